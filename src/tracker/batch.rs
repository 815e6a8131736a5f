//! A thread that does a file's writes in batches, for the journal and the outbox: the
//! async side hands it jobs; it takes every job waiting (up to a limit) and commits
//! them together, so callers that arrive while a sync runs share the next one. Its
//! owner closes the queue and waits for the batch in hand when dropped.

use std::io;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};

enum Msg<J> {
    Job(J),
    /// Answered once every job sent before it is committed.
    Flush(oneshot::Sender<()>),
}

pub(crate) struct BatchThread<J> {
    /// Unbounded, yet bounded by its senders (each user says how).
    tx: Option<mpsc::UnboundedSender<Msg<J>>>,
    thread: Option<JoinHandle<()>>,
}

impl<J: Send + 'static> BatchThread<J> {
    /// Starts the thread; `commit` gets each batch, in arrival order, and must empty it.
    pub(crate) fn start(
        name: &str,
        max_batch: usize,
        mut commit: impl FnMut(&mut Vec<J>) + Send + 'static,
    ) -> io::Result<BatchThread<J>> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg<J>>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let (mut batch, mut flushes) = (Vec::new(), Vec::new());
                while let Some(msg) = rx.blocking_recv() {
                    take(msg, &mut batch, &mut flushes);
                    while batch.len() < max_batch {
                        match rx.try_recv() {
                            Ok(msg) => take(msg, &mut batch, &mut flushes),
                            Err(_) => break,
                        }
                    }
                    if !batch.is_empty() {
                        commit(&mut batch);
                        batch.clear();
                    }
                    for reply in flushes.drain(..) {
                        let _ = reply.send(());
                    }
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
            .and_then(|tx| tx.send(Msg::Job(job)).ok())
            .ok_or_else(stopped)
    }

    /// Returns once every job sent before is committed (at shutdown: nothing queued
    /// is left for a process exit to cut off).
    pub(crate) async fn flush(&self) {
        let (reply, answer) = oneshot::channel();
        if self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send(Msg::Flush(reply)).is_ok())
        {
            let _ = answer.await;
        }
    }
}

fn take<J>(msg: Msg<J>, batch: &mut Vec<J>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match msg {
        Msg::Job(job) => batch.push(job),
        Msg::Flush(reply) => flushes.push(reply),
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
