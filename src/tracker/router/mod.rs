//! The router: turns accepted tracker events into agent runs and reports.
//!
//! At most `max_concurrent_tasks` runs at once; the rest wait in a FIFO queue. Runs of
//! one task never overlap: a chat message for a task whose run is going waits for it.
//! `task.cancelled` drops the task's queued work and cancels its run. Every outcome is
//! reported through the outbox; an event is marked done in the journal only once its
//! reports are queued, so a crash in between replays it instead of losing it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

mod fleet;
pub(crate) use fleet::{FleetSettings, FleetView};
mod hooks;
mod inject;
mod run;
mod status;
#[cfg(test)]
mod tests;

use crate::agent::Agent;
use crate::tracker::delivery::Delivery;
use crate::tracker::journal_writer::JournalWriter;
use crate::tracker::outbox::Outbox;
use crate::tracker::room::Room;
use crate::tracker::seam::Tracker;
use crate::tracker::types::{Arrival, Event, Report, TaskId};
use crate::tracker::worktree::{SharedFolder, Trees, Workspace};

/// After this many starts without finishing (the daemon died each time), a task is
/// reported as blocked instead of being run again.
const MAX_ATTEMPTS: u32 = 3;

/// What became of an event handed to the router.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Accepted {
    New,
    Duplicate,
    Ignored,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AcceptError {
    #[error("the event could not be recorded: {0}")]
    Journal(String),
    #[error("the agent is shutting down")]
    ShuttingDown,
}

#[derive(Debug, Clone)]
enum JobKind {
    Task {
        title: String,
        description: String,
    },
    Chat {
        message_id: String,
        content: String,
        author: Option<String>,
    },
}

#[derive(Debug, Clone)]
struct Job {
    event_id: String,
    task_id: TaskId,
    kind: JobKind,
}

impl Job {
    /// The chat message a chat job answers; `None` for work on the task itself.
    fn reply_to(&self) -> Option<String> {
        match &self.kind {
            JobKind::Chat { message_id, .. } => Some(message_id.clone()),
            JobKind::Task { .. } => None,
        }
    }
}

pub(super) use super::delivery::StopReason;

struct Running {
    cancel: CancellationToken,
    why: Option<StopReason>,
    /// The run's live control once it started, when it works the task itself (not a
    /// chat reply): chat messages for the task are passed to it as instructions.
    control: Option<crate::agent::control::RunControl>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    running: HashMap<TaskId, Running>,
    draining: bool,
    /// Tasks cancelled since they were last assigned: a chat message their run never
    /// read is not worked on after all.
    cancelled: std::collections::HashSet<TaskId>,
    /// Tasks with work here besides their jobs (a result being queued, a chat
    /// message's receipt awaited): how much.
    settling: HashMap<TaskId, usize>,
}

impl State {
    /// Marks a task cancelled and drops its queued jobs; their events' ids.
    fn drop_task(&mut self, task_id: &TaskId) -> Vec<String> {
        self.cancelled.insert(task_id.clone());
        let mut dropped = Vec::new();
        self.queue.retain(|j| {
            let keep = j.task_id != *task_id;
            if !keep {
                dropped.push(j.event_id.clone());
            }
            keep
        });
        dropped
    }
}

struct Shared {
    agent: Agent,
    journal: JournalWriter,
    delivery: Arc<Delivery>,
    /// Each task's git worktree, when tasks do not share the working folder.
    worktrees: Option<Trees>,
    /// Otherwise the repository the shared folder is in, to name what a run changed.
    shared_folder: Option<Arc<SharedFolder>>,
    max: usize,
    state: Mutex<State>,
    changed: Notify,
    /// Runs start only when the disks they write to have room.
    room: Arc<Room>,
    /// Why the last event could not be journaled, and when, until one is again.
    journal_refusing: Mutex<Option<(std::time::Instant, String)>>,
    /// Every task the router starts (jobs, a chat message's receipt, a cancellation's
    /// comment): `shutdown` waits for them.
    tasks: tokio_util::task::TaskTracker,
    /// Where reports go, and what the tracker adds to a task's life.
    tracker: Arc<dyn Tracker>,
    /// The link to Team Board, for `/healthz`.
    link: crate::tracker::link::Link,
    /// Wakes a fleet's worker loop: an event was accepted here.
    fleet_wake: Notify,
    /// What the fleet was doing when its worker loop last asked the store.
    fleet_seen: Mutex<Option<crate::store::pg::FleetStatus>>,
}

/// Work for a task that is not one of its jobs; the task has work while it lives.
pub(super) struct Settling {
    router: Router,
    task: TaskId,
}

impl Drop for Settling {
    fn drop(&mut self) {
        let mut st = lock(&self.router.shared.state);
        if let Some(n) = st.settling.get_mut(&self.task) {
            *n -= 1;
            if *n == 0 {
                st.settling.remove(&self.task);
            }
        }
        drop(st);
        self.router.shared.fleet_wake.notify_one();
    }
}

#[derive(Clone)]
pub(crate) struct Router {
    shared: Arc<Shared>,
}

/// Frees a job's task if the job ends without doing so itself (a bug made it panic):
/// the task's later jobs still run and a shutdown does not wait for it; its event stays
/// pending, so it is tried again at the next start.
struct Ended {
    router: Router,
    task: TaskId,
    armed: bool,
}

impl Ended {
    /// The job ended as it should (it freed its task itself).
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let draining = {
            let mut st = lock(&self.router.shared.state);
            st.running.remove(&self.task);
            st.draining
        };
        self.router.shared.changed.notify_waiters();
        // Dropped with the runtime at shutdown: nothing more to start, nothing to say.
        if !draining {
            tracing::error!(task = %self.task, "a job ended unexpectedly; its event stays pending");
            self.router.schedule();
        }
    }
}

/// The session a task's work and chat continue in.
pub(super) fn session_for(task_id: &TaskId) -> String {
    let task_id = task_id.as_str();
    let clean: String = task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if clean == task_id {
        format!("task-{clean}")
    } else {
        // Different ids must not share a session after cleaning.
        let hash = task_id.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
        format!("task-{clean}-{hash:016x}")
    }
}

pub(super) use crate::util::lock;

impl Router {
    pub(crate) fn new(
        agent: Agent,
        journal: JournalWriter,
        outbox: Outbox,
        workspace: Workspace,
        tracker: Arc<dyn Tracker>,
    ) -> Router {
        let max = agent.config().limits.max_concurrent_tasks;
        // A conclusion is kept while the journal has its event pending.
        outbox.keep_concluded_while(journal.pending_check());
        let mut dirs = vec![agent.config().state_dir(), agent.config().sessions_dir()];
        let (worktrees, shared_folder) = match workspace {
            Workspace::Worktrees(w) => {
                dirs.push(w.root().to_path_buf());
                (Some(Trees::One(w)), None)
            }
            Workspace::PerRepo(repos) => {
                dirs.push(repos.root());
                (Some(Trees::PerRepo(repos)), None)
            }
            Workspace::Shared(folder) => (None, folder.map(Arc::new)),
        };
        Router {
            shared: Arc::new(Shared {
                agent,
                journal,
                delivery: Arc::new(Delivery::new(outbox)),
                shared_folder,
                worktrees,
                max,
                state: Mutex::new(State::default()),
                changed: Notify::new(),
                room: Room::new(dirs),
                journal_refusing: Mutex::new(None),
                tasks: tokio_util::task::TaskTracker::new(),
                tracker,
                link: Default::default(),
                fleet_wake: Notify::new(),
                fleet_seen: Mutex::new(None),
            }),
        }
    }

    /// Journals and schedules one event. The journal write is synced before this
    /// returns, so the caller may acknowledge the event. `hold` (the request's place in
    /// a limit) is kept until the event is journaled, even if the caller goes.
    pub(crate) async fn accept(
        &self,
        arrival: Arrival,
        hold: impl Send + 'static,
    ) -> Result<Accepted, AcceptError> {
        if lock(&self.shared.state).draining {
            // A duplicate can still be acknowledged: it was recorded before.
            if self.shared.journal.is_seen(&arrival.id).await {
                return Ok(Accepted::Duplicate);
            }
            return Err(AcceptError::ShuttingDown);
        }
        // In a task of its own: if the caller goes away (a tracker that gave up waiting),
        // an event that reached the disk is still scheduled, not left until a restart.
        // Owned by the router's tasks: shutdown waits for it before the journal closes.
        let me = self.clone();
        self.shared
            .tasks
            .spawn(async move {
                let accepted = me.journal_and_submit(arrival).await;
                drop(hold);
                accepted
            })
            .await
            .map_err(|e| AcceptError::Journal(e.to_string()))?
    }

    async fn journal_and_submit(&self, arrival: Arrival) -> Result<Accepted, AcceptError> {
        // Acknowledged only once on disk; events arriving together share one sync.
        let new = self.shared.journal.accept(arrival.clone()).await;
        *lock(&self.shared.journal_refusing) = new
            .as_ref()
            .err()
            .map(|e| (std::time::Instant::now(), e.to_string()));
        let new = new.map_err(|e| AcceptError::Journal(e.to_string()))?;
        if !new {
            return Ok(Accepted::Duplicate);
        }
        tracing::info!(id = %arrival.id, kind = arrival.event.kind(), task = %arrival.task_id(), "event accepted");
        if self.shared.journal.store().is_some() {
            // A fleet's events are worked by whichever worker claims their task.
            self.shared.fleet_wake.notify_one();
            return Ok(Accepted::New);
        }
        self.submit(&arrival.id, arrival.event);
        Ok(Accepted::New)
    }

    /// Re-queues the journal's unfinished events after a restart.
    pub(crate) fn resume_pending(&self) {
        if self.shared.journal.store().is_some() {
            // A fleet's worker claims them (`work_fleet`).
            return;
        }
        let pending = self.shared.journal.pending();
        for p in pending {
            let id = &p.arrival.id;
            if self.shared.delivery.concluded(id) {
                // Its result was queued just before a crash took the journal's `done`.
                tracing::info!(id = %id, "an event from before the restart was concluded already: not run again");
                self.mark_done(id, p.arrival.task_id());
                continue;
            }
            tracing::info!(id = %id, task = %p.arrival.task_id(), attempts = p.attempts, "resuming an event from before the restart");
            self.submit(id, p.arrival.event);
        }
    }

    fn submit(&self, event_id: &str, event: Event) {
        let job = match event {
            Event::TaskAssigned { task: t } => {
                lock(&self.shared.state).cancelled.remove(&t.id);
                Job {
                    event_id: event_id.into(),
                    task_id: t.id,
                    kind: JobKind::Task {
                        title: t.title,
                        description: t.description.unwrap_or_default(),
                    },
                }
            }
            Event::ChatMessage { task_id, message } => {
                if self.inject(event_id, &task_id, &message) {
                    return;
                }
                Job {
                    event_id: event_id.into(),
                    task_id,
                    kind: JobKind::Chat {
                        message_id: message.id,
                        content: message.content,
                        author: message.author.and_then(|a| a.name),
                    },
                }
            }
            Event::TaskCancelled { task_id, reason } => {
                self.cancel(event_id, &task_id, reason);
                return;
            }
        };
        lock(&self.shared.state).queue.push_back(job);
        self.schedule();
    }

    fn cancel(&self, event_id: &str, task_id: &TaskId, reason: Option<String>) {
        let (dropped, running) = {
            let mut st = lock(&self.shared.state);
            let dropped = st.drop_task(task_id);
            let running = match st.running.get_mut(task_id) {
                Some(r) => {
                    r.why = Some(StopReason::Cancelled(reason.clone()));
                    r.cancel.cancel();
                    true
                }
                None => false,
            };
            (dropped, running)
        };
        if running {
            // The running job concludes its own event; these never started.
            for id in &dropped {
                self.mark_done(id, task_id);
            }
        }
        tracing::info!(
            task = %task_id,
            running,
            dropped = dropped.len(),
            "task cancelled"
        );
        if !running {
            let why = reason.map(|r| format!(" ({r})")).unwrap_or_default();
            let content = if dropped.is_empty() {
                format!("Cancellation noted{why}: no work was running or queued for this task.")
            } else {
                format!(
                    "Work on this task was cancelled{why} before it started; {} queued item(s) were dropped. Nothing was changed.",
                    dropped.len()
                )
            };
            let (me, task, event) = (self.clone(), task_id.clone(), event_id.to_string());
            let settling = self.settling(task_id);
            self.shared.tasks.spawn(async move {
                let _settling = settling;
                if let Some(w) = &me.shared.worktrees {
                    w.discard(&task).await;
                }
                let (done, task_of) = (me.clone(), task.clone());
                // Done once the comment is queued (a full disk delays it, never drops it).
                // The dropped events are concluded with the cancellation: none of
                // them can come back after a crash to run a cancelled task.
                let mut concludes = vec![event.clone()];
                concludes.extend(dropped.iter().cloned());
                let report = vec![Report::comment(content, None)];
                me.shared
                    .delivery
                    .queue_or_retry(&task, report, concludes.clone(), move || {
                        for id in &concludes {
                            done.mark_done(id, &task_of);
                        }
                    })
                    .await;
            });
        } else {
            self.mark_done(event_id, task_id);
        }
        self.shared.changed.notify_waiters();
    }

    /// Ends the journal once everything handed over is durable (at the daemon's end).
    pub(crate) async fn close_journal(&self) {
        self.shared.journal.close().await;
    }

    /// Notes work for the task besides its jobs, until the guard is dropped.
    pub(super) fn settling(&self, task: &TaskId) -> Settling {
        *lock(&self.shared.state)
            .settling
            .entry(task.clone())
            .or_default() += 1;
        Settling {
            router: self.clone(),
            task: task.clone(),
        }
    }

    fn mark_done(&self, event_id: &str, task: &TaskId) {
        self.shared.journal.done(event_id, task);
    }

    /// Starts queued jobs while there is capacity, oldest first, one run per task.
    fn schedule(&self) {
        let mut starting = Vec::new();
        let mut st = lock(&self.shared.state);
        while !st.draining && st.running.len() < self.shared.max {
            let Some(pos) = st
                .queue
                .iter()
                .position(|j| !st.running.contains_key(&j.task_id))
            else {
                break;
            };
            let Some(job) = st.queue.remove(pos) else {
                break;
            };
            let cancel = CancellationToken::new();
            st.running.insert(
                job.task_id.clone(),
                Running {
                    cancel: cancel.clone(),
                    why: None,
                    control: None,
                },
            );
            starting.push((job, cancel));
        }
        // Spawned with the lock released: a runtime that is shutting down drops a new
        // task at once, and its guard takes the lock.
        drop(st);
        for (job, cancel) in starting {
            let me = self.clone();
            let ended = Ended {
                router: self.clone(),
                task: job.task_id.clone(),
                armed: true,
            };
            self.shared.tasks.spawn(async move {
                me.run_job(job, cancel).await;
                ended.disarm();
            });
        }
    }

    /// Stops starting new work, lets running work finish for `grace`, then cancels it;
    /// cancelled work stays in the journal and resumes at the next start. Then waits
    /// (a few seconds at most) for the router's other tasks: comments being queued.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.drain_jobs(grace).await;
        let tasks = &self.shared.tasks;
        tasks.close();
        if tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .is_err()
        {
            // Their events are still pending in the journal: done at the next start.
            tracing::warn!(left = tasks.len(), "router tasks still busy at shutdown");
        }
        self.shared.delivery.stop().await;
    }

    async fn drain_jobs(&self, grace: Duration) {
        lock(&self.shared.state).draining = true;
        self.shared.room.drain();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let notified = self.shared.changed.notified();
            if lock(&self.shared.state).running.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        {
            let mut st = lock(&self.shared.state);
            tracing::warn!(
                running = st.running.len(),
                "grace period over; interrupting running work"
            );
            for r in st.running.values_mut() {
                r.why = Some(StopReason::Shutdown);
                r.cancel.cancel();
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.shared.changed.notified();
            if lock(&self.shared.state).running.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::error!("some runs did not stop within 10 s of being cancelled");
                return;
            }
        }
    }
}
