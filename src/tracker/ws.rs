//! The WebSocket transport: an outbound connection to `/ws?client_type=agent`, so the
//! agent needs no open port. Per connection: auth frame, register, then events (each
//! acked only after it is journaled), heartbeats and pings on the interval, and a dead
//! connection (nothing received for three intervals) dropped. Any failure but a refused
//! token reconnects with exponential backoff and jitter, reset once a connection got as
//! far as being registered.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::tracker::registration::FatalError;
use crate::tracker::router::{AcceptError, Router};
use crate::tracker::types::{AgentDescription, Envelope};
use crate::tracker::TrackerError;

pub struct WsOptions {
    pub tracker_url: String,
    pub token: String,
    pub heartbeat: Duration,
    /// First reconnect delay and its cap.
    pub backoff: (Duration, Duration),
}

/// How one connection ended.
enum End {
    /// Something went wrong; `registered` says whether it got that far.
    Lost {
        why: String,
        registered: bool,
    },
    Stopped,
}

fn ws_url(tracker_url: &str) -> String {
    let base = tracker_url.trim_end_matches('/');
    let base = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_string()
    };
    format!("{base}/ws?client_type=agent")
}

fn refused(url: &str, status: u16, message: String) -> FatalError {
    FatalError::Tracker(TrackerError::Unauthorized {
        status,
        url: url.to_string(),
        message,
    })
}

/// Runs the transport until `stop`, or until the tracker refuses the token.
pub async fn run(
    opts: WsOptions,
    desc: AgentDescription,
    router: Router,
    stop: CancellationToken,
) -> Result<(), FatalError> {
    let (start, cap) = opts.backoff;
    let mut delay = start;
    loop {
        match connect_once(&opts, &desc, &router, &stop).await? {
            End::Stopped => return Ok(()),
            End::Lost { why, registered } => {
                if registered {
                    delay = start;
                }
                let wait = delay + delay.mul_f64(fastrand::f64() * 0.25);
                tracing::warn!(
                    "tracker connection lost ({why}); reconnecting in {} ms",
                    wait.as_millis()
                );
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return Ok(()),
                }
                delay = (delay * 2).min(cap);
            }
        }
    }
}

async fn connect_once(
    opts: &WsOptions,
    desc: &AgentDescription,
    router: &Router,
    stop: &CancellationToken,
) -> Result<End, FatalError> {
    let url = ws_url(&opts.tracker_url);
    let lost = |why: String, registered: bool| Ok(End::Lost { why, registered });
    let mut req = match url.as_str().into_client_request() {
        Ok(r) => r,
        Err(e) => return lost(format!("bad URL {url}: {e}"), false),
    };
    if let Ok(v) = format!("Bearer {}", opts.token).parse() {
        req.headers_mut().insert("authorization", v);
    }
    let connect = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(req),
    );
    let ws = tokio::select! {
        r = connect => r,
        _ = stop.cancelled() => return Ok(End::Stopped),
    };
    let (ws, _) = match ws {
        Err(_) => return lost(format!("connecting to {url} timed out"), false),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(resp)))
            if matches!(resp.status().as_u16(), 401 | 403) =>
        {
            return Err(refused(
                &url,
                resp.status().as_u16(),
                "the WebSocket handshake was refused".into(),
            ))
        }
        Ok(Err(e)) => return lost(format!("cannot connect to {url}: {e}"), false),
        Ok(Ok(ws)) => ws,
    };
    let (mut tx, mut rx) = ws.split();
    let send = |v: Value| Message::Text(v.to_string().into());

    // Handshake: auth, then register.
    if tx
        .send(send(json!({"type": "auth", "token": opts.token})))
        .await
        .is_err()
    {
        return lost("the connection closed during auth".into(), false);
    }
    let mut heartbeat = opts.heartbeat;
    let mut stage = "auth";
    loop {
        let frame = tokio::select! {
            f = tokio::time::timeout(Duration::from_secs(15), rx.next()) => f,
            _ = stop.cancelled() => return Ok(End::Stopped),
        };
        let msg = match frame {
            Err(_) => return lost(format!("no answer to {stage} within 15 s"), false),
            Ok(None) => return lost(format!("the connection closed during {stage}"), false),
            Ok(Some(Err(e))) => return lost(e.to_string(), false),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                match (stage, v["type"].as_str()) {
                    ("auth", Some("auth_ok")) => {
                        stage = "register";
                        let mut agent = serde_json::to_value(desc).unwrap_or(Value::Null);
                        if let Some(o) = agent.as_object_mut() {
                            o.remove("callback_url");
                        }
                        if tx
                            .send(send(json!({"type": "register", "agent": agent})))
                            .await
                            .is_err()
                        {
                            return lost("the connection closed during register".into(), false);
                        }
                    }
                    ("register", Some("registered")) => {
                        if let Some(d) = super::registration::heartbeat_from_tracker(
                            v["heartbeat_interval_sec"].as_u64(),
                        ) {
                            heartbeat = d;
                        }
                        tracing::info!(
                            agent_id = v["agent_id"].as_str().unwrap_or("-"),
                            "registered with the tracker over WebSocket"
                        );
                        break;
                    }
                    (_, Some("error")) => {
                        let message = v["message"].as_str().unwrap_or("error").to_string();
                        if matches!(v["code"].as_str(), Some("unauthorized" | "forbidden")) {
                            return Err(refused(&url, 4001, message));
                        }
                        return lost(
                            format!("the tracker answered {stage} with an error: {message}"),
                            false,
                        );
                    }
                    _ => {}
                }
            }
            Message::Close(Some(f)) if matches!(u16::from(f.code), 4001 | 4003) => {
                return Err(refused(&url, u16::from(f.code), f.reason.to_string()))
            }
            Message::Close(_) => {
                return lost(
                    format!("the tracker closed the connection during {stage}"),
                    false,
                )
            }
            _ => {}
        }
    }

    // Registered: events, heartbeats, liveness.
    let mut last_seen = Instant::now();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    loop {
        tokio::select! {
            frame = rx.next() => {
                let msg = match frame {
                    None => return lost("the connection closed".into(), true),
                    Some(Err(e)) => return lost(e.to_string(), true),
                    Some(Ok(m)) => m,
                };
                last_seen = Instant::now();
                match msg {
                    Message::Text(t) => {
                        let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                        match v["type"].as_str() {
                            Some("event") => {
                                if let Some(ack) = handle_event(router, v["event"].clone()).await {
                                    if tx.send(send(json!({"type": "ack", "event_id": ack}))).await.is_err() {
                                        return lost("the connection closed while acking".into(), true);
                                    }
                                }
                            }
                            Some("error") => {
                                let message = v["message"].as_str().unwrap_or("error").to_string();
                                if matches!(v["code"].as_str(), Some("unauthorized" | "forbidden")) {
                                    return Err(refused(&url, 4001, message));
                                }
                                tracing::warn!("the tracker reported an error: {message}");
                            }
                            _ => {}
                        }
                    }
                    Message::Close(Some(f)) if matches!(u16::from(f.code), 4001 | 4003) => {
                        return Err(refused(&url, u16::from(f.code), f.reason.to_string()))
                    }
                    Message::Close(f) => {
                        let why = f.map(|f| format!("closed by the tracker ({}: {})", u16::from(f.code), f.reason)).unwrap_or_else(|| "closed by the tracker".into());
                        return lost(why, true);
                    }
                    // Pings are answered by tungstenite itself on the next read or write.
                    _ => {}
                }
            }
            _ = ticker.tick() => {
                if last_seen.elapsed() > heartbeat * 3 {
                    return lost(format!("nothing received for {} s", last_seen.elapsed().as_secs()), true);
                }
                let load = router.load();
                let beat = json!({"type": "heartbeat", "status": load.status, "active_tasks": load.active_tasks, "queued": load.queued});
                if tx.send(send(beat)).await.is_err() || tx.send(Message::Ping(Vec::new().into())).await.is_err() {
                    return lost("the connection closed while sending a heartbeat".into(), true);
                }
            }
            _ = stop.cancelled() => {
                let _ = tx.send(Message::Close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
                    code: CloseCode::Away,
                    reason: "agent shutting down".into(),
                }))).await;
                return Ok(End::Stopped);
            }
        }
    }
}

/// Journals one event and returns the id to ack, or `None` when it must not be acked
/// yet (it was not recorded, so the tracker must send it again).
async fn handle_event(router: &Router, raw: Value) -> Option<String> {
    let id = raw["id"].as_str().map(str::to_string);
    let env = match Envelope::from_value(raw) {
        Ok(e) => e,
        Err(msg) => {
            // Acked anyway: a malformed event would otherwise be re-sent forever.
            tracing::warn!("invalid event from the tracker, dropped: {msg}");
            return id;
        }
    };
    let id = env.id.clone();
    match router.accept(env).await {
        Ok(_) => Some(id),
        Err(AcceptError::Invalid(msg)) => {
            tracing::warn!(id = %id, "invalid event from the tracker, dropped: {msg}");
            Some(id)
        }
        Err(e) => {
            tracing::warn!(id = %id, "event not acked: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ws_url_follows_the_tracker_scheme() {
        assert_eq!(
            super::ws_url("http://h:8100/"),
            "ws://h:8100/ws?client_type=agent"
        );
        assert_eq!(super::ws_url("https://h"), "wss://h/ws?client_type=agent");
    }
}
