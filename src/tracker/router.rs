//! The router: turns accepted tracker events into agent runs and reports.
//!
//! At most `max_concurrent_tasks` runs at once; the rest wait in a FIFO queue. Runs of
//! one task never overlap: a chat message for a task whose run is going waits for it.
//! `task.cancelled` drops the task's queued work and cancels its run. Every outcome is
//! reported through the outbox; an event is marked done in the journal only once its
//! reports are queued, so a crash in between replays it instead of losing it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentEvent, Outcome, RunRequest};
use crate::tracker::journal::Journal;
use crate::tracker::outbox::Outbox;
use crate::tracker::types::{Envelope, Event, Load, Report};

/// After this many starts without finishing (the daemon died each time), a task is
/// reported as blocked instead of being run again.
const MAX_ATTEMPTS: u32 = 3;

/// What became of an event handed to the router.
#[derive(Debug, Clone, PartialEq)]
pub enum Accepted {
    New,
    Duplicate,
    Ignored,
}

#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("{0}")]
    Invalid(String),
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
    task_id: String,
    kind: JobKind,
}

enum StopReason {
    Cancelled(Option<String>),
    Shutdown,
}

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
    running: HashMap<String, Running>,
    draining: bool,
    /// Tasks cancelled since they were last assigned: a chat message their run never
    /// read is not worked on after all.
    cancelled: std::collections::HashSet<String>,
}

struct Shared {
    agent: Agent,
    /// While results cannot be queued (say, the disk is full): how many wait, and why
    /// the last one could not be queued.
    degraded: Mutex<(usize, String)>,
    journal: Arc<Mutex<Journal>>,
    outbox: Outbox,
    max: usize,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Clone)]
pub struct Router {
    shared: Arc<Shared>,
}

/// The session a task's work and chat continue in.
pub fn session_for(task_id: &str) -> String {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Router {
    pub fn new(agent: Agent, journal: Arc<Mutex<Journal>>, outbox: Outbox) -> Router {
        let max = agent.config().max_concurrent_tasks;
        Router {
            shared: Arc::new(Shared {
                degraded: Mutex::new((0, String::new())),
                agent,
                journal,
                outbox,
                max,
                state: Mutex::new(State::default()),
                changed: Notify::new(),
            }),
        }
    }

    /// Validates, journals and schedules one event. The journal write is synced before
    /// this returns, so the caller may acknowledge the event.
    pub async fn accept(&self, env: Envelope) -> Result<Accepted, AcceptError> {
        let Some(event) = Event::parse(&env).map_err(AcceptError::Invalid)? else {
            tracing::debug!(id = %env.id, kind = %env.kind, "ignored an event type this agent does not handle");
            return Ok(Accepted::Ignored);
        };
        if lock(&self.shared.state).draining {
            // A duplicate can still be acknowledged: it was recorded before.
            if lock(&self.shared.journal).is_seen(&env.id) {
                return Ok(Accepted::Duplicate);
            }
            return Err(AcceptError::ShuttingDown);
        }
        let journal = self.shared.journal.clone();
        let env2 = env.clone();
        let new = tokio::task::spawn_blocking(move || lock(&journal).accept(&env2))
            .await
            .map_err(|e| AcceptError::Journal(e.to_string()))?
            .map_err(|e| AcceptError::Journal(e.to_string()))?;
        if !new {
            return Ok(Accepted::Duplicate);
        }
        tracing::info!(id = %env.id, kind = %env.kind, task = %event.task_id(), "event accepted");
        self.submit(&env.id, event);
        Ok(Accepted::New)
    }

    /// Re-queues the journal's unfinished events after a restart.
    pub fn resume_pending(&self) {
        let pending = lock(&self.shared.journal).pending().to_vec();
        for p in pending {
            match Event::parse(&p.envelope) {
                Ok(Some(event)) => {
                    tracing::info!(id = %p.envelope.id, task = %event.task_id(), attempts = p.attempts, "resuming an event from before the restart");
                    self.submit(&p.envelope.id, event);
                }
                _ => self.mark_done(&p.envelope.id),
            }
        }
    }

    fn submit(&self, event_id: &str, event: Event) {
        let job = match event {
            Event::TaskAssigned(t) => {
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

    /// Passes a chat message to the task's running work as an instruction, to be read
    /// at its next step boundary. False when no such run is going.
    fn inject(
        &self,
        event_id: &str,
        task_id: &str,
        message: &crate::tracker::types::ChatMessage,
    ) -> bool {
        if !self.shared.agent.live_control() {
            // The engine cannot take instructions mid-run: the message waits for the
            // run and is answered after it, in the same session.
            return false;
        }
        let control = lock(&self.shared.state)
            .running
            .get(task_id)
            .and_then(|r| r.control.clone());
        let Some(control) = control else { return false };
        let who = message.author.as_ref().and_then(|a| a.name.clone());
        let text = match &who {
            Some(name) => format!(
                "{name} writes on this task while you work on it:\n\n{}",
                message.content
            ),
            None => format!(
                "A message on this task while you work on it:\n\n{}",
                message.content
            ),
        };
        let Ok(receipt) = control.instruct_with_receipt(text, crate::agent::control::Role::User)
        else {
            return false;
        };
        tracing::info!(task = task_id, message = %message.id, "chat message passed to the running task");
        // The event is done only once the message is durably in the run's session; a
        // run that ends without reading it leaves it to be answered after, as a chat
        // job. A crash before either replays the event.
        let (me, event_id, task_id, message) = (
            self.clone(),
            event_id.to_string(),
            task_id.to_string(),
            message.clone(),
        );
        tokio::spawn(async move {
            if receipt.await.is_ok() {
                me.report(
                    &task_id,
                    vec![Report::comment(
                        "Noted: I passed this to the work on this task that is under way; its result will take it into account.",
                        Some(message.id.clone()),
                    )],
                )
                .await;
                me.mark_done(&event_id);
            } else {
                let mut st = lock(&me.shared.state);
                if st.cancelled.contains(&task_id) {
                    drop(st);
                    tracing::info!(task = %task_id, message = %message.id, "the task was cancelled before its run read the chat message");
                    me.mark_done(&event_id);
                    return;
                }
                tracing::info!(task = %task_id, message = %message.id, "the run ended before reading the chat message; it will be answered after");
                // Next for its task, before anything that came later.
                st.queue.push_front(Job {
                    event_id,
                    task_id,
                    kind: JobKind::Chat {
                        message_id: message.id,
                        content: message.content,
                        author: message.author.and_then(|a| a.name),
                    },
                });
                drop(st);
                me.schedule();
            }
        });
        true
    }

    fn cancel(&self, event_id: &str, task_id: &str, reason: Option<String>) {
        let (dropped, running) = {
            let mut st = lock(&self.shared.state);
            st.cancelled.insert(task_id.to_string());
            let mut dropped = Vec::new();
            st.queue.retain(|j| {
                let keep = j.task_id != task_id;
                if !keep {
                    dropped.push(j.event_id.clone());
                }
                keep
            });
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
        for id in &dropped {
            self.mark_done(id);
        }
        tracing::info!(
            task = task_id,
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
            let (me, task, event) = (self.clone(), task_id.to_string(), event_id.to_string());
            tokio::spawn(async move {
                me.report(&task, vec![Report::comment(content, None)]).await;
                me.mark_done(&event);
            });
        } else {
            self.mark_done(event_id);
        }
        self.shared.changed.notify_waiters();
    }

    /// Queues reports off the runtime's threads: the outbox syncs to disk.
    async fn push(&self, task_id: &str, reports: Vec<Report>) -> std::io::Result<()> {
        let (outbox, task) = (self.shared.outbox.clone(), task_id.to_string());
        tokio::task::spawn_blocking(move || outbox.push(&task, reports))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }

    async fn report(&self, task_id: &str, reports: Vec<Report>) {
        if let Err(e) = self.push(task_id, reports).await {
            tracing::error!(task = task_id, "cannot queue a report: {e}");
        }
    }

    fn mark_done(&self, event_id: &str) {
        if let Err(e) = lock(&self.shared.journal).done(event_id) {
            tracing::error!(id = event_id, "cannot record a finished event: {e}");
        }
    }

    /// Starts queued jobs while there is capacity, oldest first, one run per task.
    fn schedule(&self) {
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
            let me = self.clone();
            tokio::spawn(async move { me.run_job(job, cancel).await });
        }
    }

    async fn run_job(self, job: Job, cancel: CancellationToken) {
        // The journal syncs: off the runtime's threads.
        let (journal, event) = (self.shared.journal.clone(), job.event_id.clone());
        let started = tokio::task::spawn_blocking(move || lock(&journal).started(&event))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        let attempt = match started {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("cannot record a started event: {e}");
                1
            }
        };
        let task = job.task_id.clone();
        let session_id = session_for(&task);
        let prompt = match &job.kind {
            JobKind::Task { title, description } => {
                if attempt > MAX_ATTEMPTS {
                    let content = format!(
                        "**picogent stopped retrying this task.** Work on it was interrupted {} times (the daemon stopped or crashed while it ran), so it is not started again automatically. The conversation so far is saved in session `{session_id}`.",
                        attempt - 1
                    );
                    self.report(
                        &task,
                        vec![Report::comment(content, None), Report::status("blocked")],
                    )
                    .await;
                    self.finish(&job, true);
                    return;
                }
                self.report(&task, vec![Report::status("in_progress")])
                    .await;
                let mut p = String::new();
                if attempt > 1 {
                    p.push_str("picogent was restarted while you were working on this task, so your last step may not have finished. Check the current state of the working folder, then continue.\n\n");
                }
                p.push_str(&format!("Task: {title}"));
                if !description.trim().is_empty() {
                    p.push_str(&format!("\n\n{description}"));
                }
                p
            }
            JobKind::Chat {
                content, author, ..
            } => match author {
                Some(a) => format!("{a} writes on this task:\n\n{content}"),
                None => content.clone(),
            },
        };
        tracing::info!(task = %task, event = %job.event_id, attempt, "run started");
        let mut handle = self
            .shared
            .agent
            .start_with_cancel(RunRequest::new(prompt, session_id.clone()), cancel);
        if matches!(job.kind, JobKind::Task { .. }) {
            if let Some(r) = lock(&self.shared.state).running.get_mut(&task) {
                r.control = Some(handle.control.clone());
            }
        }
        let mut outcome = None;
        while let Some(ev) = handle.events.recv().await {
            match ev {
                AgentEvent::ToolCall { summary, .. } => tracing::info!(task = %task, "{summary}"),
                AgentEvent::Finished { outcome: o } => outcome = Some(o),
                _ => {}
            }
        }
        let outcome = match outcome {
            Some(o) => o,
            None => handle.finish().await,
        };
        let why = lock(&self.shared.state)
            .running
            .get_mut(&task)
            .and_then(|r| r.why.take());
        let done = match self.report_outcome(&job, &session_id, outcome, why) {
            Some(reports) => self.queue_or_retry(&job, reports).await,
            None => false,
        };
        self.finish(&job, done);
    }

    /// The reports for an outcome; `None` when the event must stay pending.
    fn report_outcome(
        &self,
        job: &Job,
        session_id: &str,
        outcome: Outcome,
        why: Option<StopReason>,
    ) -> Option<Vec<Report>> {
        let task = &job.task_id;
        let reply_to = match &job.kind {
            JobKind::Chat { message_id, .. } => Some(message_id.clone()),
            JobKind::Task { .. } => None,
        };
        let is_task = reply_to.is_none();
        let what = if is_task { "task" } else { "message" };
        let reports = match (outcome, why) {
            (Outcome::Cancelled { .. }, Some(StopReason::Shutdown)) => {
                tracing::info!(task = %task, "run interrupted by shutdown; it resumes at the next start");
                return None;
            }
            (Outcome::Completed { text, .. }, None | Some(StopReason::Shutdown)) => {
                let content = if text.trim().is_empty() {
                    "(The agent finished without a written answer.)".to_string()
                } else {
                    text
                };
                answer(content, reply_to, "review")
            }
            (Outcome::Completed { text, .. }, Some(StopReason::Cancelled(_))) => {
                // The answer arrived as the cancellation did: keep the answer, but the
                // tracker owns the status now.
                let content = format!(
                    "{text}\n\n_(This finished just as the {what} was cancelled; the status was left as the tracker set it.)_"
                );
                vec![Report::comment(content, reply_to)]
            }
            (
                Outcome::Failed { steps, .. } | Outcome::Cancelled { steps, .. },
                Some(StopReason::Cancelled(reason)),
            ) => {
                let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
                let content = format!(
                    "Work on this {what} was cancelled{reason} after {steps} model turn(s). Changes already made in the working folder were kept as they are; the conversation is saved in session `{session_id}`."
                );
                vec![Report::comment(content, reply_to)]
            }
            (Outcome::Failed { error, .. }, None | Some(StopReason::Shutdown)) => {
                failure(reply_to, session_id, &error)
            }
            (Outcome::Cancelled { .. }, None) => {
                failure(reply_to, session_id, "the run was cancelled")
            }
        };
        Some(reports)
    }

    /// Queues an outcome's reports. When the outbox cannot take them (a full disk),
    /// the event stays pending, `/healthz` says the daemon is degraded, and they are
    /// queued again every few seconds until it can; only then is the event done.
    async fn queue_or_retry(&self, job: &Job, reports: Vec<Report>) -> bool {
        let Err(e) = self.push(&job.task_id, reports.clone()).await else {
            return true;
        };
        tracing::error!(task = %job.task_id, "cannot queue the result, will retry: {e}");
        {
            let mut d = lock(&self.shared.degraded);
            d.0 += 1;
            d.1 = format!("cannot queue reports: {e}");
        }
        let (me, task, event) = (self.clone(), job.task_id.clone(), job.event_id.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REPORT_RETRY).await;
                match me.push(&task, reports.clone()).await {
                    Ok(()) => {
                        lock(&me.shared.degraded).0 -= 1;
                        tracing::info!(task = %task, "the result is queued after all");
                        me.mark_done(&event);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(task = %task, "still cannot queue the result: {e}");
                        lock(&me.shared.degraded).1 = format!("cannot queue reports: {e}");
                    }
                }
            }
        });
        false
    }

    /// Why the daemon cannot currently keep its promises, if it cannot.
    pub fn degraded(&self) -> Option<String> {
        let d = lock(&self.shared.degraded);
        (d.0 > 0).then(|| format!("{} ({} result(s) waiting)", d.1, d.0))
    }

    fn finish(&self, job: &Job, done: bool) {
        if done {
            self.mark_done(&job.event_id);
        }
        lock(&self.shared.state).running.remove(&job.task_id);
        tracing::info!(task = %job.task_id, "run ended");
        self.shared.changed.notify_waiters();
        self.schedule();
    }

    /// What the heartbeat says.
    pub fn load(&self) -> Load {
        let st = lock(&self.shared.state);
        let mut active: Vec<String> = st.running.keys().cloned().collect();
        active.sort();
        Load {
            status: if active.is_empty() { "idle" } else { "busy" },
            active_tasks: active,
            queued: st.queue.len(),
        }
    }

    /// Stops starting new work, lets running work finish for `grace`, then cancels it;
    /// cancelled work stays in the journal and resumes at the next start.
    pub async fn shutdown(&self, grace: Duration) {
        lock(&self.shared.state).draining = true;
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

/// How long between attempts to queue a result the outbox refused.
const REPORT_RETRY: Duration = Duration::from_secs(2);

/// A comment, then (for a task, not a chat reply) the status it leads to.
fn answer(content: String, reply_to: Option<String>, status: &str) -> Vec<Report> {
    let is_task = reply_to.is_none();
    let mut reports = vec![Report::comment(content, reply_to)];
    if is_task {
        reports.push(Report::status(status));
    }
    reports
}

fn failure(reply_to: Option<String>, session_id: &str, error: &str) -> Vec<Report> {
    let content = if reply_to.is_none() {
        format!("**picogent could not finish this task.**\n\n{error}\n\nThe conversation so far is saved in session `{session_id}`.")
    } else {
        format!("**picogent could not answer this message.**\n\n{error}")
    };
    answer(content, reply_to, "blocked")
}
