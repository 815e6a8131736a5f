//! Agent mode's per-task git worktrees (`workspace: "worktree"`): each task works in a
//! worktree of its own on the branch `picogent/<task>`, outside the user's checkout,
//! and its work is delivered as a commit on that branch (pushed when `push` is on),
//! reported with a diffstat and the diff.
//!
//! The worktree's files are the agent's, so nothing in them is trusted when picogent
//! runs git: the worktree's own git folder is found from the repository (never from the
//! `.git` file the agent can rewrite), every setting that runs a program is pinned
//! (`git::harden`), every filter, diff and merge driver the configuration defines is
//! emptied in git's environment (so a planted `.gitattributes` names no program), and,
//! on git 2.40 or newer, attributes come from no tree at all (`--attr-source` of the
//! empty tree).
//!
//! Each task's record (branch, folder, last event, a push still owed) is a small JSON
//! file in picogent's state folder, which commands cannot reach.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::agent::Outcome;
use crate::sandbox::confine::Confinement;
use crate::sandbox::git::harden;
use crate::tracker::types::TaskId;

/// git's empty tree: as an attribute source it holds no `.gitattributes`.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
/// A comment shows the diff up to this many bytes.
pub(crate) const DIFF_LIMIT: usize = 20_000;

#[derive(Debug, thiserror::Error)]
pub(crate) enum WorktreeError {
    #[error("git {args}: {message}")]
    Git { args: String, message: String },
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0}")]
    Setup(String),
}

impl WorktreeError {
    /// Whether it failed for lack of room on a disk (its own write, or git's): the
    /// task then waits for room instead of failing.
    pub(crate) fn no_room(&self) -> bool {
        match self {
            WorktreeError::Io(_, e) => crate::util::no_room(e),
            WorktreeError::Git { message, .. } => crate::util::says_no_room(message),
            WorktreeError::Setup(_) => false,
        }
    }
}

/// How the run whose work is committed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    Finished,
    Failed,
    Cancelled,
}

/// A task's worktree, ready for a run.
#[derive(Debug, Clone)]
pub(crate) struct TaskTree {
    /// The worktree's top folder.
    pub path: PathBuf,
    /// Where the run works: `work_dir`'s place in the worktree.
    pub work_dir: PathBuf,
    pub branch: String,
    /// The task's name in folder, branch and record names.
    slug: String,
    /// The worktree's git folder inside the repository's `worktrees/`.
    admin: PathBuf,
    /// What the comment should say about how the worktree was made.
    pub notes: Vec<String>,
}

/// What a task's record in the state folder holds. Each step of a delivery writes its
/// intent here before it runs and its result after (the record is written and synced
/// before git starts), so a restart resumes at the first unfinished step: a worktree
/// being made is made again, a commit made but not pushed is pushed, and one no
/// comment named yet is named in the next.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Record {
    task: String,
    branch: String,
    path: PathBuf,
    /// Seconds since the epoch of the task's last event.
    last_event: u64,
    /// The branch holds work the remote does not have yet (set before a commit).
    #[serde(default)]
    push_pending: bool,
    /// `git worktree add` (and its checkout) started and has not finished: the folder
    /// is not to be used.
    #[serde(default)]
    creating: bool,
    /// The branch's tip that the last queued comment named (or the tip the task found
    /// when its worktree was made): a tip past it holds work no comment named yet,
    /// whatever happened between the commit and the record.
    #[serde(default)]
    reported_tip: Option<String>,
}

/// The repository the daemon's `work_dir` is in, and where its tasks' worktrees go.
pub(crate) struct Worktrees {
    /// The checkout's top folder (canonical).
    top: PathBuf,
    /// The repository's common git folder (canonical).
    common: PathBuf,
    /// `work_dir` relative to `top`.
    rel: PathBuf,
    /// Where the worktrees are made: one folder per task.
    root: PathBuf,
    /// Where the tasks' records are kept.
    records: PathBuf,
    base: Option<String>,
    /// The agent's allowed paths (canonical): no push goes to a remote inside them.
    allowed: Vec<PathBuf>,
    /// The operator's home (`HOME` at start): its git and ssh configuration serve a
    /// push when no command could have written them.
    home: Option<PathBuf>,
    /// How long one git command may take (`git_timeout_sec`).
    limit: Duration,
    /// When this daemon started: a git lock older than that, that nobody has open, was
    /// left by a git killed with an earlier daemon.
    started: SystemTime,
    author: (String, String),
    push: Option<String>,
    /// `push` is this URL (GitHub mode's `github.remote_url`), not a remote's name.
    push_url: Option<String>,
    /// What a push over HTTPS sends, and the only host it goes to (GitHub's token).
    push_token: Option<Credential>,
    /// The default branch, fetched before a new task branches from it (a clone of the
    /// cache's, which nobody else fetches).
    fetch_default: Option<String>,
    /// The checkout is picogent's own clone (GitHub's `repos`).
    own_clone: bool,
    retention: Duration,
    /// git locks the repository's worktree list: one change at a time.
    lock: Mutex<()>,
    /// When quiet tasks' worktrees were last looked for (seconds since the epoch).
    swept: AtomicU64,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A hardened git command run in `cwd`, with nothing configured but the repository's;
/// `writable` are the folders the agent's commands can write (no `git` is taken from
/// there).
fn git(cwd: &Path, writable: &[PathBuf]) -> Command {
    let mut cmd = Command::new(crate::sandbox::git_program::program());
    harden(&mut cmd, writable);
    cmd.current_dir(cwd);
    cmd
}

/// Runs a git command; its trimmed standard output, or an error with its message.
fn run(cmd: Command, limit: Duration) -> Result<String, WorktreeError> {
    run_raw(cmd, limit).map(|out| out.trim_end().to_string())
}

/// Runs a git command; its whole standard output, or an error with its message.
fn run_raw(cmd: Command, limit: Duration) -> Result<String, WorktreeError> {
    run_with(cmd, limit, None, usize::MAX)
}

/// Runs a git command within `limit` (else it is stopped, and everything it started),
/// with `input` on its standard input; at most `keep` bytes of its standard output
/// (the rest is read and dropped), or an error with its message.
fn run_with(
    cmd: Command,
    limit: Duration,
    input: Option<&str>,
    keep: usize,
) -> Result<String, WorktreeError> {
    let args: Vec<String> = cmd
        .get_args()
        .filter_map(|a| a.to_str())
        .filter(|a| !a.starts_with("--git-dir") && !a.starts_with("--work-tree"))
        .skip_while(|a| *a == "-c" || a.contains('='))
        .map(str::to_string)
        .collect();
    let args = args.join(" ");
    let input = input.map(|i| i.as_bytes().to_vec());
    let out = crate::sandbox::git::run_within(cmd, limit, input, keep).map_err(|e| {
        WorktreeError::Git {
            args: args.clone(),
            message: format!("cannot run git: {e}"),
        }
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(WorktreeError::Git {
        args,
        message: crate::util::one_line(err.trim(), 400),
    })
}

/// The task's name in branch and folder names: `[A-Za-z0-9._-]`, with a hash when
/// anything had to change so two tasks never share one.
pub(crate) fn task_slug(task_id: &str) -> String {
    // Only characters no git ref rule or shell option cares about, and never the same
    // slug for two ids: anything changed gets the id's hash.
    let clean: String = task_id
        .chars()
        .take(60)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let plain = !clean.is_empty() && clean == task_id && !clean.starts_with('-');
    if plain {
        return clean;
    }
    let hash = task_id.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{}-{hash:016x}", clean.trim_start_matches('-'))
        .trim_start_matches('-')
        .to_string()
}

impl Worktrees {
    /// Where the tasks' worktrees are made.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The checkout's top folder.
    pub(crate) fn checkout(&self) -> &Path {
        &self.top
    }

    /// Whether the checkout is picogent's own clone (GitHub's `repos`).
    pub(crate) fn own_clone(&self) -> bool {
        self.own_clone
    }

    /// The repository's common git folder.
    pub(crate) fn repository(&self) -> &Path {
        &self.common
    }

    /// A git command on the repository itself (no work tree), with no filter or
    /// driver of its configuration.
    fn repo_git(&self) -> Command {
        let mut cmd = git(&self.top, &self.allowed);
        self.neutral(&mut cmd);
        cmd.arg(format!("--git-dir={}", self.common.display()));
        cmd
    }

    /// A git command in a task's worktree, with no filter, diff driver or attribute the
    /// agent could have planted.
    fn tree_git(&self, tree: &TaskTree) -> Command {
        self.tree_git_at(&tree.path, &tree.admin)
    }

    /// `tree_git` for the worktree at `path`, whose git folder is `admin`.
    fn tree_git_at(&self, path: &Path, admin: &Path) -> Command {
        let mut cmd = git(path, &self.allowed);
        self.neutral(&mut cmd);
        cmd.arg(format!("--git-dir={}", admin.display()))
            .arg(format!("--work-tree={}", path.display()));
        cmd
    }

    /// Empties every filter and diff driver and reads attributes from no tree.
    fn neutral(&self, cmd: &mut Command) {
        neutral(
            cmd,
            &self.top,
            Some(&self.common),
            &self.allowed,
            None,
            self.limit,
        );
    }

    /// Runs one of this repository's git commands, within the configured time.
    fn run(&self, cmd: Command) -> Result<String, WorktreeError> {
        run(cmd, self.limit)
    }
}

/// Empties every filter and diff driver the repository at `top` (git folder `git_dir`,
/// else found from `top`) defines, and reads attributes from no tree.
fn neutral(
    cmd: &mut Command,
    top: &Path,
    git_dir: Option<&Path>,
    writable: &[PathBuf],
    confine: Option<&Confinement>,
    limit: Duration,
) {
    let mut settings = Vec::new();
    for driver in drivers(top, git_dir, writable, confine, limit) {
        // Empty: no program, and a `required` filter no longer required.
        for key in [
            "clean", "smudge", "process", "required", "textconv", "command", "driver",
        ] {
            settings.push((format!("{driver}.{key}"), String::new()));
        }
    }
    crate::sandbox::git::set_config(cmd, &settings);
    if crate::sandbox::git_program::attr_source() {
        cmd.arg(format!("--attr-source={EMPTY_TREE}"));
    }
}

/// Every `filter.X`, `diff.X` and `merge.X` a repository's configuration defines (the
/// names read NUL-separated: a subsection may hold `=`, `.` or a line break).
fn drivers(
    top: &Path,
    git_dir: Option<&Path>,
    writable: &[PathBuf],
    confine: Option<&Confinement>,
    limit: Duration,
) -> Vec<String> {
    // A configuration the agent can write (shared mode) is read confined, like the
    // status it serves.
    let mut cmd = match confine {
        Some(c) => crate::sandbox::git::read_only_command(top, Some(c)),
        None => git(top, writable),
    };
    if let Some(d) = git_dir {
        cmd.arg(format!("--git-dir={}", d.display()));
    }
    cmd.args([
        "config",
        "-z",
        "--name-only",
        "--get-regexp",
        r"^(filter|diff|merge)\..*\.",
    ]);
    let out = run_raw(cmd, limit).unwrap_or_default();
    let mut names: Vec<String> = out
        .split('\0')
        .filter_map(|l| l.rsplit_once('.').map(|(d, _)| d.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

impl Worktrees {
    fn record_path(&self, slug: &str) -> PathBuf {
        self.records.join(format!("{slug}.json"))
    }

    fn read_record(&self, slug: &str) -> Option<Record> {
        let text = std::fs::read_to_string(self.record_path(slug)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes a task's record and syncs it (an intent must be on disk before the git
    /// step it announces starts), replacing the old one whole.
    fn write_record(&self, slug: &str, r: &Record) -> Result<(), WorktreeError> {
        use std::io::Write;
        let path = self.record_path(slug);
        let tmp = path.with_extension(format!("{}.tmp", crate::util::random_hex(6)));
        let text = serde_json::to_string(r).unwrap_or_default();
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_data()?;
            std::fs::rename(&tmp, &path)
        })();
        written.map_err(|e| WorktreeError::Io(path, e))
    }

    /// Removes the repository's records of picogent's own worktrees whose folder is
    /// gone (what `git worktree prune` does, but never for the user's worktrees).
    fn prune_ours(&self) {
        let Ok(entries) = std::fs::read_dir(self.common.join("worktrees")) else {
            return;
        };
        for admin in entries.flatten().map(|e| e.path()) {
            let Ok(gitdir) = std::fs::read_to_string(admin.join("gitdir")) else {
                continue;
            };
            let tree = Path::new(gitdir.trim()).parent().map(Path::to_path_buf);
            if tree.is_some_and(|t| t.starts_with(&self.root) && !t.exists()) {
                let _ = std::fs::remove_dir_all(&admin);
            }
        }
    }

    /// The git folder the repository keeps for the worktree at `path`, if any.
    fn admin_of(&self, path: &Path) -> Option<PathBuf> {
        let want = path.join(".git");
        std::fs::read_dir(self.common.join("worktrees"))
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|admin| {
                std::fs::read_to_string(admin.join("gitdir"))
                    .is_ok_and(|g| Path::new(g.trim()) == want)
            })
    }
}

mod deliver;
pub(crate) use deliver::{Closed, Credential};
mod discover;
mod lifecycle;
mod push;
mod shared;
mod trees;
pub(crate) use shared::{SharedFolder, Status as FolderStatus};
pub(crate) use trees::{RepoTrees, Trees};

/// Where a daemon's tasks work: each in a worktree of its own, or all in the shared
/// working folder (with the repository it is in, when it is one, to name what a run
/// changed).
#[allow(
    clippy::large_enum_variant,
    reason = "made once at start and moved into the router"
)]
pub(crate) enum Workspace {
    Worktrees(Arc<Worktrees>),
    /// Each task's repository's (GitHub's `repos`).
    PerRepo(Arc<dyn RepoTrees>),
    Shared(Option<SharedFolder>),
}

impl Workspace {
    /// As the settings say. Blocking (git): call off the runtime.
    pub(crate) fn decide(
        cfg: &crate::config::Config,
        sandbox: &crate::sandbox::Sandbox,
    ) -> Result<Workspace, String> {
        Ok(match Worktrees::decide(cfg)? {
            Some(w) => Workspace::Worktrees(Arc::new(w)),
            None => Workspace::Shared(SharedFolder::find(&cfg.work_dir, sandbox, cfg.git.timeout)),
        })
    }
}

/// The router's side: each step off the runtime's threads (git is blocking work).
impl Worktrees {
    /// The task's worktree for a run.
    pub(crate) async fn open(
        self: &Arc<Self>,
        task_id: &TaskId,
    ) -> Result<TaskTree, WorktreeError> {
        let (me, task) = (self.clone(), task_id.to_string());
        // A daemon that runs for weeks looks for quiet tasks' worktrees once a day.
        let last = self.swept.load(Ordering::Relaxed);
        let sweep = now_secs().saturating_sub(last) > 86_400
            && self
                .swept
                .compare_exchange(last, now_secs(), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        tokio::task::spawn_blocking(move || {
            if sweep {
                me.sweep();
            }
            me.prepare(&task)
        })
        .await
        .unwrap_or_else(|e| Err(WorktreeError::Setup(format!("worktree task failed: {e}"))))
    }

    /// Delivers a run's work and, when the task was cancelled, removes its worktree;
    /// the comment's section about it.
    pub(crate) async fn close(
        self: &Arc<Self>,
        tree: TaskTree,
        subject: String,
        outcome: &Outcome,
        task_cancelled: bool,
    ) -> Closed {
        let (end, summary) = match outcome {
            Outcome::Completed { text, .. } => (RunEnd::Finished, text.clone()),
            Outcome::Failed { error, .. } => (RunEnd::Failed, format!("The run failed: {error}")),
            Outcome::Cancelled { .. } => (RunEnd::Cancelled, "The run was cancelled.".into()),
        };
        let me = self.clone();
        let notes = tree.notes.clone();
        let slug = tree.slug.clone();
        let branch = tree.branch.clone();
        let mut named = None;
        let mut pushed = false;
        let delivered = tokio::task::spawn_blocking(move || {
            let d = me.deliver(&tree, &subject, &summary, end);
            if task_cancelled {
                me.remove_slug_logged(&tree.slug);
            }
            d
        })
        .await
        .unwrap_or_else(|e| Err(WorktreeError::Setup(format!("worktree task failed: {e}"))));
        let mut text = match delivered {
            Ok(d) => {
                named = d.commit().map(|c| (slug.clone(), c.to_string()));
                pushed = d.pushed();
                d.comment()
            }
            Err(e) => {
                tracing::error!("cannot commit the task's work: {e}");
                format!("---\n**The work could not be committed** ({e}); it is still in the task's worktree.")
            }
        };
        for n in notes {
            text.push_str(&format!("\n\n_{n}_"));
        }
        if task_cancelled {
            text.push_str("\n\n_The task's worktree was removed; its branch is kept._");
        }
        Closed {
            text,
            named,
            pushed,
            branch,
        }
    }

    /// Removes a cancelled task's worktree when no run of it is going.
    pub(crate) async fn discard(self: &Arc<Self>, task_id: &TaskId) {
        let (me, task) = (self.clone(), task_id.to_string());
        let _ = tokio::task::spawn_blocking(move || me.remove(&task)).await;
    }
}

#[cfg(test)]
mod tests;
