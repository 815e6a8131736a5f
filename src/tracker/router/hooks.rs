//! What a tracker other than Team Board adds to a task's life (`TaskHooks`: GitHub's
//! progress comment, pull requests, and the last look before a run), and what such a
//! tracker asks of the router: its pending events, whether a task has work, ending an
//! idle task, and tasks the router's shutdown waits for.

use super::{lock, Router};
use crate::tracker::types::Envelope;

/// What a tracker other than Team Board adds to a task's life (GitHub's progress
/// comment and pull requests).
pub(crate) trait TaskHooks: Send + Sync {
    /// A step of a task's run (a tool call), as the log shows it.
    fn step(&self, task: &str, summary: &str);
    /// Whether a finished run's pushed branch is proposed (`Report::PullRequest`).
    fn proposes(&self) -> bool;
    /// Asked right before a task's run starts: whether the task is still wanted (a
    /// task whose issue was closed meanwhile is not run, and its event is done).
    fn admit(
        &self,
        task: &str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'static>>;
}

impl Router {
    /// Whether finished runs' pushed branches are proposed as pull requests.
    pub(super) fn proposes(&self) -> bool {
        self.shared.hooks.as_ref().is_some_and(|h| h.proposes())
    }

    /// The tasks of events accepted and not finished (journaled before a restart).
    pub(crate) fn pending_events(&self) -> Vec<Envelope> {
        self.shared
            .journal
            .pending()
            .into_iter()
            .map(|p| p.envelope)
            .collect()
    }

    /// Whether a run of the task is going or waiting.
    pub(crate) fn has_work(&self, task_id: &str) -> bool {
        let st = lock(&self.shared.state);
        st.running.contains_key(task_id) || st.queue.iter().any(|j| j.task_id == task_id)
    }

    /// Removes an idle task's worktree (its branch stays): the task ended without a
    /// cancellation to report.
    pub(crate) fn forget_task(&self, task_id: &str) {
        let (me, task) = (self.clone(), task_id.to_string());
        self.shared.tasks.spawn(async move {
            if let Some(w) = &me.shared.worktrees {
                w.discard(&task).await;
            }
        });
    }

    /// Lets an unwanted task go without a word: its queued jobs are dropped (their
    /// events done), a chat message its run never read is not answered, and its
    /// worktree is removed (its branch stays).
    pub(crate) fn let_go(&self, task_id: &str) {
        let dropped = lock(&self.shared.state).drop_task(task_id);
        for id in &dropped {
            self.shared.journal.done(id);
        }
        self.forget_task(task_id);
    }

    /// Spawns a task the router's shutdown waits for.
    pub(crate) fn spawn_owned(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.shared.tasks.spawn(f);
    }
}
