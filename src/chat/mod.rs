//! Chat mode's server: `client.html` at `GET /`, the chat WebSocket at `/` (upgrade)
//! and `/ws`, and `GET /healthz`, on one port. This file owns the handshake and the
//! connection loop; what a frame says is [`protocol`]'s (every client and server frame,
//! spec §7 plus the live-control extensions), what it does is [`requests`]' (prompts,
//! `subscribe`, live control), [`rewind`]'s (rollback and branch between runs) and
//! [`branches`]' (`branches`, `compare`, `prefer`, ...), and a request's frames and
//! their replay are [`runs`]'.
//!
//! A WebSocket here runs shell commands on this machine, so the handshake is guarded: a
//! browser `Origin` must be the server's own (or listed in `PICOGENT_ALLOWED_ORIGINS`),
//! which stops other web sites (and DNS-rebinding pages) from driving the agent; with
//! `PICOGENT_CHAT_TOKEN` set, the client must present it; and listening on a
//! non-loopback address without a token is refused at start.

mod branches;
mod history;
mod inflight;
mod listing;
mod page;
mod refused;
/// The chat WebSocket's frames, parsed and built in the protocol crate.
use picogent_protocol::chat as protocol;
mod replay;
mod requests;
mod rewind;
mod runs;
mod watchers;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::Agent;
use protocol::{ClientFrame, Outgoing};
use runs::{Outbound, Runs};

pub(crate) use protocol::MAX_FRAME_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("refusing to serve chat on {0} without PICOGENT_CHAT_TOKEN: anyone who can reach that address could run shell commands here. Set PICOGENT_CHAT_TOKEN, or use PICOGENT_HOST=127.0.0.1")]
    NoToken(String),
    #[error("PICOGENT_HOST {0:?} is not an IP address")]
    BadHost(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

struct ChatState {
    agent: Agent,
    /// Every request of the server, running or recently finished, by its connection's
    /// key (`c<conn>/<id>`) and, for `keepAlive` runs, also by `runId`.
    runs: Runs,
    /// Numbers the connections.
    next_conn: std::sync::atomic::AtomicU64,
    token: Option<String>,
    /// Origins that are this server itself.
    own_origins: Vec<String>,
    /// Listening on a non-loopback address: the Host a browser used is its own origin.
    public: bool,
    allowed: Vec<String>,
    /// Cancelled when the server is asked to stop: no new prompts are taken.
    stopping: CancellationToken,
    /// Cancelled once the drain is over: every run and connection ends.
    stop: CancellationToken,
    /// The tasks the server starts for its runs and connections' followers: `serve`
    /// waits for them after the cut.
    tasks: TaskTracker,
    /// The runs going now, on disk, and those a crash interrupted.
    inflight: Arc<inflight::InFlight>,
    /// The session each connection shows.
    watchers: watchers::Watchers,
    /// What the sessions list knows of each session file.
    listing: Arc<listing::Listing>,
}

/// Binds the chat port, refusing a non-loopback address without a token.
pub async fn bind(
    host: &str,
    port: u16,
    token: Option<&str>,
) -> Result<tokio::net::TcpListener, ChatError> {
    let ip: IpAddr = if host == "localhost" {
        IpAddr::from([127, 0, 0, 1])
    } else {
        host.parse().map_err(|_| ChatError::BadHost(host.into()))?
    };
    if !ip.is_loopback() && token.is_none() {
        return Err(ChatError::NoToken(host.into()));
    }
    let addr = SocketAddr::new(ip, port);
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ChatError::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// Serves chat on `listener` until `stop`, then drains: no new prompts, running
/// requests get `shutdown_grace` to finish (their pages still follow them), then what
/// is left is cancelled (and marked interrupted at the next start) and the
/// connections close.
pub async fn serve(
    agent: Agent,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let inflight = inflight::InFlight::recover(&agent).await;
    let (cut, runs) = (CancellationToken::new(), Runs::default());
    let grace = agent.config().limits.shutdown_grace;
    let tasks = TaskTracker::new();
    let app = app(
        agent,
        addr,
        (stop.clone(), cut.clone()),
        (runs.clone(), tasks.clone()),
        inflight.clone(),
    );
    let drain = async move {
        stop.cancelled().await;
        if tokio::time::timeout(grace, history::none_running(&runs))
            .await
            .is_err()
        {
            tracing::warn!("grace period over; cancelling the chat runs still going");
        }
        cut.cancel();
    };
    let served = axum::serve(crate::net::GuardedListener::new(listener), app)
        .with_graceful_shutdown(drain)
        .await;
    // The runs' own tasks (forwarding a run's events, marking it ended, a rewind)
    // finish before the server says it is done: every run was cancelled at the cut.
    tasks.close();
    if tokio::time::timeout(TASKS_GRACE, tasks.wait())
        .await
        .is_err()
    {
        tracing::error!(
            left = tasks.len(),
            "chat tasks still running {} s after the runs were cancelled",
            TASKS_GRACE.as_secs()
        );
    }
    // Every run has said whether it ended: the log is closed, and goes when it names
    // no run still going.
    inflight.close().await;
    served
}

/// How long the server waits for its runs' tasks once every run is cancelled.
const TASKS_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

fn app(
    agent: Agent,
    addr: SocketAddr,
    (stopping, stop): (CancellationToken, CancellationToken),
    (runs, tasks): (Runs, TaskTracker),
    inflight: Arc<inflight::InFlight>,
) -> axum::Router {
    let cfg = agent.config();
    let port = addr.port();
    let mut own_origins = vec![format!("http://{addr}")];
    if addr.ip().is_loopback() {
        own_origins.extend([
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
            format!("http://[::1]:{port}"),
        ]);
    }
    let state = Arc::new(ChatState {
        runs,
        next_conn: std::sync::atomic::AtomicU64::new(0),
        token: cfg.chat.token.clone(),
        allowed: cfg.chat.allowed_origins.clone(),
        public: !addr.ip().is_loopback(),
        own_origins,
        agent,
        stopping,
        stop,
        inflight,
        watchers: watchers::Watchers::default(),
        listing: Arc::default(),
        tasks,
    });
    axum::Router::new()
        .route("/", get(entry))
        .route("/ws", get(entry))
        .route("/client/{name}", get(page::asset))
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// The process answers: what a container's or orchestrator's liveness probe asks.
async fn livez() -> Response {
    Json(json!({"status": "alive"})).into_response()
}

/// Liveness, and the sandbox level commands run at (so an operator sees a container
/// that gave picogent less than namespaces).
async fn healthz(State(st): State<Arc<ChatState>>) -> Response {
    let sandbox = st.agent.sandbox();
    sandbox.settle().await;
    let mut body = json!({"status": "ok", "sandbox": sandbox.level_now()});
    if let Some(why) = sandbox.refusing_lately() {
        body["sandbox_refusing"] = json!(why);
    }
    Json(body).into_response()
}

/// Prometheus metrics, behind the chat token when one is set.
async fn metrics(State(st): State<Arc<ChatState>>, req: Request) -> Response {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !st.token_ok(req.uri(), auth) {
        return (StatusCode::UNAUTHORIZED, "missing or wrong token").into_response();
    }
    // Without a token only this machine's own names: a web page that rebinds its DNS
    // name to 127.0.0.1 cannot read it.
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let name = host.rsplit_once(':').map_or(host, |(n, _)| n);
    if st.token.is_none() && !matches!(name, "127.0.0.1" | "localhost" | "[::1]") {
        return (
            StatusCode::FORBIDDEN,
            "metrics are served to this machine only",
        )
            .into_response();
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    crate::metrics::response(accept)
}

fn refuse(status: StatusCode, message: String) -> Response {
    tracing::warn!("chat handshake refused: {message}");
    (status, message).into_response()
}

/// Why a WebSocket handshake is refused.
#[derive(Clone, Copy)]
enum Refusal {
    Origin,
    Token,
}

impl Refusal {
    /// The HTTP status for a request that is not a valid upgrade, and the close code
    /// and reason for one that is (a browser cannot read an HTTP refusal; it can read
    /// these).
    fn parts(self) -> (StatusCode, u16, &'static str) {
        match self {
            Refusal::Origin => (
                StatusCode::FORBIDDEN,
                4003,
                "origin not allowed: set PICOGENT_ALLOWED_ORIGINS",
            ),
            Refusal::Token => (StatusCode::UNAUTHORIZED, 4001, "token required"),
        }
    }
}

/// Refuses a handshake so a browser can show why: a valid upgrade is accepted and at
/// once closed with the refusal's code and reason, without reading a frame from it (no
/// frame is handled, no run can start); any other request gets the HTTP status.
async fn refuse_upgrade(
    mut parts: axum::http::request::Parts,
    st: &Arc<ChatState>,
    why: Refusal,
    log: String,
) -> Response {
    let (status, code, reason) = why.parts();
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, st).await {
        Ok(ws) => ws,
        Err(_) => return refuse(status, log),
    };
    tracing::warn!("chat handshake refused: {log}");
    ws.max_message_size(1024)
        .on_upgrade(move |mut socket| async move {
            let close = CloseFrame {
                code,
                reason: reason.into(),
            };
            if socket.send(Message::Close(Some(close))).await.is_err() {
                return;
            }
            // Wait briefly for the client's closing handshake, discarding whatever it
            // sends, so the close frame is read before the connection drops.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
                while let Some(Ok(m)) = socket.recv().await {
                    if matches!(m, Message::Close(_)) {
                        break;
                    }
                }
            })
            .await;
        })
}

impl ChatState {
    fn origin_ok(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.trim_end_matches('/');
        self.own_origins.iter().any(|o| o == origin)
            || self.allowed.iter().any(|o| o == origin)
            || (self.public
                && host.is_some_and(|h| {
                    origin == format!("http://{h}") || origin == format!("https://{h}")
                }))
    }

    fn token_ok(&self, uri: &axum::http::Uri, auth: Option<&str>) -> bool {
        let Some(want) = &self.token else { return true };
        let eq = |t: &str| crate::util::constant_time_eq(t.as_bytes(), want.as_bytes());
        if crate::util::bearer(auth).is_some_and(eq) {
            return true;
        }
        let query = uri.query().unwrap_or("");
        reqwest::Url::parse(&format!("http://x/?{query}"))
            .map(|u| u.query_pairs().any(|(k, v)| k == "token" && eq(&v)))
            .unwrap_or(false)
    }
}

async fn entry(State(st): State<Arc<ChatState>>, req: Request) -> Response {
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        if req.uri().path() == "/ws" {
            return (
                StatusCode::UPGRADE_REQUIRED,
                "this is the chat WebSocket; open / in a browser",
            )
                .into_response();
        }
        return page::index();
    }
    let (mut parts, _) = req.into_parts();
    // One readable Origin or none: two, or one that is not text, is refused rather
    // than judged by the first or treated as absent.
    let origins: Vec<_> = parts.headers.get_all(header::ORIGIN).iter().collect();
    let origin = match origins.as_slice() {
        [] => None,
        [one] => match one.to_str() {
            Ok(o) => Some(o),
            Err(_) => {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "the Origin header is not readable text".into(),
                )
            }
        },
        _ => return refuse(StatusCode::FORBIDDEN, "more than one Origin header".into()),
    };
    if let Some(origin) = origin {
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok());
        if !st.origin_ok(origin, host) {
            let log = format!("origin {origin} may not use this chat server; add it to PICOGENT_ALLOWED_ORIGINS to allow it");
            return refuse_upgrade(parts, &st, Refusal::Origin, log).await;
        }
    }
    let auth = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !st.token_ok(&parts.uri, auth) {
        let log = "missing or wrong chat token (PICOGENT_CHAT_TOKEN)".to_string();
        return refuse_upgrade(parts, &st, Refusal::Token, log).await;
    }
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &st).await {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    // Larger than the frame limit, so an oversized prompt gets an error frame instead
    // of a dropped connection.
    ws.max_message_size(4 * MAX_FRAME_BYTES)
        .on_upgrade(move |socket| connection(st, socket))
}

/// One WebSocket connection: its token (cancelling it cancels its runs, but for
/// `keepAlive` ones) and its number, which scopes the request ids its client chooses.
#[derive(Clone)]
struct Conn {
    token: CancellationToken,
    id: u64,
    /// Questions about sessions (labels, ratings, preferences, history, the list),
    /// taken in the order the client sent them through one bounded queue and answered
    /// up to `SESSION_ANSWERS` at a time (entries of one session are still written in
    /// order: its lock, or its run's queue).
    sessions: tokio::sync::mpsc::Sender<Asked>,
    /// The request logs this connection follows, each by one `attach` (a new
    /// `subscribe` to the same request replaces the last, never doubles it).
    follows: Arc<std::sync::Mutex<std::collections::HashMap<usize, CancellationToken>>>,
}

/// A question about sessions, for a connection's session worker.
enum Asked {
    Session(protocol::SessionFrame),
    List(protocol::Sessions),
}

/// Answers one question about sessions.
async fn answer(
    agent: crate::agent::Agent,
    runs: runs::Runs,
    listing: Arc<listing::Listing>,
    asked: Asked,
    tx: Outbound,
) {
    match asked {
        Asked::Session(f) => branches::answer(agent, runs, f, tx).await,
        Asked::List(q) => {
            let id = q.id.clone();
            let (list, more) = tokio::task::spawn_blocking(move || listing.page(&agent, &runs, &q))
                .await
                .unwrap_or_default();
            tx.send(&Outgoing::new(
                id,
                None,
                protocol::ServerFrame::Sessions {
                    content: list,
                    more,
                },
            ));
        }
    }
}

/// Session frames a connection may have waiting before it is told to slow down.
const SESSION_FRAMES: usize = 64;
/// Session frames of one connection answered at the same time.
const SESSION_ANSWERS: usize = 8;

async fn connection(st: Arc<ChatState>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (sender, mut rx) = tokio::sync::mpsc::channel(runs::OUTBOUND_FRAMES);
    let token = st.stop.child_token();
    let (tx, taken) = Outbound::new(sender, token.clone());
    let writer = tokio::spawn(async move {
        while let Some(text) = rx.recv().await {
            taken.took(&text);
            if sink.send(Message::Text(text)).await.is_err() {
                break;
            }
        }
    });
    let (sessions, session_worker) = spawn_session_worker(&st, &tx);
    let conn = Conn {
        token,
        id: st
            .next_conn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        sessions,
        follows: Arc::default(),
    };
    let error = |message: String| tx.send(&Outgoing::error(None, None, message));
    loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = conn.token.cancelled() => None,
        };
        match msg {
            Some(Ok(Message::Text(t))) => handle_frame(&st, t.as_str(), &tx, &conn).await,
            Some(Ok(Message::Binary(_))) => {
                error("binary frames are not supported; send JSON text".into());
            }
            Some(Err(e)) => {
                // Say why before the connection closes (a frame over the size the
                // WebSocket layer accepts, a broken frame).
                error(format!(
                    "the connection is closed: {e} (frames are limited to 1 MiB)"
                ));
                break;
            }
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {}
        }
    }
    // The client is gone: its runs are cancelled (unless started with `keepAlive`),
    // leaving their sessions consistent.
    st.watchers.leave(conn.id);
    conn.token.cancel();
    // Session frames already sent are still answered (a label is still written).
    drop(conn);
    finish_or_abort(session_worker).await;
    drop(tx);
    // A client that stopped reading would hold the writer forever: it gets a moment
    // to take what is queued, then the connection is dropped.
    finish_or_abort(writer).await;
    // What the connection held (its requests' replay logs) can go back to the system.
    crate::memory::touch();
}

/// The queue of a connection's questions about sessions, and the task answering them.
fn spawn_session_worker(
    st: &ChatState,
    tx: &Outbound,
) -> (
    tokio::sync::mpsc::Sender<Asked>,
    tokio::task::JoinHandle<()>,
) {
    let (sessions, mut session_rx) = tokio::sync::mpsc::channel(SESSION_FRAMES);
    let (agent, runs, session_tx) = (st.agent.clone(), st.runs.clone(), tx.clone());
    let listing = st.listing.clone();
    // Several at a time: a label or a rename for a session whose run is busy waits
    // for that run's next step, and must not hold this tab's other questions.
    let session_worker = tokio::spawn(async move {
        let frames = futures_util::stream::poll_fn(|cx| session_rx.poll_recv(cx));
        frames
            .for_each_concurrent(SESSION_ANSWERS, |asked| {
                answer(
                    agent.clone(),
                    runs.clone(),
                    listing.clone(),
                    asked,
                    session_tx.clone(),
                )
            })
            .await;
    });
    (sessions, session_worker)
}

/// Gives a closing connection's task `WRITER_GRACE` to finish, then aborts it.
async fn finish_or_abort(mut task: tokio::task::JoinHandle<()>) {
    if tokio::time::timeout(WRITER_GRACE, &mut task).await.is_err() {
        task.abort();
    }
}

/// How long a closing connection's writer may still deliver queued frames.
const WRITER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// One text frame from the client: a bad one gets its error frames, a good one goes
/// where it is handled.
async fn handle_frame(st: &Arc<ChatState>, text: &str, tx: &Outbound, conn: &Conn) {
    let ask = |asked: Asked, id: Option<String>| {
        if conn.sessions.try_send(asked).is_err() {
            tx.send(&Outgoing::error(
                id,
                None,
                format!("more than {SESSION_FRAMES} session requests are waiting; send again once some are answered"),
            ));
        }
    };
    match protocol::parse(text) {
        Ok(ClientFrame::Prompt(p)) => requests::start(st, conn, p, tx).await,
        Ok(ClientFrame::Subscribe(s)) => requests::subscribe(st, conn, s, tx),
        Ok(ClientFrame::Control(c)) => requests::control(st, conn, c, tx).await,
        Ok(ClientFrame::Rewind(r)) => rewind::handle(st, conn, r, tx),
        Ok(ClientFrame::Session(f)) => {
            if matches!(f.query, protocol::Query::History) {
                st.watchers.watch(conn.id, &f.about.session_id, tx);
            }
            let id = f.about.id.clone();
            ask(Asked::Session(f), id);
        }
        Ok(ClientFrame::Sessions(q)) => {
            let id = q.id.clone();
            ask(Asked::List(q), id);
        }
        Err(e) => {
            for f in e.replies() {
                tx.send(&f);
            }
        }
    }
}
