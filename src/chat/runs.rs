//! Chat requests as logs: every frame of a request gets a `seq` and is kept (bounded),
//! so a client that connects late or reconnects can ask for the frames after the last
//! `seq` it saw and then follow the live stream, without loss or repeats.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::agent::control::RunControl;
use crate::agent::{AgentEvent, Outcome, RunHandle};

/// Frames kept per request; older ones are dropped from the replay log.
const MAX_FRAMES: usize = 20_000;
/// Bytes of frames kept per request, whatever their number.
const MAX_LOG_BYTES: usize = 8 << 20;
/// How long a finished request stays available for replay.
const KEEP_FINISHED: Duration = Duration::from_secs(600);

pub type Runs = Arc<Mutex<HashMap<String, Arc<RunLog>>>>;

/// Frames waiting for one connection's writer; a client that lets more pile up is too
/// slow to follow and is disconnected (its runs then follow the `keepAlive` rules).
pub const OUTBOUND_FRAMES: usize = 4096;

/// The way to one connection: a bounded queue toward its writer.
#[derive(Clone)]
pub struct Outbound {
    tx: tokio::sync::mpsc::Sender<Value>,
    /// Cancelled when the client falls too far behind.
    conn: CancellationToken,
}

impl Outbound {
    pub fn new(tx: tokio::sync::mpsc::Sender<Value>, conn: CancellationToken) -> Outbound {
        Outbound { tx, conn }
    }

    /// Queues a frame; false when the connection is gone or was just dropped for
    /// being too slow.
    pub fn send(&self, frame: Value) -> bool {
        match self.tx.try_send(frame) {
            Ok(()) => true,
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    "a chat client is {OUTBOUND_FRAMES} frames behind; closing its connection"
                );
                self.conn.cancel();
                false
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Queues a frame of a replayed backlog, waiting for room (a backlog may be
    /// longer than the queue); a client that takes nothing for `BACKLOG_WAIT` is
    /// disconnected.
    pub async fn send_backlog(&self, frame: Value) -> bool {
        match tokio::time::timeout(BACKLOG_WAIT, self.tx.send(frame)).await {
            Ok(r) => r.is_ok(),
            Err(_) => {
                self.conn.cancel();
                false
            }
        }
    }
}

/// How long a replaying client may leave its queue full.
const BACKLOG_WAIT: Duration = Duration::from_secs(30);

/// A request's replay log: the last `seq`, the frames kept (oldest first, each with
/// its size) and their total size.
type Kept = (u64, std::collections::VecDeque<(Value, usize)>, usize);

pub struct RunLog {
    /// The server-issued id of a `keepAlive` run, by which any connection may address
    /// it; other runs belong to the connection that started them.
    pub run_id: Option<String>,
    /// The session the request runs in.
    pub session: String,
    /// The last `seq`, the frames kept (oldest first) and their size in bytes.
    frames: Mutex<Kept>,
    live: broadcast::Sender<Value>,
    done: AtomicBool,
    pub token: CancellationToken,
    pub control: RunControl,
}

fn seq_of(f: &Value) -> u64 {
    f["seq"].as_u64().unwrap_or(0)
}

impl RunLog {
    pub fn new(
        token: CancellationToken,
        control: RunControl,
        run_id: Option<String>,
        session: String,
    ) -> Arc<RunLog> {
        Arc::new(RunLog {
            run_id,
            session,
            frames: Mutex::new((0, std::collections::VecDeque::new(), 0)),
            live: broadcast::channel(1024).0,
            done: AtomicBool::new(false),
            token,
            control,
        })
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    fn push(&self, mut frame: Value) {
        let Ok(mut f) = self.frames.lock() else {
            return;
        };
        f.0 += 1;
        frame["seq"] = json!(f.0);
        if let Some(run) = &self.run_id {
            frame["runId"] = json!(run);
        }
        let size = frame.to_string().len();
        while f.1.len() >= MAX_FRAMES || (f.2 + size > MAX_LOG_BYTES && !f.1.is_empty()) {
            if let Some((_, s)) = f.1.pop_front() {
                f.2 -= s;
            }
        }
        f.1.push_back((frame.clone(), size));
        f.2 += size;
        // Sent under the lock, so live frames arrive in `seq` order.
        let _ = self.live.send(frame);
    }

    fn since(&self, after: u64) -> Vec<Value> {
        match self.frames.lock() {
            Ok(f) => {
                f.1.iter()
                    .map(|(v, _)| v)
                    .filter(|v| seq_of(v) > after)
                    .cloned()
                    .collect()
            }
            Err(_) => Vec::new(),
        }
    }
}

/// Sends a request's frames after `after` to a connection: the backlog, then the live
/// stream, until its `done` frame or the connection ends.
pub fn attach(log: Arc<RunLog>, after: u64, tx: Outbound, conn: CancellationToken) {
    let mut rx = log.live.subscribe();
    tokio::spawn(async move {
        let mut last = after;
        // Frames after `last`, from the log, waiting for room; false when the client
        // is gone or the request's `done` was sent.
        async fn backlog(log: &RunLog, tx: &Outbound, last: &mut u64) -> bool {
            for f in log.since(*last) {
                *last = seq_of(&f);
                let done = f["type"] == "done";
                if !tx.send_backlog(f).await || done {
                    return false;
                }
            }
            true
        }
        if !backlog(&log, &tx, &mut last).await {
            return;
        }
        loop {
            // A finished request has nothing more to follow (its `done` was in the log
            // before it was marked done, so the catch-up above had it, or the client
            // had already seen it).
            if log.is_done() {
                let _ = backlog(&log, &tx, &mut last).await;
                return;
            }
            let f = tokio::select! {
                f = rx.recv() => f,
                _ = conn.cancelled() => return,
            };
            match f {
                Ok(f) => {
                    let s = seq_of(&f);
                    if s <= last {
                        continue;
                    }
                    last = s;
                    let done = f["type"] == "done";
                    if !tx.send(f) || done {
                        return;
                    }
                }
                // Fell behind the live stream: catch up from the log.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if !backlog(&log, &tx, &mut last).await {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// Turns one run's events into frames for its request id; `keys` are the run's
/// entries in `runs`, removed a while after it ends.
pub async fn forward(
    mut handle: RunHandle,
    id: String,
    session: String,
    log: Arc<RunLog>,
    runs: Runs,
    keys: Vec<String>,
) {
    let frame = |kind: &str, content: &str| json!({"id": id, "type": kind, "content": content, "sessionId": session});
    while let Some(ev) = handle.events.recv().await {
        let f = match ev {
            AgentEvent::TextDelta { text } => frame("text", &text),
            AgentEvent::ToolCall { summary, .. } => frame("tool_use", &summary),
            AgentEvent::ToolResult {
                is_error: true,
                name,
                output,
                ..
            } => frame(
                "tool_result",
                &format!("{name}: {}", crate::util::truncate_bytes(&output, 4000)),
            ),
            AgentEvent::Retry { reason, .. } => frame("retry", &reason),
            AgentEvent::State { state } => {
                let s = serde_json::to_value(state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                frame("state", &s)
            }
            AgentEvent::Instruction { text, .. } => frame("instruction", &text),
            AgentEvent::Checkpoint { step, message, .. } => {
                let mut f = frame("checkpoint", &message);
                f["step"] = json!(step);
                f
            }
            AgentEvent::RolledBack { step, .. } => {
                let mut f = frame("rollback", &format!("rolled back to step {step}"));
                f["step"] = json!(step);
                f
            }
            AgentEvent::Finished { outcome } => {
                match outcome {
                    Outcome::Failed { error, .. } => log.push(frame("error", &error)),
                    Outcome::Cancelled { .. } => log.push(frame("error", "cancelled")),
                    Outcome::Completed { .. } => {}
                }
                // The `done` frame is in the log before the log says it is done.
                log.push(frame("done", ""));
                log.done.store(true, Ordering::Release);
                continue;
            }
            _ => continue,
        };
        log.push(f);
    }
    if !log.is_done() {
        // The run's task ended without its `Finished` (it panicked): the client still
        // gets an error and `done`, never a request that hangs forever.
        log.push(frame(
            "error",
            "the run ended unexpectedly (an internal error); its session is kept",
        ));
        log.push(frame("done", ""));
        log.done.store(true, Ordering::Release);
    }
    log.done.store(true, Ordering::Release);
    tokio::spawn(async move {
        // Only its own connection can reach a request that was not `keepAlive`: its
        // log goes when that connection does, or after the usual while.
        let own_only = log.run_id.is_none();
        tokio::select! {
            _ = tokio::time::sleep(KEEP_FINISHED) => {}
            _ = log.token.cancelled(), if own_only => {}
        }
        if let Ok(mut r) = runs.lock() {
            for key in &keys {
                if r.get(key).is_some_and(|l| Arc::ptr_eq(l, &log)) {
                    r.remove(key);
                }
            }
        }
    });
}
