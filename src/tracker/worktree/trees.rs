//! Where each task's worktree comes from: the one repository `work_dir` is in, or
//! (GitHub's `repos`) the repository of the task's issue, cloned on first use by the
//! tracker's side (`RepoTrees`). The router asks here, never a repository directly.

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{TaskTree, WorktreeError, Worktrees};
use crate::tracker::types::TaskId;

/// The repositories of tasks that are not all in one (GitHub's `repos`).
pub(crate) trait RepoTrees: Send + Sync {
    /// The worktrees of the task's repository, ready for a run (cloned on first use,
    /// fetched before a new task branches), and the task's id within them.
    fn ready<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<(Arc<Worktrees>, TaskId), WorktreeError>>;
    /// The same, when that repository has a clone here already (nothing is cloned).
    fn known<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Option<(Arc<Worktrees>, TaskId)>>;
    /// Where the clones and their worktrees go.
    fn root(&self) -> PathBuf;
}

/// The router's view of the tasks' worktrees.
#[derive(Clone)]
pub(crate) enum Trees {
    One(Arc<Worktrees>),
    PerRepo(Arc<dyn RepoTrees>),
}

impl Trees {
    /// The task's worktree for a run, with the repository's worktrees it is one of.
    pub(crate) async fn open(
        &self,
        task: &TaskId,
    ) -> Result<(Arc<Worktrees>, TaskTree), WorktreeError> {
        let (w, local) = match self {
            Trees::One(w) => (w.clone(), task.clone()),
            Trees::PerRepo(repos) => repos.ready(task).await?,
        };
        let tree = w.open(&local).await?;
        Ok((w, tree))
    }

    /// The task's repository's worktrees and its id there, when they are here.
    pub(crate) async fn known(&self, task: &TaskId) -> Option<(Arc<Worktrees>, TaskId)> {
        match self {
            Trees::One(w) => Some((w.clone(), task.clone())),
            Trees::PerRepo(repos) => repos.known(task).await,
        }
    }

    /// Removes a task's worktree (its branch stays), when it has one here.
    pub(crate) async fn discard(&self, task: &TaskId) {
        if let Some((w, local)) = self.known(task).await {
            w.discard(&local).await;
        }
    }
}
