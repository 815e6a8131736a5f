//! A fleet's worker (`store: "postgres://…"`): which tasks are this worker's. An event
//! accepted here or by any other worker is only committed to the store; this loop
//! claims tasks that have events waiting while the worker has room (one slot per task
//! held, `max_concurrent_tasks` in all, `fleet_max_tasks` across the fleet), hands
//! their events to the router in order, picks up events that arrive later for tasks
//! it holds (a chat message, a cancellation), renews its leases, and lets a task go
//! once the worker has nothing left to do for it.
//!
//! A lease that could not be renewed in time is given up before the database would
//! end it: the task's run is stopped, its reports are refused by the store (they are
//! fenced), and its events stay for the worker that takes it next.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{lock, Router, StopReason};
use crate::store::pg::Pg;
use crate::tracker::types::TaskId;

/// How often the loop looks at the store when nothing wakes it.
const TICK: Duration = Duration::from_millis(500);
/// How often the fleet's status is read.
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// How often events done long ago are forgotten.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// A fleet's worker as `/healthz` and `/metrics` show it.
pub(crate) struct FleetView {
    pub(crate) worker: String,
    /// Leases this worker holds.
    pub(crate) held: usize,
    /// The fleet, when the store last answered.
    pub(crate) status: Option<crate::store::pg::FleetStatus>,
    /// Why the store is not answering, while it is not.
    pub(crate) failing: Option<String>,
    pub(crate) round_trip: Option<Duration>,
}

/// What the worker knows of the tasks it holds, shared by its two loops.
#[derive(Default)]
struct Held {
    /// Events handed to the router, per task held.
    submitted: HashMap<TaskId, HashSet<String>>,
    /// Since when a held task has had no work here while events of it are not done
    /// (left by a run that ended without concluding them).
    idle_since: HashMap<TaskId, Instant>,
}

impl Held {
    fn forget(&mut self, task: &TaskId) {
        self.submitted.remove(task);
        self.idle_since.remove(task);
    }
}

/// When the fleet's status was last read, and old events last forgotten.
#[derive(Default)]
struct Looked {
    status: Option<Instant>,
    swept: Option<Instant>,
}

/// The fleet's settings this loop works by.
#[derive(Clone, Copy)]
pub(crate) struct FleetSettings {
    pub(crate) lease: Duration,
    pub(crate) fleet_max: Option<usize>,
}

impl Router {
    /// Works the fleet's tasks until `stop`: claims nothing new once the router
    /// drains, but keeps the leases of the runs finishing until then.
    /// The leases are kept by a loop of their own: a claim or a read that hangs on a
    /// store gone silent must not keep them from being given up in time.
    pub(crate) async fn work_fleet(&self, pg: Arc<Pg>, s: FleetSettings, stop: CancellationToken) {
        let held = std::sync::Mutex::new(Held::default());
        let keep = async {
            let mut last_renewed = Instant::now();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(TICK.min(s.lease / 3)) => {}
                    _ = stop.cancelled() => break,
                }
                self.keep_leases(&pg, s, &mut last_renewed, &held).await;
            }
        };
        let work = async {
            let mut looked = Looked::default();
            loop {
                tokio::select! {
                    _ = self.shared.fleet_wake.notified() => {}
                    _ = tokio::time::sleep(TICK) => {}
                    _ = stop.cancelled() => break,
                }
                if !lock(&self.shared.state).draining {
                    // Idle tasks go first, so their slots are claimed again at once.
                    self.take_events(&pg, s, &held).await;
                    if self.claim_more(&pg, s).await {
                        self.take_events(&pg, s, &held).await;
                    }
                }
                self.look(&pg, &mut looked).await;
            }
        };
        tokio::join!(keep, work);
        // Leases of tasks whose events are done go back at once; the rest run out.
        for task in pg.held() {
            if let Ok(t) = TaskId::new(task) {
                if !self.has_work(&t) {
                    let _ = pg.release(&t).await;
                }
            }
        }
    }

    /// Renews the leases every third of their life; a lease lost, or not renewed for
    /// five sixths of it, is given up (its run stopped).
    async fn keep_leases(
        &self,
        pg: &Pg,
        s: FleetSettings,
        last_renewed: &mut Instant,
        held: &std::sync::Mutex<Held>,
    ) {
        if last_renewed.elapsed() < s.lease / 3 {
            return;
        }
        // A store that stops answering (a partition) must not hold this past the
        // moment the leases may be another worker's.
        let deadline = s.lease * 5 / 6;
        let since = last_renewed.elapsed();
        let left = deadline
            .saturating_sub(since)
            .max(Duration::from_millis(100));
        // The database counts the lease from when the statement runs, no earlier
        // than it is sent: the deadline counts from the sending too.
        let sent = Instant::now();
        let renewed = match tokio::time::timeout(left, pg.renew(s.lease)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => {
                pg.note_unreachable("the store did not answer in time");
                Err("the store did not answer in time".into())
            }
        };
        let lost = match renewed {
            Ok(lost) => {
                *last_renewed = sent;
                lost
            }
            Err(e) => {
                if last_renewed.elapsed() < deadline {
                    tracing::warn!("cannot renew this worker's leases yet: {e}");
                    return;
                }
                let given_up = pg.forget_leases();
                if !given_up.is_empty() {
                    tracing::error!("the leases could not be renewed in time: this worker's tasks are given up ({e})");
                }
                given_up
            }
        };
        for task in lost {
            let Ok(task) = TaskId::new(task) else {
                continue;
            };
            tracing::warn!(task = %task, "this worker's lease on the task ran out: its work here stops");
            lock(held).forget(&task);
            self.lose(&task);
        }
    }

    /// Reads what the fleet is doing (every few seconds, for `/healthz` and
    /// `/metrics`), and now and then forgets events done long ago.
    async fn look(&self, pg: &Pg, w: &mut Looked) {
        if w.status.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return;
        }
        w.status = Some(Instant::now());
        let status = pg.fleet_status().await.ok();
        *lock(&self.shared.fleet_seen) = status;
        if w.swept.is_none_or(|t| t.elapsed() > SWEEP_EVERY) {
            w.swept = Some(Instant::now());
            match pg.forget_old().await {
                Ok(n) if n > 0 => tracing::info!(n, "events done long ago forgotten"),
                Ok(_) => {}
                Err(e) => tracing::warn!("cannot forget old events: {e}"),
            }
        }
    }

    /// The fleet's store, when this worker is one of a fleet.
    pub(crate) fn store(&self) -> Option<Arc<Pg>> {
        self.shared.journal.store().cloned()
    }

    /// What the fleet was doing when last read, and this worker's store.
    pub(crate) fn fleet(&self) -> Option<FleetView> {
        let pg = self.shared.journal.store()?;
        let health = lock(&pg.health).clone();
        Some(FleetView {
            worker: pg.worker.clone(),
            held: pg.held().len(),
            status: lock(&self.shared.fleet_seen).clone(),
            failing: health.failing,
            round_trip: health.round_trip,
        })
    }

    /// Claims tasks while this worker has room; whether it claimed any.
    async fn claim_more(&self, pg: &Pg, s: FleetSettings) -> bool {
        let room = self.shared.max.saturating_sub(pg.held().len());
        if room == 0 {
            return false;
        }
        match pg.claim(room, s.lease, s.fleet_max).await {
            Ok(tasks) => {
                for t in &tasks {
                    tracing::info!(task = %t, "task claimed");
                }
                !tasks.is_empty()
            }
            Err(e) => {
                tracing::warn!("cannot claim tasks: {e}");
                false
            }
        }
    }

    /// Hands the events of held tasks to the router (each once), and lets idle tasks go.
    async fn take_events(&self, pg: &Pg, s: FleetSettings, book: &std::sync::Mutex<Held>) {
        let held: HashSet<String> = pg.held().into_iter().collect();
        if held.is_empty() {
            return;
        }
        let pending = match pg.pending_of_held().await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("cannot read the held tasks' events: {e}");
                return;
            }
        };
        let mut with_events: HashSet<TaskId> = HashSet::new();
        let mut new = Vec::new();
        {
            let mut w = lock(book);
            for p in pending {
                let task = p.task_id().clone();
                // A lease lost since the read: its events are another worker's.
                if !held.contains(task.as_str()) || pg.fence(task.as_str()).is_none() {
                    continue;
                }
                with_events.insert(task.clone());
                if w.submitted.entry(task).or_default().insert(p.id.clone()) {
                    new.push(p);
                }
            }
        }
        for a in new {
            self.submit(&a.id, a.event);
        }
        for t in held {
            let Ok(task) = TaskId::new(t) else { continue };
            if self.has_work(&task) {
                lock(book).idle_since.remove(&task);
                continue;
            }
            // Events not done with nothing here working on them: a run that ended
            // without concluding them. Let go after a while, for any worker to take.
            if with_events.contains(&task) {
                let since = *lock(book)
                    .idle_since
                    .entry(task.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() < s.lease / 2 {
                    continue;
                }
            }
            lock(book).forget(&task);
            if let Err(e) = pg.release(&task).await {
                tracing::warn!(task = %task, "cannot let the task go: {e}");
            }
        }
    }

    /// The task is another worker's now: its queued jobs go (their events stay for
    /// that worker) and its run is stopped, reporting nothing.
    pub(super) fn lose(&self, task: &TaskId) {
        let mut st = lock(&self.shared.state);
        st.queue.retain(|j| j.task_id != *task);
        if let Some(r) = st.running.get_mut(task) {
            r.why = Some(StopReason::LeaseLost);
            r.cancel.cancel();
        }
    }
}
