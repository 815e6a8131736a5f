//! The chat WebSocket protocol (spec §7 and picogent's extensions), and the only place
//! its frames are read or written: [`parse`] turns a client's text frame into a
//! [`ClientFrame`] (or a [`FrameError`] naming the frame type and field that is wrong),
//! and every frame the server sends is a [`ServerFrame`] inside an [`Outgoing`] (its
//! `id`, `sessionId`, and in a request's log its `seq` and `runId`). The README's
//! "Chat mode" and "Live control" tables list the same frames and fields.

use crate::message::Role;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Frames larger than this get an error frame.
pub(crate) const MAX_FRAME_BYTES: usize = 1 << 20;

// ---------------------------------------------------------------------------------
// Client → server
// ---------------------------------------------------------------------------------

/// A frame a client sends. Built only by [`parse`]; it serialises back to the same
/// JSON (the prompt without a `type`, every other frame with one).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum ClientFrame {
    /// Replay a request's frames after `seq` `after`, then follow it live.
    Subscribe(Subscribe),
    /// A prompt: the one frame without a `type`; it starts a request.
    #[serde(untagged)]
    Prompt(Prompt),
    /// `cancel`, `pause`, `resume`, `stop`, `instruct`, `rollback`, `branch`: live
    /// control of a running request.
    #[serde(untagged)]
    Control(Control),
    /// `branches`, `compare`, `prefer`: questions about a session's branches.
    #[serde(untagged)]
    Session(SessionFrame),
}

/// `{id, content, sessionId?, workDir?, systemPrompt?, keepAlive?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Prompt {
    /// The client's name for the request (a number is taken as its text).
    #[serde(deserialize_with = "request_id")]
    pub(crate) id: String,
    /// The prompt; never blank.
    pub(crate) content: String,
    /// A valid session id (letters, digits, `.`, `_`, `-`); none: a new session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) session_id: Option<String>,
    /// The working folder; never empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) work_dir: Option<String>,
    /// Replaces the system prompt; never blank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) system_prompt: Option<String>,
    /// The run survives its connection and gets a `runId`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) keep_alive: bool,
}

/// The request a frame addresses: this connection's request `id`, or any connection's
/// `keepAlive` run by its `runId` (which wins when both are given). At least one is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Target {
    #[serde(
        default,
        deserialize_with = "optional_request_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<String>,
}

impl Target {
    /// The name an answer about this target goes under: the `id`, else the `runId`.
    pub(crate) fn reply_id(&self) -> &str {
        self.id.as_deref().or(self.run_id.as_deref()).unwrap_or("")
    }
}

/// `{type: "subscribe", id | runId, after?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Subscribe {
    #[serde(flatten)]
    pub(crate) to: Target,
    /// The last `seq` the client has; 0 (the default) replays everything kept.
    #[serde(default)]
    pub(crate) after: u64,
}

/// A live-control frame: what to do to which request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Control {
    #[serde(flatten)]
    pub(crate) to: Target,
    #[serde(flatten)]
    pub(crate) action: Action,
}

/// The live controls, by their `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Action {
    /// End the request (what every engine can do).
    Cancel,
    /// Hold the run before its next model or tool call.
    Pause,
    Resume,
    /// End the run at its next boundary, keeping what was done.
    Stop,
    Instruct(Instruct),
    Rollback(Rollback),
    Branch(Branch),
}

impl Action {
    /// Its `type`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Action::Cancel => "cancel",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Stop => "stop",
            Action::Instruct(_) => "instruct",
            Action::Rollback(_) => "rollback",
            Action::Branch(_) => "branch",
        }
    }
}

/// `instruct`: `{content, as?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Instruct {
    /// Never blank.
    pub(crate) content: String,
    /// Who the instruction speaks as; none: the user.
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<Role>,
}

/// `rollback`: `{step}`, a checkpoint of the request's session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Rollback {
    pub(crate) step: u64,
}

/// `branch`: `{step, content, name?}`: a rollback to `step` that keeps the old path,
/// with the instruction for the new one (never blank) and the new branch's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Branch {
    pub(crate) step: u64,
    pub(crate) content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
}

/// A question about a session: `{type, id?, sessionId, ...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SessionFrame {
    #[serde(flatten)]
    pub(crate) about: SessionRef,
    #[serde(flatten)]
    pub(crate) query: Query,
}

/// The session a question is about, and the `id` its answer carries (optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionRef {
    #[serde(
        default,
        deserialize_with = "optional_request_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) id: Option<String>,
    pub(crate) session_id: String,
}

/// The questions about a session, by their `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Query {
    /// The session's branches.
    Branches,
    Compare(Compare),
    Prefer(Prefer),
}

impl Query {
    /// Its `type`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Query::Branches => "branches",
            Query::Compare(_) => "compare",
            Query::Prefer(_) => "prefer",
        }
    }
}

/// `compare`: `{a, b}`, two branch names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Compare {
    pub(crate) a: String,
    pub(crate) b: String,
}

/// `prefer`: `{chosen, rejected, note?}`, two branch names and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Prefer {
    pub(crate) chosen: String,
    pub(crate) rejected: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// A request id: a non-empty string, or a number (taken as its text).
fn request_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) if !s.is_empty() => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(D::Error::custom(format!(
            "expected a non-empty string or a number, got {other}"
        ))),
    }
}

fn optional_request_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => request_id(v).map(Some).map_err(D::Error::custom),
    }
}

// ---------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------

/// A frame the server could not take, and how to answer it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct FrameError {
    /// The frame's `id` (a control frame's `runId` when it has no `id`), when usable.
    id: Option<String>,
    message: String,
    /// A bad prompt with a usable `id` is a request that ends here: `done` follows.
    ends_request: bool,
}

impl FrameError {
    fn new(id: Option<String>, message: String) -> FrameError {
        FrameError {
            id,
            message,
            ends_request: false,
        }
    }

    /// The frames that answer it: an `error`, and `done` when a request ends.
    pub(crate) fn replies(&self) -> Vec<Outgoing> {
        let mut out = vec![Outgoing::new(
            self.id.clone(),
            None,
            ServerFrame::error(&self.message),
        )];
        if self.ends_request {
            out.push(Outgoing::new(self.id.clone(), None, ServerFrame::done()));
        }
        out
    }
}

/// Reads one text frame. A frame over [`MAX_FRAME_BYTES`], not JSON, not an object, of
/// an unknown `type` or with a missing or wrong field is an error naming what is
/// wrong; the connection stays usable.
pub(crate) fn parse(text: &str) -> Result<ClientFrame, FrameError> {
    if text.len() > MAX_FRAME_BYTES {
        return Err(FrameError::new(
            None,
            format!("the frame is {} bytes; the limit is 1 MiB", text.len()),
        ));
    }
    let v: Value = serde_json::from_str(text)
        .map_err(|e| FrameError::new(None, format!("the frame is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(FrameError::new(
            None,
            "the frame must be a JSON object".into(),
        ));
    }
    let id = request_id(&v["id"]).ok();
    match v.get("type") {
        None => prompt(&v).map_err(|e| FrameError {
            ends_request: id.is_some(),
            id,
            message: format!("prompt frame: {e}"),
        }),
        Some(Value::String(kind)) => typed(kind, &v).map_err(|e| {
            let run_id = v["runId"].as_str().map(str::to_string);
            FrameError::new(id.or(run_id), e)
        }),
        Some(other) => Err(FrameError::new(
            id,
            format!("`type` must be a string, got {other}"),
        )),
    }
}

/// Deserialises `T` from the frame, naming the field that is wrong.
fn fields<T: DeserializeOwned>(v: &Value) -> Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("field `{path}`: {}", e.into_inner())
        }
    })
}

fn prompt(v: &Value) -> Result<ClientFrame, String> {
    let mut p: Prompt = fields(v)?;
    if p.content.trim().is_empty() {
        return Err("`content` is empty".into());
    }
    if let Some(s) = p
        .session_id
        .as_deref()
        .filter(|s| !crate::session::valid_id(s))
    {
        return Err(format!(
            "invalid sessionId {s:?}: use letters, digits, '.', '_' and '-'"
        ));
    }
    p.work_dir = p.work_dir.filter(|d| !d.is_empty());
    p.system_prompt = p.system_prompt.filter(|s| !s.trim().is_empty());
    Ok(ClientFrame::Prompt(p))
}

/// A frame with a `type`; errors name it. Dispatched here rather than by a derived
/// `Deserialize`: serde's internally tagged enums lose the path of a wrong field, and
/// an untagged prompt would swallow every control frame's error. The names match the
/// enums' serde names (the round-trip tests check it).
fn typed(kind: &str, v: &Value) -> Result<ClientFrame, String> {
    use Action as A;
    use Query as Q;
    let frame = match kind {
        "subscribe" => target(v)
            .and_then(|_| fields(v))
            .map(ClientFrame::Subscribe),
        "cancel" => control(v, A::Cancel),
        "pause" => control(v, A::Pause),
        "resume" => control(v, A::Resume),
        "stop" => control(v, A::Stop),
        "instruct" => fields(v).and_then(|p| control(v, A::Instruct(p))),
        "rollback" => fields(v).and_then(|p| control(v, A::Rollback(p))),
        "branch" => fields(v).and_then(|p| control(v, A::Branch(p))),
        "branches" => session(v, Q::Branches),
        "compare" => fields(v).and_then(|p| session(v, Q::Compare(p))),
        "prefer" => fields(v).and_then(|p| session(v, Q::Prefer(p))),
        _ => return Err(format!("unknown control frame type {kind:?}")),
    };
    frame.map_err(|e| format!("frame type {kind:?}: {e}"))
}

/// The request a frame addresses (read on its own, so its errors name the field).
fn target(v: &Value) -> Result<Target, String> {
    let to: Target = fields(v)?;
    if to.id.is_none() && to.run_id.is_none() {
        return Err("missing field `id` (the request's, or a keepAlive run's `runId`)".into());
    }
    Ok(to)
}

fn control(v: &Value, action: Action) -> Result<ClientFrame, String> {
    let to = target(v)?;
    match &action {
        Action::Instruct(i) if i.content.trim().is_empty() => {
            return Err("`content` is empty".into())
        }
        Action::Branch(b) if b.content.trim().is_empty() => {
            return Err("`content` (the instruction for the new path) is empty".into())
        }
        _ => {}
    }
    Ok(ClientFrame::Control(Control { to, action }))
}

fn session(v: &Value, query: Query) -> Result<ClientFrame, String> {
    let about: SessionRef = fields(v)?;
    Ok(ClientFrame::Session(SessionFrame { about, query }))
}

// ---------------------------------------------------------------------------------
// Server → client
// ---------------------------------------------------------------------------------

/// What a frame the server sends says: its `type` and `content` (and `step`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ServerFrame {
    /// A fragment of the answer, streamed as generated.
    Text { content: String },
    /// A tool call: `"Read: src/main.rs"`.
    ToolUse { content: String },
    /// A tool call that failed: `"<tool>: <error>"`.
    ToolResult { content: String },
    /// An agent, API or protocol error.
    Error { content: String },
    /// The request finished: always its last frame; `content` is empty.
    Done { content: String },
    /// The model call is being retried; text since the last tool step is void.
    Retry { content: String },
    /// The run's state: `running`, `paused`, `finished` or `failed`.
    State { content: String },
    /// An instruction was written into the conversation.
    Instruction { content: String },
    /// The working folder was snapshotted as checkpoint `step`.
    Checkpoint { content: String, step: u64 },
    /// Files and conversation went back to checkpoint `step`.
    Rollback { content: String, step: u64 },
    /// The answer to `branches`.
    Branches { content: Vec<BranchSummary> },
    /// The answer to `compare`: `{shared_steps, a, b, diff?}` (see the README).
    Compare { content: Value },
    /// The answer to `prefer`: `"recorded"`.
    Prefer { content: String },
}

/// One branch in a `branches` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BranchSummary {
    pub(crate) name: String,
    pub(crate) steps: usize,
}

impl ServerFrame {
    pub(crate) fn error(message: impl Into<String>) -> ServerFrame {
        ServerFrame::Error {
            content: message.into(),
        }
    }

    pub(crate) fn done() -> ServerFrame {
        ServerFrame::Done {
            content: String::new(),
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        matches!(self, ServerFrame::Done { .. })
    }
}

/// A server frame on the wire: `{id, type, content, step?, sessionId, seq?, runId?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Outgoing {
    /// The request (or question) it answers; null when the frame had none.
    pub(crate) id: Option<String>,
    #[serde(flatten)]
    pub(crate) frame: ServerFrame,
    /// The request's session; null when there is none (a bad frame).
    pub(crate) session_id: Option<String>,
    /// The frame's place in its request's log (frames of a request only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) seq: Option<u64>,
    /// A `keepAlive` request's server-issued id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<String>,
}

impl Outgoing {
    pub(crate) fn new(
        id: Option<String>,
        session_id: Option<String>,
        frame: ServerFrame,
    ) -> Outgoing {
        Outgoing {
            id,
            frame,
            session_id,
            seq: None,
            run_id: None,
        }
    }

    /// An `error` frame.
    pub(crate) fn error(
        id: Option<String>,
        session_id: Option<String>,
        message: String,
    ) -> Outgoing {
        Outgoing::new(id, session_id, ServerFrame::error(message))
    }

    /// The frame's JSON text.
    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            // Not reachable (every field is a string, a number or JSON), but a frame
            // must not vanish without a trace.
            tracing::error!("a chat frame could not be serialised: {e}");
            r#"{"id":null,"type":"error","content":"internal error: a frame could not be serialised","sessionId":null}"#.into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(frame: ClientFrame) {
        let text = serde_json::to_string(&frame).unwrap();
        assert_eq!(parse(&text), Ok(frame), "{text}");
    }

    fn error(v: Value) -> FrameError {
        parse(&v.to_string()).unwrap_err()
    }

    fn to(id: &str) -> Target {
        Target {
            id: Some(id.into()),
            run_id: None,
        }
    }

    #[test]
    fn every_client_frame_round_trips() {
        round_trip(ClientFrame::Prompt(Prompt {
            id: "m1".into(),
            content: "hi".into(),
            session_id: None,
            work_dir: None,
            system_prompt: None,
            keep_alive: false,
        }));
        round_trip(ClientFrame::Prompt(Prompt {
            id: "m2".into(),
            content: "hi".into(),
            session_id: Some("s-1".into()),
            work_dir: Some("/w".into()),
            system_prompt: Some("be brief".into()),
            keep_alive: true,
        }));
        round_trip(ClientFrame::Subscribe(Subscribe {
            to: Target {
                id: None,
                run_id: Some("run-1".into()),
            },
            after: 7,
        }));
        let actions = [
            Action::Cancel,
            Action::Pause,
            Action::Resume,
            Action::Stop,
            Action::Instruct(Instruct {
                content: "go on".into(),
                role: Some(Role::System),
            }),
            Action::Instruct(Instruct {
                content: "go on".into(),
                role: None,
            }),
            Action::Rollback(Rollback { step: 2 }),
            Action::Branch(Branch {
                step: 1,
                content: "try B".into(),
                name: Some("try-b".into()),
            }),
            Action::Branch(Branch {
                step: 1,
                content: "try B".into(),
                name: None,
            }),
        ];
        for action in actions {
            round_trip(ClientFrame::Control(Control {
                to: to("m1"),
                action,
            }));
        }
        let queries = [
            Query::Branches,
            Query::Compare(Compare {
                a: "main".into(),
                b: "try-b".into(),
            }),
            Query::Prefer(Prefer {
                chosen: "try-b".into(),
                rejected: "main".into(),
                note: Some("B is right".into()),
            }),
        ];
        for (n, query) in queries.into_iter().enumerate() {
            round_trip(ClientFrame::Session(SessionFrame {
                about: SessionRef {
                    id: (n > 0).then(|| "q".into()),
                    session_id: "s".into(),
                },
                query,
            }));
        }
    }

    #[test]
    fn client_frames_have_the_documented_json() {
        let frame = ClientFrame::Control(Control {
            to: to("m1"),
            action: Action::Branch(Branch {
                step: 3,
                content: "x".into(),
                name: None,
            }),
        });
        assert_eq!(
            serde_json::to_value(&frame).unwrap(),
            json!({"type": "branch", "id": "m1", "step": 3, "content": "x"})
        );
        let frame = parse(r#"{"id": 5, "content": "hi", "keepAlive": true}"#).unwrap();
        assert_eq!(
            serde_json::to_value(&frame).unwrap(),
            json!({"id": "5", "content": "hi", "keepAlive": true})
        );
        // Blank optional texts are absent.
        let frame = parse(r#"{"id": "a", "content": "hi", "workDir": "", "systemPrompt": " "}"#);
        assert!(matches!(
            frame,
            Ok(ClientFrame::Prompt(Prompt {
                work_dir: None,
                system_prompt: None,
                ..
            }))
        ));
    }

    #[test]
    fn every_server_frame_round_trips_with_todays_fields() {
        let frames = [
            ServerFrame::Text {
                content: "The".into(),
            },
            ServerFrame::ToolUse {
                content: "Read: a.txt".into(),
            },
            ServerFrame::ToolResult {
                content: "read: no such file".into(),
            },
            ServerFrame::error("HTTP 400"),
            ServerFrame::done(),
            ServerFrame::Retry {
                content: "overloaded".into(),
            },
            ServerFrame::State {
                content: "paused".into(),
            },
            ServerFrame::Instruction {
                content: "Use B".into(),
            },
            ServerFrame::Checkpoint {
                content: "Step 1: write f.txt".into(),
                step: 1,
            },
            ServerFrame::Rollback {
                content: "rolled back to step 1".into(),
                step: 1,
            },
            ServerFrame::Branches {
                content: vec![BranchSummary {
                    name: "main".into(),
                    steps: 2,
                }],
            },
            ServerFrame::Compare {
                content: json!({"shared_steps": 1, "a": {}, "b": {}, "diff": "-A\n+B"}),
            },
            ServerFrame::Prefer {
                content: "recorded".into(),
            },
        ];
        let types = [
            "text",
            "tool_use",
            "tool_result",
            "error",
            "done",
            "retry",
            "state",
            "instruction",
            "checkpoint",
            "rollback",
            "branches",
            "compare",
            "prefer",
        ];
        for (frame, kind) in frames.into_iter().zip(types) {
            let mut out = Outgoing::new(Some("m1".into()), Some("s".into()), frame);
            let v: Value = serde_json::from_str(&out.encode()).unwrap();
            assert_eq!(v["type"], kind);
            let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            keys.sort_unstable();
            let step = matches!(kind, "checkpoint" | "rollback");
            let want: &[&str] = if step {
                &["content", "id", "sessionId", "step", "type"]
            } else {
                &["content", "id", "sessionId", "type"]
            };
            assert_eq!(keys, want, "{v}");
            assert_eq!(serde_json::from_value::<Outgoing>(v).unwrap(), out);
            // In a request's log: with `seq` and `runId`.
            out.seq = Some(4);
            out.run_id = Some("run-1".into());
            let text = out.encode();
            assert!(text.contains(r#""seq":4"#) && text.contains(r#""runId":"run-1""#));
            assert_eq!(serde_json::from_str::<Outgoing>(&text).unwrap(), out);
        }
    }

    #[test]
    fn a_frame_without_a_request_has_null_id_and_session() {
        let out = Outgoing::error(None, None, "bad".into());
        assert_eq!(
            serde_json::from_str::<Value>(&out.encode()).unwrap(),
            json!({"id": null, "type": "error", "content": "bad", "sessionId": null})
        );
    }

    #[test]
    fn errors_name_the_frame_type_and_the_field() {
        let e = error(json!({"type": "pause"}));
        assert_eq!(
            e.message,
            "frame type \"pause\": missing field `id` (the request's, or a keepAlive run's `runId`)"
        );
        let e = error(json!({"type": "rollback", "id": "r"}));
        assert_eq!(
            (e.id.as_deref(), e.message.as_str()),
            (Some("r"), "frame type \"rollback\": missing field `step`")
        );
        let e = error(json!({"type": "branch", "runId": "run-1", "step": "one", "content": "x"}));
        assert_eq!(e.id.as_deref(), Some("run-1"));
        assert!(
            e.message
                .starts_with("frame type \"branch\": field `step`: invalid type: string \"one\""),
            "{}",
            e.message
        );
        let e = error(json!({"type": "instruct", "id": "i", "content": "x", "as": "root"}));
        assert!(
            e.message
                .starts_with("frame type \"instruct\": field `as`: unknown variant `root`"),
            "{}",
            e.message
        );
        let e = error(json!({"type": "compare", "sessionId": "s", "a": "main"}));
        assert_eq!(e.message, "frame type \"compare\": missing field `b`");
        let e = error(json!({"type": "explode", "id": "q"}));
        assert_eq!(
            (e.id.as_deref(), e.message.as_str()),
            (Some("q"), "unknown control frame type \"explode\"")
        );
        assert!(!e.ends_request);
        let e = error(json!({"type": 5}));
        assert_eq!(e.message, "`type` must be a string, got 5");
    }

    #[test]
    fn a_bad_prompt_with_an_id_ends_its_request() {
        let e = error(json!({"content": "no id"}));
        assert_eq!(
            (e.id, e.message.as_str(), e.ends_request),
            (None, "prompt frame: missing field `id`", false)
        );
        let e = error(json!({"id": "x"}));
        assert_eq!(e.message, "prompt frame: missing field `content`");
        let kinds: Vec<&str> = e
            .replies()
            .iter()
            .map(|f| match f.frame {
                ServerFrame::Error { .. } => "error",
                ServerFrame::Done { .. } => "done",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["error", "done"]);
        assert!(e.replies().iter().all(|f| f.id.as_deref() == Some("x")));
        let e = error(json!({"id": "x", "content": "  "}));
        assert_eq!(e.message, "prompt frame: `content` is empty");
        let e = error(json!({"id": "x", "content": "hi", "sessionId": "../up"}));
        assert!(
            e.message.contains("invalid sessionId \"../up\""),
            "{}",
            e.message
        );
        let e = error(json!({"id": "x", "content": "hi", "workDir": 5}));
        assert!(
            e.message
                .starts_with("prompt frame: field `workDir`: invalid type"),
            "{}",
            e.message
        );
        let e = error(json!({"id": true, "content": "hi"}));
        assert_eq!(e.id, None);
        assert!(e.message.contains("field `id`"), "{}", e.message);
    }

    #[test]
    fn frames_that_are_not_json_objects_or_too_large_are_refused() {
        assert!(parse("{not json")
            .unwrap_err()
            .message
            .contains("not valid JSON"));
        assert_eq!(
            parse("[1]").unwrap_err().message,
            "the frame must be a JSON object"
        );
        let big = json!({"id": "big", "content": "x".repeat(MAX_FRAME_BYTES)}).to_string();
        let e = parse(&big).unwrap_err();
        assert!(
            e.message.contains("limit is 1 MiB") && e.id.is_none(),
            "{}",
            e.message
        );
    }
}
