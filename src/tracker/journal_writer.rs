//! The journal's handle, which the router holds. Every change (an accepted event, its
//! work starting, its work done) is handed to the journal's log under one lock; an
//! accepted event is answered once the log's job says it is durable. Every accept
//! waiting when the job takes its batch shares one fsync (group commit), and nothing
//! here waits for the disk on the runtime's threads: the log's job does the writing,
//! and a compaction (a rewrite from memory) is one more of its operations.
//!
//! In a fleet the journal is the store's (`store::pg`): an accept is committed there
//! before it is answered, and an event is marked done under the worker's lease on its
//! task, tried again while the store is away (owned tasks, waited for at `close`).

use std::io;
use std::sync::{Arc, Mutex};

use super::journal::{Journal, Pending};
use super::types::{Arrival, TaskId};
use crate::store::pg::{Pg, StoreError};
use crate::util::lock;

pub(crate) struct JournalWriter {
    journal: Arc<Mutex<Journal>>,
    /// The fleet's store, when there is one: then it is the journal.
    fleet: Option<Fleet>,
}

struct Fleet {
    pg: Arc<Pg>,
    /// The `done` marks on their way to the store.
    marks: tokio_util::task::TaskTracker,
}

impl JournalWriter {
    pub(crate) fn start(journal: Journal) -> io::Result<JournalWriter> {
        Ok(JournalWriter {
            journal: Arc::new(Mutex::new(journal)),
            fleet: None,
        })
    }

    /// The fleet's journal, in its store. (`journal` stays empty: nothing is read or
    /// written there.)
    pub(crate) fn into_fleet(self, pg: Arc<Pg>) -> JournalWriter {
        JournalWriter {
            journal: self.journal,
            fleet: Some(Fleet {
                pg,
                marks: tokio_util::task::TaskTracker::new(),
            }),
        }
    }

    pub(crate) fn store(&self) -> Option<&Arc<Pg>> {
        self.fleet.as_ref().map(|f| &f.pg)
    }

    /// Journals an event. `Ok(true)` once it is on disk, `Ok(false)` when its id was
    /// accepted before (and that first copy is on disk). Appends are bounded by the
    /// log (`store::log::MAX_PENDING`) and by the requests in flight.
    pub(crate) async fn accept(&self, event: Arrival) -> io::Result<bool> {
        if let Some(f) = &self.fleet {
            return f.pg.accept(&event).await.map_err(io::Error::other);
        }
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
        if let Some(f) = &self.fleet {
            return f.pg.started(id).await.unwrap_or_else(|e| {
                tracing::error!(id, "cannot record a started event: {e}");
                1
            });
        }
        lock(&self.journal).started(id).unwrap_or_else(|e| {
            tracing::error!(id, "cannot record a started event: {e}");
            1
        })
    }

    /// The event's work is over; handed to the log, not synced (see `Journal::done`).
    /// Only a crash before the log's job writes it loses it: the event then runs once
    /// more. A graceful stop flushes.
    pub(crate) fn done(&self, id: &str, task: &TaskId) {
        if let Some(f) = &self.fleet {
            let (pg, id, task) = (f.pg.clone(), id.to_string(), task.clone());
            f.marks
                .spawn(async move { mark_done(&pg, &id, &task).await });
            return;
        }
        if let Err(e) = lock(&self.journal).done(id) {
            tracing::error!(id, "cannot record a finished event: {e}");
        }
    }

    /// Ends the journal's log once everything handed over is durable (the daemon's last
    /// step: nothing is joined in a `Drop`).
    pub(crate) async fn close(&self) {
        if let Some(f) = &self.fleet {
            f.marks.close();
            let waited = tokio::time::timeout(std::time::Duration::from_secs(5), f.marks.wait());
            if waited.await.is_err() {
                tracing::warn!("events not yet marked done at the end: they run again");
            }
        }
        let log = lock(&self.journal).log_handle();
        if let Err(e) = log.close().await {
            tracing::error!("the journal is not all on disk: {e}");
        }
    }

    /// Whether the id was accepted and is on disk.
    pub(crate) async fn is_seen(&self, id: &str) -> bool {
        if let Some(f) = &self.fleet {
            return f.pg.is_seen(id).await.unwrap_or(false);
        }
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

/// Marks a fleet's event done, trying again while the store is away (about 40 s; an
/// event left undone is worked again by whoever holds its task next, its start
/// counted).
async fn mark_done(pg: &Pg, id: &str, task: &TaskId) {
    let mut delay = std::time::Duration::from_millis(200);
    for _ in 0..12 {
        match pg.done(id, task).await {
            Ok(()) => return,
            Err(StoreError::LeaseLost(_)) => {
                tracing::info!(id, task = %task, "not marked done: the task is another worker's now");
                return;
            }
            Err(e) => tracing::warn!(id, "cannot mark an event done yet: {e}"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(5));
    }
    tracing::error!(id, "an event could not be marked done: it runs again");
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
        writer.done("e0-1", &crate::tracker::types::TaskId::new("t").unwrap());
        writer.close().await;
        drop(Arc::into_inner(writer).unwrap());
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.pending().len(), 16 * 24);
        let shared = j.pending().into_iter().find(|p| p.arrival.id == "shared");
        assert_eq!(shared.map(|p| p.attempts), Some(1));
        assert!(j.is_seen("e0-1"), "a done id is still remembered");
    }
}
