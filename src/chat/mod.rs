//! Chat mode's server: `client.html` at `GET /`, the chat WebSocket at `/` (upgrade)
//! and `/ws`, and `GET /healthz`, on one port.
//!
//! A WebSocket here runs shell commands on this machine, so the handshake is guarded: a
//! browser `Origin` must be the server's own (or listed in `PICOGENT_ALLOWED_ORIGINS`),
//! which stops other web sites (and DNS-rebinding pages) from driving the agent; with
//! `PICOGENT_CHAT_TOKEN` set, the client must present it; and listening on a
//! non-loopback address without a token is refused at start.
//!
//! Protocol (spec §7): client frames `{id, content, sessionId?, workDir?, systemPrompt?}`
//! or control frames with a `type` (`cancel`); server frames `{id, type, content,
//! sessionId}` with `type` one of `text`, `tool_use`, `tool_result`, `error`, `done`
//! (always last for a request), plus `retry` (an extension: the model call is being
//! retried, so text streamed since the last tool step is void).

mod runs;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::control::Role;
use crate::agent::{Agent, RunRequest};

/// The browser client, served as-is.
pub const CLIENT_HTML: &str = include_str!("../../client.html");
/// Prompt frames larger than this get an error frame.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

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
    stop: CancellationToken,
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

/// Serves chat on `listener` until `stop`.
pub async fn serve(
    agent: Agent,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let app = app(agent, addr, stop.clone());
    axum::serve(crate::net::GuardedListener::new(listener), app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

pub fn app(agent: Agent, addr: SocketAddr, stop: CancellationToken) -> axum::Router {
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
        runs: Runs::default(),
        next_conn: std::sync::atomic::AtomicU64::new(0),
        token: cfg.chat_token.clone(),
        allowed: cfg.allowed_origins.clone(),
        public: !addr.ip().is_loopback(),
        own_origins,
        agent,
        stop,
    });
    axum::Router::new()
        .route("/", get(entry))
        .route("/ws", get(entry))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .with_state(state)
}

fn refuse(status: StatusCode, message: String) -> Response {
    tracing::warn!("chat handshake refused: {message}");
    (status, message).into_response()
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
        return Html(CLIENT_HTML).into_response();
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
            return refuse(
                StatusCode::FORBIDDEN,
                format!("origin {origin} may not use this chat server; add it to PICOGENT_ALLOWED_ORIGINS to allow it"),
            );
        }
    }
    let auth = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !st.token_ok(&parts.uri, auth) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "missing or wrong chat token (PICOGENT_CHAT_TOKEN)".into(),
        );
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

use runs::{attach, forward, Outbound, RunLog, Runs};

fn frame(id: Option<&str>, kind: &str, content: &str, session: Option<&str>) -> Value {
    json!({"id": id, "type": kind, "content": content, "sessionId": session})
}

/// One WebSocket connection: its token (cancelling it cancels its runs, but for
/// `keepAlive` ones) and its number, which scopes the request ids its client chooses.
#[derive(Clone)]
struct Conn {
    token: CancellationToken,
    id: u64,
}

/// The key of a request in `runs`: its client's id, scoped to its connection.
fn own_key(conn: &Conn, id: &str) -> String {
    format!("c{}/{id}", conn.id)
}

/// The running (or recently finished) request a frame addresses: this connection's
/// request `id`, or any connection's `keepAlive` run by its server-issued `runId`.
fn find_run(st: &ChatState, conn: &Conn, id: Option<&str>, v: &Value) -> Option<Arc<RunLog>> {
    let runs = st.runs.lock().ok()?;
    if let Some(run) = v.get("runId").and_then(Value::as_str) {
        return runs
            .get(run)
            .filter(|l| l.run_id.as_deref() == Some(run))
            .cloned();
    }
    id.and_then(|i| runs.get(&own_key(conn, i)).cloned())
}

async fn connection(st: Arc<ChatState>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (sender, mut rx) = tokio::sync::mpsc::channel::<Value>(runs::OUTBOUND_FRAMES);
    let writer = tokio::spawn(async move {
        while let Some(v) = rx.recv().await {
            if sink
                .send(Message::Text(v.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let conn = Conn {
        token: st.stop.child_token(),
        id: st
            .next_conn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    };
    let tx = Outbound::new(sender, conn.token.clone());
    loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = conn.token.cancelled() => None,
        };
        match msg {
            Some(Ok(Message::Text(t))) => handle_frame(&st, t.as_str(), &tx, &conn),
            Some(Ok(Message::Binary(_))) => {
                tx.send(frame(
                    None,
                    "error",
                    "binary frames are not supported; send JSON text",
                    None,
                ));
            }
            Some(Err(e)) => {
                // Say why before the connection closes (a frame over the size the
                // WebSocket layer accepts, a broken frame).
                tx.send(frame(
                    None,
                    "error",
                    &format!("the connection is closed: {e} (frames are limited to 1 MiB)"),
                    None,
                ));
                break;
            }
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {}
        }
    }
    // The client is gone: its runs are cancelled (unless started with `keepAlive`),
    // leaving their sessions consistent.
    conn.token.cancel();
    drop(tx);
    // A client that stopped reading would hold the writer forever: it gets a moment
    // to take what is queued, then the connection is dropped.
    let mut writer = writer;
    if tokio::time::timeout(WRITER_GRACE, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
}

/// How long a closing connection's writer may still deliver queued frames.
const WRITER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

fn handle_frame(st: &Arc<ChatState>, text: &str, tx: &Outbound, conn: &Conn) {
    let error = |id: Option<&str>, msg: String| {
        tx.send(frame(id, "error", &msg, None));
    };
    if text.len() > MAX_FRAME_BYTES {
        return error(
            None,
            format!("the frame is {} bytes; the limit is 1 MiB", text.len()),
        );
    }
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return error(None, format!("the frame is not valid JSON: {e}")),
    };
    if !v.is_object() {
        return error(None, "the frame must be a JSON object".into());
    }
    let id = match &v["id"] {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    if let Some(kind) = v.get("type") {
        if matches!(kind.as_str(), Some("prefer" | "compare" | "branches")) {
            tokio::spawn(session_frame(st.agent.clone(), v, tx.clone()));
            return;
        }
        if kind.as_str() == Some("subscribe") {
            return match find_run(st, conn, id.as_deref(), &v) {
                Some(log) => attach(
                    log,
                    v["after"].as_u64().unwrap_or(0),
                    tx.clone(),
                    conn.token.clone(),
                ),
                None => error(
                    id.as_deref(),
                    format!(
                        "no request with id {:?} to subscribe to",
                        id.as_deref().unwrap_or("")
                    ),
                ),
            };
        }
        return control_frame(kind, id, &v, st, conn, &error);
    }
    let Some(id) = id else {
        return error(None, "a message frame needs a non-empty string `id`".into());
    };
    let end = |msg: String, session: Option<&str>| {
        tx.send(frame(Some(&id), "error", &msg, session));
        tx.send(frame(Some(&id), "done", "", session));
    };
    let content = match v.get("content") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return end("`content` is empty".into(), None),
        _ => return end("a message frame needs a string `content`".into(), None),
    };
    let session = match v.get("sessionId") {
        None | Some(Value::Null) => crate::util::new_session_id(),
        Some(Value::String(s)) if crate::session::valid_id(s) => s.clone(),
        Some(other) => {
            return end(
                format!("invalid sessionId {other}: use letters, digits, '.', '_' and '-'"),
                None,
            )
        }
    };
    let agent = &st.agent;
    let work_dir = match v
        .get("workDir")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        None => None,
        Some(dir) => {
            let path = crate::config::absolute(&agent.config().work_dir, &PathBuf::from(dir));
            match agent.sandbox().check_work_dir(&path) {
                Ok(p) => Some(p),
                Err(e) => return end(format!("workDir refused: {e}"), Some(&session)),
            }
        }
    };
    let system_prompt = v
        .get("systemPrompt")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string);
    // A run normally ends with its connection; `keepAlive` runs go on, and any client
    // can re-attach with `subscribe`.
    let keep_alive = v["keepAlive"].as_bool() == Some(true);
    let token = if keep_alive {
        st.stop.child_token()
    } else {
        conn.token.child_token()
    };
    let log = {
        let Ok(mut r) = st.runs.lock() else { return };
        let key = own_key(conn, &id);
        if r.get(&key).is_some_and(|l| !l.is_done()) {
            drop(r);
            return error(
                Some(&id),
                format!("a request with id {id:?} is already running"),
            );
        }
        let handle = agent.start_with_cancel(
            RunRequest {
                prompt: content,
                session_id: session.clone(),
                work_dir,
                system_prompt,
            },
            token.clone(),
        );
        // A keepAlive run outlives its connection, so it also gets an id any client
        // can address it by (`runId` in its frames); other runs stay the connection's.
        let run_id = keep_alive.then(|| format!("run-{}", crate::util::random_hex(16)));
        let log = RunLog::new(
            token,
            handle.control.clone(),
            run_id.clone(),
            session.clone(),
        );
        let mut keys = vec![key];
        keys.extend(run_id);
        for k in &keys {
            r.insert(k.clone(), log.clone());
        }
        tokio::spawn(forward(
            handle,
            id,
            session,
            log.clone(),
            st.runs.clone(),
            keys,
        ));
        log
    };
    attach(log, 0, tx.clone(), conn.token.clone());
}

/// `cancel`, `pause`, `resume`, `stop`, `instruct` addressed to a running request.
fn control_frame(
    kind: &Value,
    id: Option<String>,
    v: &Value,
    st: &ChatState,
    conn: &Conn,
    error: &dyn Fn(Option<&str>, String),
) {
    let Some(kind) = kind.as_str() else {
        return error(
            id.as_deref(),
            format!("`type` must be a string, got {kind}"),
        );
    };
    if !matches!(
        kind,
        "cancel" | "pause" | "resume" | "stop" | "instruct" | "rollback" | "branch"
    ) {
        return error(
            id.as_deref(),
            format!("unknown control frame type {kind:?}"),
        );
    }
    // The request's id on this connection, or a keepAlive run's `runId`.
    let Some(id) = id.or_else(|| v.get("runId").and_then(Value::as_str).map(str::to_string)) else {
        return error(
            None,
            format!(
                "a {kind} frame needs the `id` of a running request (or a keepAlive run's `runId`)"
            ),
        );
    };
    let run = find_run(st, conn, Some(&id), v).filter(|l| !l.is_done());
    let Some(log) = run else {
        return error(
            Some(&id),
            format!("no request with id {id:?} is running on this connection (a keepAlive run started elsewhere is addressed by its runId)"),
        );
    };
    if kind != "cancel" && !st.agent.live_control() {
        return error(
            Some(&id),
            format!("{kind} is not available: this run's engine (claude-code) runs its own loop and cannot pause, resume, stop at a step, take instructions or roll back; send cancel to end it"),
        );
    }
    let (token, control) = (&log.token, &log.control);
    let result = match kind {
        "cancel" => {
            token.cancel();
            Ok(())
        }
        "pause" => control.pause().map(|_| ()),
        "resume" => control.resume().map(|_| ()),
        "stop" => control.stop().map(|_| ()),
        "rollback" | "branch" => {
            let Some(step) = v.get("step").and_then(Value::as_u64) else {
                return error(
                    Some(&id),
                    format!("a {kind} frame needs the checkpoint `step` (a number)"),
                );
            };
            let known = st
                .agent
                .sessions()
                .snapshot(&log.session)
                .is_ok_and(|s| s.checkpoint(step).is_some());
            if !known {
                return error(
                    Some(&id),
                    format!(
                        "no checkpoint {step} in session {}; nothing was rolled back",
                        log.session
                    ),
                );
            }
            if kind == "rollback" {
                control.rollback(step)
            } else {
                let Some(text) = v
                    .get("content")
                    .and_then(Value::as_str)
                    .filter(|s| !s.trim().is_empty())
                else {
                    return error(
                        Some(&id),
                        "a branch frame needs the instruction for the new path in `content`".into(),
                    );
                };
                let name = v.get("name").and_then(Value::as_str).map(str::to_string);
                control.branch(step, name, text.to_string())
            }
        }
        _ => {
            let role = match v.get("as").and_then(Value::as_str) {
                None | Some("user") => Role::User,
                Some("system") => Role::System,
                Some(other) => {
                    return error(
                        Some(&id),
                        format!("`as` must be \"user\" or \"system\", got {other:?}"),
                    )
                }
            };
            match v
                .get("content")
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
            {
                Some(text) => control.instruct(text, role),
                None => {
                    return error(
                        Some(&id),
                        "an instruct frame needs a non-empty `content`".into(),
                    )
                }
            }
        }
    };
    if let Err(e) = result {
        error(Some(&id), e.to_string());
    }
}

/// `branches` (list them), `compare` (two side by side) and `prefer` (record which was
/// better), addressed to a session rather than a running request.
async fn session_frame(agent: Agent, v: Value, tx: Outbound) {
    let kind = v["type"].as_str().unwrap_or_default().to_string();
    let session = v["sessionId"].as_str().unwrap_or_default().to_string();
    let reply = |content: Value| {
        tx.send(json!({"id": v.get("id"), "type": kind, "content": content, "sessionId": session}));
    };
    let fail = |msg: String| {
        tx.send(json!({"id": v.get("id"), "type": "error", "content": msg, "sessionId": session}));
    };
    let s = match agent.sessions().snapshot(&session) {
        Ok(s) => s,
        Err(e) => return fail(format!("{kind}: {e}")),
    };
    let all = crate::session::branches::branches(&s);
    if kind == "branches" {
        let list: Vec<Value> = all
            .iter()
            .map(|b| json!({"name": b.name, "steps": crate::session::branches::steps(&s, &b.path).len()}))
            .collect();
        return reply(json!(list));
    }
    let names: Vec<String> = crate::session::branches::branches(&s)
        .into_iter()
        .map(|b| b.name)
        .collect();
    let (a, b) = if kind == "prefer" {
        ("chosen", "rejected")
    } else {
        ("a", "b")
    };
    let (Some(x), Some(y)) = (v[a].as_str(), v[b].as_str()) else {
        return fail(format!(
            "a {kind} frame needs `sessionId`, `{a}` and `{b}` (branch names: {})",
            names.join(", ")
        ));
    };
    if kind == "prefer" {
        for n in [x, y] {
            if !names.iter().any(|m| m == n) {
                return fail(format!(
                    "no branch {n:?}; the branches are {}",
                    names.join(", ")
                ));
            }
        }
        drop(s);
        let record = crate::session::Record::Preference(crate::session::records::Preference {
            chosen: x.to_string(),
            rejected: y.to_string(),
            note: v["note"].as_str().map(str::to_string),
            time: crate::util::now_iso(),
        });
        match agent.annotate(&session, &record).await {
            Ok(_) => reply(json!("recorded")),
            Err(e) => fail(format!("prefer: {e}")),
        }
        return;
    }
    let mut cmp = match crate::session::branches::compare(&s, x, y) {
        Ok(c) => c,
        Err(e) => return fail(format!("compare: {e}")),
    };
    if let (Some(ca), Some(cb)) = (
        cmp["a"]["final_commit"].as_str(),
        cmp["b"]["final_commit"].as_str(),
    ) {
        let cfg = agent.config();
        let diff = crate::agent::checkpoint::Checkpoints::open(
            &cfg.state_dir(),
            &session,
            &cfg.work_dir,
            agent.sandbox(),
        )
        .and_then(|c| c.diff(ca, cb));
        cmp["diff"] = match diff {
            Ok(d) => json!(d),
            Err(e) => json!(format!("(no diff: {e})")),
        };
    }
    reply(cmp);
}
