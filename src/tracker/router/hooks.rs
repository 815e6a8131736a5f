//! What a tracker asks of the router besides taking events (GitHub's intake): its
//! pending events, whether a task has work, ending an idle task, and tasks the
//! router's shutdown waits for. What the router asks of the tracker is its `Tracker`
//! hooks (`tracker::seam`).

use super::{lock, Router};
use crate::tracker::types::{Arrival, TaskId};

impl Router {
    /// Events accepted and not finished (journaled before a restart).
    pub(crate) fn pending_arrivals(&self) -> Vec<Arrival> {
        self.shared
            .journal
            .pending()
            .into_iter()
            .map(|p| p.arrival)
            .collect()
    }

    /// Tells a fleet's worker loop to look for work: a door committed an event to the
    /// store itself (in a transaction of its own, with what it decided).
    pub(crate) fn wake_fleet(&self) {
        self.shared.fleet_wake.notify_one();
    }

    /// Whether a run of the task is going or waiting.
    pub(crate) fn has_work(&self, task_id: &TaskId) -> bool {
        let st = lock(&self.shared.state);
        st.running.contains_key(task_id)
            || st.queue.iter().any(|j| j.task_id == *task_id)
            || st.settling.contains_key(task_id)
    }

    /// Removes an idle task's worktree (its branch stays): the task ended without a
    /// cancellation to report.
    pub(crate) fn forget_task(&self, task_id: &TaskId) {
        let (me, task) = (self.clone(), task_id.clone());
        self.shared.tasks.spawn(async move {
            if let Some(w) = &me.shared.worktrees {
                w.discard(&task).await;
            }
        });
    }

    /// Lets an unwanted task go without a word: its queued jobs are dropped (their
    /// events done), a chat message its run never read is not answered, and its
    /// worktree is removed (its branch stays).
    pub(crate) fn let_go(&self, task_id: &TaskId) {
        let dropped = lock(&self.shared.state).drop_task(task_id);
        for id in &dropped {
            self.shared.journal.done(id, task_id);
        }
        self.forget_task(task_id);
    }
}
