//! A session file's one writer. `Session::append` hands each line over, and a job on
//! the blocking pool writes what was handed over, in order, so a slow or full disk
//! never holds an async runtime thread. The job runs only while there is work (at
//! most one per session, so lines stay in order), so 200 open sessions do not keep
//! 200 threads. The hand-over is bounded (`MAX_PENDING` bytes not yet written); `sync`
//! waits for what was handed over and makes it durable; the first failed write is kept
//! and given to every later append and sync, so both engines see a failure the same way.
//!
//! `close` (or, as a last resort, dropping the session) waits until everything handed
//! over is written, so the next writer of the session, which loads the file under the
//! session lock, never misses a line.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::SessionError;

/// At most this many bytes wait for the disk; an append past it fails (the run stops
/// with a session error) instead of growing without bound. Every step syncs, so a run
/// has at most a step's entries pending.
const MAX_PENDING: usize = 64 << 20;

pub(super) struct Writer {
    shared: Arc<Shared>,
    path: PathBuf,
}

struct Shared {
    /// Written only by the session's one job at a time.
    file: File,
    state: Mutex<State>,
    /// Blocking callers wait here for progress (`written`, `synced`, idle, a failure).
    progress: Condvar,
    /// Async callers wait here for the same.
    moved: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    pending: Vec<u8>,
    /// The file's length once everything handed over is written.
    queued: u64,
    /// The file's length written so far.
    written: u64,
    /// Of that, the length made durable.
    synced: u64,
    /// A sync is asked for, up to this many bytes.
    sync_to: u64,
    failed: Option<(std::io::ErrorKind, String)>,
    /// A job is writing, or about to.
    busy: bool,
    /// The job started (a job the pool never starts, as at a runtime's shutdown, is
    /// done by `finish` instead).
    claimed: bool,
}

impl State {
    fn has_work(&self) -> bool {
        self.failed.is_none() && (!self.pending.is_empty() || self.sync_to > self.synced)
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// The writer of `file` (opened for appending), whose first `size` bytes are
    /// already written.
    pub(super) fn start(file: File, path: PathBuf, size: u64) -> Result<Writer, SessionError> {
        // Not yet durable: the first `sync` also syncs what opening wrote (a new
        // header, a repaired last line).
        let state = State {
            queued: size,
            written: size,
            ..State::default()
        };
        Ok(Writer {
            shared: Arc::new(Shared {
                file,
                state: Mutex::new(state),
                progress: Condvar::new(),
                moved: tokio::sync::Notify::new(),
            }),
            path,
        })
    }

    fn failure(&self, st: &State) -> Option<SessionError> {
        st.failed.as_ref().map(|(kind, msg)| SessionError::Io {
            path: self.path.clone(),
            source: std::io::Error::new(*kind, msg.clone()),
        })
    }

    /// Hands a line over; never waits for the disk.
    pub(super) fn append(&self, line: &[u8]) -> Result<(), SessionError> {
        let mut st = lock(&self.shared);
        if let Some(e) = self.failure(&st) {
            return Err(e);
        }
        if st.pending.len() + line.len() > MAX_PENDING {
            return Err(SessionError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(format!(
                    "an entry of {} KiB does not fit: {} KiB are still waiting for the disk (at most {} MiB may)",
                    line.len() >> 10,
                    st.pending.len() >> 10,
                    MAX_PENDING >> 20
                )),
            });
        }
        st.pending.extend_from_slice(line);
        st.queued += line.len() as u64;
        kick(&self.shared, st);
        Ok(())
    }

    /// Waits until everything handed over so far is durable.
    pub(super) async fn sync(&self) -> Result<(), SessionError> {
        let target = {
            let mut st = lock(&self.shared);
            st.sync_to = st.sync_to.max(st.queued);
            let target = st.queued;
            kick(&self.shared, st);
            target
        };
        self.wait_for(|st| st.synced >= target).await
    }

    /// Waits until everything handed over so far is in the file.
    pub(super) async fn written(&self) -> Result<(), SessionError> {
        let end = lock(&self.shared).queued;
        self.wait_for(|st| st.written >= end).await
    }

    /// Waits (without holding a thread) until `reached` holds or a write failed; the
    /// failure, if any.
    async fn wait_for(&self, reached: impl Fn(&State) -> bool) -> Result<(), SessionError> {
        loop {
            let moved = self.shared.moved.notified();
            {
                let st = lock(&self.shared);
                if let Some(e) = self.failure(&st) {
                    return Err(e);
                }
                if reached(&st) {
                    return Ok(());
                }
            }
            moved.await;
        }
    }

    /// Blocks until the bytes before `end` are in the file (for reading a line back);
    /// false if they never will be.
    pub(super) fn written_up_to(&self, end: u64) -> bool {
        self.wait_blocking(|st| st.written >= end || st.failed.is_some());
        lock(&self.shared).written >= end
    }

    /// Blocks until no job is writing and nothing waits (or a write failed).
    fn finish(&self) {
        self.wait_blocking(|st| !st.busy && !st.has_work());
    }

    /// Blocks until `done` holds, doing the writing itself when no job is doing it: a
    /// job the pool never started (a runtime shutting down) must not leave a caller
    /// waiting forever.
    fn wait_blocking(&self, done: impl Fn(&State) -> bool) {
        let mut waited = 0;
        loop {
            let mut st = lock(&self.shared);
            if done(&st) {
                return;
            }
            let nobody = (!st.busy && st.has_work()) || (st.busy && !st.claimed && waited >= 10);
            if nobody {
                (st.busy, st.claimed) = (true, true);
                drop(st);
                write_all_waiting(&self.shared);
                continue;
            }
            let (guard, _) = self
                .shared
                .progress
                .wait_timeout(st, std::time::Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner());
            drop(guard);
            waited += 1;
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Ends a writer once everything handed over is written, waiting on a blocking thread
/// (never the caller's runtime thread); the failure of a write that was still pending
/// is returned.
pub(super) async fn close(writer: Writer) -> Result<(), SessionError> {
    let path = writer.path.clone();
    tokio::task::spawn_blocking(move || {
        writer.finish();
        let st = lock(&writer.shared);
        writer.failure(&st).map_or(Ok(()), Err)
    })
    .await
    .map_err(|e| SessionError::Io {
        path,
        source: std::io::Error::other(e),
    })?
}

/// Starts the session's job when there is work and none runs.
fn kick(shared: &Arc<Shared>, mut st: MutexGuard<'_, State>) {
    if st.busy || !st.has_work() {
        return;
    }
    (st.busy, st.claimed) = (true, false);
    drop(st);
    let me = shared.clone();
    let job = move || {
        let mut st = lock(&me);
        if st.claimed {
            return;
        }
        st.claimed = true;
        drop(st);
        write_all_waiting(&me);
    };
    // On the runtime's blocking pool; a caller outside any runtime (a command-line
    // export, a unit test) gets a short-lived thread of its own.
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(job)),
        Err(_) => {
            let me = shared.clone();
            if std::thread::Builder::new()
                .name("session-writer".into())
                .spawn(job)
                .is_err()
            {
                fail(&me, std::io::Error::other("no thread to write the session"));
            }
        }
    }
}

/// Writes (and syncs, when asked) until nothing waits, then lets the session go.
fn write_all_waiting(shared: &Shared) {
    loop {
        let (bytes, want_sync) = {
            let mut st = lock(shared);
            if !st.has_work() {
                st.busy = false;
                drop(st);
                tell(shared);
                return;
            }
            let want_sync = st.sync_to > st.synced;
            (std::mem::take(&mut st.pending), want_sync)
        };
        let done = (&shared.file)
            .write_all(&bytes)
            .and_then(|()| match want_sync {
                true => shared.file.sync_data(),
                false => Ok(()),
            });
        match done {
            Ok(()) => {
                let mut st = lock(shared);
                st.written += bytes.len() as u64;
                if want_sync {
                    // sync_data covers every byte written before it.
                    st.synced = st.written;
                }
            }
            Err(e) => fail(shared, e),
        }
        tell(shared);
    }
}

/// Keeps the first failure; later appends and syncs return it.
fn fail(shared: &Shared, e: std::io::Error) {
    let mut st = lock(shared);
    if st.failed.is_none() {
        st.failed = Some((e.kind(), e.to_string()));
    }
    st.busy = false;
    drop(st);
    tell(shared);
}

fn tell(shared: &Shared) {
    shared.progress.notify_all();
    shared.moved.notify_waiters();
}
