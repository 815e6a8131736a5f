//! One job's life: it waits for room on its disks, is counted as an attempt, opens its
//! worktree, drives the agent, commits what it did, and queues its reports; a job the
//! daemon gave up on before it began says so or stays pending. A start that fails for
//! lack of room (the worktree, the session, the state) waits for room again and retries.

use tokio_util::sync::CancellationToken;

use super::{lock, session_for, Job, JobKind, Router, StopReason, MAX_ATTEMPTS};
use crate::agent::{AgentEvent, FailureKind, Outcome, RunRequest, WorktreeRun};
use crate::tracker::delivery;
use crate::tracker::types::{Report, TaskStatus};
use crate::tracker::worktree::{FolderStatus, TaskTree, Worktrees};

/// A task's worktree, with the repository's worktrees it is one of.
type Opened = (std::sync::Arc<Worktrees>, TaskTree);

impl Router {
    pub(super) async fn run_job(self, job: Job, cancel: CancellationToken) {
        // Not counted as an attempt, and nothing reported, until it can really start.
        if !self.shared.room.wait(&job.task_id, &cancel).await {
            return self.never_started(job).await;
        }
        if let JobKind::Task { .. } = &job.kind {
            let admitted = tokio::select! {
                ok = self.shared.tracker.admit(&job.task_id) => ok,
                _ = cancel.cancelled() => false,
            };
            if cancel.is_cancelled() {
                return self.never_started(job).await;
            }
            if !admitted {
                tracing::info!(task = %job.task_id, "the tracker no longer wants this task: not run");
                self.let_go(&job.task_id);
                return self.finish(&job, true);
            }
        }
        let attempt = self.record_start(&job.event_id).await;
        let session_id = session_for(&job.task_id);
        let Some(prompt) = self.prompt(&job, attempt, &session_id).await else {
            return;
        };
        let mut request = RunRequest::new(prompt, session_id.clone());
        let tree = match self.open_tree(&job, &session_id, &cancel).await {
            Ok(tree) => tree,
            Err(Some(reports)) => return self.report_and_end(&job, reports).await,
            Err(None) => return self.never_started(job).await,
        };
        if let Some((w, t)) = &tree {
            request.work_dir = Some(t.work_dir.clone());
            request.worktree = Some(WorktreeRun {
                checkout: w.checkout().to_path_buf(),
                repository: w.repository().to_path_buf(),
                worktree: t.path.clone(),
                own_clone: w.own_clone(),
            });
        }
        let before = match &self.shared.shared_folder {
            Some(f) => Some(f.before().await),
            None => None,
        };
        tracing::info!(task = %job.task_id, event = %job.event_id, attempt, "run started");
        let outcome = loop {
            let outcome = self.drive(&job, request.clone(), cancel.clone()).await;
            // Its session or first checkpoint had no room: nothing was done yet.
            let Some(error) = no_room_at_start(&outcome) else {
                break outcome;
            };
            if !self.shared.room.retry(&job.task_id, &cancel, error).await {
                return self.never_started(job).await;
            }
        };
        self.conclude(&job, &session_id, outcome, (tree, before))
            .await;
    }

    /// The run's prompt: a task's (reported in progress first), or a chat message's.
    /// `None` once a task interrupted too often was reported blocked instead.
    async fn prompt(&self, job: &Job, attempt: u32, session_id: &str) -> Option<String> {
        match &job.kind {
            JobKind::Task { title, description } => {
                if attempt > MAX_ATTEMPTS {
                    let reports = delivery::stopped_retrying(attempt - 1, session_id);
                    self.report_and_end(job, reports).await;
                    return None;
                }
                self.shared
                    .delivery
                    .report(&job.task_id, vec![Report::status(TaskStatus::InProgress)])
                    .await;
                Some(task_prompt(title, description, attempt))
            }
            JobKind::Chat {
                content, author, ..
            } => Some(match author {
                Some(a) => format!("{a} writes on this task:\n\n{content}"),
                None => content.clone(),
            }),
        }
    }

    /// After the run: what changed (its worktree closed, or the shared folder's
    /// changes), the reports queued (the event done once they are), the job ended.
    async fn conclude(
        &self,
        job: &Job,
        session_id: &str,
        outcome: Outcome,
        (tree, before): (Option<Opened>, Option<FolderStatus>),
    ) {
        let task = job.task_id.clone();
        let delivery = self.shared.delivery.clone();
        let why = lock(&self.shared.state)
            .running
            .get_mut(&task)
            .and_then(|r| r.why.take());
        // The task's commit the comment names: recorded as named once it is queued.
        let mut named = None;
        let mut proposal = None;
        let answer = match &outcome {
            Outcome::Completed { text, .. } => Some(text.clone()),
            _ => None,
        };
        // The repository's worktrees the commit it names is recorded in.
        let opened = tree.as_ref().map(|(w, _)| w.clone());
        let appendix = match (&self.shared.shared_folder, before) {
            (Some(f), Some(before)) => f.changed_since(before).await,
            _ => self
                .close_tree(job, tree, &outcome, &why)
                .await
                .map(|closed| {
                    named = closed.named;
                    // A finished run's pushed branch is proposed where the tracker
                    // takes proposals (GitHub's pull requests).
                    if closed.pushed && self.shared.tracker.proposes() {
                        proposal = answer.map(|summary| Report::PullRequest {
                            branch: closed.branch,
                            summary,
                        });
                    }
                    closed.text
                }),
        };
        let mut reports =
            delivery::outcome_reports(&task, job.reply_to(), session_id, outcome, why);
        if let (Some(reports), Some(text)) = (&mut reports, appendix) {
            if let Some(Report::Comment { content, .. }) = reports.first_mut() {
                content.push_str("\n\n");
                content.push_str(&text);
            }
        }
        if let (Some(reports), Some(p)) = (&mut reports, proposal) {
            // Before the result, so the result can name the pull request.
            reports.insert(0, p);
        }
        let record_named = {
            let tasks = self.shared.tasks.clone();
            move || {
                if let (Some(w), Some((slug, commit))) = (opened, named) {
                    // A small synced write, off the runtime's threads, owned by the router.
                    tasks.spawn_blocking(move || w.reported(&slug, &commit));
                }
            }
        };
        // Without reports (a shutdown interrupted the run) the event stays pending.
        if let Some(reports) = reports {
            let (me, event, t) = (self.clone(), job.event_id.clone(), task.clone());
            // The task has work here until its result is queued (a fleet's worker
            // keeps its lease meanwhile).
            let settling = self.settling(&task);
            // Called when the reports are queued, now or after retries: the event is
            // marked done there, and the commit recorded as named.
            delivery
                .queue_or_retry(&task, reports, vec![job.event_id.clone()], move || {
                    me.mark_done(&event, &t);
                    record_named();
                    drop(settling);
                })
                .await;
        }
        self.finish(job, false);
    }

    /// Queues a job's reports (the event is marked done once they are queued, now or
    /// after retries) and ends it.
    async fn report_and_end(&self, job: &Job, reports: Vec<Report>) {
        let (me, event, task) = (self.clone(), job.event_id.clone(), job.task_id.clone());
        self.shared
            .delivery
            .queue_or_retry(
                &job.task_id,
                reports,
                vec![job.event_id.clone()],
                move || me.mark_done(&event, &task),
            )
            .await;
        self.finish(job, false);
    }

    /// A run stopped while it waited for room to start: reported as a run cancelled
    /// before its first turn; on shutdown its event stays pending for the next start.
    async fn never_started(&self, job: Job) {
        let why = lock(&self.shared.state)
            .running
            .get_mut(&job.task_id)
            .and_then(|r| r.why.take());
        match why {
            // Shutdown: pending for the next start.
            Some(StopReason::Shutdown | StopReason::LeaseLost) | None => self.finish(&job, false),
            Some(StopReason::Cancelled(reason)) => {
                // A worktree made before the wait goes, as a cancelled run's does.
                if let Some(w) = &self.shared.worktrees {
                    w.discard(&job.task_id).await;
                }
                let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
                let content = format!("Work on this was cancelled{reason} before it started; nothing was run or changed.");
                let reports = vec![Report::comment(content, job.reply_to())];
                self.report_and_end(&job, reports).await;
            }
        }
    }

    /// Records in the journal that the event's work starts; returns which attempt this
    /// is (1 when it cannot be recorded).
    async fn record_start(&self, event_id: &str) -> u32 {
        self.shared.journal.started(event_id).await
    }

    /// The task's worktree, when tasks have their own; the reports for a task that
    /// cannot get one. One that fails for lack of room is made again once there is
    /// room (`Err(None)`: the wait was stopped first).
    async fn open_tree(
        &self,
        job: &Job,
        session_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<Opened>, Option<Vec<Report>>> {
        let Some(w) = &self.shared.worktrees else {
            return Ok(None);
        };
        loop {
            let e = match w.open(&job.task_id).await {
                Ok(tree) => return Ok(Some(tree)),
                Err(e) => e,
            };
            if e.no_room() {
                if !self
                    .shared
                    .room
                    .retry(&job.task_id, cancel, &e.to_string())
                    .await
                {
                    return Err(None);
                }
                continue;
            }
            tracing::error!(task = %job.task_id, "cannot prepare the task's worktree: {e}");
            let why = format!("Its git worktree could not be prepared: {e}");
            return Err(Some(delivery::failure(job.reply_to(), session_id, &why)));
        }
    }

    /// Commits the run's work on the task's branch (not when shutdown interrupted it:
    /// it resumes in the same worktree); the comment's section about it.
    async fn close_tree(
        &self,
        job: &Job,
        tree: Option<Opened>,
        outcome: &Outcome,
        why: &Option<StopReason>,
    ) -> Option<crate::tracker::worktree::Closed> {
        let (w, tree) = tree?;
        let interrupted = matches!(
            (outcome, why),
            (
                Outcome::Cancelled { .. },
                Some(StopReason::Shutdown | StopReason::LeaseLost)
            )
        );
        if interrupted {
            return None;
        }
        let subject = match &job.kind {
            JobKind::Task { title, .. } => title.clone(),
            JobKind::Chat { content, .. } => {
                format!("Follow-up: {}", crate::util::one_line(content, 60))
            }
        };
        let cancelled = matches!(why, Some(StopReason::Cancelled(_)));
        Some(w.close(tree, subject, outcome, cancelled).await)
    }

    /// Runs the agent on the job's prompt until it ends, logging its tool calls.
    async fn drive(&self, job: &Job, request: RunRequest, cancel: CancellationToken) -> Outcome {
        let task = &job.task_id;
        let mut handle = self.shared.agent.start_with_cancel(request, cancel);
        if matches!(job.kind, JobKind::Task { .. }) {
            if let Some(r) = lock(&self.shared.state).running.get_mut(task) {
                r.control = Some(handle.control.clone());
            }
        }
        let mut outcome = None;
        while let Some(ev) = handle.events.recv().await {
            match ev {
                AgentEvent::ToolCall { summary, .. } => {
                    tracing::info!(task = %task, "{summary}");
                    if let JobKind::Task { .. } = &job.kind {
                        self.shared.tracker.step(task, &summary);
                    }
                }
                AgentEvent::Finished { outcome: o } => outcome = Some(o),
                _ => {}
            }
        }
        match outcome {
            Some(o) => o,
            None => handle.finish().await,
        }
    }

    fn finish(&self, job: &Job, done: bool) {
        if done {
            self.mark_done(&job.event_id, &job.task_id);
        }
        lock(&self.shared.state).running.remove(&job.task_id);
        tracing::info!(task = %job.task_id, "run ended");
        self.shared.changed.notify_waiters();
        // A fleet's worker lets the task go and claims the next at once.
        self.shared.fleet_wake.notify_one();
        self.schedule();
    }
}

/// The error of a run that failed for lack of room before its first model turn (its
/// session or first checkpoint could not be written): nothing was done, so it starts
/// again once there is room instead of failing.
fn no_room_at_start(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::Failed {
            kind: FailureKind::Infrastructure,
            error,
            steps: 0,
            ..
        } if crate::util::says_no_room(error) => Some(error),
        _ => None,
    }
}

/// The prompt for work on a task; after a restart it says the last step may not have
/// finished.
fn task_prompt(title: &str, description: &str, attempt: u32) -> String {
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
