//! Result delivery: what the tracker is told about a run (the comment or reply an
//! outcome becomes, and the status it leads to), and queuing those reports in the
//! durable outbox. When the outbox cannot take them (a full disk), they are queued
//! again every few seconds until it can, and the daemon says it is degraded meanwhile.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::Outcome;
use crate::tracker::outbox::{Outbox, QueueError};
use crate::tracker::types::{Report, TaskId, TaskStatus};
use crate::util::lock;

/// Why a run was stopped before it finished by itself.
pub(super) enum StopReason {
    Cancelled(Option<String>),
    Shutdown,
    /// A fleet's worker lost the task's lease: another worker takes it from here.
    LeaseLost,
}

/// How long between attempts to queue a result the outbox refused.
const REPORT_RETRY: Duration = Duration::from_secs(2);

pub(super) struct Delivery {
    outbox: Outbox,
    /// While results cannot be queued (say, the disk is full): how many wait, and why
    /// the last one could not be queued.
    degraded: Mutex<(usize, String)>,
    /// The retries of results the outbox refused; stopped and waited for at shutdown.
    retries: tokio_util::task::TaskTracker,
    stop: tokio_util::sync::CancellationToken,
}

impl Delivery {
    pub(super) fn new(outbox: Outbox) -> Delivery {
        Delivery {
            outbox,
            degraded: Mutex::new((0, String::new())),
            retries: tokio_util::task::TaskTracker::new(),
            stop: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Stops retrying results the outbox refused, and waits until no retry runs: their
    /// events stay pending in the journal and run again at the next start.
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        self.retries.close();
        // A retry in the middle of a write on a hung disk is left to the process's end.
        if tokio::time::timeout(Duration::from_secs(5), self.retries.wait())
            .await
            .is_err()
        {
            tracing::warn!("a result's retry is still writing at shutdown; left to the exit");
        }
        let waiting = lock(&self.degraded).0;
        if waiting > 0 {
            tracing::warn!(waiting, "results the outbox would not take are left pending; their events run again at the next start");
        }
    }

    /// Queues reports (the outbox's writer thread syncs them), as the conclusion of
    /// the events `concludes`.
    async fn push(
        &self,
        task_id: &TaskId,
        reports: Vec<Report>,
        concludes: Vec<String>,
    ) -> Result<(), QueueError> {
        self.outbox
            .push_concluding(task_id, reports, concludes)
            .await
    }

    /// Whether the event's concluding reports were queued before (see `Outbox::concluded`).
    pub(super) fn concluded(&self, event: &str) -> bool {
        self.outbox.concluded(event)
    }

    /// Queues reports; one that cannot be queued is logged and dropped.
    pub(super) async fn report(&self, task_id: &TaskId, reports: Vec<Report>) {
        if let Err(e) = self.push(task_id, reports, Vec::new()).await {
            tracing::error!(task = %task_id, "cannot queue a report: {e}");
        }
    }

    /// Queues the reports that conclude the events `concludes` (in one record with
    /// them, so none is worked again once they are queued); true when they
    /// are queued. When the outbox cannot take them, the daemon is degraded and they
    /// are queued again every few seconds until it can. `on_queued` is called once
    /// they are queued, at once or after retries (it marks the event done).
    pub(super) async fn queue_or_retry(
        self: &Arc<Self>,
        task_id: &TaskId,
        reports: Vec<Report>,
        concludes: Vec<String>,
        on_queued: impl FnOnce() + Send + 'static,
    ) -> bool {
        let Err(e) = self.push(task_id, reports.clone(), concludes.clone()).await else {
            // The instant between the two records (issue 36): the reports are on disk and
            // going out, the journal has not heard of it.
            crate::util::fault::point("result_queued");
            on_queued();
            return true;
        };
        if e.lease_lost() {
            tracing::warn!(task = %task_id, "the task is another worker's now: this run's result is not reported");
            return false;
        }
        tracing::error!(task = %task_id, "cannot queue the result, will retry: {e}");
        {
            let mut d = lock(&self.degraded);
            d.0 += 1;
            d.1 = format!("cannot queue reports: {e}");
        }
        let (me, task) = (self.clone(), task_id.clone());
        self.retries.spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(REPORT_RETRY) => {}
                    _ = me.stop.cancelled() => return,
                }
                match me.push(&task, reports.clone(), concludes.clone()).await {
                    Ok(()) => {
                        lock(&me.degraded).0 -= 1;
                        tracing::info!(task = %task, "the result is queued after all");
                        on_queued();
                        return;
                    }
                    Err(e) if e.lease_lost() => {
                        lock(&me.degraded).0 -= 1;
                        tracing::warn!(task = %task, "the task is another worker's now: this run's result is not reported");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(task = %task, "still cannot queue the result: {e}");
                        lock(&me.degraded).1 = format!("cannot queue reports: {e}");
                    }
                }
            }
        });
        false
    }

    /// Reports not yet delivered.
    /// Why the tracker is not taking reports, while it is not.
    pub(super) fn failing(&self) -> Option<String> {
        self.outbox.failing()
    }

    /// Why the tracker refuses reports, while it does.
    pub(super) fn refusing(&self) -> Option<String> {
        self.outbox.refusing()
    }

    /// Reports kept in the dead-letter file, and where.
    pub(super) fn dead_letters(&self) -> (usize, std::path::PathBuf) {
        self.outbox.dead_letters()
    }

    pub(super) fn backlog(&self) -> usize {
        self.outbox.len()
    }

    /// Why results cannot currently be queued, if they cannot.
    pub(super) fn degraded(&self) -> Option<String> {
        let d = lock(&self.degraded);
        (d.0 > 0).then(|| format!("{} ({} result(s) waiting)", d.1, d.0))
    }
}

/// The reports for a run's outcome: `reply_to` is the chat message it answers (`None`
/// for work on the task itself), `why` what stopped it. `None` when the event must
/// stay pending.
pub(super) fn outcome_reports(
    task: &TaskId,
    reply_to: Option<String>,
    session_id: &str,
    outcome: Outcome,
    why: Option<StopReason>,
) -> Option<Vec<Report>> {
    let what = if reply_to.is_none() {
        "task"
    } else {
        "message"
    };
    let reports = match (outcome, why) {
        (Outcome::Cancelled { .. }, Some(StopReason::Shutdown | StopReason::LeaseLost)) => {
            tracing::info!(task = %task, "run interrupted by shutdown; it resumes at the next start");
            return None;
        }
        (
            Outcome::Completed { text, .. },
            None | Some(StopReason::Shutdown | StopReason::LeaseLost),
        ) => {
            let content = if text.trim().is_empty() {
                "(The agent finished without a written answer.)".to_string()
            } else {
                text
            };
            answer(content, reply_to, TaskStatus::Review)
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
        (
            Outcome::Failed { error, .. },
            None | Some(StopReason::Shutdown | StopReason::LeaseLost),
        ) => failure(reply_to, session_id, &error),
        (Outcome::Cancelled { .. }, None) => failure(reply_to, session_id, "the run was cancelled"),
    };
    Some(reports)
}

/// The reports for a task whose work was interrupted `interrupted` times: it is blocked
/// rather than started again.
pub(super) fn stopped_retrying(interrupted: u32, session_id: &str) -> Vec<Report> {
    let content = format!(
        "**picogent stopped retrying this task.** Work on it was interrupted {interrupted} times (the daemon stopped or crashed while it ran), so it is not started again automatically. The conversation so far is saved in session `{session_id}`."
    );
    vec![
        Report::comment(content, None),
        Report::status(TaskStatus::Blocked),
    ]
}

/// A comment, then (for a task, not a chat reply) the status it leads to.
fn answer(content: String, reply_to: Option<String>, status: TaskStatus) -> Vec<Report> {
    let is_task = reply_to.is_none();
    let mut reports = vec![Report::comment(content, reply_to)];
    if is_task {
        reports.push(Report::status(status));
    }
    reports
}

pub(super) fn failure(reply_to: Option<String>, session_id: &str, error: &str) -> Vec<Report> {
    let content = if reply_to.is_none() {
        format!("**picogent could not finish this task.**\n\n{error}\n\nThe conversation so far is saved in session `{session_id}`.")
    } else {
        format!("**picogent could not answer this message.**\n\n{error}")
    };
    answer(content, reply_to, TaskStatus::Blocked)
}
