//! Protocol types. Unknown fields from the tracker are ignored (forward compatibility);
//! a malformed envelope or event is rejected with a message naming the field.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{Config, Transport};

/// Sent at registration.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AgentDescription {
    name: String,
    pub(crate) slug: String,
    capabilities: Vec<String>,
    max_concurrent_tasks: usize,
    transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    callback_url: Option<String>,
    version: &'static str,
}

impl AgentDescription {
    /// The description for a transport nothing calls back on.
    pub(crate) fn without_callback(&self) -> AgentDescription {
        AgentDescription {
            callback_url: None,
            ..self.clone()
        }
    }

    pub(crate) fn new(config: &Config, callback_url: Option<String>) -> Self {
        AgentDescription {
            name: config.name.clone(),
            slug: config.slug.clone(),
            capabilities: config.capabilities.clone(),
            max_concurrent_tasks: config.max_concurrent_tasks,
            transport: match config.transport {
                Transport::Http => "http",
                Transport::Ws => "ws",
            },
            callback_url,
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// The event envelope, as received and as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub(crate) id: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) created_at: Option<String>,
    pub(crate) data: Value,
}

impl Envelope {
    /// Validates an envelope: a non-empty string `id`, a string `type`, an object `data`.
    pub(crate) fn from_value(v: Value) -> Result<Envelope, String> {
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Task {
    pub(crate) id: String,
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChatMessage {
    pub(crate) id: String,
    pub(crate) content: String,
    #[serde(default)]
    pub(crate) author: Option<Author>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Author {
    #[serde(default)]
    pub(crate) name: Option<String>,
}

/// The events agent mode handles.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    TaskAssigned(Task),
    ChatMessage {
        task_id: String,
        message: ChatMessage,
    },
    TaskCancelled {
        task_id: String,
        reason: Option<String>,
    },
}

impl Event {
    /// `Ok(None)` for a well-formed event of a type the agent does not handle.
    pub fn parse(env: &Envelope) -> Result<Option<Event>, String> {
        fn field<T: serde::de::DeserializeOwned>(data: &Value, name: &str) -> Result<T, String> {
            let v = data.get(name).cloned().unwrap_or(Value::Null);
            serde_path_to_error::deserialize(v).map_err(|e| {
                let path = e.path().to_string();
                let at = if path == "." {
                    String::new()
                } else {
                    format!(".{path}")
                };
                format!("`data.{name}{at}`: {}", e.into_inner())
            })
        }
        let event = match env.kind.as_str() {
            "task.assigned" => Event::TaskAssigned(field(&env.data, "task")?),
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
        // The id goes into report URLs (`/api/v1/tasks/{id}`): one path segment.
        let id = event.task_id();
        if id.is_empty() || id == "." || id == ".." || id.contains(['/', '?', '#']) {
            let at = match &event {
                Event::TaskAssigned(_) => "data.task.id",
                _ => "data.task_id",
            };
            return Err(format!("`{at}` {id:?} is not a usable task id"));
        }
        Ok(Some(event))
    }

    pub(crate) fn task_id(&self) -> &str {
        match self {
            Event::TaskAssigned(t) => &t.id,
            Event::ChatMessage { task_id, .. } | Event::TaskCancelled { task_id, .. } => task_id,
        }
    }
}

/// The tracker's answer to a registration. Both fields are read leniently: one that
/// is missing, null or of another type (`30.0`, `"30"`) is `None`, and the agent's
/// own default applies, as over HTTP.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Registered {
    #[serde(default, deserialize_with = "crate::util::lenient")]
    pub(crate) agent_id: Option<String>,
    #[serde(default, deserialize_with = "crate::util::lenient")]
    pub(crate) heartbeat_interval_sec: Option<u64>,
}

/// A frame picogent sends over the tracker's WebSocket (tracker-protocol §3).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum AgentFrame<'a> {
    Auth {
        token: &'a str,
    },
    /// The agent's description, without the callback URL (nothing calls back).
    Register {
        agent: &'a AgentDescription,
    },
    Ack {
        event_id: String,
    },
    Heartbeat {
        #[serde(flatten)]
        load: &'a Load,
    },
}

impl AgentFrame<'_> {
    pub(crate) fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A frame the tracker sends over its WebSocket. Frames of other types are ignored;
/// an event's body is validated by `Envelope::from_value`, so a malformed one can
/// still be acked by its id.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum TrackerFrame {
    AuthOk,
    Registered(Registered),
    Event {
        event: Value,
    },
    Error {
        #[serde(default)]
        code: Option<String>,
        #[serde(default)]
        message: Option<String>,
    },
    #[serde(other)]
    Other,
}

impl TrackerFrame {
    /// Parses a text frame; one that is not a frame at all is named in the error.
    pub(crate) fn parse(text: &str) -> Result<TrackerFrame, String> {
        serde_json::from_str(text).map_err(|e| {
            format!(
                "a WebSocket frame from the tracker is not a frame of the protocol ({e}): {}",
                crate::util::one_line(text, 200)
            )
        })
    }
}

/// Whether the agent is working (a heartbeat's `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LoadStatus {
    Idle,
    Busy,
}

/// What a heartbeat says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Load {
    pub(crate) status: LoadStatus,
    pub(crate) active_tasks: Vec<String>,
    pub(crate) queued: usize,
}

/// The task statuses picogent sets (the tracker also knows `todo` and `done`, which
/// are people's to set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TaskStatus {
    /// Work on the task started.
    InProgress,
    /// The work is finished, after its result comment.
    Review,
    /// The work failed; a comment saying why comes first.
    Blocked,
}

/// A report to the tracker, delivered through the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Report {
    Status {
        status: TaskStatus,
    },
    Comment {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<String>,
    },
    /// GitHub: propose the task's pushed branch as a pull request (found again when it
    /// exists), `summary` the run's answer. Team Board has no such thing.
    PullRequest {
        branch: String,
        summary: String,
    },
}

impl Report {
    pub(crate) fn status(status: TaskStatus) -> Report {
        Report::Status { status }
    }

    pub(crate) fn comment(content: impl Into<String>, reply_to: Option<String>) -> Report {
        Report::Comment {
            content: content.into(),
            reply_to,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn websocket_frames_are_the_protocols() {
        let load = Load {
            status: LoadStatus::Busy,
            active_tasks: vec!["t1".into()],
            queued: 2,
        };
        let beat: Value =
            serde_json::from_str(&AgentFrame::Heartbeat { load: &load }.to_text()).unwrap();
        assert_eq!(
            beat,
            json!({"type": "heartbeat", "status": "busy", "active_tasks": ["t1"], "queued": 2})
        );
        let ack = AgentFrame::Ack {
            event_id: "e1".into(),
        };
        assert_eq!(ack.to_text(), r#"{"type":"ack","event_id":"e1"}"#);
        assert!(matches!(
            TrackerFrame::parse(r#"{"type":"auth_ok"}"#),
            Ok(TrackerFrame::AuthOk)
        ));
        match TrackerFrame::parse(
            r#"{"type":"registered","agent_id":"a","heartbeat_interval_sec":5}"#,
        ) {
            Ok(TrackerFrame::Registered(r)) => {
                assert_eq!(
                    (r.agent_id.as_deref(), r.heartbeat_interval_sec),
                    (Some("a"), Some(5))
                )
            }
            other => panic!("{other:?}"),
        }
        match TrackerFrame::parse(
            r#"{"type":"registered","agent_id":7,"heartbeat_interval_sec":"30"}"#,
        ) {
            Ok(TrackerFrame::Registered(r)) => {
                assert_eq!((r.agent_id, r.heartbeat_interval_sec), (None, None))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            TrackerFrame::parse(r#"{"type":"event","event":{"id":"e"}}"#),
            Ok(TrackerFrame::Event { .. })
        ));
        assert!(matches!(
            TrackerFrame::parse(r#"{"type":"error","code":"forbidden"}"#),
            Ok(TrackerFrame::Error {
                code: Some(_),
                message: None
            })
        ));
        // A type of a later protocol is skipped; what is no frame at all is named.
        assert!(matches!(
            TrackerFrame::parse(r#"{"type":"welcome","x":1}"#),
            Ok(TrackerFrame::Other)
        ));
        let err = TrackerFrame::parse("not json").unwrap_err();
        assert!(
            err.contains("not a frame") && err.contains("not json"),
            "{err}"
        );
        assert_eq!(
            serde_json::to_value(Report::status(TaskStatus::InProgress)).unwrap(),
            json!({"kind": "status", "status": "in_progress"})
        );
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
    }
}
