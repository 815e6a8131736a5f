//! The one seam between agent mode and a tracker: `Tracker`. The outbox delivers every
//! report through its `report` (the one thing each tracker must do); the router asks
//! its hooks about a task's life, each with a default that suits a tracker with
//! nothing to add (Team Board). The shape is ripgrep's `Sink`: one required method,
//! defaulted callbacks.

use futures_util::future::BoxFuture;

use super::types::{Report, TaskId};
use super::TrackerError;

pub(crate) trait Tracker: Send + Sync + 'static {
    /// Delivers one report about `task`; `key` is the same for every attempt at it (a
    /// tracker that honours it drops a repeat).
    fn report<'a>(
        &'a self,
        task: &'a TaskId,
        report: &'a Report,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), TrackerError>>;

    /// A step of a task's run (a tool call), as the log shows it.
    fn step(&self, _task: &TaskId, _summary: &str) {}

    /// Whether a finished run's pushed branch is proposed (`Report::PullRequest`).
    fn proposes(&self) -> bool {
        false
    }

    /// Asked right before a task's run starts: whether the task is still wanted (a
    /// GitHub issue closed meanwhile is not run, and its event is done).
    fn admit(&self, _task: &TaskId) -> BoxFuture<'static, bool> {
        Box::pin(std::future::ready(true))
    }
}
