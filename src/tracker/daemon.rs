//! Agent mode's one daemon, for every tracker kind. It owns the order of things: the
//! state folder locked and the journal and outbox open before any event can arrive,
//! the tracker's door opened (`board` or `github`), the router made, unfinished work
//! from the last run queued before new work, the outbox delivering through the
//! tracker, the server (health, and the door's routes) up, the door run until `stop`;
//! then a graceful wind-down (running tasks get a grace period before they are
//! interrupted) and every task it started waited for.

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::Agent;
use crate::tracker::base::{bind, serve, wind_down, Core};
use crate::tracker::router::Router;

pub use crate::tracker::base::{DaemonError, Timing};
use crate::tracker::door::Opening;

/// A tracker kind's settings, checked before the state opens.
enum Prepared {
    Board(crate::tracker::board::Prepared),
    Github(crate::tracker::github::Prepared),
}

impl Prepared {
    /// The configured tracker's settings, checked.
    fn check(
        cfg: &crate::config::Config,
        timing: &Timing,
        stop: &CancellationToken,
    ) -> Result<Prepared, DaemonError> {
        Ok(match &cfg.tracker {
            Some(crate::config::Tracker::Github(gh)) => {
                Prepared::Github(crate::tracker::github::prepare(gh, stop)?)
            }
            // Without a URL, Team Board's check names what is missing.
            Some(crate::config::Tracker::Board { .. }) | None => {
                Prepared::Board(crate::tracker::board::prepare(cfg, timing)?)
            }
        })
    }
}

/// How long shutdown waits for the work the doors started (a webhook being handled, a
/// GitHub comment going out) once the tasks and the outbox have stopped.
const OWNED_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs agent mode until `stop` is cancelled (then drains) or a fatal error.
pub async fn run(agent: Agent, timing: Timing, stop: CancellationToken) -> Result<(), DaemonError> {
    let cfg = agent.config().clone();
    let prepared = Prepared::check(&cfg, &timing, &stop)?;
    let core = Core::open(&agent, &timing).await?;
    let owned = TaskTracker::new();
    let background = CancellationToken::new();
    let opening = Opening {
        agent: &agent,
        timing: &timing,
        stop: &stop,
        owned: &owned,
        background: &background,
        store: core.store.as_ref(),
    };
    let opened = match prepared {
        Prepared::Board(p) => crate::tracker::board::open(p, &opening).await.map(Some),
        Prepared::Github(p) => crate::tracker::github::open(p, &opening).await,
    };
    let door = match opened {
        Ok(Some(door)) => door,
        // Stopped while GitHub was still being asked, or the door could not open.
        end => {
            close_owned(&owned, &background).await;
            return end.map(|_| ());
        }
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
    let listen = front.listen(&router);
    // Bound before any work resumes: a port already taken, when the door needs it,
    // stops the daemon with nothing started.
    let bound = match bind(&cfg, &listen).await {
        Ok(bound) => Some(bound),
        Err(e) if !listen.required => {
            tracing::warn!("no health server: {e}");
            None
        }
        Err(e) => {
            close_owned(&owned, &background).await;
            router.close_journal().await;
            core.outbox.close().await;
            return Err(e);
        }
    };
    let outbox_task = tokio::spawn(core.outbox.clone().run(
        door.tracker,
        timing.report_backoff,
        timing.report_refused_for,
        background.clone(),
    ));
    router.resume_pending();
    if let Some(pg) = &core.store {
        work_fleet(&cfg, &router, pg, &owned, &background);
    }

    let server_stop = CancellationToken::new();
    let port = bound.map(|(listener, port)| {
        serve(listener, listen, &router, &server_stop, &owned);
        port
    });
    let result = front.run(router.clone(), port, stop, owned.clone()).await;
    wind_down(
        &cfg,
        &router,
        &core.outbox,
        outbox_task,
        &background,
        &server_stop,
    )
    .await;
    close_owned(&owned, &background).await;
    if let Some(pg) = &core.store {
        pg.close().await;
    }
    tracing::info!("stopped");
    result
}

/// A fleet's worker loop (claims, leases, the events of the tasks held), owned by the
/// daemon until the background stops, after the router drained.
fn work_fleet(
    cfg: &crate::config::Config,
    router: &Router,
    pg: &std::sync::Arc<crate::store::pg::Pg>,
    owned: &TaskTracker,
    background: &CancellationToken,
) {
    let settings = crate::tracker::router::FleetSettings {
        lease: cfg.store.lease,
        fleet_max: cfg.store.fleet_max_tasks,
    };
    let (r, pg, stop) = (router.clone(), pg.clone(), background.clone());
    owned.spawn(async move { r.work_fleet(pg, settings, stop).await });
}

/// Stops the doors' background work and waits a bounded while for what they started.
async fn close_owned(owned: &TaskTracker, background: &CancellationToken) {
    background.cancel();
    owned.close();
    if tokio::time::timeout(OWNED_GRACE, owned.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = owned.len(),
            "work the tracker's door started did not end within {OWNED_GRACE:?}; leaving it"
        );
    }
}
