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

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Registered {
    #[serde(default)]
    pub(crate) agent_id: Option<String>,
    #[serde(default)]
    pub(crate) heartbeat_interval_sec: Option<u64>,
}

/// What a heartbeat says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Load {
    pub(crate) status: &'static str,
    pub(crate) active_tasks: Vec<String>,
    pub(crate) queued: usize,
}

/// A report to the tracker, delivered through the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Report {
    Status {
        status: String,
    },
    Comment {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_to: Option<String>,
    },
}

impl Report {
    pub(crate) fn status(status: &str) -> Report {
        Report::Status {
            status: status.into(),
        }
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
