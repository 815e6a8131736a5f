//! picogent's own records in a session: checkpoints, rollbacks, branches, interventions,
//! preferences, step labels, run ratings and the Claude Code session id, each one typed
//! variant of `Record`. They are stored as pi's `custom` entries (`customType` + `data`), so pi and other tools
//! keep and ignore them. This is the one place they are turned into entries and read
//! back: a custom entry of another tool is not a record, and one of ours with an
//! unexpected shape (a hand-edited file) is skipped with a warning.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Known;
use crate::message::Role;

/// A snapshot of the working folder after step `step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub step: u64,
    pub commit: String,
    pub message: String,
    /// The folder snapshotted (absent in sessions from before it was recorded): a
    /// rollback after the run restores this folder, not whatever the next run uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// Files and conversation went back to checkpoint `step`; `from` is the leaf before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollback {
    pub step: u64,
    pub commit: String,
    pub from: Option<String>,
}

/// A named branch starts here (a rollback to `step` plus an instruction).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BranchStart {
    pub name: String,
    pub step: u64,
    pub time: String,
}

/// A person stepped in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Intervention {
    Pause {
        time: String,
    },
    Resume {
        time: String,
    },
    Instruct {
        role: Role,
        text: String,
        time: String,
    },
}

/// Which of two branches was better, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preference {
    pub chosen: String,
    pub rejected: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub time: String,
}

/// A person's verdict on one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepVerdict {
    Correct,
    Incorrect,
    Unsure,
}

/// A person's label on one step (a tool call, by its call id); the last one wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLabel {
    pub call_id: String,
    pub label: StepVerdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub time: String,
}

/// How a run went, in a person's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    Success,
    Partial,
    Failure,
}

/// A person's rating of a run (the request's `runId` or id when the client knows it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRating {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    pub rating: RunOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub time: String,
}

/// The Claude Code session this session continues (`--resume`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaudeCodeSession {
    pub id: String,
}

/// A chat run that was still going when the server stopped without ending it (a crash,
/// a kill -9): its answer stops where the session does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupted {
    /// The run's `runId` (a `keepAlive` run), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Its request's prompt.
    pub prompt: String,
    /// When it started, and when the interruption was found.
    pub started: String,
    pub time: String,
}

/// One of picogent's records; the variant name is the entry's `customType`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "customType", content = "data", rename_all = "snake_case")]
pub enum Record {
    Checkpoint(Checkpoint),
    Rollback(Rollback),
    Branch(BranchStart),
    Intervention(Intervention),
    Preference(Preference),
    ClaudeCodeSession(ClaudeCodeSession),
    StepLabel(StepLabel),
    RunRating(RunRating),
    Interrupted(Interrupted),
}

/// The `customType`s that are ours.
const OURS: [&str; 9] = [
    "checkpoint",
    "rollback",
    "branch",
    "intervention",
    "preference",
    "claude_code_session",
    "step_label",
    "run_rating",
    "interrupted",
];

impl Record {
    /// The custom entry that stores this record.
    pub fn to_custom(&self) -> Known {
        let (custom_type, data) = match serde_json::to_value(self) {
            Ok(Value::Object(mut o)) => (
                o.remove("customType")
                    .and_then(|t| t.as_str().map(str::to_string))
                    .unwrap_or_default(),
                o.remove("data").unwrap_or(Value::Null),
            ),
            // Plain structs of strings and numbers always serialise to an object.
            _ => (String::new(), Value::Null),
        };
        Known::Custom { custom_type, data }
    }

    /// The record a custom entry holds: `None` for another tool's entry and for one of
    /// ours that does not parse (with a warning naming the entry).
    pub fn from_custom(entry_id: &str, custom_type: &str, data: &Value) -> Option<Record> {
        if !OURS.contains(&custom_type) {
            return None;
        }
        let tagged = serde_json::json!({"customType": custom_type, "data": data});
        match serde_json::from_value(tagged) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(entry = entry_id, custom_type, "session entry skipped: {e}");
                None
            }
        }
    }

    /// The entry's `customType` for this record (the tests check it against the
    /// serialised form).
    #[cfg(test)]
    fn custom_type(&self) -> &'static str {
        match self {
            Record::Checkpoint(_) => "checkpoint",
            Record::Rollback(_) => "rollback",
            Record::Branch(_) => "branch",
            Record::Intervention(_) => "intervention",
            Record::Preference(_) => "preference",
            Record::ClaudeCodeSession(_) => "claude_code_session",
            Record::StepLabel(_) => "step_label",
            Record::RunRating(_) => "run_rating",
            Record::Interrupted(_) => "interrupted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_custom_entries() {
        let all = [
            Record::Interrupted(Interrupted {
                run: Some("run-1".into()),
                prompt: "go on".into(),
                started: "2026-12-01T10:00:00Z".into(),
                time: "2026-12-01T10:01:00Z".into(),
            }),
            Record::Checkpoint(Checkpoint {
                step: 2,
                commit: "abc".into(),
                message: "edit a.txt".into(),
                dir: Some("/w".into()),
            }),
            Record::Rollback(Rollback {
                step: 1,
                commit: "abc".into(),
                from: None,
            }),
            Record::Branch(BranchStart {
                name: "try-b".into(),
                step: 1,
                time: "t".into(),
            }),
            Record::Intervention(Intervention::Instruct {
                role: Role::System,
                text: "be brief".into(),
                time: "t".into(),
            }),
            Record::Intervention(Intervention::Pause { time: "t".into() }),
            Record::Preference(Preference {
                chosen: "main".into(),
                rejected: "b".into(),
                note: None,
                time: "t".into(),
            }),
            Record::ClaudeCodeSession(ClaudeCodeSession { id: "x".into() }),
            Record::StepLabel(StepLabel {
                call_id: "c1".into(),
                label: StepVerdict::Incorrect,
                note: Some("wrong file".into()),
                time: "t".into(),
            }),
            Record::RunRating(RunRating {
                run: None,
                rating: RunOutcome::Partial,
                note: None,
                time: "t".into(),
            }),
        ];
        for r in all {
            let Known::Custom { custom_type, data } = r.to_custom() else {
                panic!("not a custom entry");
            };
            assert_eq!(custom_type, r.custom_type());
            assert_eq!(Record::from_custom("e", &custom_type, &data), Some(r));
        }
    }

    #[test]
    fn foreign_and_malformed_entries_are_not_records() {
        let v = serde_json::json!({"step": "two"});
        assert_eq!(Record::from_custom("e", "checkpoint", &v), None);
        assert_eq!(Record::from_custom("e", "checkpoint", &Value::Null), None);
        let v = serde_json::json!({"anything": 1});
        assert_eq!(Record::from_custom("e", "other-tool", &v), None);
        let v = serde_json::json!({"kind": "dance"});
        assert_eq!(Record::from_custom("e", "intervention", &v), None);
        let v = serde_json::json!({"call_id": "c", "label": "great", "time": "t"});
        assert_eq!(Record::from_custom("e", "step_label", &v), None);
    }
}
