//! Agent mode: start-up checks and log, the durable state, the transport, and a
//! graceful shutdown. The daemon owns the order of things: the journal and outbox open
//! before any event can arrive, unfinished work from the last run is queued before new
//! work, and on SIGTERM running tasks get a grace period before they are interrupted.
//! Team Board's transports are here; GitHub's daemon is `tracker::github`; what both
//! share is `tracker::base`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::config::{Config, Transport};
use crate::tracker::base::{serve, wind_down, Core};
use crate::tracker::registration;
use crate::tracker::router::Router;
use crate::tracker::types::AgentDescription;
use crate::tracker::TrackerClient;

pub use crate::tracker::base::{DaemonError, Timing};

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
    let Some(reg) =
        registration::register(client, &desc, timing.register_retry, router.link(), stop).await?
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
        router.link(),
        stop,
    )
    .await?;
    Ok(())
}
