//! The trackers' protocol types. Unknown fields from the tracker are ignored (forward
//! compatibility); a malformed envelope or event is rejected with a message naming the
//! field. The events and what they are about are `event`'s; here are the frames,
//! registration, heartbeats and the reports picogent sends.

mod event;

pub use event::Author;
pub use event::{Arrival, BadTaskId, By, ChatMessage, Envelope, Event, Origin, Task, TaskId};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Sent at registration.
#[derive(Debug, Clone, Serialize)]
pub struct AgentDescription {
    pub name: String,
    pub slug: String,
    pub capabilities: Vec<String>,
    pub max_concurrent_tasks: usize,
    /// `"http"` or `"ws"`.
    pub transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// picogent's version.
    pub version: &'static str,
}

impl AgentDescription {
    /// The description for a transport nothing calls back on.
    pub fn without_callback(&self) -> AgentDescription {
        AgentDescription {
            callback_url: None,
            ..self.clone()
        }
    }
}

/// The tracker's answer to a registration. Both fields are read leniently: one that
/// is missing, null or of another type (`30.0`, `"30"`) is `None`, and the agent's
/// own default applies, as over HTTP.
#[derive(Debug, Clone, Deserialize)]
pub struct Registered {
    #[serde(default, deserialize_with = "crate::text::lenient")]
    pub agent_id: Option<String>,
    #[serde(default, deserialize_with = "crate::text::lenient")]
    pub heartbeat_interval_sec: Option<u64>,
}

/// A frame picogent sends over the tracker's WebSocket (tracker-protocol §3).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentFrame<'a> {
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
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A frame the tracker sends over its WebSocket. Frames of other types are ignored;
/// an event's body is validated by `Envelope::from_value`, so a malformed one can
/// still be acked by its id.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TrackerFrame {
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
    pub fn parse(text: &str) -> Result<TrackerFrame, String> {
        serde_json::from_str(text).map_err(|e| {
            format!(
                "a WebSocket frame from the tracker is not a frame of the protocol ({e}): {}",
                crate::text::one_line(text, 200)
            )
        })
    }
}

/// Whether the agent is working (a heartbeat's `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadStatus {
    Idle,
    Busy,
}

/// What a heartbeat says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Load {
    pub status: LoadStatus,
    pub active_tasks: Vec<String>,
    pub queued: usize,
}

/// The task statuses picogent sets (the tracker also knows `todo` and `done`, which
/// are people's to set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
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
pub enum Report {
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
    pub fn status(status: TaskStatus) -> Report {
        Report::Status { status }
    }

    pub fn comment(content: impl Into<String>, reply_to: Option<String>) -> Report {
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
}
