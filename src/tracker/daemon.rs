//! Agent mode: start-up checks and log, the durable state, the transport, and a
//! graceful shutdown. The daemon owns the order of things: the journal and outbox open
//! before any event can arrive, unfinished work from the last run is queued before new
//! work, and on SIGTERM running tasks get a grace period before they are interrupted.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::config::{Config, Transport};
use crate::tracker::journal::Journal;
use crate::tracker::journal_writer::JournalWriter;
use crate::tracker::outbox::Outbox;
use crate::tracker::registration::{self, FatalError};
use crate::tracker::router::Router;
use crate::tracker::types::AgentDescription;
use crate::tracker::TrackerClient;

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
}

fn log_start(cfg: &Config, agent: &Agent) {
    let allowed = cfg.allowed_paths_display();
    let skills: Vec<&str> = agent.skills().iter().map(|s| s.name.as_str()).collect();
    tracing::info!(
        name = %cfg.name,
        slug = %cfg.slug,
        transport = ?cfg.transport,
        tracker = cfg.tracker_url.as_deref().unwrap_or("-"),
        work_dir = %cfg.work_dir.display(),
        engine = cfg.engine.as_str(),
        provider = cfg.provider.as_str(),
        model = %cfg.model,
        allowed_paths = %allowed,
        skills = %if skills.is_empty() { "none".to_string() } else { skills.join(", ") },
        max_concurrent_tasks = cfg.max_concurrent_tasks,
        "picogent agent mode starting"
    );
}

/// The durable state every tracker kind starts from: the state folder locked (no
/// second daemon on it), the journal and the outbox open.
pub(crate) struct Core {
    pub(crate) journal: JournalWriter,
    pub(crate) outbox: Outbox,
    _lock: crate::tracker::state_lock::StateLock,
}

impl Core {
    pub(crate) fn open(agent: &Agent, _timing: &Timing) -> Result<Core, DaemonError> {
        let cfg = agent.config();
        log_start(cfg, agent);
        let state_dir = cfg.state_dir();
        // Held until the daemon returns: no second daemon on this state meanwhile.
        let lock = crate::tracker::state_lock::StateLock::take(&state_dir)?;
        let state_err = |source| DaemonError::State {
            path: state_dir.display().to_string(),
            source,
        };
        let journal = Journal::open(&state_dir).map_err(state_err)?;
        let journal = JournalWriter::start(journal).map_err(state_err)?;
        let outbox = Outbox::open(&state_dir).map_err(state_err)?;
        Ok(Core {
            journal,
            outbox,
            _lock: lock,
        })
    }
}

/// Runs agent mode until `stop` is cancelled (then drains) or a fatal error.
pub async fn run(agent: Agent, timing: Timing, stop: CancellationToken) -> Result<(), DaemonError> {
    if agent.config().tracker == crate::config::TrackerKind::Github {
        return crate::tracker::github::run(agent, timing, stop).await;
    }
    let cfg = agent.config().clone();
    let tracker_url = cfg.tracker_url.clone().ok_or_else(|| {
        DaemonError::Config("agent mode needs tracker_url (or TRACKER_URL)".into())
    })?;
    let token = cfg.token.clone().ok_or_else(|| {
        DaemonError::Config("agent mode needs the tracker's bearer token: set AGENT_TOKEN (or `token` in agent.json)".into())
    })?;
    let core = Core::open(&agent, &timing)?;
    let (journal, outbox) = (core.journal, core.outbox);
    let client = TrackerClient::new(&tracker_url, &token)
        .map_err(|e| DaemonError::Config(format!("cannot build the HTTP client: {e}")))?
        .with_report_timeout(timing.report_timeout);
    let worktrees =
        crate::tracker::worktree::Worktrees::decide(&cfg).map_err(DaemonError::Config)?;
    let router = Router::new(agent.clone(), journal, outbox.clone(), worktrees, None);

    let outbox_stop = CancellationToken::new();
    let outbox_task = tokio::spawn(outbox.clone().run(
        client.clone(),
        timing.report_backoff,
        timing.report_refused_for,
        outbox_stop.clone(),
    ));
    router.resume_pending();

    let server_stop = CancellationToken::new();
    let result = match cfg.transport {
        Transport::Http => {
            run_http(&cfg, &token, &client, &router, &timing, &stop, &server_stop).await
        }
        Transport::Ws => {
            run_ws(
                &cfg,
                tracker_url,
                token,
                &router,
                &timing,
                &stop,
                &server_stop,
            )
            .await
        }
    };
    if let Err(e) = &result {
        tracing::error!("{e}");
    }
    wind_down(
        &cfg,
        &router,
        &outbox,
        outbox_task,
        &outbox_stop,
        &server_stop,
    )
    .await;
    result
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
        cfg.shutdown_grace
    );
    router.shutdown(cfg.shutdown_grace).await;
    server_stop.cancel();
    // Give queued reports a moment to go out; the rest are delivered after a restart.
    let flush_until = tokio::time::Instant::now() + Duration::from_secs(5);
    while !outbox.is_empty() && tokio::time::Instant::now() < flush_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    outbox_stop.cancel();
    let _ = outbox_task.await;
    router.flush_journal().await;
    outbox.flush().await;
    if !outbox.is_empty() {
        tracing::warn!(
            "{} report(s) not yet delivered; they are sent at the next start",
            outbox.len()
        );
    }
    tracing::info!("stopped");
}

/// GitHub mode's server on every interface at `listen_port`: the health endpoints
/// (`/metrics` behind AGENT_TOKEN when it is set, closed otherwise) and `extra` (the
/// webhook). Returns the port.
pub(crate) async fn serve_health(
    cfg: &Config,
    router: &Router,
    extra: Option<axum::Router>,
    server_stop: &CancellationToken,
) -> Result<u16, DaemonError> {
    let token = cfg.token.clone().unwrap_or_else(|| {
        tracing::info!(
            "/metrics answers only with AGENT_TOKEN as its bearer token: set one to read it"
        );
        crate::util::random_hex(48)
    });
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    serve(cfg, &token, router, extra, any, server_stop).await
}

/// Serves the health endpoints, then keeps a WebSocket to the tracker until `stop`.
async fn run_ws(
    cfg: &Config,
    tracker_url: String,
    token: String,
    router: &Router,
    timing: &Timing,
    stop: &CancellationToken,
    server_stop: &CancellationToken,
) -> Result<(), DaemonError> {
    // Probes (a container's health check, Kubernetes) reach `/healthz` and
    // `/livez` from outside the pod: every interface, and no `/events`.
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    match serve(cfg, &token, router, None, any, server_stop).await {
        Ok(port) => {
            tracing::info!(port, "health server listening (/healthz, /livez, /metrics)")
        }
        Err(e) => tracing::warn!("no health server: {e}"),
    }
    let opts = super::ws::WsOptions {
        tracker_url,
        token,
        heartbeat: Duration::from_secs(cfg.heartbeat_interval_sec),
        backoff: timing.ws_backoff,
    };
    let desc = AgentDescription::new(cfg, None);
    super::ws::run(opts, desc, router.clone(), stop.clone())
        .await
        .map_err(DaemonError::from)
}

/// Binds the events server, registers with the callback URL, then beats until `stop`.
async fn run_http(
    cfg: &Config,
    token: &str,
    client: &TrackerClient,
    router: &Router,
    timing: &Timing,
    stop: &CancellationToken,
    server_stop: &CancellationToken,
) -> Result<(), DaemonError> {
    // Listen on loopback when the tracker is told a loopback address; everywhere when
    // it is told another host's address.
    let host: IpAddr = match cfg
        .callback_url
        .as_deref()
        .and_then(|u| reqwest::Url::parse(u).ok())
        .and_then(|u| u.host_str().map(str::to_string))
    {
        Some(h) if !(h == "localhost" || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())) => {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        }
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let events = super::http::events_route(token.to_string(), router.clone());
    let port = serve(cfg, token, router, Some(events), host, server_stop).await?;
    let callback = cfg.callback_url_for(port);
    tracing::info!(listen = %std::net::SocketAddr::new(host, port), callback = %callback, "events server listening");

    let desc = AgentDescription::new(cfg, Some(callback));
    let Some(reg) = registration::register(client, &desc, timing.register_retry, stop).await?
    else {
        return Ok(());
    };
    let interval = Duration::from_secs(
        reg.heartbeat_interval_sec
            .filter(|s| *s > 0)
            .unwrap_or(cfg.heartbeat_interval_sec),
    );
    let r = router.clone();
    registration::heartbeats(
        client,
        &desc,
        interval,
        timing.register_retry,
        move || r.load(),
        stop,
    )
    .await?;
    Ok(())
}

/// Binds `listen_port` on `host` and serves the health app and `extra` (`/events`, the
/// GitHub webhook) until `server_stop`; the port it listens on.
async fn serve(
    cfg: &Config,
    token: &str,
    router: &Router,
    extra: Option<axum::Router>,
    host: IpAddr,
    server_stop: &CancellationToken,
) -> Result<u16, DaemonError> {
    let addr = std::net::SocketAddr::new(host, cfg.listen_port);
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
    let mut app = super::http::app(token.to_string(), router.clone());
    if let Some(extra) = extra {
        app = app.merge(extra);
    }
    let graceful = server_stop.clone();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(crate::net::GuardedListener::new(listener), app)
            .with_graceful_shutdown(async move { graceful.cancelled().await })
            .await
        {
            tracing::error!("events server failed: {e}");
        }
    });
    Ok(port)
}
