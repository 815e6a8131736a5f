//! Why a session frame (`branches`, `compare`, `label`, `delete`, …) gets an error
//! frame instead of its answer.

use crate::session::SessionError;

/// Why a session frame gets an error frame instead of its answer; the text names the
/// frame (`label: …`), as the page shows it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// The session could not be read or written.
    #[error("{0}: {1}")]
    Session(&'static str, SessionError),
    /// A name the frame gives is not the session's (a branch, a tool call), or a value
    /// is out of its bounds.
    #[error("{0}")]
    Invalid(String),
    /// A request runs in the session, which the frame would change under it.
    #[error("{0}")]
    Busy(String),
    /// A rollback's preview could not be made.
    #[error("preview: {0}")]
    Preview(crate::agent::RewindError),
    /// The blocking work behind the answer ended abnormally.
    #[error("{0}: {1}")]
    Internal(&'static str, String),
}
