//! One append-only file of JSON lines, written off the runtime. Its owner hands bytes
//! over (`append`, never waiting for the disk, at most `MAX_PENDING` bytes queued),
//! asks for durability (`sync`, or `sync_then` with a callback run in order once the
//! bytes before it are durable or lost), replaces the content whole (`rewrite`, a
//! compaction: everything handed over before it is superseded), and ends it
//! (`close`, awaited: nothing is joined or waited for in `Drop`).
//!
//! Writes happen in a job on the runtime's blocking pool that runs only while there is
//! work, one at a time per log, in the order things were handed over: every `sync`
//! waiting when the job takes its batch shares one fsync (group commit). The first
//! failure is sticky: later appends and syncs get it, until a `rewrite` (the owner's
//! content from memory) succeeds.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// At most this many bytes wait for the disk; an append past it fails instead of
/// growing without bound.
pub(crate) const MAX_PENDING: usize = 64 << 20;

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum LogError {
    #[error("{path}: {message}")]
    Io {
        path: PathBuf,
        kind: std::io::ErrorKind,
        message: String,
    },
    #[error("{path}: {size} KiB do not fit: {pending} KiB are still waiting for the disk (at most {} MiB may)", MAX_PENDING >> 20)]
    Full {
        path: PathBuf,
        size: usize,
        pending: usize,
    },
    #[error("{path}: the log is closed")]
    Closed { path: PathBuf },
}

impl LogError {
    fn io(path: &Path, e: &std::io::Error) -> LogError {
        LogError::Io {
            path: path.to_path_buf(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl LogError {
    /// The failure without the file's name (for an error that names it already).
    pub(crate) fn bare(&self) -> std::io::Error {
        match self {
            LogError::Io { kind, message, .. } => std::io::Error::new(*kind, message.clone()),
            LogError::Full { size, pending, .. } => std::io::Error::other(format!(
                "an entry of {size} KiB does not fit: {pending} KiB are still waiting for the disk (at most {} MiB may)",
                MAX_PENDING >> 20
            )),
            LogError::Closed { .. } => std::io::Error::other("the log is closed"),
        }
    }
}

impl From<LogError> for std::io::Error {
    fn from(e: LogError) -> std::io::Error {
        match &e {
            LogError::Io { kind, .. } => std::io::Error::new(*kind, e.to_string()),
            _ => std::io::Error::other(e.to_string()),
        }
    }
}

type Then = Box<dyn FnOnce(Result<(), LogError>) + Send>;

enum Op {
    Bytes(Vec<u8>),
    Sync(Then),
    /// A sync answered with this error when its turn comes (the log was closed).
    Answer(Then, LogError),
    /// Called once the bytes before it are in the file (not necessarily durable).
    Written(Then),
    Rewrite(Vec<u8>),
}

impl Op {
    /// The bytes it holds.
    fn len(&self) -> usize {
        match self {
            Op::Bytes(b) | Op::Rewrite(b) => b.len(),
            Op::Sync(_) | Op::Answer(..) | Op::Written(_) => 0,
        }
    }
}

#[derive(Default)]
struct State {
    ops: VecDeque<Op>,
    /// Bytes in `ops`.
    pending: usize,
    /// A job is writing, or about to.
    busy: bool,
    failed: Option<LogError>,
    closed: bool,
}

struct Inner {
    path: PathBuf,
    state: Mutex<State>,
    /// Touched by the log's one job at a time.
    file: Mutex<File>,
    /// Bytes written to the file since it was opened (or last rewritten).
    written: std::sync::atomic::AtomicU64,
}

/// The log's handle; its owner decides what goes in (a clone is the same log).
#[derive(Clone)]
pub(crate) struct Log {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads a log's lines (a missing file has none); a torn last line (a crash in the
/// middle of an append) is cut off the file, so the next append starts a line.
/// Blocking: call off the runtime.
pub(crate) fn read(path: &Path) -> std::io::Result<String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if whole < bytes.len() {
        tracing::warn!(
            "{}: a torn last line ({} bytes) is cut off",
            path.display(),
            bytes.len() - whole
        );
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(whole as u64)?;
    }
    Ok(String::from_utf8_lossy(&bytes[..whole]).into_owned())
}

impl Log {
    /// Starts the log of `path` with `content` (what its owner read, compacted),
    /// written durably in place of what was there. Blocking: call off the runtime.
    pub(crate) fn replace(path: &Path, content: &[u8]) -> std::io::Result<Log> {
        let file = crate::util::rewrite_log(path, content)?;
        Ok(Log::with_file(path, file))
    }

    /// Continues the log of `path` after what it holds (an archive nobody compacts),
    /// made if missing, readable by its owner alone, never through a symlink; `read`
    /// it first, so a torn last line is cut off. Blocking: call off the runtime.
    pub(crate) fn open(path: &Path) -> std::io::Result<Log> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        Ok(Log::with_file(path, file))
    }

    /// The log of a file its owner opened for appending (and reads itself).
    pub(crate) fn with_file(path: &Path, file: File) -> Log {
        Log {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                state: Mutex::new(State::default()),
                file: Mutex::new(file),
                written: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Bytes in the file that this log wrote since it was opened (or last rewritten):
    /// a reader of an earlier line need not wait for later ones.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.inner
            .written
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The failure every later append and sync gets, until a rewrite succeeds.
    pub(crate) fn failed(&self) -> Option<LogError> {
        lock(&self.inner.state).failed.clone()
    }

    /// Hands bytes over (whole lines); never waits for the disk.
    pub(crate) fn append(&self, bytes: &[u8]) -> Result<(), LogError> {
        let mut st = lock(&self.inner.state);
        self.usable(&st)?;
        if st.pending + bytes.len() > MAX_PENDING {
            return Err(LogError::Full {
                path: self.inner.path.clone(),
                size: bytes.len() >> 10,
                pending: st.pending >> 10,
            });
        }
        st.pending += bytes.len();
        match st.ops.back_mut() {
            Some(Op::Bytes(b)) => b.extend_from_slice(bytes),
            _ => st.ops.push_back(Op::Bytes(bytes.to_vec())),
        }
        self.kick(st);
        Ok(())
    }

    fn usable(&self, st: &State) -> Result<(), LogError> {
        if st.closed {
            return Err(self.closed());
        }
        st.failed.clone().map_or(Ok(()), Err)
    }

    /// Calls `then` once everything handed over before is durable (`Ok`) or lost, in
    /// the order of the log's operations, on the log's job.
    /// Never called on the caller's thread, so the caller may hold its own lock.
    pub(crate) fn sync_then(&self, then: impl FnOnce(Result<(), LogError>) + Send + 'static) {
        let mut st = lock(&self.inner.state);
        let op = match st.closed {
            true => Op::Answer(Box::new(then), self.closed()),
            // A failure is answered by the job, in order: a rewrite queued before this
            // one may clear it.
            false => Op::Sync(Box::new(then)),
        };
        st.ops.push_back(op);
        self.kick(st);
    }

    fn closed(&self) -> LogError {
        LogError::Closed {
            path: self.inner.path.clone(),
        }
    }

    /// Waits until everything handed over before is durable. What to wait for is
    /// taken when this is called, not when the future is first polled.
    pub(crate) fn sync(
        &self,
    ) -> impl std::future::Future<Output = Result<(), LogError>> + Send + 'static {
        let (then, answered) = self.answer();
        self.sync_then(then);
        answered
    }

    /// `sync`, blocking this thread (outside async code).
    pub(crate) fn wait_synced(&self) -> Result<(), LogError> {
        self.answer_blocking(|then| self.sync_then(then))
    }

    /// A callback for an operation and the future of what it is called with (the
    /// operation is queued by the caller now, not when the future is first polled).
    fn answer(
        &self,
    ) -> (
        Then,
        impl std::future::Future<Output = Result<(), LogError>> + Send + 'static,
    ) {
        let (tx, rx) = oneshot::channel();
        let path = self.inner.path.clone();
        let then: Then = Box::new(move |r| {
            let _ = tx.send(r);
        });
        (then, async move {
            rx.await.unwrap_or(Err(LogError::Closed { path }))
        })
    }

    /// The answer of the operation `ask` queues with its callback, waited for on this
    /// thread.
    fn answer_blocking(&self, ask: impl FnOnce(Then)) -> Result<(), LogError> {
        let (tx, rx) = std::sync::mpsc::channel();
        ask(Box::new(move |r| drop(tx.send(r))));
        rx.recv().unwrap_or_else(|_| Err(self.closed()))
    }

    /// Calls `then` once everything handed over before is in the file, synced or not
    /// (for a reader of the file), on the log's job; `Err` when it never will be. It
    /// may run before an earlier sync's callback (it does not wait for the fsync).
    /// When nothing waits, it is called at once, on the caller's thread.
    pub(crate) fn when_written(&self, then: impl FnOnce(Result<(), LogError>) + Send + 'static) {
        let mut st = lock(&self.inner.state);
        if !st.busy && st.ops.is_empty() {
            let now = st.failed.clone().map_or(Ok(()), Err);
            drop(st);
            return then(now);
        }
        st.ops.push_back(Op::Written(Box::new(then)));
        self.kick(st);
    }

    /// Waits until everything handed over before is in the file.
    pub(crate) fn written(
        &self,
    ) -> impl std::future::Future<Output = Result<(), LogError>> + Send + 'static {
        let (then, answered) = self.answer();
        self.when_written(then);
        answered
    }

    /// `written`, blocking this thread (a reader outside async code).
    pub(crate) fn wait_written(&self) -> Result<(), LogError> {
        self.answer_blocking(|then| self.when_written(then))
    }

    /// Replaces the log's content with `content`, superseding everything handed over
    /// before; appends after it follow it. A failure before it is forgotten: the
    /// rewrite holds what the owner has.
    pub(crate) fn rewrite(&self, content: Vec<u8>) -> Result<(), LogError> {
        let mut st = lock(&self.inner.state);
        if st.closed {
            return Err(self.closed());
        }
        // What is queued before it is superseded: not written at all.
        let superseded: usize = st.ops.iter().map(Op::len).sum();
        // The syncs queued before it asked for bytes the rewrite now holds: they are
        // answered once it is durable.
        let waiting: Vec<Op> = st
            .ops
            .drain(..)
            .filter(|o| matches!(o, Op::Sync(_) | Op::Answer(..) | Op::Written(_)))
            .collect();
        st.pending = st.pending.saturating_sub(superseded) + content.len();
        st.failed = None;
        st.ops.push_back(Op::Rewrite(content));
        st.ops.extend(waiting);
        self.kick(st);
        Ok(())
    }

    /// Ends the log once everything handed over is durable; the failure, if any.
    /// Later appends and syncs get `Closed`.
    pub(crate) async fn close(&self) -> Result<(), LogError> {
        let (then, answered) = self.answer();
        {
            // One hold of the lock: no append slips in between the sync and the close.
            let mut st = lock(&self.inner.state);
            let op = match st.closed {
                true => Op::Answer(then, self.closed()),
                false => Op::Sync(then),
            };
            st.closed = true;
            st.ops.push_back(op);
            self.kick(st);
        }
        answered.await
    }

    /// Starts the log's job when there is work and none runs.
    fn kick(&self, mut st: MutexGuard<'_, State>) {
        if st.busy || st.ops.is_empty() {
            return;
        }
        st.busy = true;
        drop(st);
        let job = Job {
            inner: self.inner.clone(),
            ran: false,
        };
        let job = move || job.run();
        // On the runtime's blocking pool; a caller outside any runtime (a test, a
        // command-line tool) gets a short-lived thread of its own.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(job)),
            Err(_) => {
                if let Err(e) = std::thread::Builder::new().name("log".into()).spawn(job) {
                    let mut st = lock(&self.inner.state);
                    st.busy = false;
                    st.failed = Some(LogError::io(&self.inner.path, &e));
                }
            }
        }
    }
}

/// The log's job, on the blocking pool. One the pool drops without running it (a
/// runtime shutting down) does its work on a thread of its own (not where it is
/// dropped, where a caller may hold a lock a callback takes): what was handed over
/// is still written, and no caller waits forever.
struct Job {
    inner: Arc<Inner>,
    ran: bool,
}

impl Job {
    fn run(mut self) {
        self.ran = true;
        run(&self.inner);
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.ran {
            self.ran = true;
            let inner = self.inner.clone();
            let spawned = std::thread::Builder::new()
                .name("log".into())
                .spawn(move || run(&inner));
            if let Err(e) = spawned {
                let mut st = lock(&self.inner.state);
                st.busy = false;
                st.failed.get_or_insert(LogError::io(&self.inner.path, &e));
            }
        }
    }
}

/// The job: writes until nothing waits, one batch at a time.
fn run(inner: &Inner) {
    loop {
        let batch = {
            let mut st = lock(&inner.state);
            if st.ops.is_empty() {
                st.busy = false;
                return;
            }
            std::mem::take(&mut st.ops)
        };
        // Counted until written: the bound holds what waits for the disk, taken or not.
        let bytes: usize = batch.iter().map(Op::len).sum();
        write_batch(inner, batch);
        let mut st = lock(&inner.state);
        st.pending = st.pending.saturating_sub(bytes);
    }
}

/// Does a batch's operations in order: its bytes in one write, then one fsync for the
/// syncs waiting (done before a rewrite and at the batch's end), each answered in order.
fn write_batch(inner: &Inner, batch: VecDeque<Op>) {
    let mut waiting: Vec<Then> = Vec::new();
    let mut bytes: Vec<u8> = Vec::new();
    for op in batch {
        match op {
            Op::Bytes(b) if bytes.is_empty() => bytes = b,
            Op::Bytes(b) => bytes.extend_from_slice(&b),
            Op::Sync(then) => waiting.push(then),
            Op::Written(then) => {
                write_gathered(inner, &mut bytes);
                then(failed(inner).map_or(Ok(()), Err));
            }
            Op::Answer(then, e) => {
                settle(inner, &mut bytes, &mut waiting);
                then(Err(e));
            }
            Op::Rewrite(content) => {
                settle(inner, &mut bytes, &mut waiting);
                match crate::util::rewrite_log(&inner.path, &content) {
                    Ok(file) => {
                        *lock(&inner.file) = file;
                        inner
                            .written
                            .store(content.len() as u64, std::sync::atomic::Ordering::Release);
                        lock(&inner.state).failed = None;
                    }
                    Err(e) => fail(inner, &e),
                }
            }
        }
    }
    settle(inner, &mut bytes, &mut waiting);
}

/// Writes what is gathered, then one fsync for every sync waiting, then their
/// callbacks, in order. After a failure nothing is written and every sync gets it.
fn settle(inner: &Inner, bytes: &mut Vec<u8>, waiting: &mut Vec<Then>) {
    write_gathered(inner, bytes);
    if waiting.is_empty() {
        return;
    }
    let synced = match failed(inner) {
        Some(e) => Err(e),
        None => lock(&inner.file).sync_data().map_err(|e| {
            fail(inner, &e);
            LogError::io(&inner.path, &e)
        }),
    };
    for then in waiting.drain(..) {
        then(synced.clone());
    }
}

/// Writes what is gathered, in one write, unless a failure came first.
fn write_gathered(inner: &Inner, bytes: &mut Vec<u8>) {
    if !bytes.is_empty() && failed(inner).is_none() {
        match crate::util::append_whole(&lock(&inner.file), bytes) {
            Ok(()) => {
                inner
                    .written
                    .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Release);
            }
            Err(e) => fail(inner, &e),
        }
    }
    bytes.clear();
}

fn failed(inner: &Inner) -> Option<LogError> {
    lock(&inner.state).failed.clone()
}

/// Keeps the first failure.
fn fail(inner: &Inner, e: &std::io::Error) {
    let mut st = lock(&inner.state);
    if st.failed.is_none() {
        st.failed = Some(LogError::io(&inner.path, e));
    }
}

#[cfg(test)]
mod tests;
