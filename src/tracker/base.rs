//! The daemon's parts: the timings, its errors, the start-up log and durable state
//! (`Core`: the state folder locked, the journal and outbox open), the server for the
//! health endpoints (and the way events come in), and a graceful shutdown
//! (`wind_down`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::Agent;
use crate::config::Config;
use crate::tracker::journal::Journal;
use crate::tracker::journal_writer::JournalWriter;
use crate::tracker::outbox::Outbox;
use crate::tracker::registration::FatalError;
use crate::tracker::router::Router;

/// Where the daemon's server listens, and what it serves besides the health endpoints.
pub(crate) struct Listen {
    pub(crate) host: std::net::IpAddr,
    /// `/metrics`' bearer token (and `/events`', on Team Board).
    pub(crate) token: String,
    pub(crate) routes: Option<axum::Router>,
    /// Whether the daemon cannot run without the server (it takes the events).
    pub(crate) required: bool,
}

/// Retry and backoff timings; tests shorten them.
#[derive(Debug, Clone)]
pub struct Timing {
    pub register_retry: Duration,
    /// WebSocket reconnect delay: first and cap.
    pub ws_backoff: (Duration, Duration),
    /// Report delivery retry delay: first and cap.
    pub report_backoff: (Duration, Duration),
    /// How long a report the tracker refuses (404, most 4xx) is retried before it is
    /// kept in the dead-letter file.
    pub report_refused_for: Duration,
    /// How long one report may wait for the tracker's answer before it is tried again.
    pub report_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            register_retry: Duration::from_secs(5),
            ws_backoff: (Duration::from_secs(1), Duration::from_secs(30)),
            report_backoff: (Duration::from_secs(1), Duration::from_secs(60)),
            report_refused_for: Duration::from_secs(600),
            report_timeout: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Config(String),
    #[error("cannot open the agent's state in {path}: {source}")]
    State {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Fatal(#[from] FatalError),
    #[error(transparent)]
    Locked(#[from] crate::tracker::state_lock::LockError),
    /// The store could not be opened (unreachable, refused, a newer schema).
    #[error("the store ({at}): {message}")]
    Store { at: String, message: String },
}

pub(crate) fn log_start(cfg: &Config, agent: &Agent) {
    let allowed = cfg.allowed_paths_display();
    let skills: Vec<&str> = agent.skills().iter().map(|s| s.name.as_str()).collect();
    tracing::info!(
        name = %cfg.name,
        slug = %cfg.slug,
        transport = ?cfg.transport,
        tracker = cfg.tracker_url().unwrap_or("-"),
        work_dir = %cfg.work_dir.display(),
        engine = cfg.llm.engine.as_str(),
        provider = cfg.llm.provider.as_str(),
        model = %cfg.llm.model,
        allowed_paths = %allowed,
        skills = %if skills.is_empty() { "none".to_string() } else { skills.join(", ") },
        max_concurrent_tasks = cfg.limits.max_concurrent_tasks,
        "picogent agent mode starting"
    );
}

/// The durable state every tracker kind starts from: the state folder locked (no
/// second daemon on it), the journal and the outbox open.
pub(crate) struct Core {
    pub(crate) journal: JournalWriter,
    pub(crate) outbox: Outbox,
    /// The fleet's store, when the configuration names one.
    pub(crate) store: Option<std::sync::Arc<crate::store::pg::Pg>>,
    _lock: crate::tracker::state_lock::StateLock,
}

impl Core {
    /// Opens it on a blocking thread: the lock's wait, the journal's and the outbox's
    /// reads, compactions and syncs never hold a runtime thread.
    pub(crate) async fn open(agent: &Agent, _timing: &Timing) -> Result<Core, DaemonError> {
        let cfg = agent.config();
        log_start(cfg, agent);
        let state_dir = cfg.state_dir();
        let dir = state_dir.clone();
        let core = tokio::task::spawn_blocking(move || Core::open_blocking(&dir))
            .await
            .map_err(|e| DaemonError::Config(format!("opening the agent's state failed: {e}")))??;
        match &cfg.store.postgres {
            None => Ok(core),
            Some(pg) => core.into_fleet(pg, cfg.store.lease, &state_dir).await,
        }
    }

    /// The fleet's journal and outbox, in the store. The local files must hold no
    /// unfinished work: it would be left behind where no other worker can see it.
    async fn into_fleet(
        self,
        target: &crate::config::Postgres,
        lease: Duration,
        state_dir: &std::path::Path,
    ) -> Result<Core, DaemonError> {
        let (pending, unsent) = (self.journal.pending().len(), self.outbox.len());
        if pending + unsent > 0 {
            return Err(DaemonError::Config(format!(
                "{} holds {pending} unfinished event(s) and {unsent} unsent report(s) from before `store` was set: run once without `store` until they are done, then start the fleet",
                state_dir.display()
            )));
        }
        let worker = crate::store::pg::worker_id();
        let pg = crate::store::pg::Pg::open(target, worker.clone())
            .await
            .map_err(|e| DaemonError::Store {
                at: target.shown(),
                message: e.to_string(),
            })?;
        tracing::info!(store = %target.shown(), worker, schema = crate::store::pg::SCHEMA_VERSION, "a fleet's worker: the state is in the store");
        let Core { journal, _lock, .. } = self;
        Ok(Core {
            journal: journal.into_fleet(pg.clone()),
            outbox: Outbox::fleet(pg.clone(), lease),
            store: Some(pg),
            _lock,
        })
    }

    fn open_blocking(state_dir: &std::path::Path) -> Result<Core, DaemonError> {
        // Held until the daemon returns: no second daemon on this state meanwhile.
        let lock = crate::tracker::state_lock::StateLock::take(state_dir)?;
        let state_err = |source| DaemonError::State {
            path: state_dir.display().to_string(),
            source,
        };
        let journal = Journal::open(state_dir).map_err(state_err)?;
        let journal = JournalWriter::start(journal).map_err(state_err)?;
        let outbox = Outbox::open(state_dir).map_err(state_err)?;
        Ok(Core {
            journal,
            outbox,
            store: None,
            _lock: lock,
        })
    }
}

/// A graceful shutdown: no new events, running tasks get `shutdown_grace`, the
/// server stops, queued reports get a moment to go out, and everything written is
/// flushed.
pub(crate) async fn wind_down(
    cfg: &Config,
    router: &Router,
    outbox: &Outbox,
    outbox_task: tokio::task::JoinHandle<()>,
    outbox_stop: &CancellationToken,
    server_stop: &CancellationToken,
) {
    tracing::info!(
        "shutting down: no new events; running tasks get {:?} to finish",
        cfg.limits.shutdown_grace
    );
    router.shutdown(cfg.limits.shutdown_grace).await;
    server_stop.cancel();
    // Give queued reports a moment to go out; the rest are delivered after a restart.
    let _ = tokio::time::timeout(Duration::from_secs(5), outbox.emptied()).await;
    outbox_stop.cancel();
    let _ = outbox_task.await;
    router.close_journal().await;
    outbox.close().await;
    if !outbox.is_empty() {
        tracing::warn!(
            "{} report(s) not yet delivered; they are sent at the next start",
            outbox.len()
        );
    }
}

/// Binds `listen_port` on the host `listen` names: before any work resumes, so a port
/// already taken stops the daemon with nothing started.
pub(crate) async fn bind(
    cfg: &Config,
    listen: &Listen,
) -> Result<(tokio::net::TcpListener, u16), DaemonError> {
    let addr = std::net::SocketAddr::new(listen.host, cfg.listen_port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let port = listener
        .local_addr()
        .map(|a| a.port())
        .unwrap_or(cfg.listen_port);
    Ok((listener, port))
}

/// Serves the health app and `listen`'s routes (`/events`, the GitHub webhook) on the
/// bound `listener` until `server_stop`, in a task of `owned`.
pub(crate) fn serve(
    listener: tokio::net::TcpListener,
    listen: Listen,
    router: &Router,
    server_stop: &CancellationToken,
    owned: &TaskTracker,
) {
    let mut app = super::http::app(listen.token, router.clone());
    if let Some(extra) = listen.routes {
        app = app.merge(extra);
    }
    let graceful = server_stop.clone();
    owned.spawn(async move {
        if let Err(e) = axum::serve(crate::net::GuardedListener::new(listener), app)
            .with_graceful_shutdown(async move { graceful.cancelled().await })
            .await
        {
            tracing::error!("events server failed: {e}");
        }
    });
}
