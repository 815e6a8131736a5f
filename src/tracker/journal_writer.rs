//! The journal's handle, which the router holds. Every change (an accepted event, its
//! work starting, its work done) is handed to the journal's log under one lock; an
//! accepted event is answered once the log's job says it is durable. Every accept
//! waiting when the job takes its batch shares one fsync (group commit), and nothing
//! here waits for the disk on the runtime's threads: the log's job does the writing,
//! and a compaction (a rewrite from memory) is one more of its operations.

use std::io;
use std::sync::{Arc, Mutex};

use super::journal::{Journal, Pending};
use super::types::Arrival;
use crate::util::lock;

pub(crate) struct JournalWriter {
    journal: Arc<Mutex<Journal>>,
}

impl JournalWriter {
    pub(crate) fn start(journal: Journal) -> io::Result<JournalWriter> {
        Ok(JournalWriter {
            journal: Arc::new(Mutex::new(journal)),
        })
    }

    /// Journals an event. `Ok(true)` once it is on disk, `Ok(false)` when its id was
    /// accepted before (and that first copy is on disk). Appends are bounded by the
    /// log (`store::log::MAX_PENDING`) and by the requests in flight.
    pub(crate) async fn accept(&self, event: Arrival) -> io::Result<bool> {
        let (new, synced) = {
            let mut j = lock(&self.journal);
            let new = j.accept_unsynced(&event)?;
            // A duplicate is answered after the sync too: its first copy may still be
            // on its way to the disk.
            (new, j.sync())
        };
        match synced.await {
            Ok(()) => Ok(new),
            Err(e) => {
                if new {
                    // Not durable: a redelivery must be taken, not called a duplicate.
                    lock(&self.journal).forget(&event.id);
                }
                Err(e.into())
            }
        }
    }

    /// Notes that work for the event starts; which attempt this is (1 when it cannot be
    /// recorded).
    pub(crate) async fn started(&self, id: &str) -> u32 {
        lock(&self.journal).started(id).unwrap_or_else(|e| {
            tracing::error!(id, "cannot record a started event: {e}");
            1
        })
    }

    /// The event's work is over; handed to the log, not synced (see `Journal::done`).
    /// Only a crash before the log's job writes it loses it: the event then runs once
    /// more. A graceful stop flushes.
    pub(crate) fn done(&self, id: &str) {
        if let Err(e) = lock(&self.journal).done(id) {
            tracing::error!(id, "cannot record a finished event: {e}");
        }
    }

    /// Ends the journal's log once everything handed over is durable (the daemon's last
    /// step: nothing is joined in a `Drop`).
    pub(crate) async fn close(&self) {
        let log = lock(&self.journal).log_handle();
        if let Err(e) = log.close().await {
            tracing::error!("the journal is not all on disk: {e}");
        }
    }

    /// Whether the id was accepted and is on disk.
    pub(crate) async fn is_seen(&self, id: &str) -> bool {
        let synced = {
            let j = lock(&self.journal);
            if !j.is_seen(id) {
                return false;
            }
            j.sync()
        };
        synced.await.is_ok() && lock(&self.journal).is_seen(id)
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
        writer.close().await;
        drop(Arc::into_inner(writer).unwrap());
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.pending().len(), 16 * 24);
        let shared = j.pending().into_iter().find(|p| p.arrival.id == "shared");
        assert_eq!(shared.map(|p| p.attempts), Some(1));
        assert!(j.is_seen("e0-1"), "a done id is still remembered");
    }
}
