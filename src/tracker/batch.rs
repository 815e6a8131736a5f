//! A thread that does a file's writes in batches, for the journal and the outbox: the
//! async side hands it jobs; it takes every job waiting (up to a limit) and commits
//! them together, so callers that arrive while a sync runs share the next one. Its
//! owner closes the queue and waits for the batch in hand when dropped.

use std::io;
use std::thread::JoinHandle;

use tokio::sync::mpsc;

pub(crate) struct BatchThread<J> {
    /// Unbounded, yet bounded by its senders (each user says how).
    tx: Option<mpsc::UnboundedSender<J>>,
    thread: Option<JoinHandle<()>>,
}

impl<J: Send + 'static> BatchThread<J> {
    /// Starts the thread; `commit` gets each batch, in arrival order, and must empty it.
    pub(crate) fn start(
        name: &str,
        max_batch: usize,
        mut commit: impl FnMut(&mut Vec<J>) + Send + 'static,
    ) -> io::Result<BatchThread<J>> {
        let (tx, mut rx) = mpsc::unbounded_channel::<J>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut batch = Vec::new();
                while let Some(job) = rx.blocking_recv() {
                    batch.push(job);
                    while batch.len() < max_batch {
                        match rx.try_recv() {
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                    commit(&mut batch);
                    batch.clear();
                }
            })?;
        Ok(BatchThread {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    pub(crate) fn send(&self, job: J) -> io::Result<()> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(job).ok())
            .ok_or_else(stopped)
    }
}

/// The error for a job whose thread has gone.
pub(crate) fn stopped() -> io::Error {
    io::Error::other("the writer thread has stopped")
}

impl<J> Drop for BatchThread<J> {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the batch in hand (at most one sync);
        // waiting for it means no write is cut off by the process exiting.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
