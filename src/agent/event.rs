//! The one event type every front door consumes and how a run ends
//! (`picogent_protocol::agent`); inside a run, `Emitter` sends events and `RunError`
//! says why the loop stopped.

use tokio::sync::mpsc::UnboundedSender;

pub use picogent_protocol::agent::{AgentEvent, FailureKind, Outcome};

use crate::session::SessionError;

#[derive(Debug, thiserror::Error)]
pub(super) enum RunError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("{1}")]
    Stop(FailureKind, String),
    #[error("cancelled")]
    Cancelled,
}

pub(super) struct Emitter(pub(super) UnboundedSender<AgentEvent>);

impl Emitter {
    pub(super) fn emit(&self, ev: AgentEvent) {
        // A consumer that went away does not stop the run; cancellation does.
        let _ = self.0.send(ev);
    }
}
