//! Team Board's door (docs/tracker-protocol.md): reports through its REST `client`;
//! events by callbacks to `/events` (`http`, registered with the callback URL, then
//! heartbeats) or over an outbound WebSocket (`ws`), beside the health endpoints.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Transport};
use crate::tracker::base::{DaemonError, Timing};
use crate::tracker::door::{Door, Front, Listen, Opening};
use crate::tracker::registration;
use crate::tracker::router::Router;
use crate::tracker::TrackerClient;

/// Team Board, as the settings say to reach it.
struct Board {
    cfg: Config,
    tracker_url: String,
    token: String,
    client: TrackerClient,
    timing: Timing,
}

/// What Team Board's settings give before anything opens: where it is, the token,
/// the client reports go through.
pub(crate) struct Prepared {
    tracker_url: String,
    token: String,
    client: TrackerClient,
}

/// Checks Team Board's settings (before the state opens, so a missing URL or token is
/// the first thing an operator hears).
pub(crate) fn prepare(cfg: &Config, timing: &Timing) -> Result<Prepared, DaemonError> {
    let tracker_url = cfg.tracker_url().map(str::to_string).ok_or_else(|| {
        DaemonError::Config("agent mode needs tracker_url (or TRACKER_URL)".into())
    })?;
    let token = cfg.token.clone().ok_or_else(|| {
        DaemonError::Config("agent mode needs the tracker's bearer token: set AGENT_TOKEN (or `token` in agent.json)".into())
    })?;
    let client = TrackerClient::new(&tracker_url, &token)
        .map_err(|e| DaemonError::Config(format!("cannot build the HTTP client: {e}")))?
        .with_report_timeout(timing.report_timeout);
    Ok(Prepared {
        tracker_url,
        token,
        client,
    })
}

/// Team Board's door: the client reports go through, the worktrees, how events come.
pub(crate) async fn open(p: Prepared, o: &Opening<'_>) -> Result<Door, DaemonError> {
    let Prepared {
        tracker_url,
        token,
        client,
    } = p;
    let cfg = o.agent.config().clone();
    let agent = o.agent.clone();
    let workspace = tokio::task::spawn_blocking(move || {
        crate::tracker::worktree::Workspace::decide(agent.config(), agent.sandbox())
    })
    .await
    .map_err(|e| DaemonError::Config(format!("finding the repository failed: {e}")))?
    .map_err(DaemonError::Config)?;
    Ok(Door {
        tracker: Arc::new(client.clone()),
        workspace,
        front: Box::new(Board {
            cfg,
            tracker_url,
            token,
            client,
            timing: o.timing.clone(),
        }),
    })
}

impl Front for Board {
    fn listen(&self, router: &Router) -> Listen {
        match self.cfg.transport {
            // Probes (a container's health check, Kubernetes) reach `/healthz` and
            // `/livez` from outside the pod: every interface, and no `/events`.
            Transport::Ws => Listen {
                host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                token: self.token.clone(),
                routes: None,
                required: false,
            },
            Transport::Http => Listen {
                host: callback_host(&self.cfg),
                token: self.token.clone(),
                routes: Some(super::http::events_route(
                    self.token.clone(),
                    router.clone(),
                )),
                required: true,
            },
        }
    }

    fn run(
        self: Box<Self>,
        router: Router,
        port: Option<u16>,
        stop: CancellationToken,
        _owned: TaskTracker,
    ) -> BoxFuture<'static, Result<(), DaemonError>> {
        Box::pin(async move {
            match (self.cfg.transport, port) {
                (Transport::Http, Some(port)) => self.callbacks(&router, port, &stop).await,
                (Transport::Http, None) => Err(DaemonError::Config(
                    "Team Board's callbacks need the events server".into(),
                )),
                (Transport::Ws, port) => {
                    if let Some(port) = port {
                        tracing::info!(
                            port,
                            "health server listening (/healthz, /livez, /metrics)"
                        );
                    }
                    self.websocket(router, stop).await
                }
            }
        })
    }
}

/// Listen on loopback when the tracker is told a loopback address; everywhere when it
/// is told another host's address.
fn callback_host(cfg: &Config) -> IpAddr {
    match cfg
        .callback_url
        .as_deref()
        .and_then(|u| reqwest::Url::parse(u).ok())
        .and_then(|u| u.host_str().map(str::to_string))
    {
        Some(h) if !(h == "localhost" || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())) => {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        }
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

impl Board {
    /// Keeps a WebSocket to the tracker until `stop` (in a fleet, while this worker
    /// holds the connection for the fleet: `fleet_ws`).
    async fn websocket(self, router: Router, stop: CancellationToken) -> Result<(), DaemonError> {
        let opts = super::ws::WsOptions {
            tracker_url: self.tracker_url,
            token: self.token,
            heartbeat: Duration::from_secs(self.cfg.limits.heartbeat_interval_sec),
            backoff: self.timing.ws_backoff,
        };
        let desc = super::types::describe(&self.cfg, None);
        if let Some(pg) = router.store() {
            let lease = self.cfg.store.lease;
            return super::fleet_ws::run(opts, desc, router, pg, lease, stop).await;
        }
        super::ws::run(opts, desc, router, stop)
            .await
            .map_err(DaemonError::from)
    }

    /// Registers with the callback URL of the events server on `port`, then beats
    /// until `stop`.
    async fn callbacks(
        &self,
        router: &Router,
        port: u16,
        stop: &CancellationToken,
    ) -> Result<(), DaemonError> {
        let cfg = &self.cfg;
        let callback = cfg.callback_url_for(port);
        let host = callback_host(cfg);
        tracing::info!(listen = %std::net::SocketAddr::new(host, port), callback = %callback, "events server listening");
        let desc = super::types::describe(cfg, Some(callback));
        let retry = self.timing.register_retry;
        let Some(reg) =
            registration::register(&self.client, &desc, retry, router.link(), stop).await?
        else {
            return Ok(());
        };
        let interval = Duration::from_secs(
            reg.heartbeat_interval_sec
                .filter(|s| *s > 0)
                .unwrap_or(cfg.limits.heartbeat_interval_sec),
        );
        let r = router.clone();
        registration::heartbeats(
            &self.client,
            &desc,
            interval,
            retry,
            move || r.reported_load(),
            router.link(),
            stop,
        )
        .await?;
        Ok(())
    }
}
