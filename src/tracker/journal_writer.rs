//! The journal's one writer thread. Every change to the journal (an accepted event,
//! its work starting, its work done) is handed to this thread, which takes all that is
//! waiting, writes it, and syncs once for every accepted event among it before
//! answering any of them: group commit without a thread per waiter.
//!
//! Measured under 50 concurrent senders (issue 18 §5): the previous design woke every
//! waiting blocking thread after each sync (~12 context switches per event, and about
//! one sync per event); here one wake-up hands a whole batch to the thread and one
//! reply answers each sender. Compaction, which rewrites and syncs the file, also runs
//! here, never on the async runtime's threads.

use std::io;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::batch::{stopped, BatchThread};
use super::journal::{Journal, Pending};
use super::types::Arrival;
use crate::util::lock;

/// Most jobs taken in one batch (one sync).
const MAX_BATCH: usize = 512;

enum Job {
    Accept {
        event: Arrival,
        reply: oneshot::Sender<io::Result<bool>>,
    },
    Started {
        id: String,
        reply: oneshot::Sender<u32>,
    },
    Done {
        id: String,
    },
    /// Whether the id was accepted, answered after the batch's sync: never "seen" for
    /// a record that is not on disk yet (and may be forgotten if its sync fails).
    Seen {
        id: String,
        reply: oneshot::Sender<bool>,
    },
}

pub(crate) struct JournalWriter {
    journal: Arc<Mutex<Journal>>,
    /// Accepts are bounded by the requests in flight (the `/events` limit, one at a
    /// time per WebSocket), starts and dones by the events already accepted.
    thread: BatchThread<Job>,
}

impl JournalWriter {
    pub(crate) fn start(journal: Journal) -> io::Result<JournalWriter> {
        let journal = Arc::new(Mutex::new(journal));
        let for_thread = journal.clone();
        let thread = BatchThread::start("picogent-journal", MAX_BATCH, move |batch| {
            commit(&for_thread, batch)
        })?;
        Ok(JournalWriter { journal, thread })
    }

    /// Journals an event. `Ok(true)` once it is on disk, `Ok(false)` when its id was
    /// accepted before (and that first copy is on disk).
    pub(crate) async fn accept(&self, event: Arrival) -> io::Result<bool> {
        let (reply, answer) = oneshot::channel();
        self.thread.send(Job::Accept { event, reply })?;
        answer.await.map_err(|_| stopped())?
    }

    /// Notes that work for the event starts; which attempt this is (1 when it cannot be
    /// recorded).
    pub(crate) async fn started(&self, id: &str) -> u32 {
        let (reply, answer) = oneshot::channel();
        if self
            .thread
            .send(Job::Started {
                id: id.into(),
                reply,
            })
            .is_err()
        {
            return 1;
        }
        answer.await.unwrap_or(1)
    }

    /// The event's work is over; written in the background, not synced (see
    /// `Journal::done`). Only a crash while it waits for the thread (at most one
    /// batch) loses it: the event then runs once more. A graceful stop flushes.
    pub(crate) fn done(&self, id: &str) {
        if let Err(e) = self.thread.send(Job::Done { id: id.into() }) {
            tracing::error!(id, "cannot record a finished event: {e}");
        }
    }

    /// Returns once everything sent before is written (at shutdown: no finished event
    /// is left unrecorded, to run again at the next start).
    pub(crate) async fn flush(&self) {
        self.thread.flush().await;
    }

    /// Whether the id was accepted and is on disk.
    pub(crate) async fn is_seen(&self, id: &str) -> bool {
        let (reply, answer) = oneshot::channel();
        if self
            .thread
            .send(Job::Seen {
                id: id.into(),
                reply,
            })
            .is_err()
        {
            return false;
        }
        answer.await.unwrap_or(false)
    }

    /// Asks whether an event's work is still to finish (the outbox keeps the event's
    /// conclusion while it is, see `Outbox::keep_concluded_while`).
    pub(crate) fn pending_check(&self) -> super::outbox::PendingCheck {
        let journal = self.journal.clone();
        Arc::new(move |id: &str| lock(&journal).is_pending(id))
    }

    pub(crate) fn pending(&self) -> Vec<Pending> {
        lock(&self.journal).pending()
    }
}

/// Writes a batch in order, syncs once if it accepted anything, then answers.
fn commit(journal: &Mutex<Journal>, batch: &mut Vec<Job>) {
    let mut accepted: Vec<(oneshot::Sender<io::Result<bool>>, String, io::Result<bool>)> =
        Vec::new();
    let mut checks: Vec<(oneshot::Sender<bool>, String)> = Vec::new();
    let file = {
        let mut j = lock(journal);
        for job in batch.drain(..) {
            match job {
                Job::Accept { event, reply } => {
                    let new = j.accept_unsynced(&event);
                    accepted.push((reply, event.id, new));
                }
                Job::Started { id, reply } => {
                    let attempt = j.started(&id).unwrap_or_else(|e| {
                        tracing::error!(id, "cannot record a started event: {e}");
                        1
                    });
                    let _ = reply.send(attempt);
                }
                Job::Done { id } => {
                    if let Err(e) = j.done(&id) {
                        tracing::error!(id, "cannot record a finished event: {e}");
                    }
                }
                Job::Seen { id, reply } => checks.push((reply, id)),
            }
        }
        // After any compaction above: the file that now holds every write.
        j.file()
    };
    // Duplicates are answered after the sync too: their first copy may be in this batch.
    let synced = if accepted.is_empty() {
        Ok(())
    } else {
        file.sync_data()
    };
    match synced {
        Ok(()) => {
            for (reply, _, new) in accepted {
                let _ = reply.send(new);
            }
        }
        Err(e) => {
            let mut j = lock(journal);
            for (reply, id, new) in accepted {
                if matches!(new, Ok(true)) {
                    j.forget(&id);
                }
                let _ = reply.send(Err(io::Error::new(e.kind(), e.to_string())));
            }
        }
    }
    if !checks.is_empty() {
        let j = lock(journal);
        for (reply, id) in checks {
            let _ = reply.send(j.is_seen(&id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::journal::tests::arrival;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_accepts_are_answered_once_on_disk_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Arc::new(JournalWriter::start(Journal::open(dir.path()).unwrap()).unwrap());
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let w = writer.clone();
                tokio::spawn(async move {
                    let mut new = 0;
                    for i in 0..25 {
                        // Every sender also repeats one shared id: exactly one is new.
                        let id = if i == 0 {
                            "shared".to_string()
                        } else {
                            format!("e{t}-{i}")
                        };
                        new += usize::from(w.accept(arrival(&id)).await.unwrap());
                    }
                    new
                })
            })
            .collect();
        let mut new = 0;
        for t in tasks {
            new += t.await.unwrap();
        }
        assert_eq!(new, 16 * 24 + 1);
        assert_eq!(writer.started("shared").await, 1);
        writer.done("e0-1");
        drop(Arc::into_inner(writer).unwrap());
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.pending().len(), 16 * 24);
        let shared = j.pending().into_iter().find(|p| p.arrival.id == "shared");
        assert_eq!(shared.map(|p| p.attempts), Some(1));
        assert!(j.is_seen("e0-1"), "a done id is still remembered");
    }
}
