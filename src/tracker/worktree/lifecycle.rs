//! A task's worktree from its first event to its removal: made (or found again) before
//! a run, removed after `task.cancelled` or when the task has been quiet for
//! `worktree_retention_days`; worktrees picogent has no record of are only reported.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{now_secs, task_slug, Record, TaskTree, WorktreeError, Worktrees};
use crate::tracker::router::lock;

/// Whether git's record of a worktree says it is still being made.
fn initializing(admin: &Path) -> bool {
    std::fs::read_to_string(admin.join("locked")).is_ok_and(|l| l.contains("initializing"))
}

impl Worktrees {
    /// The task's worktree, made on its branch at the first event and found again at
    /// later ones (a chat message, a run resumed after a crash).
    pub(crate) fn prepare(&self, task_id: &str) -> Result<TaskTree, WorktreeError> {
        let _one = lock(&self.lock);
        let slug = task_slug(task_id);
        let branch = format!("picogent/{slug}");
        let path = self.root.join(&slug);
        let mut notes = Vec::new();
        let mut record = self.read_record(&slug).unwrap_or(Record {
            task: task_id.to_string(),
            branch: branch.clone(),
            path: path.clone(),
            ..Record::default()
        });
        // A `git worktree add` that never finished (picogent was killed during it)
        // left a folder that is not to be worked in: it is made again.
        if record.creating || self.admin_of(&path).is_some_and(|a| initializing(&a)) {
            tracing::warn!(worktree = %path.display(), "a worktree was being made when picogent stopped; making it again");
            self.discard_half_made(&path);
        }
        let admin = match self.admin_of(&path).filter(|_| path.is_dir()) {
            Some(admin) => admin,
            None => {
                self.prune_ours();
                if std::fs::symlink_metadata(&path).is_ok() {
                    return Err(WorktreeError::Setup(format!(
                        "{} exists but is not a worktree of {}; move it away and send the task again",
                        path.display(),
                        self.top.display()
                    )));
                }
                record.creating = true;
                // Dated now: the retention sweep must not take a record being made
                // for one from long ago.
                record.last_event = now_secs();
                self.write_record(&slug, &record)?;
                // The branch's lock a `worktree add` killed with picogent left.
                self.clear_stale_locks(&self.common.join("worktrees").join(&slug), &branch);
                self.add(&path, &branch, &mut notes)?;
                let admin = self.admin_of(&path).ok_or_else(|| {
                    WorktreeError::Setup(format!(
                        "git made no worktree record for {}",
                        path.display()
                    ))
                })?;
                // The checkout, as picogent's own child (git's `worktree add` would run
                // it as a grandchild, which outlives a killed picogent).
                let mut checkout = super::git(&path, &self.allowed);
                self.neutral(&mut checkout);
                checkout
                    .arg(format!("--git-dir={}", admin.display()))
                    .arg(format!("--work-tree={}", path.display()))
                    .args(["reset", "--hard", "--quiet"]);
                self.run(checkout)?;
                record.creating = false;
                // Work up to here was not the task's: a comment names what comes after.
                record.reported_tip = self.branch_tip(&branch);
                admin
            }
        };
        if record.reported_tip.is_none() {
            record.reported_tip = self.branch_tip(&branch);
        }
        // Locks of this task's own a killed git left: nothing of picogent's is running
        // on this worktree now, and nothing else has them open.
        self.clear_stale_locks(&admin, &branch);
        record.last_event = now_secs();
        self.write_record(&slug, &record)?;
        Ok(TaskTree {
            work_dir: path.join(&self.rel),
            path,
            branch,
            slug,
            admin,
            notes,
        })
    }

    /// Removes what an interrupted `git worktree add` left (the folder and git's record
    /// of it); the branch is kept.
    fn discard_half_made(&self, path: &Path) {
        if self.admin_of(path).is_some() {
            let mut cmd = self.repo_git();
            cmd.args(["worktree", "remove", "--force", "--force"])
                .arg(path);
            if let Err(e) = self.run(cmd) {
                tracing::warn!(worktree = %path.display(), "cannot remove the half-made worktree: {e}");
            }
        }
        if std::fs::symlink_metadata(path).is_ok() {
            if let Err(e) = crate::util::remove_tree(path) {
                tracing::warn!(worktree = %path.display(), "cannot remove the half-made worktree's folder: {e}");
            }
        }
        self.prune_ours();
    }

    /// The branch's tip (short id), if it exists.
    fn branch_tip(&self, branch: &str) -> Option<String> {
        let mut cmd = self.repo_git();
        cmd.args([
            "rev-parse",
            "--verify",
            "--quiet",
            "--short=12",
            &format!("refs/heads/{branch}"),
        ]);
        self.run(cmd).ok().filter(|t| !t.is_empty())
    }

    /// Removes lock files of the task's worktree and branch left by a git killed with
    /// an earlier daemon: older than this daemon (every git of its own on this task
    /// runs under the lock held now) and open in no process it can see.
    pub(super) fn clear_stale_locks(&self, admin: &Path, branch: &str) {
        let candidates = [
            admin.join("index.lock"),
            admin.join("HEAD.lock"),
            self.common
                .join("refs/heads")
                .join(format!("{branch}.lock")),
        ];
        for lock in candidates.iter().filter(|p| p.exists()) {
            // Older than this daemon, or dated in the future: made before the clock
            // was set back (a lock of this daemon's is never dated after now).
            let older = std::fs::symlink_metadata(lock)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < self.started || t > SystemTime::now());
            if !older || crate::util::open_by_anyone(lock) {
                tracing::warn!(lock = %lock.display(), "a git lock is held by a running process; leaving it");
                continue;
            }
            match std::fs::remove_file(lock) {
                Ok(()) => {
                    tracing::warn!(lock = %lock.display(), "removed a lock a killed git left")
                }
                Err(e) => {
                    tracing::warn!(lock = %lock.display(), "cannot remove a stale git lock: {e}")
                }
            }
        }
    }

    /// Adds the worktree: on the task's branch when it exists (continuing from its
    /// tip), else on a new branch from `base_branch` or `HEAD`.
    fn add(&self, path: &Path, branch: &str, notes: &mut Vec<String>) -> Result<(), WorktreeError> {
        let mut exists = self.repo_git();
        exists.args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ]);
        let mut cmd = self.repo_git();
        cmd.args(["worktree", "add", "--quiet", "--no-checkout"]);
        let local = self.verify(exists)?;
        let pushed = self.take_pushed(branch, local.as_deref(), notes);
        if let Some(tip) = pushed.as_ref().or(local.as_ref()) {
            if pushed.is_none() {
                let short: String = tip.chars().take(12).collect();
                notes.push(format!(
                    "The branch `{branch}` existed from an earlier run of this task; work continued from its tip `{short}`."
                ));
            }
            cmd.arg(path).arg(branch);
        } else {
            if let Some(default) = &self.fetch_default {
                if let Err(e) = self.fetch_default(default) {
                    tracing::warn!(branch = %default, "cannot fetch the default branch before branching; the task starts from the last fetch: {e}");
                }
            }
            let base = self.base.clone().unwrap_or_else(|| "HEAD".into());
            let mut check = self.repo_git();
            check.args([
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{base}^{{commit}}"),
            ]);
            if self.verify(check)?.is_none() {
                return Err(WorktreeError::Setup(format!(
                    "base_branch {base:?} is not a branch or commit of {}",
                    self.top.display()
                )));
            }
            cmd.args(["-b", branch]).arg(path).arg(&base);
            notes.extend(self.checkout_notes());
        }
        self.run(cmd).map(|_| ())
    }

    /// The work already pushed on the task's branch (another worker's, or a person's
    /// since): the branch is made at the pushed tip, or moved forward to it, when the
    /// pushed tip holds everything the branch here does. Its new tip, when it moved.
    /// A remote that cannot be asked leaves the branch as it is (the push says so).
    fn take_pushed(
        &self,
        branch: &str,
        local: Option<&str>,
        notes: &mut Vec<String>,
    ) -> Option<String> {
        let pushed = match self.fetch_pushed(branch) {
            Ok(Some(pushed)) => pushed,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(branch, "cannot fetch the task's pushed branch: {e}");
                return None;
            }
        };
        if let Some(local) = local {
            let mut behind = self.repo_git();
            behind.args(["merge-base", "--is-ancestor", local, &pushed]);
            if local == pushed || self.run(behind).is_err() {
                return None;
            }
        }
        let mut moved = self.repo_git();
        moved.args(["update-ref", "-m", "picogent: the pushed branch"]);
        moved.arg(format!("refs/heads/{branch}")).arg(&pushed);
        moved.arg(local.unwrap_or(""));
        if let Err(e) = self.run(moved) {
            tracing::warn!(branch, "cannot take the task's pushed branch: {e}");
            return None;
        }
        let short: String = pushed.chars().take(12).collect();
        tracing::info!(branch, tip = %short, "the task's branch continues from its pushed tip");
        notes.push(format!(
            "The branch `{branch}` had been pushed with earlier work on this task; work continued from its pushed tip `{short}`."
        ));
        Some(pushed)
    }

    /// Whether the repository has `name` (a full ref name).
    pub(super) fn has_ref(&self, name: &str) -> bool {
        let mut cmd = self.repo_git();
        cmd.args(["rev-parse", "--verify", "--quiet", name]);
        self.verify(cmd).is_ok_and(|found| found.is_some())
    }

    /// A `rev-parse --verify --quiet`: what it names, `None` when it names nothing (git
    /// fails without a word), or git's own error when git failed for another reason.
    fn verify(&self, cmd: std::process::Command) -> Result<Option<String>, WorktreeError> {
        match self.run(cmd) {
            Ok(found) => Ok(Some(found)),
            Err(WorktreeError::Git { message, .. }) if message.is_empty() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What the user's checkout holds that a worktree from `HEAD` does not.
    fn checkout_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let busy = [
            ("MERGE_HEAD", "a merge"),
            ("rebase-merge", "a rebase"),
            ("rebase-apply", "a rebase"),
            ("CHERRY_PICK_HEAD", "a cherry-pick"),
        ];
        if let Some((_, what)) = busy.iter().find(|(f, _)| self.common.join(f).exists()) {
            notes.push(format!("The checkout is in the middle of {what}; the worktree started from its last commit."));
        }
        if self.base.is_none() {
            let mut status = super::git(&self.top, &self.allowed);
            self.neutral(&mut status);
            // Reading only: the user's index is not refreshed.
            status
                .env("GIT_OPTIONAL_LOCKS", "0")
                .arg(format!("--git-dir={}", self.common.display()))
                .arg(format!("--work-tree={}", self.top.display()))
                .args(["status", "--porcelain", "--untracked-files=normal"]);
            if self.run(status).is_ok_and(|s| !s.is_empty()) {
                notes.push("The checkout had uncommitted local changes; they were not included (the worktree started from `HEAD`).".into());
            }
        }
        notes
    }

    /// Removes a task's worktree (its branch stays), after `task.cancelled`.
    pub(crate) fn remove(&self, task_id: &str) {
        self.remove_slug_logged(&task_slug(task_id));
    }

    pub(super) fn remove_slug_logged(&self, slug: &str) {
        if let Err(e) = self.remove_slug(slug) {
            tracing::warn!(worktree = slug, "cannot remove the task's worktree: {e}");
        }
    }

    fn remove_slug(&self, slug: &str) -> Result<(), WorktreeError> {
        let _one = lock(&self.lock);
        let path = self.root.join(slug);
        if self.admin_of(&path).is_some() {
            let mut cmd = self.repo_git();
            cmd.args(["worktree", "remove", "--force", "--force"])
                .arg(&path);
            self.run(cmd)?;
            tracing::info!(worktree = %path.display(), "removed a task's worktree; its branch is kept");
        }
        self.prune_ours();
        let record = self.record_path(slug);
        match std::fs::remove_file(&record) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(WorktreeError::Io(record, e)),
            _ => Ok(()),
        }
    }

    /// Whether a task's worktree holds work its branch or remote lacks: changes not
    /// committed, a commit not pushed; yes when git cannot tell.
    fn holds_work(&self, r: &Record) -> bool {
        if r.push_pending {
            return true;
        }
        let Some(admin) = self.admin_of(&r.path) else {
            return false;
        };
        let mut status = self.tree_git_at(&r.path, &admin);
        status.args(["status", "--porcelain", "--ignore-submodules=all"]);
        // A repository the agent made in the tree is never committed (see `deliver`):
        // it does not count as work left.
        let nested = crate::sandbox::git::nested_repositories(&r.path);
        self.run(status).map_or(true, |out| {
            out.lines().any(|l| match l.strip_prefix("?? ") {
                Some(p) => !nested.iter().any(|n| n == p.trim_end_matches('/')),
                None => !l.trim().is_empty(),
            })
        })
    }

    /// At start: removes the worktrees of tasks quiet for longer than the retention,
    /// and lists (never deletes) folders picogent has no record of.
    pub(crate) fn sweep(&self) {
        let now = now_secs();
        let mut known: Vec<PathBuf> = Vec::new();
        for e in std::fs::read_dir(&self.records)
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(slug) = name.strip_suffix(".json") else {
                continue;
            };
            let Some(r) = self.read_record(slug) else {
                continue;
            };
            let quiet = now.saturating_sub(r.last_event) > self.retention.as_secs();
            if quiet && self.holds_work(&r) {
                // Age alone never removes work: a daemon down for longer than the
                // retention resumes this task in the same worktree.
                tracing::info!(task = %r.task, "the task had no event for {} days, but its worktree holds work not yet committed or pushed: kept", self.retention.as_secs() / 86_400);
                known.push(r.path);
            } else if quiet {
                tracing::info!(task = %r.task, "the task had no event for {} days: removing its worktree", self.retention.as_secs() / 86_400);
                if let Err(e) = self.remove_slug(slug) {
                    tracing::warn!(task = %r.task, "cannot remove the task's worktree: {e}");
                }
            } else {
                known.push(r.path);
            }
        }
        for e in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = e.path();
            if path.is_dir() && !known.contains(&path) {
                tracing::warn!(folder = %path.display(), "a worktree folder of no known task (left as it is; remove it with `git worktree remove` when it is not needed)");
            }
        }
    }
}
