//! A session file's records, as pi's v3 JSONL holds them: the entry types picogent
//! reads and writes (`Known`), and picogent's own records kept in pi `custom` entries
//! (`records`); and the views of a session its clients are sent: two branches
//! compared (`Comparison`), what a rollback would change (`Preview`).

pub mod records;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::Message;

/// The entry types picogent reads and writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Known {
    Message {
        message: Message,
    },
    Compaction {
        summary: String,
        #[serde(rename = "firstKeptEntryId")]
        first_kept_entry_id: String,
        #[serde(rename = "tokensBefore")]
        tokens_before: u64,
    },
    BranchSummary {
        #[serde(rename = "fromId")]
        from_id: String,
        summary: String,
    },
    ModelChange {
        provider: String,
        #[serde(rename = "modelId")]
        model_id: String,
    },
    /// The session's name, as pi's `/name` stores it: the newest one counts, and one
    /// without a name clears it.
    SessionInfo {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// pi's extension entry, outside the model's context; picogent records checkpoints
    /// and rollbacks this way.
    Custom {
        #[serde(rename = "customType")]
        custom_type: String,
        #[serde(default)]
        data: Value,
    },
}

/// One step of a branch, as compare frames and exports show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
// A view built once per answer; `Value` is larger with serde_json's `preserve_order`
// (which the ACP SDK turns on), not worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Step {
    /// A tool call with its result (absent when the call never finished).
    Tool {
        entry_id: String,
        /// The tool call's id, which a person's step label names.
        #[serde(skip)]
        call_id: String,
        tool: String,
        args_summary: String,
        result_summary: Option<String>,
        is_error: Option<bool>,
        exit_code: Value,
        diff: Value,
    },
    /// Text the model wrote.
    Text { entry_id: String, text: String },
}

/// Two branches side by side from where they part (the `compare` answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// The last entry both share (`None`: they share nothing).
    pub branch_point: Option<String>,
    /// The tool steps both share.
    pub shared_steps: usize,
    pub a: Compared,
    pub b: Compared,
    /// The diff of the two branches' final files, when both have checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// One branch of a comparison: its steps after the branch point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Compared {
    pub name: String,
    pub steps: Vec<Step>,
    /// The commit of its last checkpoint.
    pub final_commit: Option<String>,
}

/// What a rollback would change: picogent's `Checkpoints::preview`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Preview {
    pub files: Vec<PreviewFile>,
    pub diff: String,
}

/// One file a rollback puts back: how the session's steps changed it since the
/// checkpoint (`added`: the rollback deletes it; `deleted`: it comes back), and the
/// lines they added and removed (none for a binary file).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct PreviewFile {
    pub path: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
}

/// Whether a session id is usable: a file name in the sessions folder (letters,
/// digits, '.', '_' and '-', at most 128, not starting with '.').
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}
