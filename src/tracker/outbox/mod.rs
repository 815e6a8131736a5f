//! The outbox: every report to the tracker (status change, comment) is stored before
//! it is sent, then delivered in the order it was queued, task by task, so the reports
//! of a task arrive in order (`review` only after the result comment was accepted) and
//! survive tracker outages and daemon restarts. Different tasks' reports go out side by
//! side (`LANES`), so a slow or refused report holds back only its own task. Connection
//! errors, 429 and 5xx are retried with backoff (capped at 60 s) for as long as the
//! daemon runs; a 404 or another 4xx that may pass is retried for a bounded time, and
//! what the tracker refuses for good is kept among the dead letters so the next report
//! proceeds and none is dropped in silence. A report waits `report_timeout` (5 min) for
//! its answer before it is tried again: a slow tracker is not sent a repeat while it is
//! still answering.
//!
//! Each report carries an `Idempotency-Key`, so a tracker that honours it drops the one
//! repeat that can happen when the daemon dies between a send and its bookkeeping.
//!
//! Where the queue is kept is the store's: `state/outbox.jsonl` (`files.rs`), or the
//! fleet's PostgreSQL (`store::pg`), where any worker delivers a report it claimed,
//! one worker at a time per task, its claim renewed while it is being delivered.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::seam::Tracker;
use super::types::{Report, TaskId};
use crate::store::pg::{Pg, StoreError};
use crate::util::lock;

mod files;

/// Tasks whose reports are delivered at the same time.
const LANES: usize = 8;
/// How often a fleet's worker looks for reports other workers queued.
const FLEET_POLL: Duration = Duration::from_secs(1);

/// Whether the journal still has an event pending.
pub(crate) type PendingCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

#[derive(Debug, Clone)]
pub(super) struct Item {
    seq: u64,
    key: String,
    task_id: TaskId,
    report: Report,
}

/// Why reports could not be queued.
#[derive(Debug, thiserror::Error)]
pub(crate) enum QueueError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl QueueError {
    /// The task is another worker's now: its reports are not this worker's to send.
    pub(crate) fn lease_lost(&self) -> bool {
        matches!(self, QueueError::Store(StoreError::LeaseLost(_)))
    }
}

/// Where the queue is kept.
#[derive(Clone)]
enum Queue {
    Files(files::Files),
    Fleet {
        pg: Arc<Pg>,
        /// The fleet's unsent reports and dead letters, as last counted.
        counts: Arc<Mutex<(i64, i64)>>,
        /// How long a report is claimed for (`lease_sec`): renewed every third of it
        /// while it is being delivered, another worker's once it runs out.
        hold: Duration,
    },
}

#[derive(Clone)]
pub(crate) struct Outbox {
    queue: Queue,
    notify: Arc<Notify>,
    /// Told when the last queued report was delivered (`emptied`).
    emptied: Arc<Notify>,
    /// Why the last attempt failed, while the tracker is not taking reports.
    failing: Arc<Mutex<Option<String>>>,
    /// Why the tracker refused the last attempt (a 404 or another 4xx), while it does.
    refusing: Arc<Mutex<Option<String>>>,
}

impl Outbox {
    fn with(queue: Queue) -> Outbox {
        Outbox {
            queue,
            notify: Arc::new(Notify::new()),
            emptied: Arc::new(Notify::new()),
            failing: Arc::new(Mutex::new(None)),
            refusing: Arc::new(Mutex::new(None)),
        }
    }

    /// The outbox in `dir` (`outbox.jsonl`, `dead_letter.jsonl`), read and compacted.
    pub(crate) fn open(dir: &Path) -> io::Result<Outbox> {
        Ok(Outbox::with(Queue::Files(files::Files::open(dir)?)))
    }

    /// The fleet's outbox, in its store; a report is claimed for `hold`.
    pub(crate) fn fleet(pg: Arc<Pg>, hold: Duration) -> Outbox {
        Outbox::with(Queue::Fleet {
            pg,
            counts: Default::default(),
            hold,
        })
    }

    fn is_fleet(&self) -> bool {
        matches!(self.queue, Queue::Fleet { .. })
    }

    /// Queues reports for a task durably, as the conclusion of the events `concludes`,
    /// recorded with them (see `concluded`); they are delivered in this order, after
    /// every report queued before for the same task. In a fleet, only under this
    /// worker's lease on the task.
    pub(crate) async fn push_concluding(
        &self,
        task_id: &TaskId,
        reports: Vec<Report>,
        concludes: Vec<String>,
    ) -> Result<(), QueueError> {
        match &self.queue {
            Queue::Files(f) => Ok(f
                .push(task_id, reports, concludes, self.notify.clone())
                .await?),
            Queue::Fleet { pg, .. } => {
                pg.push(task_id, &reports, &concludes).await?;
                self.notify.notify_one();
                Ok(())
            }
        }
    }

    /// From now on, a conclusion may be forgotten once it is old and `pending` says the
    /// journal has its event done.
    pub(crate) fn keep_concluded_while(&self, pending: PendingCheck) {
        if let Queue::Files(f) = &self.queue {
            f.keep_concluded_while(pending);
        }
    }

    /// Whether the event's concluding reports were queued: its work is over even when
    /// the journal did not get to record that. (A fleet's store marks the event done
    /// in the same transaction.)
    pub(crate) fn concluded(&self, event: &str) -> bool {
        match &self.queue {
            Queue::Files(f) => f.concluded(event),
            Queue::Fleet { .. } => false,
        }
    }

    /// Ends the outbox's log once everything handed over is durable (the daemon's
    /// last step: nothing is joined in a `Drop`).
    pub(crate) async fn close(&self) {
        if let Queue::Files(f) = &self.queue {
            f.close().await;
        }
    }

    /// Reports not yet delivered (a fleet's: as last counted, fleet-wide).
    pub(crate) fn len(&self) -> usize {
        match &self.queue {
            Queue::Files(f) => f.len(),
            Queue::Fleet { counts, .. } => lock(counts).0.max(0) as usize,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes a delivered report off the queue.
    async fn mark_sent(&self, seq: u64) {
        match &self.queue {
            Queue::Files(f) => self.after_sent(f.mark_sent(seq)),
            Queue::Fleet { pg, hold, .. } => {
                // Tried for a claim's length after the delivery (the lane stays busy,
                // so the task's next report waits); after that the claim may be
                // another worker's and the report may go once more, under the same
                // idempotency key.
                let until = tokio::time::Instant::now() + *hold;
                let mut delay = Duration::from_millis(100);
                while let Err(e) = pg.sent(seq as i64).await {
                    if tokio::time::Instant::now() + delay > until {
                        tracing::warn!(seq, "cannot record a delivered report: {e}");
                        break;
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                self.count().await;
            }
        }
    }

    fn after_sent(&self, empty: bool) {
        if empty {
            self.emptied.notify_waiters();
        }
    }

    /// Counts a fleet's unsent reports and dead letters again.
    async fn count(&self) {
        if let Queue::Fleet { pg, counts, .. } = &self.queue {
            if let Ok(c) = pg.report_counts().await {
                *lock(counts) = c;
                if c.0 == 0 {
                    self.emptied.notify_waiters();
                }
            }
        }
    }

    /// Returns once no report is queued (at shutdown, with a time limit).
    pub(crate) async fn emptied(&self) {
        loop {
            // Registered before the check: a delivery in between still wakes it.
            let mut told = std::pin::pin!(self.emptied.notified());
            told.as_mut().enable();
            if self.is_empty() {
                return;
            }
            told.await;
        }
    }

    /// Why the tracker is not taking reports, while it is not.
    pub(crate) fn failing(&self) -> Option<String> {
        lock(&self.failing).clone()
    }

    /// Why the tracker refuses reports (a 404 while it lost a task, say), while it does.
    pub(crate) fn refusing(&self) -> Option<String> {
        lock(&self.refusing).clone()
    }

    /// Reports the tracker refused for good, and where they are kept.
    pub(crate) fn dead_letters(&self) -> (usize, PathBuf) {
        match &self.queue {
            Queue::Files(f) => f.dead_letters(),
            Queue::Fleet { counts, .. } => (
                lock(counts).1.max(0) as usize,
                PathBuf::from("the store's dead_letters table"),
            ),
        }
    }

    /// Delivers reports until `stop` is cancelled: one report at a time per task (its
    /// reports stay in order, and the tracker never gets a report while the same one
    /// is still being answered), up to `LANES` tasks at once, so one slow or refused
    /// report holds back only its own task's later reports.
    pub(crate) async fn run(
        self,
        tracker: Arc<dyn Tracker>,
        backoff: (Duration, Duration),
        refused_for: Duration,
        stop: CancellationToken,
    ) {
        let mut lanes: tokio::task::JoinSet<Option<TaskId>> = tokio::task::JoinSet::new();
        let mut busy: HashSet<TaskId> = HashSet::new();
        // Which task each lane serves, to free it even when the lane panicked.
        let mut serving: std::collections::HashMap<tokio::task::Id, TaskId> =
            std::collections::HashMap::new();
        loop {
            // Checked before every report: a long backlog must not hold up a shutdown.
            if stop.is_cancelled() {
                break;
            }
            let next = match lanes.len() < LANES {
                true => self.next_free(&busy).await,
                false => None,
            };
            if let Some(item) = next {
                busy.insert(item.task_id.clone());
                let (me, tracker, stop) = (self.clone(), tracker.clone(), stop.clone());
                let task = item.task_id.clone();
                let lane = lanes.spawn(async move {
                    me.deliver(&*tracker, &item, backoff, refused_for, &stop)
                        .await
                        .then_some(item.task_id)
                });
                serving.insert(lane.id(), task);
                continue;
            }
            tokio::select! {
                _ = self.notify.notified() => {}
                // Other workers queue reports too, and a claim that ran out frees one.
                _ = tokio::time::sleep(FLEET_POLL), if self.is_fleet() => {}
                done = lanes.join_next_with_id(), if !lanes.is_empty() => match done {
                    Some(Ok((id, Some(task)))) => {
                        serving.remove(&id);
                        busy.remove(&task);
                    }
                    // A bug in one lane: its report stays queued and is tried again.
                    Some(Err(e)) if e.is_panic() => {
                        tracing::error!("a report delivery failed unexpectedly: {e}");
                        if let Some(task) = serving.remove(&e.id()) {
                            busy.remove(&task);
                        }
                    }
                    // Stopped.
                    _ => break,
                },
                _ = stop.cancelled() => break,
            }
        }
        lanes.shutdown().await;
    }

    /// Delivers one report, retrying what may pass; false when `stop` came first.
    async fn deliver(
        &self,
        tracker: &dyn Tracker,
        item: &Item,
        (start, cap): (Duration, Duration),
        refused_for: Duration,
        stop: &CancellationToken,
    ) -> bool {
        let mut delay = start;
        // When the tracker first refused it (an outage before does not count).
        let mut first_refused: Option<std::time::Instant> = None;
        // When this worker's claim on the report was last known to be renewed.
        let mut held_at = tokio::time::Instant::now();
        loop {
            let sent = tracker.report(&item.task_id, &item.report, &item.key);
            let e = match self.while_held(item, sent, &mut held_at).await {
                // Another worker has the report now.
                None => return true,
                Some(answer) => answer,
            };
            let e = match e {
                Ok(()) => {
                    tracing::debug!(task = %item.task_id, seq = item.seq, "report delivered");
                    *lock(&self.failing) = None;
                    *lock(&self.refusing) = None;
                    self.mark_sent(item.seq).await;
                    return true;
                }
                Err(e) => e,
            };
            // Both make `/healthz` degraded, each with a kind of its own.
            if e.is_transient() {
                *lock(&self.failing) = Some(e.to_string());
            } else {
                *lock(&self.refusing) = Some(e.to_string());
            }
            let refused_since = e
                .may_pass()
                .then(|| *first_refused.get_or_insert_with(std::time::Instant::now));
            let retry = e.is_transient()
                || e.is_unauthorized()
                || refused_since.is_some_and(|t| t.elapsed() < refused_for);
            // Kept only once it is on disk: otherwise it stays queued and is tried again.
            if !retry && self.keep_dead(item, &e).await {
                if let Queue::Files(f) = &self.queue {
                    self.after_sent(f.mark_sent(item.seq));
                }
                return true;
            }
            tracing::warn!(task = %item.task_id, "report not delivered, retrying in {delay:?}: {e}");
            // The claim is kept through the wait too: the report stays this worker's,
            // and so does its count of refusals.
            tokio::select! {
                kept = self.while_held(item, tokio::time::sleep(delay), &mut held_at) => {
                    if kept.is_none() {
                        return true;
                    }
                }
                _ = stop.cancelled() => return false,
            }
            delay = (delay * 2).min(cap);
        }
    }

    /// The next report to deliver whose task has no report in flight here (in a
    /// fleet: claimed for this worker, none of its task's in flight anywhere).
    async fn next_free(&self, busy: &HashSet<TaskId>) -> Option<Item> {
        match &self.queue {
            Queue::Files(f) => f.next_free(busy),
            Queue::Fleet { pg, hold, .. } => {
                let busy: Vec<String> = busy.iter().map(|t| t.as_str().to_string()).collect();
                let claimed = pg.claim_reports(1, &busy, *hold).await;
                self.count().await;
                match claimed {
                    Ok(mut q) => q.pop().map(|q| Item {
                        seq: q.seq.max(0) as u64,
                        key: q.key,
                        task_id: q.task_id,
                        report: q.report,
                    }),
                    Err(e) => {
                        tracing::debug!("no report claimed: {e}");
                        None
                    }
                }
            }
        }
    }

    /// Awaits `work` (a delivery attempt, a wait before the next); in a fleet,
    /// renewing this worker's claim on the report meanwhile. `None` when the claim is
    /// another worker's, or may be (not renewed for five sixths of it: the store is
    /// away): that worker delivers it, and this one lets go of it.
    async fn while_held<T>(
        &self,
        item: &Item,
        work: impl std::future::Future<Output = T>,
        held_at: &mut tokio::time::Instant,
    ) -> Option<T> {
        let Queue::Fleet { pg, hold, .. } = &self.queue else {
            return Some(work.await);
        };
        let deadline = *hold * 5 / 6;
        let mut work = std::pin::pin!(work);
        loop {
            let sent = tokio::time::Instant::now();
            let left = (*held_at + deadline).saturating_duration_since(sent);
            match tokio::time::timeout(left, pg.hold_report(item.seq as i64, *hold)).await {
                Ok(Ok(false)) => {
                    tracing::info!(task = %item.task_id, seq = item.seq, "another worker delivers this report now");
                    return None;
                }
                Ok(Ok(true)) => *held_at = sent,
                // Tried again at the next renewal, while the claim lasts.
                Ok(Err(e)) => tracing::warn!("cannot renew a report's claim: {e}"),
                Err(_) => {}
            }
            let left = (*held_at + deadline).saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                tracing::warn!(task = %item.task_id, seq = item.seq, "this worker's claim on a report ran out: it is left to the worker that takes it");
                return None;
            }
            tokio::select! {
                answer = &mut work => return Some(answer),
                _ = tokio::time::sleep((*hold / 3).min(left)) => {}
            }
        }
    }

    /// Keeps a refused report among the dead letters; false when it could not be.
    async fn keep_dead(&self, item: &Item, e: &super::client::TrackerError) -> bool {
        let kept = match &self.queue {
            Queue::Files(f) => f
                .keep_dead(item, &e.to_string())
                .await
                .map_err(|e| e.to_string()),
            Queue::Fleet { pg, .. } => {
                let q = crate::store::pg::Queued {
                    seq: item.seq as i64,
                    key: item.key.clone(),
                    task_id: item.task_id.clone(),
                    report: item.report.clone(),
                };
                pg.bury(&q, &e.to_string()).await.map_err(|e| e.to_string())
            }
        };
        let (_, place) = self.dead_letters();
        match kept {
            Ok(()) => {
                tracing::error!(
                    task = %item.task_id,
                    place = %place.display(),
                    "the tracker refused a report for good; it is kept among the dead letters: {e}"
                );
                true
            }
            Err(why) => {
                tracing::error!(
                    task = %item.task_id,
                    "the tracker refused a report for good, and it cannot be kept in {} yet ({why}); it stays queued: {e}",
                    place.display()
                );
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
