//! The clones of `github.repos`, one per repository on each worker, made on a task's
//! first use (`<agent home>/repos/<owner>/<name>`, beside the worktrees: a run reads
//! its clone's git folder as it reads a checkout's), fetched before each new task
//! branches. Together they stay under `github.clone_cache_mb`: when a new clone passes
//! it, the clones used longest ago that hold no task's worktree and that no run has
//! open are removed (made again when a task needs them).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::BoxFuture;

use super::desks::{Desk, Desks};
use crate::tracker::types::TaskId;
use crate::tracker::worktree::{Credential, RepoTrees, WorktreeError, Worktrees};

/// Touched at each use: the clone's last use, for the eviction's order.
const USED: &str = ".git/picogent-used";

impl Desks {
    fn clones_root(&self) -> Result<PathBuf, WorktreeError> {
        self.kit.cfg.clones_dir().ok_or_else(|| {
            WorktreeError::Setup(
                "github.repos needs a folder for its clones: run from an agent directory, or set HOME".into(),
            )
        })
    }

    /// The desk's clone's worktrees: made (cloned) on first use; its use noted.
    async fn clone_of(&self, desk: &Arc<Desk>) -> Result<Arc<Worktrees>, WorktreeError> {
        let mut trees = desk.trees.lock().await;
        let key = key_of(&desk.repo);
        let dir = self.clones_root()?.join(&key);
        if let Some(w) = trees.as_ref() {
            tokio::task::spawn_blocking(move || touch(&dir)).await.ok();
            return Ok(w.clone());
        }
        let cfg = self.kit.cfg.clone();
        let auth = self.kit.api.auth().clone();
        let credential = Credential {
            user: "x-access-token",
            token: Arc::new(move || auth.current()),
            host: super::web_host(&self.kit.gh.api_url),
        };
        let (remote, base) = (desk.remote.clone(), desk.base.clone());
        let made = tokio::task::spawn_blocking(move || {
            let w = Worktrees::of_clone(&cfg, (&dir, &key), (remote, Some(credential)), &base);
            touch(&dir);
            w
        })
        .await
        .map_err(|e| WorktreeError::Setup(format!("the clone's task failed: {e}")))?
        .map_err(|e| WorktreeError::Setup(format!("cannot clone {}: {e}", desk.repo)))?;
        let made = Arc::new(made);
        // Where the clones' worktrees go: `<root>/<owner>/<name>`.
        if let Some(base) = made.root().parent().and_then(Path::parent) {
            let _ = self.trees_base.set(base.to_path_buf());
        }
        *trees = Some(made.clone());
        drop(trees);
        tracing::info!(repository = %desk.repo, "cloned for its tasks");
        self.keep_under_limit(&desk.repo).await;
        Ok(made)
    }

    /// Removes the clones used longest ago, holding no task's worktree, until all of
    /// them take at most `clone_cache_mb` (never `keep`'s, just made).
    async fn keep_under_limit(&self, keep: &str) {
        let limit = self.kit.gh.clone_cache_bytes;
        let (Ok(root), Some(trees_root)) = (self.clones_root(), self.trees_base.get().cloned())
        else {
            return;
        };
        let listed = trees_root.clone();
        let sized = tokio::task::spawn_blocking(move || sizes(&root, &listed))
            .await
            .unwrap_or_default();
        let mut total: u64 = sized.iter().map(|c| c.bytes).sum();
        for c in sized {
            if total <= limit {
                break;
            }
            if c.key == key_of(keep) || c.busy {
                continue;
            }
            // The desk's clone is let go first, under its lock, unless a run holds it
            // (or a task's worktree appeared since): no task opens it while it goes. A
            // clone whose desk is not made (yet) is left: nothing could hold it off.
            let Some(desk) = self.known(&c.key) else {
                continue;
            };
            let mut held = desk.trees.lock().await;
            let in_use = held.as_ref().is_some_and(|w| Arc::strong_count(w) > 1);
            let trees = trees_root.join(&c.key);
            if in_use || has_entries(&trees) {
                continue;
            }
            *held = None;
            let records = self.kit.cfg.state_dir().join("worktrees").join(&c.key);
            let dir = c.dir.clone();
            let removed = tokio::task::spawn_blocking(move || {
                for d in [&dir, &trees, &records] {
                    if d.exists() {
                        crate::util::remove_tree(d)?;
                    }
                }
                Ok::<_, crate::util::RemoveTreeError>(())
            })
            .await;
            match removed {
                Ok(Ok(())) => {
                    tracing::info!(repository = %c.key, bytes = c.bytes, limit, "a clone unused the longest was removed to keep the clones under github.clone_cache_mb");
                    total = total.saturating_sub(c.bytes);
                }
                Ok(Err(e)) => tracing::warn!(repository = %c.key, "cannot remove a clone: {e}"),
                Err(e) => tracing::warn!(repository = %c.key, "cannot remove a clone: {e}"),
            }
        }
        if total > limit {
            tracing::warn!(
                bytes = total,
                limit,
                "the clones take more than github.clone_cache_mb, and each left holds a task's worktree"
            );
        }
    }
}

fn has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

/// A repository's folder under the cache: `owner/name`, in lower case.
fn key_of(repo: &str) -> String {
    repo.to_ascii_lowercase()
}

fn touch(dir: &Path) {
    let _ = std::fs::write(dir.join(USED), b"");
}

struct Sized {
    key: String,
    dir: PathBuf,
    bytes: u64,
    used: SystemTime,
    /// A task's worktree is in it.
    busy: bool,
}

/// Every clone under `root` (`owner/name`), least recently used first.
fn sizes(root: &Path, trees_root: &Path) -> Vec<Sized> {
    let mut out = Vec::new();
    let owners = std::fs::read_dir(root).into_iter().flatten().flatten();
    for owner in owners {
        for repo in std::fs::read_dir(owner.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = repo.path();
            let key = format!(
                "{}/{}",
                owner.file_name().to_string_lossy(),
                repo.file_name().to_string_lossy()
            );
            let used = std::fs::metadata(dir.join(USED))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let trees = trees_root.join(&key);
            let busy = has_entries(&trees);
            let bytes = crate::util::tree_size(&dir) + crate::util::tree_size(&trees);
            out.push(Sized {
                key,
                dir,
                bytes,
                used,
                busy,
            });
        }
    }
    out.sort_by_key(|c| c.used);
    out
}

impl RepoTrees for Desks {
    fn ready<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<(Arc<Worktrees>, TaskId), WorktreeError>> {
        Box::pin(async move {
            let (desk, n) = self.of_task(task).await.ok_or_else(|| {
                WorktreeError::Setup(format!(
                    "task {task} is no issue of a repository github.repos names"
                ))
            })?;
            let w = self.clone_of(&desk).await?;
            Ok((w, TaskId::of_issue(n)))
        })
    }

    fn known<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Option<(Arc<Worktrees>, TaskId)>> {
        Box::pin(async move {
            let (desk, n) = self.of_task(task).await?;
            let dir = self.clones_root().ok()?.join(key_of(&desk.repo));
            let open = {
                let trees = desk.trees.lock().await;
                // Looked at under the lock the eviction takes.
                (trees.clone(), dir.is_dir())
            };
            let w = match open {
                (Some(w), _) => w,
                // A clone from before a restart is opened again; none is made.
                (None, true) => self.clone_of(&desk).await.ok()?,
                (None, false) => return None,
            };
            Some((w, TaskId::of_issue(n)))
        })
    }

    fn root(&self) -> PathBuf {
        self.clones_root()
            .unwrap_or_else(|_| self.kit.cfg.state_dir())
    }
}
