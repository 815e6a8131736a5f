//! The outbox in local files (the default store): `state/outbox.jsonl`, written
//! through the store's one log (`store::log`). Reports queued together share one sync
//! (group commit) on the log's job, and a delivery's record and a compaction (a rewrite
//! from memory) are operations of that job too, never writes on the async runtime's
//! threads. Reports the tracker refused for good go to the dead-letter file.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};

use super::{Item, PendingCheck};
use crate::store::log::{self, Log};
use crate::tracker::dead_letter::DeadLetters;
use crate::tracker::types::{Report, TaskId};
use crate::util::lock;

/// Records written before the file is compacted, at least (see `commit`).
const COMPACT_EVERY: usize = 1000;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
enum Record {
    Add {
        seq: u64,
        key: String,
        /// Read as text: a line from before task ids were checked, whose id is no
        /// usable one, goes to the dead letters instead of failing to parse.
        task_id: String,
        report: Report,
    },
    Sent {
        seq: u64,
    },
    /// The reports queued with it conclude this event: written in the same append as
    /// those reports, so a task whose result is queued is never worked again, even
    /// when the journal's `done` was lost (the journal asks here at replay).
    Concluded {
        event: String,
        at: i64,
    },
}

/// How long an event's conclusion is remembered once the journal no longer has the
/// event pending (see `Outbox::concluded`).
pub(super) const REMEMBER_MS: i64 = 7 * 24 * 3600 * 1000;

pub(super) struct State {
    pub(super) log: Log,
    /// Queued and durable: what is delivered.
    pub(super) items: VecDeque<Item>,
    /// Written, not yet durable: delivered once the log says they are, and part of
    /// every compaction meanwhile (the rewrite supersedes their own write).
    unsynced: Vec<Item>,
    unsynced_concludes: Vec<String>,
    /// Events whose concluding reports were queued (id → when), kept across
    /// compactions for `REMEMBER_MS`.
    concluded: std::collections::HashMap<String, i64>,
    /// Until it is set (at open, before the journal was asked), no conclusion is
    /// forgotten; then only those of events the journal no longer has pending.
    pending: Option<PendingCheck>,
    next_seq: u64,
    appended: usize,
}

impl State {
    /// Records a delivery. Not synced: a lost `sent` record (power loss only) means one
    /// repeat, which the idempotency key covers.
    fn append_sent(&mut self, seq: u64) -> io::Result<()> {
        let mut line = Vec::new();
        crate::util::push_json_line(&mut line, &Record::Sent { seq })?;
        self.append(&line)?;
        self.appended += 1;
        self.maybe_compact();
        Ok(())
    }

    /// Hands bytes to the log. After a failure the log refuses every append until a
    /// compaction rewrites the file from memory (dropping torn lines, and reports whose
    /// write failed): that is tried first.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.log.failed().is_some() {
            self.compact()?;
        }
        Ok(self.log.append(bytes)?)
    }

    /// Compacts once the file holds twice what it must: proportional to what it
    /// rewrites, since a rewrite every 1,000 records made a long backlog (a slow
    /// tracker) cost its square.
    fn maybe_compact(&mut self) {
        let kept = self.items.len() + self.unsynced.len() + self.concluded.len();
        if self.appended >= COMPACT_EVERY.max(2 * kept) {
            if let Err(e) = self.compact() {
                tracing::error!("cannot compact {}: {e}", self.log.path().display());
            }
        }
    }

    /// Writes reports, and the event they conclude, in one append (not synced); the
    /// items to deliver once they are synced (kept in `unsynced` meanwhile).
    fn write_adds(
        &mut self,
        task_id: &TaskId,
        reports: Vec<Report>,
        concludes: &[String],
    ) -> io::Result<Vec<Item>> {
        let mut items = Vec::with_capacity(reports.len());
        let mut bytes = Vec::new();
        for (n, report) in reports.into_iter().enumerate() {
            let seq = self.next_seq.saturating_add(n as u64);
            let key = format!(
                "picogent-{}-{seq}-{}",
                crate::util::now_millis(),
                crate::util::random_hex(6)
            );
            let rec = Record::Add {
                seq,
                key: key.clone(),
                task_id: task_id.as_str().to_string(),
                report: report.clone(),
            };
            crate::util::push_json_line(&mut bytes, &rec)?;
            items.push(Item {
                seq,
                key,
                task_id: task_id.clone(),
                report,
            });
        }
        for event in concludes {
            let rec = Record::Concluded {
                event: event.clone(),
                at: crate::util::now_millis(),
            };
            crate::util::push_json_line(&mut bytes, &rec)?;
        }
        self.append(&bytes)?;
        self.appended += items.len() + concludes.len();
        self.next_seq = self.next_seq.saturating_add(items.len() as u64);
        self.unsynced.extend(items.iter().cloned());
        self.unsynced_concludes.extend(concludes.iter().cloned());
        Ok(items)
    }

    /// The log says whether a push's write is durable: its reports join the queue, or
    /// leave the file at the next compaction. Whether any was queued.
    fn settle(&mut self, items: Vec<Item>, concludes: Vec<String>, durable: bool) -> bool {
        let seqs: HashSet<u64> = items.iter().map(|i| i.seq).collect();
        self.unsynced.retain(|i| !seqs.contains(&i.seq));
        for event in &concludes {
            if let Some(n) = self.unsynced_concludes.iter().position(|e| e == event) {
                self.unsynced_concludes.swap_remove(n);
            }
        }
        if !durable {
            return false;
        }
        let queued = !items.is_empty();
        self.items.extend(items);
        // In seq order: another push's reports may have settled first.
        self.items.make_contiguous().sort_by_key(|i| i.seq);
        for event in concludes {
            self.concluded.insert(event, crate::util::now_millis());
        }
        self.maybe_compact();
        queued
    }

    pub(super) fn compact(&mut self) -> io::Result<()> {
        // Age alone never drops one: a daemon down for weeks, or a clock set back to
        // 1970 meanwhile, still finds it at the next start.
        let cutoff = crate::util::now_millis() - REMEMBER_MS;
        let pending = self.pending.clone();
        self.concluded
            .retain(|event, at| *at >= cutoff || pending.as_ref().is_none_or(|p| p(event)));
        let buf = content(
            &self.concluded,
            &self.unsynced_concludes,
            self.items.iter().chain(&self.unsynced),
        )?;
        self.log.rewrite(buf)?;
        self.appended = 0;
        Ok(())
    }
}

/// What the file must hold: the conclusions remembered (and those on their way to the
/// disk), then the reports not yet delivered.
fn content<'a>(
    concluded: &std::collections::HashMap<String, i64>,
    unsynced_concludes: &[String],
    items: impl Iterator<Item = &'a Item>,
) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let now = crate::util::now_millis();
    let unsynced = unsynced_concludes.iter().map(|e| (e, &now));
    for (event, at) in concluded.iter().chain(unsynced) {
        let rec = Record::Concluded {
            event: event.clone(),
            at: *at,
        };
        crate::util::push_json_line(&mut buf, &rec)?;
    }
    for it in items {
        let rec = Record::Add {
            seq: it.seq,
            key: it.key.clone(),
            task_id: it.task_id.as_str().to_string(),
            report: it.report.clone(),
        };
        crate::util::push_json_line(&mut buf, &rec)?;
    }
    Ok(buf)
}

/// The queue and its file.
#[derive(Clone)]
pub(super) struct Files {
    state: Arc<Mutex<State>>,
    /// Where reports the tracker refused for good go.
    dead: Arc<DeadLetters>,
}

impl Files {
    pub(super) fn open(dir: &Path) -> io::Result<Files> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("outbox.jsonl");
        let mut items: Vec<Item> = Vec::new();
        let mut concluded = std::collections::HashMap::new();
        let mut next_seq = 1;
        let dead = DeadLetters::open(dir)?;
        {
            for (n, line) in log::read(&path)?.lines().enumerate() {
                match serde_json::from_str::<Record>(line) {
                    Ok(Record::Add {
                        seq,
                        key,
                        task_id,
                        report,
                    }) => {
                        next_seq = next_seq.max(seq.saturating_add(1));
                        match TaskId::new(task_id) {
                            Ok(task_id) => items.push(Item {
                                seq,
                                key,
                                task_id,
                                report,
                            }),
                            Err(e) => dead.keep_blocking(e.id(), &key, &report, &e.to_string())?,
                        }
                    }
                    Ok(Record::Sent { seq }) => items.retain(|i| i.seq != seq),
                    Ok(Record::Concluded { event, at }) => {
                        concluded.insert(event, at);
                    }
                    Err(e) => tracing::warn!("{}: line {} skipped: {e}", path.display(), n + 1),
                }
            }
        }
        items.sort_by_key(|i| i.seq);
        // The file starts as what is still needed, written durably before any report.
        let log = Log::replace(&path, &content(&concluded, &[], items.iter())?)?;
        let state = State {
            log,
            items: items.into(),
            unsynced: Vec::new(),
            unsynced_concludes: Vec::new(),
            concluded,
            pending: None,
            next_seq,
            appended: 0,
        };
        if !state.items.is_empty() {
            tracing::info!(
                "{} unsent report(s) from before the restart will be delivered",
                state.items.len()
            );
        }
        Ok(Files {
            state: Arc::new(Mutex::new(state)),
            dead: Arc::new(dead),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Queues reports for a task durably (written and synced with any queued at the
    /// same time), as the conclusion of the events `concludes`, recorded in the same
    /// write (see `concluded`); they are delivered in this order, after every report
    /// queued before for the same task.
    pub(super) async fn push(
        &self,
        task_id: &TaskId,
        reports: Vec<Report>,
        concludes: Vec<String>,
        notify: Arc<Notify>,
    ) -> io::Result<()> {
        let (reply, answer) = oneshot::channel();
        {
            let mut s = self.lock();
            let items = s.write_adds(task_id, reports, &concludes)?;
            let state = Arc::downgrade(&self.state);
            // On the log's job, in the order of the writes.
            s.log.sync_then(move |synced| {
                let queued = state
                    .upgrade()
                    .is_some_and(|state| lock(&state).settle(items, concludes, synced.is_ok()));
                if queued {
                    notify.notify_one();
                }
                let _ = reply.send(synced.map_err(io::Error::from));
            });
        }
        answer
            .await
            .map_err(|_| io::Error::other("the outbox stopped"))?
    }

    /// From now on, a conclusion may be forgotten once it is old and `pending` says the
    /// journal has its event done.
    pub(super) fn keep_concluded_while(&self, pending: PendingCheck) {
        self.lock().pending = Some(pending);
    }

    /// Whether the event's concluding reports were queued (and synced): its work is
    /// over even when the journal did not get to record that.
    pub(super) fn concluded(&self, event: &str) -> bool {
        self.lock().concluded.contains_key(event)
    }

    /// Ends the outbox's log once everything handed over is durable (the daemon's
    /// last step: nothing is joined in a `Drop`).
    pub(super) async fn close(&self) {
        let log = self.lock().log.clone();
        if let Err(e) = log.close().await {
            tracing::error!("the outbox is not all on disk: {e}");
        }
    }

    /// Reports not yet delivered.
    pub(super) fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Takes a delivered report off the queue now (its record is written after);
    /// whether the queue is empty then.
    pub(super) fn mark_sent(&self, seq: u64) -> bool {
        let mut s = self.lock();
        match s.items.front() {
            Some(first) if first.seq == seq => {
                s.items.pop_front();
            }
            _ => s.items.retain(|i| i.seq != seq),
        }
        let empty = s.items.is_empty();
        if let Err(e) = s.append_sent(seq) {
            tracing::error!(seq, "cannot record a delivered report: {e}");
        }
        empty
    }

    /// The first queued report whose task has no report in flight: the earliest of
    /// its task, since any earlier one would be in flight or found first.
    pub(super) fn next_free(&self, busy: &HashSet<TaskId>) -> Option<Item> {
        self.lock()
            .items
            .iter()
            .find(|i| !busy.contains(&i.task_id))
            .cloned()
    }

    /// Keeps a refused report in the dead-letter file (written by its log's job).
    pub(super) async fn keep_dead(&self, item: &Item, error: &str) -> io::Result<()> {
        self.dead
            .keep(item.task_id.as_str(), &item.key, &item.report, error)
            .await
    }

    pub(super) fn dead_letters(&self) -> (usize, PathBuf) {
        (self.dead.count(), self.dead.path().to_path_buf())
    }
}
