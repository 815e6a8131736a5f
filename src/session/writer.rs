//! A session file's one writer: the store's log (`store::log`) over the file, with
//! the session's lock. `Session::append` hands each line over; the log's job on the
//! blocking pool writes what was handed over, in order, so a slow or full disk never
//! holds an async runtime thread, and a job runs only while there is work, so 200
//! open sessions do not keep 200 threads. The hand-over is bounded (the log's
//! `MAX_PENDING` bytes not yet written); `sync` makes it durable; the first failed
//! write is kept and given to every later append and sync, so both engines see a
//! failure the same way.
//!
//! `close` waits until everything handed over is written, then lets the session lock
//! go. A writer dropped without `close` waits for nothing: the lock goes to the log,
//! which lets it go once the lines before it are in the file, so the next writer of
//! the session, which loads the file under the lock, never misses a line.

use std::fs::File;
use std::path::PathBuf;

use super::lock::SessionLock;
use super::SessionError;
use crate::store::log::{Log, LogError};

pub(super) struct Writer {
    log: Log,
    path: PathBuf,
    /// Held until the file has every line handed over.
    lock: Option<SessionLock>,
    /// The file's length when the writer started (what the log wrote comes after).
    base: u64,
}

impl Writer {
    /// The writer of `file` (opened for appending), under the session's lock. What
    /// opening wrote (a new header, a repaired last line) is made durable by the
    /// first `sync`.
    pub(super) fn start(file: File, path: PathBuf, lock: SessionLock, base: u64) -> Writer {
        Writer {
            log: Log::with_file(&path, file),
            path,
            lock: Some(lock),
            base,
        }
    }

    fn error(&self, e: LogError) -> SessionError {
        SessionError::Io {
            path: self.path.clone(),
            source: e.bare(),
        }
    }

    /// Hands a line over; never waits for the disk.
    pub(super) fn append(&self, line: &[u8]) -> Result<(), SessionError> {
        self.log.append(line).map_err(|e| self.error(e))
    }

    /// Waits until everything handed over so far is durable.
    pub(super) async fn sync(&self) -> Result<(), SessionError> {
        self.log.sync().await.map_err(|e| self.error(e))
    }

    /// Waits until everything handed over so far is in the file.
    pub(super) async fn written(&self) -> Result<(), SessionError> {
        self.log.written().await.map_err(|e| self.error(e))
    }

    /// Whether the file's first `end` bytes are written, blocking only when they are
    /// not yet (for reading a line back); false if they never will be.
    pub(super) fn written_up_to(&self, end: u64) -> bool {
        let done = || self.base + self.log.bytes_written() >= end;
        done() || {
            let _ = self.log.wait_written();
            done()
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            self.log.when_written(move |_| drop(lock));
        }
    }
}

/// Ends a writer once everything handed over is written (and synced), then lets the
/// session lock go; the failure of a write that was still pending is returned.
pub(super) async fn close(mut writer: Writer) -> Result<(), SessionError> {
    let closed = writer.log.close().await.map_err(|e| writer.error(e));
    drop(writer.lock.take());
    closed
}
