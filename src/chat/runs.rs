//! Chat requests as logs: a run's events become its request's frames (`forward`), and
//! every frame gets a `seq` and is kept (bounded, written out once), so a client that
//! connects late or reconnects can ask for the frames after the last `seq` it saw and
//! then follow the live stream, without loss or repeats (`attach`). Also each
//! connection's bounded queue of outgoing frames (`Outbound`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::protocol::{Outgoing, ServerFrame, Shown};
use super::replay::{Logged, Replay};
use crate::agent::control::RunControl;
use crate::agent::{AgentEvent, Outcome, RunHandle};

/// Frames a request's live stream holds for a follower that has not taken them yet;
/// one further behind catches up from the log. Small: every request allocates all
/// of its slots at once, so 1,024 of them made a 200-session burst ~16 MB larger.
const LIVE_FRAMES: usize = 64;
/// How long a finished request stays available for replay.
const KEEP_FINISHED: Duration = Duration::from_secs(600);

pub(crate) type Runs = Arc<Mutex<HashMap<String, Arc<RunLog>>>>;

/// Frames waiting for one connection's writer, at most; the last `RESERVED` of them
/// only for frames that are not a request's (answers to the client's own frames), so
/// a request's backlog never crowds those out.
pub(crate) const OUTBOUND_FRAMES: usize = 4096;
const RESERVED: usize = 256;
/// Bytes of a request's frames waiting for one connection's writer, at most.
const OUTBOUND_BYTES: usize = 8 << 20;
/// How long a client may take nothing at all before it is disconnected (its runs then
/// follow the `keepAlive` rules). A client that reads, however slowly, stays.
const STALLED_FOR: Duration = Duration::from_secs(30);

/// The way to one connection: a bounded queue of frame texts toward its writer. A
/// follower that falls behind is not dropped: it catches up from the request's log,
/// where the text pieces it missed are joined into a few frames.
#[derive(Clone)]
pub(crate) struct Outbound {
    tx: tokio::sync::mpsc::Sender<Utf8Bytes>,
    /// Bytes queued and not yet taken by the writer.
    queued: Arc<AtomicUsize>,
    /// Notified whenever the writer takes a frame.
    taken: Arc<Notify>,
    /// Cancelled when the client stops reading.
    conn: CancellationToken,
}

/// The writer's side of an `Outbound`: it says what it took.
pub(crate) struct Taken {
    queued: Arc<AtomicUsize>,
    taken: Arc<Notify>,
}

impl Taken {
    pub(crate) fn took(&self, text: &Utf8Bytes) {
        self.queued.fetch_sub(text.len(), Ordering::AcqRel);
        self.taken.notify_waiters();
    }
}

enum Queued {
    Yes,
    /// No room now: catch up from the log later.
    Full,
    Gone,
}

impl Outbound {
    pub(crate) fn new(
        tx: tokio::sync::mpsc::Sender<Utf8Bytes>,
        conn: CancellationToken,
    ) -> (Outbound, Taken) {
        let (queued, taken) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let side = Taken {
            queued: queued.clone(),
            taken: taken.clone(),
        };
        (
            Outbound {
                tx,
                queued,
                taken,
                conn,
            },
            side,
        )
    }

    /// Queues a frame that is not a request's; false when the connection is gone (or
    /// holds so much that even the reserved room is used up: then it is closed).
    pub(crate) fn send(&self, frame: &Outgoing) -> bool {
        self.send_encoded(frame.encode())
    }

    /// `send` of a frame encoded already (a large answer is encoded off the runtime).
    pub(crate) fn send_encoded(&self, text: String) -> bool {
        let text: Utf8Bytes = text.into();
        let len = text.len();
        self.queued.fetch_add(len, Ordering::AcqRel);
        match self.tx.try_send(text) {
            Ok(()) => true,
            Err(e) => {
                self.queued.fetch_sub(len, Ordering::AcqRel);
                if matches!(e, tokio::sync::mpsc::error::TrySendError::Full(_)) {
                    tracing::warn!("a chat client's queue is full; closing its connection");
                    self.conn.cancel();
                }
                false
            }
        }
    }

    /// Queues one of a request's frames if there is room for it now.
    fn try_send_logged(&self, text: Utf8Bytes) -> Queued {
        if self.tx.is_closed() {
            return Queued::Gone;
        }
        let len = text.len();
        let full = self.tx.capacity() <= RESERVED
            || self.queued.load(Ordering::Acquire).saturating_add(len) > OUTBOUND_BYTES;
        // One frame larger than the whole budget still goes when nothing waits.
        if full && self.queued.load(Ordering::Acquire) > 0 {
            return Queued::Full;
        }
        self.queued.fetch_add(len, Ordering::AcqRel);
        match self.tx.try_send(text) {
            Ok(()) => Queued::Yes,
            Err(e) => {
                self.queued.fetch_sub(len, Ordering::AcqRel);
                match e {
                    tokio::sync::mpsc::error::TrySendError::Full(_) => Queued::Full,
                    tokio::sync::mpsc::error::TrySendError::Closed(_) => Queued::Gone,
                }
            }
        }
    }

    /// Queues one of a request's frames, waiting for room; a client that takes nothing
    /// for `STALLED_FOR` is disconnected. False when the connection is gone.
    async fn send_logged(&self, text: Utf8Bytes) -> bool {
        loop {
            let taken = self.taken.notified();
            match self.try_send_logged(text.clone()) {
                Queued::Yes => return true,
                Queued::Gone => return false,
                Queued::Full => {}
            }
            tokio::select! {
                _ = taken => {}
                _ = tokio::time::sleep(STALLED_FOR) => {
                    tracing::warn!("a chat client took nothing for {STALLED_FOR:?}; closing its connection");
                    self.conn.cancel();
                    return false;
                }
                _ = self.conn.cancelled() => return false,
            }
        }
    }
}

pub(crate) struct RunLog {
    /// The client's id of the request, on every frame.
    id: String,
    /// The session the request runs in.
    pub(crate) session: String,
    /// The server-issued id of a `keepAlive` run, by which any connection may address
    /// it; other runs belong to the connection that started them.
    pub(crate) run_id: Option<String>,
    frames: Mutex<Replay>,
    live: broadcast::Sender<Logged>,
    done: AtomicBool,
    /// Cancelled once `done` is set: what waiting for the end awaits.
    ended: CancellationToken,
    pub(crate) token: CancellationToken,
    pub(crate) control: RunControl,
    /// The id of the entry the request's prompt gets in the session: the history up to
    /// it is the session file's, the rest is this log's (until the run writes it, the
    /// whole file is history).
    pub(crate) prompt_entry: String,
    /// When the request was made, in the server's order of requests.
    pub(crate) made: u64,
    pub(crate) prompt: String,
}

impl RunLog {
    pub(crate) fn new(
        id: String,
        session: String,
        run_id: Option<String>,
        token: CancellationToken,
        control: RunControl,
        prompt_entry: String,
        prompt: String,
    ) -> Arc<RunLog> {
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Arc::new(RunLog {
            id,
            session,
            run_id,
            frames: Mutex::new(Replay::default()),
            live: broadcast::channel(LIVE_FRAMES).0,
            done: AtomicBool::new(false),
            ended: CancellationToken::new(),
            token,
            control,
            prompt_entry,
            made: MADE.fetch_add(1, Ordering::Relaxed),
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

    /// Waits until the request is done.
    pub(crate) async fn ended(&self) {
        self.ended.cancelled().await
    }

    /// A frame of this request as connections are sent it, with its `seq` (and `runId`).
    fn encode(&self, seq: u64, frame: ServerFrame) -> Utf8Bytes {
        let out = Outgoing {
            seq: Some(seq),
            run_id: self.run_id.clone(),
            ..Outgoing::new(Some(self.id.clone()), Some(self.session.clone()), frame)
        };
        Utf8Bytes::from(out.encode())
    }

    /// Adds a frame of this request and sends it to the connections following it.
    fn push(&self, frame: ServerFrame) {
        let Ok(mut k) = self.frames.lock() else {
            return;
        };
        let seq = k.next_seq();
        let last = frame.is_done();
        let text = self.encode(seq, frame.clone());
        k.keep(seq, &frame, text.clone());
        // Sent under the lock, so live frames arrive in `seq` order.
        let _ = self.live.send(Logged { seq, last, text });
    }

    /// Ends the request: `error` for a failed or cancelled run (or one whose task
    /// ended without saying how), then `done`, which is in the log before the log
    /// says it is done.
    fn finish(&self, outcome: Option<Outcome>) {
        let error = match outcome {
            // What the page shows: the cause first, and what to do about it.
            Some(Outcome::Failed { error, .. }) if crate::util::says_no_room(&error) => Some(
                format!("the disk is full, so the run could not go on; send it again once there is room ({error})"),
            ),
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
        self.ended.cancel();
    }

    /// The last `seq` so far.
    pub(crate) fn seq(&self) -> u64 {
        self.frames.lock().map(|k| k.seq()).unwrap_or(0)
    }

    /// The frames after `after`, text pieces joined (see `replay.rs`).
    fn since(&self, after: u64) -> Vec<Logged> {
        match self.frames.lock() {
            Ok(k) => k.since(after, |seq, frame| self.encode(seq, frame)),
            Err(_) => Vec::new(),
        }
    }
}

/// Sends a request's frames after `after` to a connection: the backlog, then the live
/// stream, until its `done` frame or the connection ends.
pub(crate) fn attach(
    tasks: &TaskTracker,
    log: Arc<RunLog>,
    after: u64,
    tx: Outbound,
    conn: CancellationToken,
) {
    let mut rx = log.live.subscribe();
    tasks.spawn(async move {
        // `conn` is this follower's own token: cancelled once it ends, so its
        // connection forgets it.
        let _ended = conn.clone().drop_guard();
        let mut last = after;
        // Frames after `last`, from the log, waiting for room; false when the client
        // is gone or the request's `done` was sent.
        async fn backlog(log: &RunLog, tx: &Outbound, last: &mut u64) -> bool {
            for f in log.since(*last) {
                *last = f.seq;
                if !tx.send_logged(f.text).await || f.last {
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
                Ok(f) => match tx.try_send_logged(f.text) {
                    Queued::Yes if f.last => return,
                    Queued::Yes => last = f.seq,
                    Queued::Gone => return,
                    // Behind: the rest comes from the log, pieces joined.
                    Queued::Full => {
                        if !backlog(&log, &tx, &mut last).await {
                            return;
                        }
                    }
                },
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
        AgentEvent::Started {
            provider,
            model,
            work_dir,
            ..
        } => ServerFrame::Context {
            provider,
            model,
            work_dir,
        },
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
        AgentEvent::ToolOutputDelta { id, text } => ServerFrame::ToolProgress {
            content: text,
            call_id: id,
        },
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
            content: state.into(),
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
        AgentEvent::Usage { step, usage } => ServerFrame::Usage {
            content: usage,
            step,
        },
        AgentEvent::Notice { message } => ServerFrame::Notice { content: message },
        AgentEvent::Approval {
            id,
            name,
            kind,
            summary,
            ..
        } => ServerFrame::Approval {
            content: summary,
            tool: name,
            kind,
            call_id: id,
        },
        AgentEvent::Approved { id, answer } => ServerFrame::Approved {
            answer,
            call_id: id,
        },
        AgentEvent::Compacted { .. } => ServerFrame::State {
            content: Shown::Compacted,
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
    duration_ms: Option<u64>,
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
        duration_ms,
    }
}

/// Turns one run's events into its request's frames. True when the run ended
/// cancelled.
pub(crate) async fn forward(mut handle: RunHandle, log: Arc<RunLog>) -> bool {
    let mut cancelled = false;
    // When each tool call started, to say how long it took.
    let mut started: HashMap<String, std::time::Instant> = HashMap::new();
    while let Some(ev) = handle.events.recv().await {
        if let AgentEvent::ToolCall { id, .. } = &ev {
            started.insert(id.clone(), std::time::Instant::now());
        }
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
                // Every result as `tool_output`; a failed one then also as
                // `tool_result`, the frame clients knew before `tool_output` (after it,
                // so a client that knows both has finished the step already).
                let took = started
                    .remove(&id)
                    .map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX));
                let legacy = is_error.then(|| ServerFrame::ToolResult {
                    content: format!("{name}: {}", crate::util::truncate_bytes(&output, 4000)),
                });
                log.push(tool_output(id, name, is_error, &output, details, took));
                if let Some(f) = legacy {
                    log.push(f);
                }
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
    cancelled
}

/// Removes a finished request from `runs` after `KEEP_FINISHED`. Only its own
/// connection can reach a request that was not `keepAlive`: its log goes when that
/// connection does.
pub(crate) async fn forget_later(log: Arc<RunLog>, runs: Runs, keys: Vec<String>) {
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
