//! Delivering a run's work: everything it changed in the task's worktree committed on
//! the task's branch (author: the agent), pushed when `push` is on, and described for
//! the result comment: branch, commit, diffstat and the diff up to a bounded size.

use super::{run_with, Record, RunEnd, TaskTree, WorktreeError, Worktrees, DIFF_LIMIT};
use crate::tracker::router::lock;
use std::sync::Arc;

/// The token a push sends, read when the push starts (a GitHub App's changes).
pub(crate) type PushToken = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// What a push over HTTPS to `host` (and only there) authenticates with: `user` and
/// the token `token` gives at the time.
pub(crate) struct Credential {
    pub(crate) user: &'static str,
    pub(crate) token: PushToken,
    pub(crate) host: String,
}

/// What closing a run's worktree did, for its reports.
pub(crate) struct Closed {
    /// The comment's section about the branch.
    pub(crate) text: String,
    /// The task's slug and the commit the section names.
    pub(crate) named: Option<(String, String)>,
    /// The remote has the branch's work (see `Delivered::pushed`).
    pub(crate) pushed: bool,
    pub(crate) branch: String,
}

/// What a run's delivery did, for its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// The run changed nothing.
    Unchanged {
        branch: String,
        push: Option<(String, Result<(), super::push::PushError>)>,
    },
    /// The run changed nothing, and the branch's tip is work no comment named yet.
    Earlier {
        branch: String,
        commit: String,
        push: Option<(String, Result<(), super::push::PushError>)>,
    },
    Committed {
        branch: String,
        commit: String,
        end: RunEnd,
        stat: String,
        diff: String,
        push: Option<(String, Result<(), super::push::PushError>)>,
    },
}

impl Worktrees {
    /// Every task branch is pushed, to `url` (else the clone's `origin`), with
    /// `credential` for its host (the tracker decides both: GitHub mode).
    pub(crate) fn push_every_branch(
        &mut self,
        url: Option<String>,
        credential: Option<Credential>,
    ) {
        self.push = Some(url.clone().unwrap_or_else(|| "origin".to_string()));
        self.push_url = url;
        self.push_token = credential;
    }

    /// The default branch `branch` is fetched before each new task branches from it.
    pub(crate) fn fetch_before_branching(&mut self, branch: &str) {
        self.fetch_default = Some(branch.to_string());
    }

    /// Tasks start from the remote's default branch `branch` unless `base_branch`
    /// says otherwise. Blocking (git): call off the runtime.
    pub(crate) fn start_from_default(&mut self, branch: &str) {
        if self.base.is_some() {
            return;
        }
        // The default branch as the clone last fetched it (not a local branch that may
        // hold the operator's unpushed commits), else the clone's own branch.
        let candidates = [
            format!("refs/remotes/origin/{branch}"),
            format!("refs/heads/{branch}"),
        ];
        self.base = candidates.into_iter().find(|r| {
            let mut cmd = self.repo_git();
            cmd.args([
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{r}^{{commit}}"),
            ]);
            self.run(cmd).is_ok()
        });
    }

    /// Commits what the run changed (nothing when nothing changed), then pushes. Each
    /// step's intent is in the task's record before it runs (see `Record`); every
    /// change to the record is made under the lock, on a fresh read.
    pub(crate) fn deliver(
        &self,
        tree: &TaskTree,
        title: &str,
        summary: &str,
        end: RunEnd,
    ) -> Result<Delivered, WorktreeError> {
        let slug = &tree.slug;
        let (committed, record) = {
            let _one = lock(&self.lock);
            let mut record = self.read_record(slug).ok_or_else(|| {
                WorktreeError::Setup(format!("the record of task {slug} is missing"))
            })?;
            self.clear_stale_locks(&tree.admin, &tree.branch);
            let mut add = self.tree_git(tree);
            // A repository the agent made inside the worktree is left out: git would
            // run its `status` there, with that repository's own filters.
            add.env_remove("GIT_LITERAL_PATHSPECS")
                .args(["add", "--all", "--", ":(literal)."]);
            for nested in crate::sandbox::git::nested_repositories(&tree.path) {
                add.arg(format!(":(exclude,literal){nested}"));
            }
            self.run(add)?;
            let mut changed = self.tree_git(tree);
            changed.args(["diff", "--cached", "--quiet", "--ignore-submodules=all"]);
            let committed = if self.run(changed).is_ok() {
                None
            } else {
                // Intent: once committed, the branch owes the remote a push.
                if self.push.is_some() && !record.push_pending {
                    record.push_pending = true;
                    self.write_record(slug, &record)?;
                }
                Some(self.commit(tree, title, summary, end)?)
            };
            (committed, record)
        };
        // Pushing can take long (a slow remote): other tasks are not held up by it.
        let push = match &self.push {
            Some(remote) if record.push_pending => {
                Some((remote.clone(), self.push_branch(tree, remote)))
            }
            _ => None,
        };
        if matches!(push, Some((_, Ok(())))) {
            self.update_record(slug, |r| r.push_pending = false);
            crate::util::fault::point("push_recorded");
        }
        let branch = tree.branch.clone();
        Ok(match committed {
            // The branch holds work no comment named yet (committed before picogent
            // stopped, or before a comment could be queued).
            None => match self
                .tip(tree)
                .filter(|t| Some(t) != record.reported_tip.as_ref())
            {
                Some(commit) => Delivered::Earlier {
                    branch,
                    commit,
                    // Owing no push, the earlier work reached the remote before the
                    // interruption (the push is recorded done only once it landed).
                    push: push.or_else(|| self.push.clone().map(|remote| (remote, Ok(())))),
                },
                None => Delivered::Unchanged { branch, push },
            },
            Some((commit, stat, diff)) => Delivered::Committed {
                branch,
                commit,
                end,
                stat,
                diff,
                push,
            },
        })
    }

    /// The task branch's tip (short id), if it can be read.
    pub(super) fn tip(&self, tree: &TaskTree) -> Option<String> {
        let mut id = self.tree_git(tree);
        id.args(["rev-parse", "--short=12", "HEAD"]);
        self.run(id).ok().filter(|t| !t.is_empty())
    }

    /// Changes the task's record on a fresh read, under the lock; a failure is logged
    /// (the record is a promise about what is owed, not the work itself).
    fn update_record(&self, slug: &str, change: impl FnOnce(&mut Record)) {
        let _one = lock(&self.lock);
        if let Some(mut r) = self.read_record(slug) {
            change(&mut r);
            if let Err(e) = self.write_record(slug, &r) {
                tracing::warn!(task = %r.task, "cannot update the task's record: {e}");
            }
        }
    }

    /// A comment naming `commit` (the branch's tip) is queued: later comments name
    /// only what comes after it.
    pub(crate) fn reported(&self, slug: &str, commit: &str) {
        self.update_record(slug, |r| r.reported_tip = Some(commit.to_string()));
    }

    /// Commits the staged work; its short id, diffstat and (bounded) diff.
    fn commit(
        &self,
        tree: &TaskTree,
        title: &str,
        summary: &str,
        end: RunEnd,
    ) -> Result<(String, String, String), WorktreeError> {
        let mark = match end {
            RunEnd::Finished => "",
            RunEnd::Failed => "[failed] ",
            RunEnd::Cancelled => "[cancelled] ",
        };
        let subject = crate::util::one_line(title, 72);
        let body = crate::util::one_line(summary, 1200);
        // The issue's title and the model's answer may close issues (`Fixes #3`) or
        // name people: broken in every mode, a Team Board's remote may be on GitHub.
        let message = crate::tracker::defuse::defuse(&format!("{mark}{subject}\n\n{body}\n"));
        let (name, email) = &self.author;
        let mut commit = self.tree_git(tree);
        commit
            .args(["commit", "--quiet", "--no-verify", "--file=-"])
            .env("GIT_AUTHOR_NAME", name)
            .env("GIT_AUTHOR_EMAIL", email)
            .env("GIT_COMMITTER_NAME", name)
            .env("GIT_COMMITTER_EMAIL", email);
        run_with(commit, self.limit, Some(&message), usize::MAX)?;
        let commit = self
            .tip(tree)
            .ok_or_else(|| WorktreeError::Setup("the new commit cannot be read".into()))?;
        let mut stat = self.tree_git(tree);
        stat.args([
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--stat=100",
            "HEAD^",
            "HEAD",
        ]);
        let stat = self.run(stat)?;
        let mut diff = self.tree_git(tree);
        diff.args([
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "HEAD^",
            "HEAD",
        ]);
        // Only what a comment can show is kept, whatever the agent wrote.
        let diff = run_with(diff, self.limit, None, DIFF_LIMIT + 1)?;
        Ok((commit, stat, diff))
    }
}

impl Delivered {
    /// Whether the remote has the branch's work: pushed now, or owing no push (a
    /// push before an interruption got through). A failed push is the one "no".
    pub(crate) fn pushed(&self) -> bool {
        let (Delivered::Unchanged { push, .. }
        | Delivered::Earlier { push, .. }
        | Delivered::Committed { push, .. }) = self;
        !matches!(push, Some((_, Err(_))))
    }

    /// The commit the comment names, if it names one.
    pub(crate) fn commit(&self) -> Option<&str> {
        match self {
            Delivered::Unchanged { .. } => None,
            Delivered::Earlier { commit, .. } | Delivered::Committed { commit, .. } => Some(commit),
        }
    }

    /// The comment's section about the branch: after the agent's answer.
    pub(crate) fn comment(&self) -> String {
        let push_line = |push: &Option<(String, Result<(), super::push::PushError>)>| {
            match push {
            None => String::new(),
            Some((remote, Ok(()))) => format!("\nPushed to `{remote}`."),
            Some((remote, Err(e))) => format!(
                "\nThe push to `{remote}` failed {} times ({e}), and the remote does not hold the commit: the commit is kept, and the next run of this task pushes again.",
                super::push::PUSH_ATTEMPTS
            ),
        }
        };
        match self {
            Delivered::Unchanged { branch, push } => format!(
                "---\nNo files changed in this run (branch `{branch}`).{}",
                push_line(push)
            ),
            Delivered::Earlier {
                branch,
                commit,
                push,
            } => format!(
                "---\nNo files changed in this run. **Branch** `{branch}` · **commit** `{commit}` holds work no earlier comment named (made before an interruption).{}",
                push_line(push)
            ),
            Delivered::Committed {
                branch,
                commit,
                end,
                stat,
                diff,
                push,
            } => {
                let how = match end {
                    RunEnd::Finished => String::new(),
                    RunEnd::Failed => " The run failed; this commit holds how far it got.".into(),
                    RunEnd::Cancelled => {
                        " The run was cancelled; this commit holds how far it got.".into()
                    }
                };
                let shown = crate::util::truncate_bytes(diff, DIFF_LIMIT);
                let cut = if shown.len() < diff.len() {
                    format!(
                        "\n_(The diff is cut at {} KB; the branch has all of it.)_",
                        DIFF_LIMIT / 1000
                    )
                } else {
                    String::new()
                };
                let fence = if shown.contains("```") { "~~~~" } else { "```" };
                format!(
                    "---\n**Branch** `{branch}` · **commit** `{commit}`.{how}{}\n\n{fence}\n{stat}\n{fence}\n\n{fence}diff\n{shown}\n{fence}{cut}",
                    push_line(push)
                )
            }
        }
    }
}
