//! What a run tells the front doors: the one event type every front door consumes
//! (CLI, tracker router, chat server, logs), the run's state, and how a run ends. A
//! run emits `Started` first and `Finished` last, always.

use serde::Serialize;
use serde_json::Value;

use crate::message::{Role, Usage};

/// Where a run is (its live control's state machine lives with the agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Running,
    Paused,
    Finished,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    Started {
        session_id: String,
        provider: String,
        model: String,
        /// The working folder the run's tools act in (after resolving links).
        work_dir: String,
    },
    /// A fragment of the answer, as the model produces it.
    TextDelta { text: String },
    /// A fragment of the model's visible reasoning, where the provider streams it.
    ThinkingDelta { text: String },
    /// The model asked for a tool call; `summary` reads like "Read: src/main.rs".
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
        summary: String,
    },
    /// Output a running command printed since the last piece, for people watching; the
    /// model gets only the `ToolResult`. Bounded per call (see `tools::bash::live`).
    ToolOutputDelta { id: String, text: String },
    /// A tool call finished. `output` is what the model receives (already bounded).
    ToolResult {
        id: String,
        name: String,
        is_error: bool,
        output: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// Token use of one model call.
    Usage { step: u32, usage: Usage },
    /// A model call failed and is being retried; text streamed since the last
    /// `Usage` for this step is void and will be streamed again.
    Retry {
        /// The attempt that failed (1 is the first call).
        attempt: u32,
        /// Attempts allowed in all.
        of: u32,
        delay_ms: u64,
        reason: String,
    },
    /// Older history was summarised to keep the context inside the model's window.
    Compacted {
        tokens_before: u64,
        first_kept_entry_id: String,
    },
    /// The run paused at a step boundary, or went on.
    State { state: RunState },
    /// An operator's instruction was written into the conversation.
    Instruction { text: String, role: Role },
    /// The working folder was snapshotted after a change (checkpoints on).
    Checkpoint {
        step: u64,
        commit: String,
        entry_id: String,
        message: String,
    },
    /// Files and conversation went back to checkpoint `step`.
    RolledBack { step: u64, entry_id: String },
    /// Something a person watching should know (loop warning, nudge, ...).
    Notice { message: String },
    /// The run waits for a person to approve tool call `id` (`approval: ask` for its
    /// kind); the front door asks and answers through the run's control.
    Approval {
        id: String,
        name: String,
        kind: ToolKind,
        summary: String,
        /// The call's arguments whole (`summary` is cut to a line).
        arguments: Value,
    },
    /// The approval of call `id` was answered (by a person, or by an earlier "always").
    Approved { id: String, answer: ApprovalAnswer },
    /// The run ended; always the last event.
    Finished { outcome: Outcome },
}

/// What a tool does, as approvals and editors group tools (ACP's `ToolKind` names).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads a file or lists a folder (read, ls).
    Read,
    /// Looks for files or text (grep, find).
    Search,
    /// Changes files (write, edit).
    Edit,
    /// Runs a command (bash).
    Execute,
    /// An MCP server's tool.
    Mcp,
}

impl ToolKind {
    pub const ALL: [ToolKind; 5] = [
        ToolKind::Read,
        ToolKind::Search,
        ToolKind::Edit,
        ToolKind::Execute,
        ToolKind::Mcp,
    ];

    /// Its name in settings and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Read => "read",
            ToolKind::Search => "search",
            ToolKind::Edit => "edit",
            ToolKind::Execute => "execute",
            ToolKind::Mcp => "mcp",
        }
    }
}

/// A person's answer to an approval: this call only, or every call of the tool for
/// the rest of the session.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

impl ApprovalAnswer {
    pub const ALL: [ApprovalAnswer; 4] = [
        ApprovalAnswer::AllowOnce,
        ApprovalAnswer::AllowAlways,
        ApprovalAnswer::RejectOnce,
        ApprovalAnswer::RejectAlways,
    ];

    pub fn allows(self) -> bool {
        matches!(
            self,
            ApprovalAnswer::AllowOnce | ApprovalAnswer::AllowAlways
        )
    }

    /// Whether it holds for the rest of the session.
    pub fn always(self) -> bool {
        matches!(
            self,
            ApprovalAnswer::AllowAlways | ApprovalAnswer::RejectAlways
        )
    }

    /// Its name on the wire (ACP's option kinds use the same words).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAnswer::AllowOnce => "allow_once",
            ApprovalAnswer::AllowAlways => "allow_always",
            ApprovalAnswer::RejectOnce => "reject_once",
            ApprovalAnswer::RejectAlways => "reject_always",
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The model answered without asking for more tools; `text` is its final answer.
    Completed {
        text: String,
        steps: u32,
        usage: Usage,
    },
    Failed {
        /// What kind of failure, for callers that act on it.
        kind: FailureKind,
        error: String,
        steps: u32,
        usage: Usage,
    },
    Cancelled {
        steps: u32,
        usage: Usage,
    },
}

/// Why a run failed: callers and tests match on this, not on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The model call failed after retries (HTTP errors, a broken stream).
    Model,
    /// `max_steps` model turns without a final answer.
    MaxSteps,
    /// The repeat guard stopped a loop of identical tool calls.
    RepeatLoop,
    /// The model hit its output limit without answering.
    OutputLimit,
    /// The working folder was refused by the sandbox.
    WorkDir,
    /// picogent's own machinery failed: the session file, checkpoints, rollback.
    Infrastructure,
    /// The external engine (the Claude Code CLI) failed or is missing.
    Engine,
    /// The run's task ended without an outcome (a bug).
    Internal,
}

impl FailureKind {
    /// Its name on the wire (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Model => "model",
            FailureKind::MaxSteps => "max_steps",
            FailureKind::RepeatLoop => "repeat_loop",
            FailureKind::OutputLimit => "output_limit",
            FailureKind::WorkDir => "work_dir",
            FailureKind::Infrastructure => "infrastructure",
            FailureKind::Engine => "engine",
            FailureKind::Internal => "internal",
        }
    }
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Completed { .. })
    }

    pub fn steps(&self) -> u32 {
        match self {
            Outcome::Completed { steps, .. }
            | Outcome::Failed { steps, .. }
            | Outcome::Cancelled { steps, .. } => *steps,
        }
    }
}
