//! The WebSocket transport: an outbound connection to `/ws?client_type=agent`, so the
//! agent needs no open port. Per connection: auth frame, register, then events (each
//! acked only after it is journaled), heartbeats and pings on the interval, and a dead
//! connection (nothing received for three intervals) dropped. Any failure but a refused
//! token reconnects with exponential backoff and jitter, reset once a connection got as
//! far as being registered.

use std::time::{Duration, Instant};

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::tracker::registration::FatalError;
use crate::tracker::router::Router;
use crate::tracker::types::{AgentDescription, AgentFrame, Arrival, Envelope, TrackerFrame};
use crate::tracker::TrackerError;

#[derive(Clone)]
pub(crate) struct WsOptions {
    pub(crate) tracker_url: String,
    pub(crate) token: String,
    pub(crate) heartbeat: Duration,
    /// First reconnect delay and its cap.
    pub(crate) backoff: (Duration, Duration),
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

/// Why a connection went no further: it ended, or the tracker refused the token (which
/// stops the transport instead of reconnecting).
enum Halt {
    End(End),
    Refused(FatalError),
}

fn lost(why: String, registered: bool) -> Halt {
    Halt::End(End::Lost { why, registered })
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

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
        hint: "Check AGENT_TOKEN / `token`",
    })
}

/// Runs the transport until `stop`, or until the tracker refuses the token.
pub(crate) async fn run(
    opts: WsOptions,
    desc: AgentDescription,
    router: Router,
    stop: CancellationToken,
) -> Result<(), FatalError> {
    let mut backoff = Backoff::new(opts.backoff);
    router.link().expect();
    loop {
        match connect_once(&opts, &desc, &router, &stop).await? {
            End::Stopped => return Ok(()),
            End::Lost { why, registered } => {
                if registered {
                    router.link().lost(&why, &desc.slug);
                } else {
                    router.link().failed(&why);
                }
                crate::metrics::ws_reconnect();
                let delay = backoff.next(registered);
                let wait = delay + delay.mul_f64(fastrand::f64() * 0.25);
                tracing::warn!(
                    "tracker connection lost ({why}); reconnecting in {} ms",
                    wait.as_millis()
                );
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return Ok(()),
                }
            }
        }
    }
}

/// The reconnect delays before jitter: the first, doubling up to the cap, back to the
/// first once a connection got as far as registering.
struct Backoff {
    start: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    fn new((start, cap): (Duration, Duration)) -> Backoff {
        Backoff {
            start,
            cap,
            next: start,
        }
    }

    /// The delay before the next attempt, after a connection that was (or was not)
    /// registered when it ended.
    fn next(&mut self, registered: bool) -> Duration {
        if registered {
            self.next = self.start;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(self.cap);
        delay
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn delays_double_to_the_cap_and_start_again_after_a_registered_connection() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new((ms(100), ms(1000)));
        let refused: Vec<Duration> = (0..6).map(|_| b.next(false)).collect();
        assert_eq!(
            refused,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        assert_eq!(b.next(true), ms(100));
        assert_eq!(b.next(false), ms(200));
    }
}

/// One connection, from dialling to its end.
async fn connect_once(
    opts: &WsOptions,
    desc: &AgentDescription,
    router: &Router,
    stop: &CancellationToken,
) -> Result<End, FatalError> {
    let url = ws_url(&opts.tracker_url);
    let halt = match dial(opts, &url, stop).await {
        Ok(socket) => {
            let (tx, rx) = socket.split();
            let mut conn = Conn {
                tx,
                rx,
                url: &url,
                stop,
            };
            match conn.handshake(opts, desc).await {
                Ok(heartbeat) => {
                    router.link().registered();
                    conn.serve(heartbeat, router).await
                }
                Err(halt) => halt,
            }
        }
        Err(halt) => halt,
    };
    match halt {
        Halt::End(end) => Ok(end),
        Halt::Refused(e) => Err(e),
    }
}

/// Opens the socket with the bearer token, giving up after 10 s.
async fn dial(opts: &WsOptions, url: &str, stop: &CancellationToken) -> Result<Socket, Halt> {
    let mut req = url
        .into_client_request()
        .map_err(|e| lost(format!("bad URL {url}: {e}"), false))?;
    if let Ok(v) = format!("Bearer {}", opts.token).parse() {
        req.headers_mut().insert("authorization", v);
    }
    let connect = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(req),
    );
    let ws = tokio::select! {
        r = connect => r,
        _ = stop.cancelled() => return Err(Halt::End(End::Stopped)),
    };
    match ws {
        Err(_) => Err(lost(format!("connecting to {url} timed out"), false)),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(resp)))
            if matches!(resp.status().as_u16(), 401 | 403) =>
        {
            Err(Halt::Refused(refused(
                url,
                resp.status().as_u16(),
                "the WebSocket handshake was refused".into(),
            )))
        }
        Ok(Err(e)) => Err(lost(format!("cannot connect to {url}: {e}"), false)),
        Ok(Ok((ws, _))) => Ok(ws),
    }
}

/// The refusal a close frame amounts to (4001/4003), if it is one.
fn close_refusal(url: &str, frame: Option<&CloseFrame>) -> Option<Halt> {
    let f = frame.filter(|f| matches!(u16::from(f.code), 4001 | 4003))?;
    Some(Halt::Refused(refused(
        url,
        u16::from(f.code),
        f.reason.to_string(),
    )))
}

/// An `error` frame's message, or the refusal it amounts to.
fn error_frame(url: &str, code: Option<&str>, message: Option<String>) -> Result<String, Halt> {
    let message = message.unwrap_or_else(|| "error".into());
    if matches!(code, Some("unauthorized" | "forbidden")) {
        return Err(Halt::Refused(refused(url, 4001, message)));
    }
    Ok(message)
}

/// An open connection, split so frames can be read and written independently.
struct Conn<'a> {
    tx: SplitSink<Socket, Message>,
    rx: SplitStream<Socket>,
    url: &'a str,
    stop: &'a CancellationToken,
}

impl Conn<'_> {
    async fn send(
        &mut self,
        frame: AgentFrame<'_>,
    ) -> Result<(), tokio_tungstenite::tungstenite::Error> {
        self.tx.send(Message::Text(frame.to_text().into())).await
    }

    /// Auth, then register; returns the heartbeat interval to keep.
    async fn handshake(
        &mut self,
        opts: &WsOptions,
        desc: &AgentDescription,
    ) -> Result<Duration, Halt> {
        if self
            .send(AgentFrame::Auth { token: &opts.token })
            .await
            .is_err()
        {
            return Err(lost("the connection closed during auth".into(), false));
        }
        let mut stage = "auth";
        loop {
            let Some(frame) = self.handshake_frame(stage).await? else {
                continue;
            };
            match (stage, frame) {
                ("auth", TrackerFrame::AuthOk) => {
                    stage = "register";
                    self.register(desc).await?;
                }
                ("register", TrackerFrame::Registered(r)) => {
                    tracing::info!(
                        agent_id = r.agent_id.as_deref().unwrap_or("-"),
                        "registered with the tracker over WebSocket"
                    );
                    return Ok(super::registration::heartbeat_from_tracker(
                        r.heartbeat_interval_sec,
                    )
                    .unwrap_or(opts.heartbeat));
                }
                (_, TrackerFrame::Error { code, message }) => {
                    let message = error_frame(self.url, code.as_deref(), message)?;
                    return Err(lost(
                        format!("the tracker answered {stage} with an error: {message}"),
                        false,
                    ));
                }
                _ => {}
            }
        }
    }

    /// The next frame of the handshake (`None` for frames that carry none, or are not
    /// the protocol's), within 15 s.
    async fn handshake_frame(&mut self, stage: &str) -> Result<Option<TrackerFrame>, Halt> {
        let frame = tokio::select! {
            f = tokio::time::timeout(Duration::from_secs(15), self.rx.next()) => f,
            _ = self.stop.cancelled() => return Err(Halt::End(End::Stopped)),
        };
        let msg = match frame {
            Err(_) => return Err(lost(format!("no answer to {stage} within 15 s"), false)),
            Ok(None) => return Err(lost(format!("the connection closed during {stage}"), false)),
            Ok(Some(Err(e))) => return Err(lost(e.to_string(), false)),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => Ok(parsed(&t)),
            Message::Close(f) => Err(close_refusal(self.url, f.as_ref()).unwrap_or_else(|| {
                lost(
                    format!("the tracker closed the connection during {stage}"),
                    false,
                )
            })),
            _ => Ok(None),
        }
    }

    /// Registers the agent; the callback URL means nothing over WebSocket.
    async fn register(&mut self, desc: &AgentDescription) -> Result<(), Halt> {
        self.send(AgentFrame::Register {
            agent: &desc.without_callback(),
        })
        .await
        .map_err(|_| lost("the connection closed during register".into(), false))
    }

    /// Registered: events, heartbeats and liveness until the connection ends.
    async fn serve(&mut self, heartbeat: Duration, router: &Router) -> Halt {
        let stop = self.stop;
        let mut last_seen = Instant::now();
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
        loop {
            let step = tokio::select! {
                frame = self.rx.next() => match frame {
                    None => Err(lost("the connection closed".into(), true)),
                    Some(Err(e)) => Err(lost(e.to_string(), true)),
                    Some(Ok(msg)) => {
                        last_seen = Instant::now();
                        self.on_message(msg, router).await
                    }
                },
                _ = ticker.tick() => self.beat(last_seen, heartbeat, router).await,
                _ = stop.cancelled() => {
                    self.close_away().await;
                    Err(Halt::End(End::Stopped))
                }
            };
            if let Err(halt) = step {
                return halt;
            }
        }
    }

    /// One frame after registration: events are journaled and acked.
    async fn on_message(&mut self, msg: Message, router: &Router) -> Result<(), Halt> {
        match msg {
            Message::Text(t) => {
                match parsed(&t) {
                    Some(TrackerFrame::Event { event }) => {
                        if let Some(ack) = handle_event(router, event).await {
                            if self.send(AgentFrame::Ack { event_id: ack }).await.is_err() {
                                return Err(lost(
                                    "the connection closed while acking".into(),
                                    true,
                                ));
                            }
                        }
                    }
                    Some(TrackerFrame::Error { code, message }) => {
                        let message = error_frame(self.url, code.as_deref(), message)?;
                        tracing::warn!("the tracker reported an error: {message}");
                    }
                    _ => {}
                }
                Ok(())
            }
            Message::Close(f) => Err(close_refusal(self.url, f.as_ref()).unwrap_or_else(|| {
                let why = f
                    .map(|f| {
                        format!(
                            "closed by the tracker ({}: {})",
                            u16::from(f.code),
                            f.reason
                        )
                    })
                    .unwrap_or_else(|| "closed by the tracker".into());
                lost(why, true)
            })),
            // Pings are answered by tungstenite itself on the next read or write.
            _ => Ok(()),
        }
    }

    /// A heartbeat and a ping, unless the tracker has gone quiet for three intervals.
    async fn beat(
        &mut self,
        last_seen: Instant,
        heartbeat: Duration,
        router: &Router,
    ) -> Result<(), Halt> {
        if last_seen.elapsed() > heartbeat * 3 {
            return Err(lost(
                format!("nothing received for {} s", last_seen.elapsed().as_secs()),
                true,
            ));
        }
        let load = router.reported_load();
        if self
            .send(AgentFrame::Heartbeat { load: &load })
            .await
            .is_err()
            || self
                .tx
                .send(Message::Ping(Vec::new().into()))
                .await
                .is_err()
        {
            return Err(lost(
                "the connection closed while sending a heartbeat".into(),
                true,
            ));
        }
        Ok(())
    }

    async fn close_away(&mut self) {
        let _ = self
            .tx
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Away,
                reason: "agent shutting down".into(),
            })))
            .await;
    }
}

/// A text frame as the protocol's frame; one that is not (not JSON, no `type`) is
/// logged, naming it, and skipped.
fn parsed(text: &str) -> Option<TrackerFrame> {
    TrackerFrame::parse(text)
        .map_err(|e| tracing::warn!("{e}"))
        .ok()
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
    let arrival = match Arrival::from_board(&env) {
        Ok(Some(a)) => a,
        Ok(None) => {
            tracing::debug!(id = %id, kind = %env.kind, "ignored an event type this agent does not handle");
            return Some(id);
        }
        Err(msg) => {
            tracing::warn!(id = %id, "invalid event from the tracker, dropped: {msg}");
            return Some(id);
        }
    };
    match router.accept(arrival, ()).await {
        Ok(_) => Some(id),
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
