//! A session file's one writer. `Session::append` hands each line to a thread that owns
//! the file's writes, so a slow or full disk never holds an async runtime thread; the
//! hand-over is bounded (`MAX_PENDING` bytes not yet written), `sync` waits for what
//! was handed over and makes it durable, and the first failed write is kept and given
//! to every later append and sync, so both engines see a failure the same way.
//!
//! The thread is the session's: `close` (or, as a last resort, dropping the session)
//! waits until everything handed over is written, so the next writer of the session,
//! which loads the file under the session lock, never misses a line.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::SessionError;

/// At most this many bytes wait for the disk; an append past it fails (the run stops
/// with a session error) instead of growing without bound. Every step syncs, so a run
/// has at most a step's entries pending.
const MAX_PENDING: usize = 64 << 20;

pub(super) struct Writer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// The thread waits here for work.
    work: Condvar,
    /// Callers wait here for progress (`written`, `synced`, a failure).
    progress: Condvar,
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
    closing: bool,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// Starts the writer of `file` (opened for appending), whose first `size` bytes
    /// are already written.
    pub(super) fn start(file: File, path: PathBuf, size: u64) -> Result<Writer, SessionError> {
        let shared = Arc::new(Shared::default());
        {
            let mut st = lock(&shared);
            (st.queued, st.written, st.synced) = (size, size, size);
        }
        let me = shared.clone();
        let thread = std::thread::Builder::new()
            .name("session-writer".into())
            .spawn(move || write_loop(file, &me))
            .map_err(|source| SessionError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(Writer {
            shared,
            thread: Some(thread),
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
        drop(st);
        self.shared.work.notify_one();
        Ok(())
    }

    /// Waits (on a blocking thread) until everything handed over so far is durable.
    pub(super) async fn sync(&self) -> Result<(), SessionError> {
        let target = {
            let mut st = lock(&self.shared);
            st.sync_to = st.sync_to.max(st.queued);
            st.queued
        };
        self.shared.work.notify_one();
        self.wait_for(move |st| st.synced >= target).await
    }

    /// Waits (on a blocking thread) until everything handed over so far is in the file.
    pub(super) async fn written(&self) -> Result<(), SessionError> {
        let end = lock(&self.shared).queued;
        self.wait_for(move |st| st.written >= end).await
    }

    /// Waits on a blocking thread until `reached` holds or a write failed; the
    /// failure, if any.
    async fn wait_for(
        &self,
        reached: impl Fn(&State) -> bool + Send + 'static,
    ) -> Result<(), SessionError> {
        let shared = self.shared.clone();
        let waited = tokio::task::spawn_blocking(move || {
            let mut st = lock(&shared);
            while !reached(&st) && st.failed.is_none() {
                st = shared.progress.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        })
        .await;
        let st = lock(&self.shared);
        match (self.failure(&st), waited) {
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(SessionError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(e),
            }),
            (None, Ok(())) => Ok(()),
        }
    }

    /// Blocks until the bytes before `end` are in the file (for reading a line back);
    /// false if they never will be.
    pub(super) fn written_up_to(&self, end: u64) -> bool {
        let mut st = lock(&self.shared);
        while st.written < end && st.failed.is_none() {
            st = self
                .shared
                .progress
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        st.written >= end
    }

    /// Writes what is pending and ends the thread. Blocking: call it off the runtime
    /// (`Session::close`), or let `Drop` do it.
    fn finish(&mut self) {
        lock(&self.shared).closing = true;
        self.shared.work.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Closes a writer on a blocking thread, so the caller's runtime thread never waits for
/// the disk; the failure of a write that was still pending is returned.
pub(super) async fn close(mut writer: Writer) -> Result<(), SessionError> {
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

fn write_loop(mut file: File, shared: &Shared) {
    loop {
        let (bytes, want_sync, closing) = {
            let mut st = lock(shared);
            while st.pending.is_empty() && st.sync_to <= st.synced && !st.closing {
                st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.failed.is_some() {
                return;
            }
            let want_sync = st.sync_to > st.synced;
            (std::mem::take(&mut st.pending), want_sync, st.closing)
        };
        let wrote = file.write_all(&bytes);
        let synced = match wrote {
            Ok(()) if want_sync => file.sync_data(),
            other => other,
        };
        let mut st = lock(shared);
        match synced {
            Ok(()) => {
                st.written += bytes.len() as u64;
                if want_sync {
                    // sync_data covers every byte written before it.
                    st.synced = st.written;
                }
            }
            Err(e) => st.failed = Some((e.kind(), e.to_string())),
        }
        let stop = st.failed.is_some() || (closing && st.pending.is_empty());
        drop(st);
        shared.progress.notify_all();
        if stop {
            return;
        }
    }
}
