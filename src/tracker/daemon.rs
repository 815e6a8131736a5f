//! Agent mode's one daemon, for every tracker kind. It owns the order of things: the
//! state folder locked and the journal and outbox open before any event can arrive,
//! the tracker's door opened (`board` or `github`), the router made, unfinished work
//! from the last run queued before new work, the outbox delivering through the
//! tracker, the server (health, and the door's routes) up, the door run until `stop`;
//! then a graceful wind-down (running tasks get a grace period before they are
//! interrupted) and every task it started waited for.

use std::net::IpAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::Agent;
use crate::config::TrackerKind;
use crate::tracker::base::{serve, wind_down, Core};
use crate::tracker::router::Router;
use crate::tracker::seam::Tracker;
use crate::tracker::worktree::Workspace;

pub use crate::tracker::base::{DaemonError, Timing};

/// What a tracker kind brings to the daemon once it is ready to take events.
pub(crate) struct Door {
    /// Where reports go, and its hooks into a task's life.
    pub(crate) tracker: Arc<dyn Tracker>,
    /// Where tasks work.
    pub(crate) workspace: Workspace,
    /// How events come in.
    pub(crate) front: Box<dyn Front>,
}

/// Where the daemon's server listens, and what it serves besides the health endpoints.
pub(crate) struct Listen {
    pub(crate) host: IpAddr,
    /// `/metrics`' bearer token (and `/events`', on Team Board).
    pub(crate) token: String,
    pub(crate) routes: Option<axum::Router>,
    /// Whether the daemon cannot run without the server (it takes the events).
    pub(crate) required: bool,
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
}

/// Runs agent mode until `stop` is cancelled (then drains) or a fatal error.
pub async fn run(agent: Agent, timing: Timing, stop: CancellationToken) -> Result<(), DaemonError> {
    let cfg = agent.config().clone();
    let core = Core::open(&agent, &timing).await?;
    let owned = TaskTracker::new();
    let background = CancellationToken::new();
    let opening = Opening {
        agent: &agent,
        timing: &timing,
        stop: &stop,
        owned: &owned,
        background: &background,
    };
    let door = match cfg.tracker {
        TrackerKind::TeamBoard => crate::tracker::board::open(&opening).await?,
        TrackerKind::Github => match crate::tracker::github::open(&opening).await? {
            Some(door) => door,
            // Stopped while GitHub was still being asked.
            None => return Ok(()),
        },
    };
    let router = Router::new(
        agent.clone(),
        core.journal,
        core.outbox.clone(),
        door.workspace,
        door.tracker.clone(),
    );
    let mut front = door.front;
    front.attach(&router);
    let outbox_task = tokio::spawn(core.outbox.clone().run(
        door.tracker,
        timing.report_backoff,
        timing.report_refused_for,
        background.clone(),
    ));
    router.resume_pending();

    let server_stop = CancellationToken::new();
    let listen = front.listen(&router);
    let required = listen.required;
    let result = match serve(&cfg, listen, &router, &server_stop, &owned).await {
        Ok(port) => {
            front
                .run(router.clone(), Some(port), stop, owned.clone())
                .await
        }
        Err(e) if !required => {
            tracing::warn!("no health server: {e}");
            front.run(router.clone(), None, stop, owned.clone()).await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        tracing::error!("{e}");
    }
    owned.close();
    wind_down(
        &cfg,
        &router,
        &core.outbox,
        outbox_task,
        &background,
        &server_stop,
    )
    .await;
    owned.wait().await;
    tracing::info!("stopped");
    result
}
