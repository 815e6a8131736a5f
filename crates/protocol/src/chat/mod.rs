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
pub const MAX_FRAME_BYTES: usize = 1 << 20;

// ---------------------------------------------------------------------------------
// Client → server
// ---------------------------------------------------------------------------------

/// A frame a client sends. Built only by [`parse`]; it serialises back to the same
/// JSON (the prompt without a `type`, every other frame with one).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ClientFrame {
    /// Replay a request's frames after `seq` `after`, then follow it live.
    Subscribe(Subscribe),
    /// The server's sessions, newest first.
    Sessions(Sessions),
    /// A prompt: the one frame without a `type`; it starts a request.
    #[serde(untagged)]
    Prompt(Prompt),
    /// `cancel`, `pause`, `resume`, `stop`, `instruct`, `rollback`, `branch`: live
    /// control of a running request.
    #[serde(untagged)]
    Control(Control),
    /// `branches`, `compare`, `prefer`, `label`, `rate`, `history`, `delete`,
    /// `preview`: questions about a session.
    #[serde(untagged)]
    Session(SessionFrame),
    /// `rollback` and `branch` addressed by `sessionId` (without a `runId`): a
    /// session whose run has ended goes back to a checkpoint.
    #[serde(untagged)]
    Rewind(Rewind),
}

/// `{type: "sessions", id?, query?, before?, limit?}`: a page of the server's sessions,
/// newest first; with `query`, only those whose title, first prompt or name holds it
/// (any case); `before` continues after the last one of the page before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sessions {
    #[serde(
        default,
        deserialize_with = "optional_request_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "search_query"
    )]
    pub query: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<SessionCursor>,
    /// At most this many (1 to [`MAX_SESSIONS_PAGE`]; none: [`SESSIONS_PAGE`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "page_size"
    )]
    pub limit: Option<usize>,
}

/// Where a page of sessions ends: the last session's `modified` and `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionCursor {
    pub modified: u64,
    pub id: String,
}

/// Sessions in a page when the frame does not say.
pub const SESSIONS_PAGE: usize = 100;
/// Sessions in a page at most.
pub const MAX_SESSIONS_PAGE: usize = 500;
/// A search's text at most, in characters.
pub const MAX_SESSION_QUERY: usize = 200;

fn search_query<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let q = Option::<String>::deserialize(d)?;
    match q {
        Some(q) if q.chars().count() > MAX_SESSION_QUERY => Err(D::Error::custom(format!(
            "`query` is longer than {MAX_SESSION_QUERY} characters"
        ))),
        Some(q) if q.trim().is_empty() => Ok(None),
        q => Ok(q),
    }
}

fn page_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let n = Option::<usize>::deserialize(d)?;
    match n {
        Some(n) if n == 0 || n > MAX_SESSIONS_PAGE => Err(D::Error::custom(format!(
            "`limit` is from 1 to {MAX_SESSIONS_PAGE}"
        ))),
        n => Ok(n),
    }
}

/// `{id, content, sessionId?, workDir?, systemPrompt?, keepAlive?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Prompt {
    /// The client's name for the request (a number is taken as its text).
    #[serde(deserialize_with = "request_id")]
    pub id: String,
    /// The prompt; never blank.
    pub content: String,
    /// A valid session id (letters, digits, `.`, `_`, `-`); none: a new session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The working folder; never empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<String>,
    /// Replaces the system prompt; never blank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The run survives its connection and gets a `runId`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_alive: bool,
}

/// The request a frame addresses: this connection's request `id`, or any connection's
/// `keepAlive` run by its `runId` (which wins when both are given). At least one is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    #[serde(
        default,
        deserialize_with = "optional_request_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl Target {
    /// The name an answer about this target goes under: the `id`, else the `runId`.
    pub fn reply_id(&self) -> &str {
        self.id.as_deref().or(self.run_id.as_deref()).unwrap_or("")
    }
}

/// `{type: "subscribe", id | runId, after?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscribe {
    #[serde(flatten)]
    pub to: Target,
    /// The last `seq` the client has; 0 (the default) replays everything kept.
    #[serde(default)]
    pub after: u64,
}

/// A live-control frame: what to do to which request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Control {
    #[serde(flatten)]
    pub to: Target,
    #[serde(flatten)]
    pub action: Action,
}

/// The live controls, by their `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Action {
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
    /// A person's answer to a tool call waiting for approval.
    Approve(Approve),
}

impl Action {
    /// Its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Cancel => "cancel",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Stop => "stop",
            Action::Instruct(_) => "instruct",
            Action::Rollback(_) => "rollback",
            Action::Branch(_) => "branch",
            Action::Approve(_) => "approve",
        }
    }
}

/// `instruct`: `{content, as?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instruct {
    /// Never blank.
    pub content: String,
    /// Who the instruction speaks as; none: the user.
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
}

/// `approve`: `{callId, answer}`, the answer to an `approval` frame: `allow_once`,
/// `allow_always`, `reject_once` or `reject_always` (always: every call of that tool
/// in the session).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approve {
    pub call_id: String,
    pub answer: crate::agent::ApprovalAnswer,
}

/// `rollback`: `{step}`, a checkpoint of the request's session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollback {
    pub step: u64,
}

/// `branch`: `{step, content, name?}`: a rollback to `step` that keeps the old path,
/// with the instruction for the new one (never blank) and the new branch's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Branch {
    pub step: u64,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `rollback` or `branch` of a session between runs: `{type, id?, sessionId, ...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rewind {
    #[serde(flatten)]
    pub about: SessionRef,
    #[serde(flatten)]
    pub action: RewindAction,
}

/// What a [`Rewind`] does, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RewindAction {
    /// `{step}`: files and conversation go back; the next prompt continues there.
    Rollback(Rollback),
    Branch(NewBranch),
}

impl RewindAction {
    /// Its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            RewindAction::Rollback(_) => "rollback",
            RewindAction::Branch(_) => "branch",
        }
    }
}

/// `branch` between runs: `{step, name?, content?, keepAlive?}`, a rollback that names
/// the new path; with `content` (never blank) a request starts there, under the
/// frame's `id` (then required), as a prompt would.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewBranch {
    pub step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_alive: bool,
}

/// A question about a session: `{type, id?, sessionId, ...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionFrame {
    #[serde(flatten)]
    pub about: SessionRef,
    #[serde(flatten)]
    pub query: Query,
}

/// The session a question is about, and the `id` its answer carries (optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef {
    #[serde(
        default,
        deserialize_with = "optional_request_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<String>,
    pub session_id: String,
}

/// The questions about a session, by their `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Query {
    /// The session's branches.
    Branches,
    Compare(Compare),
    Prefer(Prefer),
    /// A person's label on one step.
    Label(Label),
    /// A person's rating of a run.
    Rate(Rate),
    /// The session's conversation on its current branch, and its running requests.
    History,
    /// Delete the session's file (refused while a request runs in it).
    Delete,
    /// Which files a rollback to a checkpoint would put back.
    Preview(PreviewQuery),
    /// Name the session (stored in its file, as pi's `/name` does).
    Rename(Rename),
}

impl Query {
    /// Its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Query::Branches => "branches",
            Query::Compare(_) => "compare",
            Query::Prefer(_) => "prefer",
            Query::Label(_) => "label",
            Query::Rate(_) => "rate",
            Query::History => "history",
            Query::Delete => "delete",
            Query::Preview(_) => "preview",
            Query::Rename(_) => "rename",
        }
    }
}

/// `preview`: `{step}`, a checkpoint of the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewQuery {
    pub step: u64,
}

/// `rename`: `{name}`, the session's new name (empty: no name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rename {
    pub name: String,
}

/// `compare`: `{a, b}`, two branch names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compare {
    pub a: String,
    pub b: String,
}

/// `prefer`: `{chosen, rejected, note?}`, two branch names and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prefer {
    pub chosen: String,
    pub rejected: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `label`: `{callId, label: "correct"|"incorrect"|"unsure", note?}`, a step (its
/// tool call's id) and a person's verdict on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Label {
    pub call_id: String,
    pub label: crate::session::records::StepVerdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `rate`: `{rating: "success"|"partial"|"failure", run?, note?}`, a person's rating
/// of a run (`run`: its `runId` or request id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    pub rating: crate::session::records::RunOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
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
pub struct FrameError {
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
    pub fn replies(&self) -> Vec<Outgoing> {
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
pub fn parse(text: &str) -> Result<ClientFrame, FrameError> {
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
        "approve" => fields(v).and_then(|p| control(v, A::Approve(p))),
        "rollback" | "branch" if to_session(v) => rewind(kind, v),
        "rollback" => fields(v).and_then(|p| control(v, A::Rollback(p))),
        "branch" => fields(v).and_then(|p| control(v, A::Branch(p))),
        "branches" => session(v, Q::Branches),
        "compare" => fields(v).and_then(|p| session(v, Q::Compare(p))),
        "prefer" => fields(v).and_then(|p| session(v, Q::Prefer(p))),
        "label" => fields(v).and_then(|p| session(v, Q::Label(p))),
        "rate" => fields(v).and_then(|p| session(v, Q::Rate(p))),
        "history" => session(v, Q::History),
        "delete" => session(v, Q::Delete),
        "preview" => fields(v).and_then(|p| session(v, Q::Preview(p))),
        "rename" => fields(v).and_then(|p| session(v, Q::Rename(p))),
        "sessions" => fields(v).map(ClientFrame::Sessions),
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

/// A `rollback` or `branch` with a `sessionId` and no `runId` is about a session
/// between runs; otherwise it steers a running request.
fn to_session(v: &Value) -> bool {
    v.get("sessionId").is_some() && v.get("runId").is_none()
}

fn rewind(kind: &str, v: &Value) -> Result<ClientFrame, String> {
    let about: SessionRef = fields(v)?;
    let action = if kind == "rollback" {
        RewindAction::Rollback(fields(v)?)
    } else {
        let b: NewBranch = fields(v)?;
        match &b.content {
            Some(c) if c.trim().is_empty() => {
                return Err("`content` (the instruction for the new path) is empty".into())
            }
            Some(_) if about.id.is_none() => {
                return Err(
                    "a branch with `content` starts a request: give the frame an `id`".into(),
                )
            }
            _ => {}
        }
        RewindAction::Branch(b)
    };
    Ok(ClientFrame::Rewind(Rewind { about, action }))
}

fn session(v: &Value, query: Query) -> Result<ClientFrame, String> {
    let about: SessionRef = fields(v)?;
    Ok(ClientFrame::Session(SessionFrame { about, query }))
}

mod server;
pub use server::*;

#[cfg(test)]
mod tests;
