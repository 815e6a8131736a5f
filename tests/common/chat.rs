//! Chat mode over a real WebSocket: a server on a free port, connections, and frames
//! read until a condition (a request's `done`, a frame of a kind, the server settled).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use picogent::chat;
use picogent::config::Config;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::agent_from;

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Chat {
    pub addr: std::net::SocketAddr,
    _stop: tokio_util::sync::DropGuard,
}

pub async fn start(config: Config) -> Chat {
    let listener = chat::bind("127.0.0.1", 0, config.chat.token.as_deref())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(chat::serve(agent_from(config), listener, stop.clone()));
    Chat {
        addr,
        _stop: stop.drop_guard(),
    }
}

pub async fn connect_with(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Ws, u16> {
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    for (k, v) in headers {
        let name: axum::http::HeaderName = k.parse().unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("{e}"),
    }
}

/// A refused handshake, as `(HTTP status, reason)`: a request refused over HTTP, or an
/// upgrade accepted only to be closed at once with code 4003 (read as 403) or 4001
/// (401). The close is the only frame: a prompt sent first is not handled.
pub async fn refusal(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut ws = match connect_with(addr, path, headers).await {
        Err(status) => return (status, String::new()),
        Ok(ws) => ws,
    };
    let _ = ws
        .send(Message::Text(
            json!({"id": "x", "content": "hi"}).to_string().into(),
        ))
        .await;
    let first = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("the refused connection was neither closed nor answered");
    let (code, reason) = match first {
        Some(Ok(Message::Close(Some(f)))) => (u16::from(f.code), f.reason.to_string()),
        other => panic!("a refused handshake's first frame must be its close: {other:?}"),
    };
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
        assert!(
            matches!(m, Message::Close(_)),
            "a frame after the close: {m:?}"
        );
    }
    match code {
        4003 => (403, reason),
        4001 => (401, reason),
        other => panic!("unexpected close code {other}"),
    }
}

pub async fn connect(c: &Chat) -> Ws {
    connect_with(c.addr, "/ws", &[]).await.unwrap()
}

/// `picogent <home>` in chat mode as a child process on `port`, finding programs (git)
/// on `path`; killed when dropped.
pub fn server_process(sb: &super::Sandbox, port: u16, path: &str) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .arg(&sb.home)
        .current_dir(sb.base())
        .env_clear()
        .env("PATH", path)
        .env("HOME", &sb.user_home)
        .env("PICOGENT_API_KEY", super::llm::API_KEY)
        .env("PICOGENT_PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// A connection to the chat server on `port`, once it listens.
pub async fn connect_port(port: u16) -> Ws {
    for _ in 0..400 {
        if let Ok((ws, _)) =
            tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/ws")).await
        {
            return ws;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the chat server never listened on {port}");
}

pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

/// The frames a page renders steps and totals from; most tests follow the rest.
fn is_detail(f: &Value) -> bool {
    matches!(
        f["type"].as_str(),
        Some("tool_output" | "tool_progress" | "thinking" | "usage" | "context")
    )
}

/// The next frame but the detail frames.
pub async fn next(ws: &mut Ws) -> Value {
    loop {
        let v = next_any(ws).await;
        if !is_detail(&v) {
            return v;
        }
    }
}

/// The next frame, detail frames included.
pub async fn next_any(ws: &mut Ws) -> Value {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("no frame for 30 s")
            .unwrap()
            .unwrap();
        if let Message::Text(t) = msg {
            return serde_json::from_str(&t).unwrap();
        }
    }
}

/// Frames but the detail frames until the `done` of request `id` (frames of other
/// requests included).
pub async fn until_done(ws: &mut Ws, id: &str) -> Vec<Value> {
    let mut all = until_done_all(ws, id).await;
    all.retain(|f| !is_detail(f));
    all
}

/// Frames (detail frames included) until the `done` of request `id`.
pub async fn until_done_all(ws: &mut Ws, id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let f = next_any(ws).await;
        let end = f["id"] == id && f["type"] == "done";
        out.push(f);
        if end {
            return out;
        }
    }
}

/// Returns once the server has handled every frame sent before (a `sessions`
/// question answered after them): then a gate may open.
pub async fn settled(ws: &mut Ws) {
    send(ws, json!({"type": "sessions"})).await;
    next_of(ws, "sessions").await;
}

/// The next frame of `kind`.
pub async fn next_of(ws: &mut Ws, kind: &str) -> Value {
    loop {
        let f = next_any(ws).await;
        if f["type"] == kind {
            return f;
        }
    }
}
