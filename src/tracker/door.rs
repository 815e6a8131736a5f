//! The seam between the daemon and a tracker kind's door (`board`, `github`): what a
//! door brings once it is ready (`Door`: its `Tracker`, its `Workspace` and its
//! `Front`), how its events come in (`Front`), what the daemon's server serves for it
//! (`Listen`), and what its opening may use (`Opening`). Doors and the daemon both
//! depend on this; neither on the other's insides.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::Agent;
pub(crate) use crate::tracker::base::Listen;
use crate::tracker::base::{DaemonError, Timing};
use crate::tracker::router::Router;
use crate::tracker::seam::Tracker;
use crate::tracker::worktree::Workspace;

/// What a tracker kind brings to the daemon once it is ready to take events.
pub(crate) struct Door {
    /// Where reports go, and its hooks into a task's life.
    pub(crate) tracker: Arc<dyn Tracker>,
    /// Where tasks work.
    pub(crate) workspace: Workspace,
    /// How events come in.
    pub(crate) front: Box<dyn Front>,
}

/// How a tracker's events come in: callbacks, a WebSocket, webhooks and polling.
pub(crate) trait Front: Send {
    /// Once the router exists, before unfinished work resumes.
    fn attach(&mut self, _router: &Router) {}

    /// What the server listens on and serves.
    fn listen(&self, router: &Router) -> Listen;

    /// Takes events until `stop` (then returns); `port` is the server's, when it
    /// listens. Work it starts goes to `owned`, which the daemon waits for.
    fn run(
        self: Box<Self>,
        router: Router,
        port: Option<u16>,
        stop: CancellationToken,
        owned: TaskTracker,
    ) -> BoxFuture<'static, Result<(), DaemonError>>;
}

/// What a door's opening may use: the agent, the timings, the daemon's stop (a wait
/// for the tracker at start ends with it), the tasks the daemon waits for at the end,
/// and the token that stops background work once the outbox has stopped.
pub(crate) struct Opening<'a> {
    pub(crate) agent: &'a Agent,
    pub(crate) timing: &'a Timing,
    pub(crate) stop: &'a CancellationToken,
    pub(crate) owned: &'a TaskTracker,
    pub(crate) background: &'a CancellationToken,
    /// The fleet's store, when the configuration names one.
    pub(crate) store: Option<&'a std::sync::Arc<crate::store::pg::Pg>>,
}
