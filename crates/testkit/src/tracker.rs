//! A fake Team Board tracker speaking docs/tracker-protocol.md: REST registration,
//! heartbeats, status and comments; the agent WebSocket with auth, register, events,
//! acks and redelivery. It records everything and has switchable faults.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub const TOKEN: &str = "tracker-token";

/// One REST call the agent made.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: &'static str,
    pub path: String,
    pub body: Value,
    pub at: Instant,
    /// The answer's status code.
    pub status: u16,
    /// Answered by a scripted fault (whatever its status), not by the tracker.
    pub scripted: bool,
    /// The report's `Idempotency-Key`.
    pub key: Option<String>,
}

#[derive(Default)]
pub struct Faults {
    /// Answer this many registrations with 503 first.
    pub register_down: usize,
    /// Answer every registration with this status.
    pub register_status: Option<u16>,
    /// Answer the next heartbeat with 404.
    pub forget_agent: bool,
    /// Answer this many status/comment calls with 503 first (or `report_status` with
    /// `report_body`, when set).
    pub reports_down: usize,
    pub report_status: Option<u16>,
    /// Sent as it is (an HTML page, say), instead of the tracker's JSON error.
    pub report_body: Option<String>,
    /// Refuse this many WebSocket handshakes with 503 first.
    pub ws_refuse: usize,
    /// Answer the WebSocket auth frame with an error and close 4001.
    pub ws_reject_auth: bool,
    /// Answer this task's status and comment calls only after this long (a tracker
    /// that is slow for one task).
    pub slow_task: Option<(String, Duration)>,
    /// Drop the connection when this event id is acked, without recording the ack.
    pub ws_lose_ack_of: Option<String>,
}

#[derive(Default)]
struct St {
    calls: Vec<Call>,
    faults: Faults,
    heartbeat_sec: u64,
    ws_attempts: Vec<Instant>,
    ws_frames: Vec<Value>,
    ws_unacked: VecDeque<Value>,
    ws_acked: Vec<String>,
    ws_conn: Option<mpsc::UnboundedSender<Option<Value>>>,
    /// Report calls being answered now, and the most at once for one task.
    in_flight: std::collections::HashMap<String, usize>,
    most_in_flight: std::collections::HashMap<String, usize>,
}

#[derive(Clone)]
pub struct FakeTracker {
    pub addr: SocketAddr,
    st: Arc<Mutex<St>>,
}

type S = State<Arc<Mutex<St>>>;

fn authorized(h: &HeaderMap) -> bool {
    h.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}"))
}

fn err(status: u16, code: &str, message: &str) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

impl FakeTracker {
    pub async fn start() -> FakeTracker {
        FakeTracker::start_on("127.0.0.1:0").await
    }

    /// Serves on `addr` (the local board example: a fixed port).
    pub async fn start_on(addr: &str) -> FakeTracker {
        let st = Arc::new(Mutex::new(St {
            heartbeat_sec: 1,
            ..Default::default()
        }));
        let app = Router::new()
            .route("/api/v1/agents/register", post(register))
            .route("/api/v1/agents/heartbeat", post(heartbeat))
            .route("/api/v1/tasks/{id}", patch(status))
            .route("/api/v1/tasks/{id}/comments", post(comment))
            .route("/ws", get(ws))
            .with_state(st.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeTracker { addr, st }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.st.lock().unwrap().faults)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.st.lock().unwrap().calls.clone()
    }

    /// Successful calls to `path_prefix`.
    pub fn ok_calls(&self, path: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.path == path && c.status < 300 && !c.scripted)
            .collect()
    }

    /// What the tracker accepted for a task, in order: `status:<s>` and `comment:<text>`.
    pub fn timeline(&self, task: &str) -> Vec<String> {
        let status_path = format!("/api/v1/tasks/{task}");
        let comment_path = format!("/api/v1/tasks/{task}/comments");
        self.calls()
            .into_iter()
            .filter(|c| c.status < 300 && !c.scripted)
            .filter_map(|c| {
                if c.path == status_path {
                    Some(format!(
                        "status:{}",
                        c.body["status"].as_str().unwrap_or("?")
                    ))
                } else if c.path == comment_path {
                    Some(format!(
                        "comment:{}",
                        c.body["content"].as_str().unwrap_or("?")
                    ))
                } else {
                    None
                }
            })
            .collect()
    }

    /// The most report calls for `task` the tracker was answering at the same time.
    pub fn most_in_flight(&self, task: &str) -> usize {
        let s = self.st.lock().unwrap();
        s.most_in_flight.get(task).copied().unwrap_or(0)
    }

    /// The task's comments as a tracker that honours `Idempotency-Key` keeps them: a
    /// repeat of a key it took is dropped.
    pub fn comments_once_per_key(&self, task: &str) -> Vec<Value> {
        let mut keys = std::collections::HashSet::new();
        self.ok_calls(&format!("/api/v1/tasks/{task}/comments"))
            .into_iter()
            .filter(|c| c.key.as_ref().is_none_or(|k| keys.insert(k.clone())))
            .map(|c| c.body)
            .collect()
    }

    pub fn comments(&self, task: &str) -> Vec<Value> {
        self.ok_calls(&format!("/api/v1/tasks/{task}/comments"))
            .into_iter()
            .map(|c| c.body)
            .collect()
    }

    /// The body of the last successful registration.
    pub fn registration(&self) -> Option<Value> {
        self.ok_calls("/api/v1/agents/register")
            .last()
            .map(|c| c.body.clone())
    }

    pub fn ws_attempts(&self) -> Vec<Instant> {
        self.st.lock().unwrap().ws_attempts.clone()
    }

    pub fn ws_frames(&self) -> Vec<Value> {
        self.st.lock().unwrap().ws_frames.clone()
    }

    pub fn ws_acked(&self) -> Vec<String> {
        self.st.lock().unwrap().ws_acked.clone()
    }

    /// Queues an event for the WebSocket agent; it is re-sent on every connection
    /// until acked.
    pub fn ws_send(&self, event: Value) {
        let mut st = self.st.lock().unwrap();
        st.ws_unacked.push_back(event.clone());
        if let Some(tx) = &st.ws_conn {
            let _ = tx.send(Some(event));
        }
    }

    /// Posts an event to the agent's callback URL as the tracker does.
    pub async fn deliver(&self, callback: &str, event: &Value) -> (u16, Value) {
        deliver_raw(callback, Some(TOKEN), event.to_string().into_bytes()).await
    }

    /// Waits for the agent's registration and returns the callback URL it announced.
    pub async fn callback_url(&self) -> String {
        self.wait_for(20, "registration", |t| t.registration().is_some())
            .await;
        self.registration().unwrap()["callback_url"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Waits until the tracker accepted status `status` for `task`.
    pub async fn wait_status(&self, task: &str, status: &str, secs: u64) {
        let want = format!("status:{status}");
        self.wait_for(secs, &want, |t| t.timeline(task).contains(&want))
            .await;
    }

    /// Polls until `cond` holds, or panics after `secs` seconds naming `what`.
    pub async fn wait_for(&self, secs: u64, what: &str, cond: impl Fn(&FakeTracker) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond(self) {
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; calls: {:#?}",
                    self.calls()
                        .iter()
                        .map(|c| (c.method, c.path.clone(), c.status, c.body.to_string()))
                        .collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub async fn deliver_raw(callback: &str, token: Option<&str>, body: Vec<u8>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client
        .post(callback)
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    // Nobody answering is status 0 with the reason (the board keeps going).
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return (0, json!({"error": e.to_string()})),
    };
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

fn record(st: &Arc<Mutex<St>>, method: &'static str, path: String, body: &Value, status: u16) {
    push_call(st, method, path, body, status, false);
}

fn push_call(
    st: &Arc<Mutex<St>>,
    method: &'static str,
    path: String,
    body: &Value,
    status: u16,
    scripted: bool,
) {
    st.lock().unwrap().calls.push(Call {
        method,
        path,
        body: body.clone(),
        at: Instant::now(),
        status,
        scripted,
        key: None,
    });
}

/// Records a report the tracker took, with its idempotency key.
fn record_report(
    st: &Arc<Mutex<St>>,
    method: &'static str,
    path: String,
    body: &Value,
    h: &HeaderMap,
) {
    let status = if method == "POST" { 201 } else { 200 };
    record(st, method, path, body, status);
    let key = h
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(last) = st.lock().unwrap().calls.last_mut() {
        last.key = key;
    }
}

async fn register(State(st): S, h: HeaderMap, Json(body): Json<Value>) -> Response {
    let path = "/api/v1/agents/register".to_string();
    let answer = {
        let mut s = st.lock().unwrap();
        if !authorized(&h) {
            Err(401)
        } else if let Some(code) = s.faults.register_status {
            Err(code)
        } else if s.faults.register_down > 0 {
            s.faults.register_down -= 1;
            Err(503)
        } else {
            Ok(s.heartbeat_sec)
        }
    };
    match answer {
        Ok(hb) => {
            record(&st, "POST", path, &body, 201);
            (
                StatusCode::CREATED,
                Json(json!({"agent_id": "ag_1", "heartbeat_interval_sec": hb})),
            )
                .into_response()
        }
        Err(code) => {
            record(&st, "POST", path, &body, code);
            err(
                code,
                "scripted",
                &format!("scripted registration failure {code}"),
            )
        }
    }
}

async fn heartbeat(State(st): S, h: HeaderMap, Json(body): Json<Value>) -> Response {
    let path = "/api/v1/agents/heartbeat".to_string();
    if !authorized(&h) {
        record(&st, "POST", path, &body, 401);
        return err(401, "unauthorized", "bad token");
    }
    // An agent this tracker never registered (it restarted, as the board may) is told
    // so, and registers again.
    let (forget, known) = {
        let mut s = st.lock().unwrap();
        let known = s
            .calls
            .iter()
            .any(|c| c.path == "/api/v1/agents/register" && c.status < 300);
        (std::mem::take(&mut s.faults.forget_agent), known)
    };
    if forget || !known {
        record(&st, "POST", path, &body, 404);
        return err(404, "unknown_agent", "no such agent");
    }
    record(&st, "POST", path, &body, 200);
    Json(json!({})).into_response()
}

/// Holds a report call for a slow task, counting how many are answered at once.
async fn slow_down(st: &Arc<Mutex<St>>, task: &str) {
    let delay = {
        let mut s = st.lock().unwrap();
        let Some(delay) = s
            .faults
            .slow_task
            .as_ref()
            .and_then(|(t, d)| (t == task).then_some(*d))
        else {
            return;
        };
        let now = {
            let n = s.in_flight.entry(task.to_string()).or_default();
            *n += 1;
            *n
        };
        let most = s.most_in_flight.entry(task.to_string()).or_default();
        *most = (*most).max(now);
        delay
    };
    // Counted down even when the agent gives up on the call and this future is dropped.
    struct Leave<'a>(&'a Arc<Mutex<St>>, String);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            if let Ok(mut s) = self.0.lock() {
                if let Some(n) = s.in_flight.get_mut(&self.1) {
                    *n = n.saturating_sub(1);
                }
            }
        }
    }
    let _leave = Leave(st, task.to_string());
    tokio::time::sleep(delay).await;
}

/// The scripted answer to the next status or comment call, while a fault lasts.
fn report_fault(st: &Arc<Mutex<St>>) -> Option<(u16, Response)> {
    let mut s = st.lock().unwrap();
    if s.faults.reports_down == 0 {
        return None;
    }
    s.faults.reports_down -= 1;
    let status = s.faults.report_status.unwrap_or(503);
    let resp = match &s.faults.report_body {
        Some(body) => (StatusCode::from_u16(status).unwrap(), body.clone()).into_response(),
        None => err(status, "unavailable", "scripted outage"),
    };
    Some((status, resp))
}

async fn status(
    State(st): S,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = format!("/api/v1/tasks/{id}");
    if !authorized(&h) {
        record(&st, "PATCH", path, &body, 401);
        return err(401, "unauthorized", "bad token");
    }
    slow_down(&st, &id).await;
    if let Some((code, resp)) = report_fault(&st) {
        push_call(&st, "PATCH", path, &body, code, true);
        return resp;
    }
    record_report(&st, "PATCH", path, &body, &h);
    Json(json!({"id": id, "status": body["status"]})).into_response()
}

async fn comment(
    State(st): S,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = format!("/api/v1/tasks/{id}/comments");
    if !authorized(&h) {
        record(&st, "POST", path, &body, 401);
        return err(401, "unauthorized", "bad token");
    }
    slow_down(&st, &id).await;
    if let Some((code, resp)) = report_fault(&st) {
        push_call(&st, "POST", path, &body, code, true);
        return resp;
    }
    record_report(&st, "POST", path, &body, &h);
    (StatusCode::CREATED, Json(json!({"id": "c_1"}))).into_response()
}

async fn ws(State(st): S, h: HeaderMap, up: WebSocketUpgrade) -> Response {
    let refuse = {
        let mut s = st.lock().unwrap();
        s.ws_attempts.push(Instant::now());
        if s.faults.ws_refuse > 0 {
            s.faults.ws_refuse -= 1;
            true
        } else {
            false
        }
    };
    if refuse {
        return err(503, "unavailable", "scripted outage");
    }
    if !authorized(&h) {
        return err(401, "unauthorized", "bad token");
    }
    up.on_upgrade(move |socket| ws_session(st, socket))
}

fn text(v: Value) -> Message {
    Message::Text(v.to_string().into())
}

async fn ws_session(st: Arc<Mutex<St>>, mut socket: WebSocket) {
    // auth
    let Some(Ok(Message::Text(t))) = socket.recv().await else {
        return;
    };
    let auth: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
    st.lock().unwrap().ws_frames.push(auth.clone());
    let reject = st.lock().unwrap().faults.ws_reject_auth;
    if reject || auth["token"] != TOKEN {
        let _ = socket
            .send(text(
                json!({"type": "error", "code": "unauthorized", "message": "invalid token"}),
            ))
            .await;
        let _ = socket
            .send(Message::Close(Some(CloseFrame {
                code: 4001,
                reason: "unauthorized".into(),
            })))
            .await;
        return;
    }
    let _ = socket.send(text(json!({"type": "auth_ok"}))).await;
    // register
    let Some(Ok(Message::Text(t))) = socket.recv().await else {
        return;
    };
    let reg: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
    st.lock().unwrap().ws_frames.push(reg.clone());
    if reg["type"] != "register" {
        return;
    }
    let hb = st.lock().unwrap().heartbeat_sec;
    let _ = socket
        .send(text(
            json!({"type": "registered", "agent_id": "ag_ws", "heartbeat_interval_sec": hb}),
        ))
        .await;
    let (tx, mut rx) = mpsc::unbounded_channel::<Option<Value>>();
    let backlog: Vec<Value> = {
        let mut s = st.lock().unwrap();
        s.ws_conn = Some(tx);
        s.ws_unacked.iter().cloned().collect()
    };
    for ev in backlog {
        let _ = socket
            .send(text(json!({"type": "event", "event": ev})))
            .await;
    }
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Some(ev)) => { let _ = socket.send(text(json!({"type": "event", "event": ev}))).await; }
                _ => return,
            },
            msg = socket.recv() => {
                let Some(Ok(msg)) = msg else { return };
                if let Message::Text(t) = msg {
                    let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                    let mut s = st.lock().unwrap();
                    s.ws_frames.push(v.clone());
                    if v["type"] == "ack" {
                        let id = v["event_id"].as_str().unwrap_or("").to_string();
                        if s.faults.ws_lose_ack_of.as_deref() == Some(id.as_str()) {
                            // Lose this ack and the connection: the event stays un-acked.
                            s.faults.ws_lose_ack_of = None;
                            s.ws_conn = None;
                            return;
                        }
                        s.ws_unacked.retain(|e| e["id"] != id.as_str());
                        s.ws_acked.push(id);
                    }
                }
            }
        }
    }
}
