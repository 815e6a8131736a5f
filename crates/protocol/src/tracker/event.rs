//! What a tracker tells picogent, typed: the `Event`s agent mode handles, the `TaskId`
//! they are about, where an event came from (`Origin`), and the `Arrival` the router
//! takes and the journal stores as it is. Team Board's wire form, the `Envelope`, is
//! parsed here and only here; GitHub builds arrivals directly.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The event envelope, as Team Board sends it (tracker-protocol §2), and as journals
/// written before typed events hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    pub data: Value,
}

impl Envelope {
    /// Validates an envelope: a non-empty string `id`, a string `type`, an object `data`.
    pub fn from_value(v: Value) -> Result<Envelope, String> {
        let Value::Object(mut o) = v else {
            return Err("the event must be a JSON object".into());
        };
        let id = match o.remove("id") {
            Some(Value::String(s)) if !s.is_empty() => s,
            _ => return Err("`id` must be a non-empty string".into()),
        };
        let kind = match o.remove("type") {
            Some(Value::String(s)) => s,
            _ => return Err("`type` must be a string".into()),
        };
        let data = match o.remove("data") {
            Some(d @ Value::Object(_)) => d,
            _ => return Err("`data` must be an object".into()),
        };
        let created_at = match o.remove("created_at") {
            Some(Value::String(s)) => Some(s),
            None | Some(Value::Null) => None,
            Some(_) => return Err("`created_at` must be a string".into()),
        };
        Ok(Envelope {
            id,
            kind,
            created_at,
            data,
        })
    }

    pub fn from_slice(body: &[u8]) -> Result<Envelope, String> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        Envelope::from_value(v)
    }
}

/// A task's id as its tracker names it. It goes into report URLs
/// (`/api/v1/tasks/{id}`), so it is one path segment: never empty, `.` or `..`, and
/// without `/`, `?` or `#`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

/// A task id that is no usable path segment.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0:?} is not a usable task id")]
pub struct BadTaskId(String);

impl BadTaskId {
    /// The id as it came.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl TaskId {
    pub fn new(id: impl Into<String>) -> Result<TaskId, BadTaskId> {
        let id = id.into();
        if id.is_empty() || id == "." || id == ".." || id.contains(['/', '?', '#']) {
            return Err(BadTaskId(id));
        }
        Ok(TaskId(id))
    }

    /// A GitHub issue's task: its branch is `picogent/issue-<n>`.
    pub fn of_issue(number: u64) -> TaskId {
        TaskId(format!("issue-{number}"))
    }

    /// The GitHub issue the task is (`issue-<n>`); `None` for another id.
    pub fn issue(&self) -> Option<u64> {
        let n = self.0.strip_prefix("issue-")?;
        // `issue-012` is no issue's: `of_issue` never writes it.
        n.parse().ok().filter(|v: &u64| v.to_string() == n)
    }

    /// An issue's task in one of several repositories (`github.repos`):
    /// `<owner>:<name>:issue-<n>` (neither part of a repository's name holds `:`).
    pub fn of_repo_issue(repo: &str, number: u64) -> TaskId {
        TaskId(format!("{}:issue-{number}", repo.replacen('/', ":", 1)))
    }

    /// The repository (`owner/name`) and the issue of an `of_repo_issue` id.
    pub fn repo_issue(&self) -> Option<(String, u64)> {
        let (repo, issue) = self.0.rsplit_once(':')?;
        let (owner, name) = repo.split_once(':')?;
        if owner.is_empty() || name.is_empty() || name.contains(':') {
            return None;
        }
        let n = TaskId(issue.to_string()).issue()?;
        Some((format!("{owner}/{name}"), n))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TaskId {
    type Error = BadTaskId;
    fn try_from(s: String) -> Result<TaskId, BadTaskId> {
        TaskId::new(s)
    }
}

impl From<TaskId> for String {
    fn from(t: TaskId) -> String {
        t.0
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for TaskId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for TaskId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub id: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<Author>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Author {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The events agent mode handles, as the journal stores them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "task.assigned")]
    TaskAssigned { task: Task },
    #[serde(rename = "chat.message")]
    ChatMessage {
        task_id: TaskId,
        message: ChatMessage,
    },
    #[serde(rename = "task.cancelled")]
    TaskCancelled {
        task_id: TaskId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Event {
    /// `Ok(None)` for a well-formed event of a type the agent does not handle.
    pub fn parse(env: &Envelope) -> Result<Option<Event>, String> {
        let event = match env.kind.as_str() {
            "task.assigned" => Event::TaskAssigned {
                task: field(&env.data, "task")?,
            },
            "chat.message" => Event::ChatMessage {
                task_id: field(&env.data, "task_id")?,
                message: field(&env.data, "message")?,
            },
            "task.cancelled" => Event::TaskCancelled {
                task_id: field(&env.data, "task_id")?,
                reason: field(&env.data, "reason")?,
            },
            _ => return Ok(None),
        };
        Ok(Some(event))
    }

    pub fn task_id(&self) -> &TaskId {
        match self {
            Event::TaskAssigned { task } => &task.id,
            Event::ChatMessage { task_id, .. } | Event::TaskCancelled { task_id, .. } => task_id,
        }
    }

    /// The event's type as the protocol names it, for the log.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TaskAssigned { .. } => "task.assigned",
            Event::ChatMessage { .. } => "chat.message",
            Event::TaskCancelled { .. } => "task.cancelled",
        }
    }
}

/// One field of an envelope's `data`, its error naming the field's path.
fn field<T: serde::de::DeserializeOwned>(data: &Value, name: &str) -> Result<T, String> {
    let v = data.get(name).cloned().unwrap_or(Value::Null);
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!(".{path}")
        };
        // A task id that is no path segment reads as before typed ids.
        let inner = e.into_inner().to_string();
        match inner.strip_suffix(" is not a usable task id") {
            Some(id) => format!("`data.{name}{at}` {id} is not a usable task id"),
            None => format!("`data.{name}{at}`: {inner}"),
        }
    })
}

/// What made a GitHub issue a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    /// Its assignment or label (the trigger's `assignee` or `label`).
    #[default]
    Trigger,
    /// A mention: nothing about the issue itself says it is picogent's.
    Mention,
}

/// Where an event came from, with what its tracker needs to know of it again after a
/// restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "tracker", rename_all = "snake_case")]
pub enum Origin {
    /// Team Board, with the envelope's own time when it gave one.
    Board {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_at: Option<String>,
    },
    /// GitHub: which of the issue's starts this event belongs to, and (a start) what
    /// made the issue a task.
    Github {
        generation: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<By>,
    },
}

/// An event as the router takes it and the journal keeps it: its id (a repeat of it
/// is a duplicate), what it says, and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    pub id: String,
    pub event: Event,
    pub origin: Origin,
}

impl Arrival {
    /// A Team Board envelope as an arrival; `Ok(None)` for a type the agent does not
    /// handle. Whatever its id or fields say, it is Team Board's.
    pub fn from_board(env: &Envelope) -> Result<Option<Arrival>, String> {
        let Some(event) = Event::parse(env)? else {
            return Ok(None);
        };
        Ok(Some(Arrival {
            id: env.id.clone(),
            event,
            origin: Origin::Board {
                created_at: env.created_at.clone(),
            },
        }))
    }

    /// An envelope from a journal written before typed events, which held GitHub's
    /// arrivals as envelopes too: with a `github` field beside the event's own, or (a
    /// chat message) an id that starts `github-`.
    pub fn from_old_journal(env: &Envelope) -> Result<Option<Arrival>, String> {
        let Some(mut arrival) = Arrival::from_board(env)? else {
            return Ok(None);
        };
        let github = (env.id.starts_with("github-")).then(|| serde_json::json!({}));
        if let Some(g) = env.data.get("github").or(github.as_ref()) {
            arrival.origin = Origin::Github {
                generation: g["generation"]
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
                by: serde_json::from_value(g["by"].clone()).ok(),
            };
        }
        Ok(Some(arrival))
    }

    pub fn task_id(&self) -> &TaskId {
        self.event.task_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repository_issues_name_their_repository() {
        let t = TaskId::of_repo_issue("acme/api.rs", 7);
        assert_eq!(t.as_str(), "acme:api.rs:issue-7");
        assert_eq!(t.repo_issue(), Some(("acme/api.rs".to_string(), 7)));
        assert_eq!(t.issue(), None);
        assert_eq!(TaskId::of_issue(7).repo_issue(), None);
        for bad in ["a:b:c:issue-1", ":b:issue-1", "a::issue-1", "a:b:issue-01"] {
            assert_eq!(TaskId::new(bad).unwrap().repo_issue(), None, "{bad}");
        }
    }

    #[test]
    fn envelopes_are_validated_field_by_field() {
        let ok = Envelope::from_value(json!({"id": "e1", "type": "x", "data": {}})).unwrap();
        assert_eq!(ok.id, "e1");
        for (v, msg) in [
            (json!([]), "JSON object"),
            (json!({"id": "", "type": "x", "data": {}}), "`id`"),
            (json!({"id": "e", "type": 1, "data": {}}), "`type`"),
            (json!({"id": "e", "type": "x", "data": []}), "`data`"),
        ] {
            assert!(Envelope::from_value(v).unwrap_err().contains(msg));
        }
    }

    #[test]
    fn events_name_the_missing_field() {
        let env = Envelope::from_value(
            json!({"id": "e", "type": "task.assigned", "data": {"task": {"id": "t"}}}),
        )
        .unwrap();
        let err = Event::parse(&env).unwrap_err();
        assert!(err.contains("data.task") && err.contains("title"), "{err}");
        let env =
            Envelope::from_value(json!({"id": "e", "type": "agent.poked", "data": {}})).unwrap();
        assert_eq!(Event::parse(&env).unwrap(), None);
        for (data, at) in [
            (
                json!({"task": {"id": "a/b", "title": "x"}}),
                "`data.task.id`",
            ),
            (
                json!({"task": {"id": "..", "title": "x"}}),
                "`data.task.id`",
            ),
        ] {
            let env =
                Envelope::from_value(json!({"id": "e", "type": "task.assigned", "data": data}))
                    .unwrap();
            let err = Event::parse(&env).unwrap_err();
            assert!(
                err.starts_with(at) && err.contains("not a usable task id"),
                "{err}"
            );
        }
        let env = Envelope::from_value(
            json!({"id": "e", "type": "task.cancelled", "data": {"task_id": "x?y"}}),
        )
        .unwrap();
        let err = Event::parse(&env).unwrap_err();
        assert!(err.starts_with("`data.task_id` \"x?y\""), "{err}");
    }

    #[test]
    fn task_ids_are_one_path_segment_and_name_issues_one_way() {
        for bad in ["", ".", "..", "a/b", "a?b", "a#b"] {
            assert!(TaskId::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(TaskId::of_issue(12).issue(), Some(12));
        assert_eq!(TaskId::new("issue-12").unwrap(), TaskId::of_issue(12));
        for other in ["issue-", "issue-x", "issue-012", "issue-1-2", "task-1"] {
            assert_eq!(TaskId::new(other).unwrap().issue(), None, "{other}");
        }
        // A journal line with an id no tracker could have sent is not read as one.
        assert!(serde_json::from_value::<TaskId>(json!("a/b")).is_err());
    }

    #[test]
    fn arrivals_round_trip_and_old_envelopes_read_as_them() {
        let board = Envelope::from_value(json!({"id": "e", "type": "chat.message", "created_at": "2026-01-01T00:00:00Z", "data": {"task_id": "t1", "message": {"id": "m", "content": "hi", "author": {"name": "Ann"}}}})).unwrap();
        let a = Arrival::from_board(&board).unwrap().unwrap();
        assert_eq!(
            a.origin,
            Origin::Board {
                created_at: Some("2026-01-01T00:00:00Z".into())
            }
        );
        let back: Arrival = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        let github = Envelope::from_value(json!({"id": "github-delivery-d", "type": "task.assigned", "data": {"task": {"id": "issue-3", "title": "T", "description": "D"}, "github": {"generation": 2, "by": "mention"}}})).unwrap();
        // Live, Team Board's whatever it says; from an old journal, GitHub's.
        let live = Arrival::from_board(&github).unwrap().unwrap();
        assert_eq!(live.origin, Origin::Board { created_at: None });
        let a = Arrival::from_old_journal(&github).unwrap().unwrap();
        assert_eq!(
            a.origin,
            Origin::Github {
                generation: 2,
                by: Some(By::Mention)
            }
        );
        assert_eq!(a.task_id().issue(), Some(3));
        assert_eq!(
            serde_json::to_value(&a.event).unwrap(),
            json!({"type": "task.assigned", "task": {"id": "issue-3", "title": "T", "description": "D"}})
        );
    }
}
