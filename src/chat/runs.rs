//! Chat requests as logs: a run's events become its request's frames (`forward`), and
//! every frame gets a `seq` and is kept (bounded, written out once), so a client that
//! connects late or reconnects can ask for the frames after the last `seq` it saw and
//! then follow the live stream, without loss or repeats (`attach`). Also each
//! connection's bounded queue of outgoing frames (`Outbound`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::protocol::{Outgoing, ServerFrame};
use crate::agent::control::RunControl;
use crate::agent::{AgentEvent, Outcome, RunHandle};

/// Frames kept per request; older ones are dropped from the replay log.
const MAX_FRAMES: usize = 20_000;
/// Bytes of frames kept per request, whatever their number.
const MAX_LOG_BYTES: usize = 8 << 20;
/// Frames a request's live stream holds for a follower that has not taken them yet;
/// one further behind catches up from the log. Small: every request allocates all
/// of its slots at once, so 1,024 of them made a 200-session burst ~16 MB larger.
const LIVE_FRAMES: usize = 64;
/// How long a finished request stays available for replay.
const KEEP_FINISHED: Duration = Duration::from_secs(600);

pub(crate) type Runs = Arc<Mutex<HashMap<String, Arc<RunLog>>>>;

/// Frames waiting for one connection's writer; a client that lets more pile up is too
/// slow to follow and is disconnected (its runs then follow the `keepAlive` rules).
pub(crate) const OUTBOUND_FRAMES: usize = 4096;

/// The way to one connection: a bounded queue of frame texts toward its writer.
#[derive(Clone)]
pub(crate) struct Outbound {
    tx: tokio::sync::mpsc::Sender<Utf8Bytes>,
    /// Cancelled when the client falls too far behind.
    conn: CancellationToken,
}

impl Outbound {
    pub(crate) fn new(
        tx: tokio::sync::mpsc::Sender<Utf8Bytes>,
        conn: CancellationToken,
    ) -> Outbound {
        Outbound { tx, conn }
    }

    /// Queues a frame; false when the connection is gone or was just dropped for
    /// being too slow.
    pub(crate) fn send(&self, frame: &Outgoing) -> bool {
        self.send_text(frame.encode().into())
    }

    /// Queues a frame already written out (one of a request's log).
    fn send_text(&self, text: Utf8Bytes) -> bool {
        match self.tx.try_send(text) {
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
    async fn send_backlog(&self, text: Utf8Bytes) -> bool {
        match tokio::time::timeout(BACKLOG_WAIT, self.tx.send(text)).await {
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

/// One frame of a request's log, written out once and shared by every connection that
/// follows the request.
#[derive(Clone)]
struct Logged {
    seq: u64,
    /// The request's `done`, its last frame.
    last: bool,
    text: Utf8Bytes,
}

/// A request's replay log: the last `seq`, the frames kept (oldest first) and their
/// total size in bytes.
#[derive(Default)]
struct Kept {
    seq: u64,
    frames: VecDeque<Logged>,
    bytes: usize,
}

pub(crate) struct RunLog {
    /// The client's id of the request, on every frame.
    id: String,
    /// The session the request runs in.
    pub(crate) session: String,
    /// The server-issued id of a `keepAlive` run, by which any connection may address
    /// it; other runs belong to the connection that started them.
    pub(crate) run_id: Option<String>,
    frames: Mutex<Kept>,
    live: broadcast::Sender<Logged>,
    done: AtomicBool,
    pub(crate) token: CancellationToken,
    pub(crate) control: RunControl,
    /// How many entries the session had when the request was made: its history up to
    /// there is the session file's, the rest is this log's.
    pub(crate) start_entries: usize,
    /// The prompt, the first entry the request writes (a request queued behind
    /// another in its session starts writing later than `start_entries`).
    pub(crate) prompt: String,
}

impl RunLog {
    pub(crate) fn new(
        id: String,
        session: String,
        run_id: Option<String>,
        token: CancellationToken,
        control: RunControl,
        start_entries: usize,
        prompt: String,
    ) -> Arc<RunLog> {
        Arc::new(RunLog {
            id,
            session,
            run_id,
            frames: Mutex::new(Kept::default()),
            live: broadcast::channel(LIVE_FRAMES).0,
            done: AtomicBool::new(false),
            token,
            control,
            start_entries,
            prompt,
        })
    }

    /// The client's id of the request.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Adds a frame of this request, with its `seq` (and `runId`), and sends it to the
    /// connections following the request.
    fn push(&self, frame: ServerFrame) {
        let Ok(mut k) = self.frames.lock() else {
            return;
        };
        k.seq += 1;
        let last = frame.is_done();
        let out = Outgoing {
            seq: Some(k.seq),
            run_id: self.run_id.clone(),
            ..Outgoing::new(Some(self.id.clone()), Some(self.session.clone()), frame)
        };
        let text = Utf8Bytes::from(out.encode());
        let size = text.len();
        while k.frames.len() >= MAX_FRAMES
            || (k.bytes + size > MAX_LOG_BYTES && !k.frames.is_empty())
        {
            if let Some(old) = k.frames.pop_front() {
                k.bytes -= old.text.len();
            }
        }
        let logged = Logged {
            seq: k.seq,
            last,
            text,
        };
        k.frames.push_back(logged.clone());
        k.bytes += size;
        // Sent under the lock, so live frames arrive in `seq` order.
        let _ = self.live.send(logged);
    }

    /// Ends the request: `error` for a failed or cancelled run (or one whose task
    /// ended without saying how), then `done`, which is in the log before the log
    /// says it is done.
    fn finish(&self, outcome: Option<Outcome>) {
        let error = match outcome {
            Some(Outcome::Failed { error, .. }) => Some(error),
            Some(Outcome::Cancelled { .. }) => Some("cancelled".into()),
            Some(Outcome::Completed { .. }) => None,
            None => {
                Some("the run ended unexpectedly (an internal error); its session is kept".into())
            }
        };
        if let Some(e) = error {
            self.push(ServerFrame::error(e));
        }
        self.push(ServerFrame::done());
        self.done.store(true, Ordering::Release);
    }

    /// The last `seq` so far.
    pub(crate) fn seq(&self) -> u64 {
        self.frames.lock().map(|k| k.seq).unwrap_or(0)
    }

    fn since(&self, after: u64) -> Vec<Logged> {
        match self.frames.lock() {
            Ok(k) => k.frames.iter().filter(|f| f.seq > after).cloned().collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Sends a request's frames after `after` to a connection: the backlog, then the live
/// stream, until its `done` frame or the connection ends.
pub(crate) fn attach(log: Arc<RunLog>, after: u64, tx: Outbound, conn: CancellationToken) {
    let mut rx = log.live.subscribe();
    tokio::spawn(async move {
        let mut last = after;
        // Frames after `last`, from the log, waiting for room; false when the client
        // is gone or the request's `done` was sent.
        async fn backlog(log: &RunLog, tx: &Outbound, last: &mut u64) -> bool {
            for f in log.since(*last) {
                *last = f.seq;
                if !tx.send_backlog(f.text).await || f.last {
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
                Ok(f) if f.seq <= last => {}
                Ok(f) => {
                    last = f.seq;
                    if !tx.send_text(f.text) || f.last {
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

/// The frame a run's event becomes, if any (`Finished` is [`RunLog::finish`]'s).
fn frame_of(ev: AgentEvent) -> Option<ServerFrame> {
    Some(match ev {
        AgentEvent::TextDelta { text } => ServerFrame::Text { content: text },
        AgentEvent::ToolCall {
            id,
            name,
            arguments,
            summary,
        } => ServerFrame::ToolUse {
            content: summary,
            tool: Some(name),
            args: Some(arguments),
            call_id: Some(id),
        },
        AgentEvent::ThinkingDelta { text } => ServerFrame::Thinking { content: text },
        AgentEvent::Retry {
            attempt,
            of,
            delay_ms,
            reason,
        } => ServerFrame::Retry {
            content: reason,
            attempt: attempt + 1,
            of,
            delay_ms,
        },
        AgentEvent::State { state } => ServerFrame::State {
            content: serde_json::to_value(state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        },
        AgentEvent::Instruction { text, .. } => ServerFrame::Instruction { content: text },
        AgentEvent::Checkpoint { step, message, .. } => ServerFrame::Checkpoint {
            content: message,
            step,
        },
        AgentEvent::RolledBack { step, .. } => ServerFrame::Rollback {
            content: format!("rolled back to step {step}"),
            step,
        },
        _ => return None,
    })
}

/// Bytes of a tool's output a `tool_output` frame carries (the model may have seen more).
pub(crate) const OUTPUT_BYTES: usize = 64 * 1024;

/// A finished tool call as a `tool_output` frame, its output bounded.
pub(crate) fn tool_output(
    call_id: String,
    tool: String,
    is_error: bool,
    output: &str,
    details: Option<serde_json::Value>,
) -> ServerFrame {
    let cut = crate::util::truncate_bytes(output, OUTPUT_BYTES);
    let content = if cut.len() < output.len() {
        format!(
            "{cut}\n… ({} more bytes not shown)",
            output.len() - cut.len()
        )
    } else {
        cut.to_string()
    };
    ServerFrame::ToolOutput {
        content,
        tool,
        call_id,
        is_error,
        details,
    }
}

/// Turns one run's events into its request's frames; `keys` are the run's entries in
/// `runs`, removed a while after it ends. True when the run ended cancelled.
pub(crate) async fn forward(
    mut handle: RunHandle,
    log: Arc<RunLog>,
    runs: Runs,
    keys: Vec<String>,
) -> bool {
    let mut cancelled = false;
    while let Some(ev) = handle.events.recv().await {
        match ev {
            AgentEvent::Finished { outcome } => {
                cancelled = matches!(outcome, Outcome::Cancelled { .. });
                log.finish(Some(outcome));
            }
            AgentEvent::ToolResult {
                id,
                name,
                is_error,
                output,
                details,
            } => {
                // Every result as `tool_output`; a failed one also as `tool_result`,
                // the frame clients knew before `tool_output`.
                if is_error {
                    log.push(ServerFrame::ToolResult {
                        content: format!("{name}: {}", crate::util::truncate_bytes(&output, 4000)),
                    });
                }
                log.push(tool_output(id, name, is_error, &output, details));
            }
            ev => {
                if let Some(f) = frame_of(ev) {
                    log.push(f);
                }
            }
        }
    }
    if !log.is_done() {
        // The run's task ended without its `Finished` (it panicked): the client still
        // gets an error and `done`, never a request that hangs forever.
        log.finish(None);
    }
    tokio::spawn(forget_later(log, runs, keys));
    cancelled
}

/// Removes a finished request from `runs` after `KEEP_FINISHED`. Only its own
/// connection can reach a request that was not `keepAlive`: its log goes when that
/// connection does.
async fn forget_later(log: Arc<RunLog>, runs: Runs, keys: Vec<String>) {
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
}
