//! Frames the server sends: every one is a [`ServerFrame`] inside an [`Outgoing`] (its
//! `id`, `sessionId`, and in a request's log its `seq` and `runId`), built and
//! serialised only here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a `state` frame says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Shown {
    Running,
    Paused,
    Finished,
    Failed,
    /// The conversation before this point was summarised (in a history).
    Compacted,
}

impl From<crate::agent::RunState> for Shown {
    fn from(s: crate::agent::RunState) -> Shown {
        use crate::agent::RunState as R;
        match s {
            R::Running => Shown::Running,
            R::Paused => Shown::Paused,
            R::Finished => Shown::Finished,
            R::Failed => Shown::Failed,
        }
    }
}

/// What a frame the server sends says: its `type` and `content` (and `step`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// A fragment of the answer, streamed as generated.
    Text { content: String },
    /// Token use (and its cost, where the model's price is known) of one model call:
    /// `input`, `output`, `cacheRead`, `cacheWrite`, `totalTokens`, `cost.total`.
    Usage {
        content: crate::message::Usage,
        step: u32,
    },
    /// What a run works with, sent as it starts: the model and the working folder.
    Context {
        provider: String,
        model: String,
        #[serde(rename = "workDir")]
        work_dir: String,
    },
    /// Something a person watching should know (a loop warning, why a run paused).
    Notice { content: String },
    /// Another connection started a `keepAlive` request in this connection's session:
    /// `subscribe` to its `runId` to follow it.
    Started { content: RunningRequest },
    /// A replay cannot give every frame after the `seq` asked for (the oldest of a very
    /// long answer are let go): what is missing, in words; the session has it all.
    Gap { content: String },
    /// A tool call: `"Read: src/main.rs"`, with the tool's name, its arguments and
    /// the call's id (absent only in frames built before they were added).
    ToolUse {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        args: Option<Value>,
        #[serde(default, rename = "callId", skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    /// What a running command printed since the last piece (at most 256 KB per call
    /// in all); the step's `tool_output` then carries the result.
    ToolProgress {
        content: String,
        #[serde(rename = "callId")]
        call_id: String,
    },
    /// A tool call finished (successfully or not): what the model got back, bounded,
    /// and the tool's details (`exit_code` for bash, `diff` for write and edit, the
    /// lines shown for read).
    ToolOutput {
        content: String,
        tool: String,
        #[serde(rename = "callId")]
        call_id: String,
        #[serde(rename = "isError")]
        is_error: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
        /// How long the call took (from the session's timestamps in a history).
        #[serde(
            default,
            rename = "durationMs",
            skip_serializing_if = "Option::is_none"
        )]
        duration_ms: Option<u64>,
    },
    /// A fragment of the model's thinking, when the provider sends it.
    Thinking { content: String },
    /// Tool call `callId` waits for a person's yes (`approval`): `content` is the call
    /// as shown (`"Bash: cargo test"`); answer with `approve`.
    Approval {
        content: String,
        tool: String,
        kind: crate::agent::ToolKind,
        #[serde(rename = "callId")]
        call_id: String,
    },
    /// Tool call `callId` was answered (here, in another tab, or by an earlier
    /// "always"): it runs only when the answer allows it.
    Approved {
        answer: crate::agent::ApprovalAnswer,
        #[serde(rename = "callId")]
        call_id: String,
    },

    /// A tool call that failed: `"<tool>: <error>"`.
    ToolResult { content: String },
    /// An agent, API or protocol error.
    Error { content: String },
    /// The request finished: always its last frame; `content` is empty.
    Done { content: String },
    /// The model call is being retried; text since the last tool step is void.
    /// `attempt` of `of` is the one about to be made, `delayMs` from now.
    Retry {
        content: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        of: u32,
        #[serde(default, rename = "delayMs")]
        delay_ms: u64,
    },
    /// The run's state, or that the conversation before was compacted.
    State { content: Shown },
    /// An instruction was written into the conversation.
    Instruction { content: String },
    /// The working folder was snapshotted as checkpoint `step`.
    Checkpoint { content: String, step: u64 },
    /// Files and conversation went back to checkpoint `step`.
    Rollback { content: String, step: u64 },
    /// The answer to `branches`.
    Branches { content: Vec<BranchSummary> },
    /// The answer to `compare` (see the README).
    Compare { content: crate::session::Comparison },
    /// The answer to `prefer`: `"recorded"`.
    Prefer { content: String },
    /// The answer to `label` and `rate`: `"recorded"`.
    Annotated { content: String },
    /// The answer to `history`.
    History { content: History },
    /// The answer to `sessions`: a page of sessions, newest first, and whether more
    /// follow it (ask again with `before` set to the last one's `modified` and `id`).
    Sessions {
        content: Vec<SessionInfo>,
        #[serde(default)]
        more: bool,
    },
    /// The answer to `delete`: `"deleted"`.
    Deleted { content: String },
    /// The answer to `rename`: the name now in force (`null`: none).
    Renamed { name: Option<String> },
    /// The answer to `preview`: the files a rollback to checkpoint `step` puts back.
    Preview {
        content: crate::session::Preview,
        step: u64,
    },
}

/// A session's conversation on its current branch, as the items a client renders,
/// and the `keepAlive` requests running in it. `items` stop where the first running
/// request began: that request's frames come from `subscribe` (`after` 0), so
/// nothing is shown twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct History {
    pub items: Vec<HistoryItem>,
    pub running: Vec<RunningRequest>,
}

/// One item of a session's history: a prompt, or what its request's frames said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryItem {
    /// A person's prompt: a new request starts here.
    User { content: String },
    /// A named branch starts here (from checkpoint `step`).
    Branch { content: String, step: u64 },
    /// A person's label on the step with `callId` (a later one for a step wins).
    Label {
        #[serde(rename = "callId")]
        call_id: String,
        label: crate::session::records::StepVerdict,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A person's rating of the run it is in (or follows).
    Rating {
        rating: crate::session::records::RunOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// The run above stopped with the server, unfinished (a crash): it can be continued.
    Interrupted {
        #[serde(rename = "runId", default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
        /// Its prompt.
        content: String,
    },
    /// Anything a request's frames say (`text`, `tool_use`, `tool_output`, ...).
    #[serde(untagged)]
    Frame(ServerFrame),
}

/// A running `keepAlive` request: subscribe to it by `runId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunningRequest {
    pub id: String,
    pub run_id: String,
    /// Its prompt.
    pub prompt: String,
    /// Its last frame's `seq` so far.
    pub seq: u64,
}

/// One session in a `sessions` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionInfo {
    pub id: String,
    /// The first prompt as typed, on one line (at most 200 characters).
    pub title: String,
    /// The name a person gave it (`rename`, or pi's `/name`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When the file last changed, milliseconds since the epoch.
    pub modified: u64,
    /// A request is running in it.
    pub running: bool,
}

/// One branch in a `branches` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BranchSummary {
    pub name: String,
    /// Its tool steps (the final texts are not counted).
    pub steps: usize,
}

impl ServerFrame {
    pub fn error(message: impl Into<String>) -> ServerFrame {
        ServerFrame::Error {
            content: message.into(),
        }
    }

    pub fn done() -> ServerFrame {
        ServerFrame::Done {
            content: String::new(),
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self, ServerFrame::Done { .. })
    }
}

/// A server frame on the wire: `{id, type, content, step?, sessionId, seq?, runId?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Outgoing {
    /// The request (or question) it answers; null when the frame had none.
    pub id: Option<String>,
    #[serde(flatten)]
    pub frame: ServerFrame,
    /// The request's session; null when there is none (a bad frame).
    pub session_id: Option<String>,
    /// The frame's place in its request's log (frames of a request only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// A `keepAlive` request's server-issued id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl Outgoing {
    pub fn new(id: Option<String>, session_id: Option<String>, frame: ServerFrame) -> Outgoing {
        Outgoing {
            id,
            frame,
            session_id,
            seq: None,
            run_id: None,
        }
    }

    /// An `error` frame.
    pub fn error(id: Option<String>, session_id: Option<String>, message: String) -> Outgoing {
        Outgoing::new(id, session_id, ServerFrame::error(message))
    }

    /// The frame's JSON text.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            // Not reachable (every field is a string, a number or JSON), but a frame
            // must not vanish without a trace.
            tracing::error!("a chat frame could not be serialised: {e}");
            r#"{"id":null,"type":"error","content":"internal error: a frame could not be serialised","sessionId":null}"#.into()
        })
    }
}
