//! Finding the repository at start: whether tasks get worktrees, and why not. A
//! folder that is no repository (or one without a commit) means the shared folder when
//! nothing asked for worktrees; a repository picogent cannot use (another user's that
//! picogent cannot write, a git that fails) is a start-up error with git's own words,
//! never a silent switch to the shared folder.
//!
//! git refuses a checkout another user owns ("dubious ownership"): such a checkout (a
//! bind mount into a container) is trusted for its folder alone, through a global
//! configuration of picogent's own that names only it (`safe.directory`), given to the
//! few commands that look for the repository; every later command names its git folder
//! outright, which git does not check. The operator's git configuration is not touched.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::{git, now_secs, run, WorktreeError, Worktrees};
use crate::config::{Config, Workspace};

/// Why `work_dir` gets no worktrees.
enum NoWorktrees {
    /// Not a repository, or nothing to branch from: the shared folder, unless asked.
    Absent(String),
    /// A repository picogent cannot use: always an error.
    Unusable(String),
}

impl Worktrees {
    /// Decides the workspace at start: `Ok(None)` for the shared folder. Logs the
    /// choice and why; a forced `worktree` without a repository, or a repository that
    /// cannot be used, is an error.
    pub(crate) fn decide(cfg: &Config) -> Result<Option<Worktrees>, String> {
        use crate::sandbox::git_program::{self, GitError};
        git_program::announce();
        let allowed = cfg.policy.real_allowed_paths();
        // Shared mode runs git too (what a run changed): no git is fine, a git picogent
        // must not run is not.
        let git = git_program::usable(&allowed);
        if let Err(e) = &git {
            if !matches!(e, GitError::Missing(_)) {
                return Err(e.to_string());
            }
        }
        if cfg.git.workspace == Some(Workspace::Shared) {
            tracing::info!(
                workspace = "shared",
                "tasks share the working folder (workspace: \"shared\")"
            );
            return Ok(None);
        }
        let forced = cfg.git.workspace == Some(Workspace::Worktree);
        let found = match git {
            Ok(_) => Worktrees::find(cfg, allowed, true),
            Err(missing) => Err(NoWorktrees::Absent(missing.to_string())),
        };
        match found {
            Ok(w) => {
                let why = if forced {
                    "workspace: \"worktree\"".to_string()
                } else {
                    format!("{} is in a git repository", cfg.work_dir.display())
                };
                tracing::info!(workspace = "worktree", repository = %w.top.display(), worktrees = %w.root.display(), "each task works in its own git worktree and branch ({why})");
                w.sweep();
                Ok(Some(w))
            }
            Err(NoWorktrees::Absent(e)) if forced => Err(format!(
                "workspace: \"worktree\" needs work_dir {} inside a git repository with at least one commit: {e}",
                cfg.work_dir.display()
            )),
            Err(NoWorktrees::Absent(e)) => {
                tracing::info!(workspace = "shared", "tasks share the working folder ({e})");
                Ok(None)
            }
            Err(NoWorktrees::Unusable(e)) => Err(format!(
                "work_dir {} is in a git repository that picogent cannot give tasks worktrees in: {e}{}",
                cfg.work_dir.display(),
                if forced {
                    ""
                } else {
                    " (set \"workspace\": \"shared\" to have tasks share the folder instead)"
                }
            )),
        }
    }

    /// The worktrees of a clone picogent keeps (GitHub's `repos`): the clone at
    /// `clone`, its worktrees and their records in folders of their own (`key`, the
    /// repository's `owner/name`). Blocking (git).
    /// The clone is made (an empty repository, then `branch` fetched from `remote`
    /// with `credential`) when it is not there yet; tasks branch from `branch`,
    /// fetched again before each new one.
    pub(crate) fn of_clone(
        cfg: &Config,
        (clone, key): (&Path, &str),
        (remote, credential): (String, Option<super::Credential>),
        branch: &str,
    ) -> Result<Worktrees, String> {
        let allowed = cfg.policy.real_allowed_paths();
        let existed = clone.join(".git").is_dir();
        if !existed {
            std::fs::create_dir_all(clone).map_err(|e| format!("{}: {e}", clone.display()))?;
            let mut init = git(clone, &allowed);
            init.args(["init", "--quiet"]);
            run(init, cfg.git.timeout).map_err(|e| e.to_string())?;
        }
        let mut at = cfg.clone();
        at.work_dir = clone.to_path_buf();
        let mut w = Worktrees::find(&at, allowed, false).map_err(|e| match e {
            NoWorktrees::Absent(m) | NoWorktrees::Unusable(m) => {
                format!("{}: {m}", clone.display())
            }
        })?;
        w.root = w.root.join(key);
        w.records = w.records.join(key);
        for dir in [&w.root, &w.records] {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        w.push_every_branch(Some(remote), credential);
        match w.fetch_default(branch) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(format!("the remote has no branch {branch:?}")),
            // A clone from before (a restart) that holds the branch still serves; the
            // next task fetches again. One whose first fetch never landed does not.
            Err(e) if existed && w.has_ref(&format!("refs/remotes/origin/{branch}")) => {
                tracing::warn!(clone = %clone.display(), "cannot fetch {branch:?}; the clone serves as it is: {e}");
            }
            Err(e) => return Err(format!("cannot fetch {branch:?}: {e}")),
        }
        w.base = None;
        w.own_clone = true;
        w.fetch_before_branching(branch);
        w.start_from_default(branch);
        Ok(w)
    }

    /// The repository `work_dir` is in, and where worktrees go.
    /// `allowed`: the allowed paths, resolved.
    fn find(
        cfg: &Config,
        allowed: Vec<PathBuf>,
        with_commit: bool,
    ) -> Result<Worktrees, NoWorktrees> {
        use NoWorktrees::{Absent, Unusable};
        let cwd = std::fs::canonicalize(&cfg.work_dir)
            .map_err(|e| Unusable(format!("{}: {e}", cfg.work_dir.display())))?;
        let trust = cfg.state_dir().join("git-trust");
        let (top, common, trusted) = locate(&cwd, &allowed, &trust, cfg.git.timeout)?;
        writable(&common)?;
        let mut cmd = git(&top, &allowed);
        cmd.arg(format!("--git-dir={}", common.display())).args([
            "rev-parse",
            "--verify",
            "--quiet",
            "HEAD^{commit}",
        ]);
        match run(cmd, cfg.git.timeout) {
            Ok(_) => {}
            // A clone of the cache's is made empty and fetched into.
            Err(WorktreeError::Git { message, .. }) if message.is_empty() && !with_commit => {}
            Err(WorktreeError::Git { message, .. }) if message.is_empty() => {
                return Err(Absent("the repository has no commit yet".into()))
            }
            Err(e) => return Err(Unusable(e.to_string())),
        }
        if let Some(owner) = trusted {
            tracing::info!(repository = %top.display(), owner, "the checkout belongs to uid {owner}, not to picogent's uid {}: git's ownership check is waived for this folder alone (no git configuration is changed)", current_uid());
        }
        let rel = cwd
            .strip_prefix(&top)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let root = worktree_root(cfg, &top).map_err(Absent)?;
        let records = cfg.state_dir().join("worktrees");
        std::fs::create_dir_all(&records)
            .map_err(|e| Unusable(format!("{}: {e}", records.display())))?;
        Ok(Worktrees {
            top,
            common,
            rel,
            root,
            records,
            base: cfg.git.base_branch.clone(),
            allowed,
            home: cfg.home_dir.clone(),
            limit: cfg.git.timeout,
            started: SystemTime::now(),
            author: (
                cfg.name.clone(),
                cfg.git
                    .email
                    .clone()
                    .unwrap_or_else(|| format!("{}@picogent.local", cfg.slug)),
            ),
            push: cfg.git.push.then(|| cfg.git.remote.clone()),
            push_url: None,
            push_token: None,
            fetch_default: None,
            own_clone: false,
            retention: Duration::from_secs(cfg.git.worktree_retention_days.saturating_mul(86_400)),
            lock: Mutex::new(()),
            swept: AtomicU64::new(now_secs()),
        })
    }
}

/// The checkout's top folder and common git folder (both canonical), and, when git
/// refused the checkout for its owner, that owner's uid (the folder is then trusted).
fn locate(
    cwd: &Path,
    allowed: &[PathBuf],
    trust: &Path,
    limit: Duration,
) -> Result<(PathBuf, PathBuf, Option<u32>), NoWorktrees> {
    use NoWorktrees::{Absent, Unusable};
    let ask = |trusted: Option<&Path>| {
        let mut cmd = git(cwd, allowed);
        if let Some(home) = trusted {
            // git 2.32+ reads GIT_CONFIG_GLOBAL, older ones `$HOME/.gitconfig`.
            cmd.env("HOME", home)
                .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"));
        }
        cmd.args(["rev-parse", "--show-toplevel", "--git-common-dir"]);
        run(cmd, limit)
    };
    let mut owner = None;
    let out = match ask(None) {
        Ok(out) => out,
        Err(e) => {
            let message = match &e {
                WorktreeError::Git { message, .. } => message.as_str(),
                _ => "",
            };
            if message.contains("not a git repository") {
                return Err(Absent("it is not inside a git checkout".into()));
            }
            let Some(folder) = refused_for_owner(message) else {
                return Err(Unusable(e.to_string()));
            };
            owner = Some(uid_of(Path::new(&folder)));
            trust_folder(trust, &folder).map_err(Unusable)?;
            ask(Some(trust)).map_err(|e| Unusable(e.to_string()))?
        }
    };
    let mut lines = out.lines();
    let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
        return Err(Unusable(format!(
            "git did not name the repository (it answered {out:?})"
        )));
    };
    let top = std::fs::canonicalize(top).map_err(|e| Unusable(format!("{top}: {e}")))?;
    let common =
        std::fs::canonicalize(cwd.join(common)).map_err(|e| Unusable(format!("{common}: {e}")))?;
    Ok((top, common, owner))
}

/// The folder git names when it refuses a checkout for its owner: "detected dubious
/// ownership in repository at '/x'" (git 2.36+), "unsafe repository ('/x' is owned by
/// someone else)" (2.35.2 and the fixes backported to 2.30–2.34).
fn refused_for_owner(message: &str) -> Option<String> {
    let first = message.lines().next()?;
    if !first.contains("dubious ownership") && !first.contains("unsafe repository") {
        return None;
    }
    let start = first.find('\'')? + 1;
    let end = start + first[start..].find('\'')?;
    Some(first[start..end].to_string())
}

/// Writes picogent's own global git configuration naming `folder` as the one safe
/// directory (in the state folder, which no command can reach).
fn trust_folder(trust: &Path, folder: &str) -> Result<(), String> {
    if folder.contains(['\n', '\0']) {
        return Err(format!(
            "git refused the checkout {folder:?} for its owner, and its name cannot be trusted"
        ));
    }
    let quoted = folder.replace('\\', "\\\\").replace('"', "\\\"");
    let text = format!("[safe]\n\tdirectory = \"{quoted}\"\n");
    std::fs::create_dir_all(trust)
        .and_then(|()| std::fs::write(trust.join(".gitconfig"), text))
        .map_err(|e| format!("{}: {e}", trust.display()))
}

/// Worktree mode writes the repository (its worktree list, the tasks' branches): a git
/// folder picogent cannot write is named with its owner, before any task fails on it.
fn writable(common: &Path) -> Result<(), NoWorktrees> {
    for dir in [
        common.to_path_buf(),
        common.join("worktrees"),
        common.join("refs/heads"),
    ] {
        if !dir.exists() {
            continue;
        }
        let ok = crate::sandbox::sys::can_write(&dir);
        if !ok {
            return Err(NoWorktrees::Unusable(format!(
                "its git folder {} belongs to uid {} and picogent runs as uid {}, which cannot write it; \
                 run picogent as the checkout's owner (in a container: --user {}:{})",
                dir.display(),
                uid_of(&dir),
                current_uid(),
                uid_of(&dir),
                gid_of(&dir)
            )));
        }
    }
    Ok(())
}

/// Where the worktrees go: outside the user's tree, under the agent home unless that
/// is in the checkout.
fn worktree_root(cfg: &Config, top: &Path) -> Result<PathBuf, String> {
    let root = match (&cfg.agent_home, &cfg.home_dir) {
        (Some(h), _) if !h.starts_with(top) => h.join("worktrees"),
        (_, Some(home)) => home.join(".picogent").join("worktrees").join(&cfg.slug),
        _ => {
            return Err(
                "no folder outside the checkout for worktrees (no agent home or HOME)".into(),
            )
        }
    };
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let root = std::fs::canonicalize(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    if root.starts_with(top) {
        return Err(format!(
            "the worktree folder {} would be inside the checkout",
            root.display()
        ));
    }
    Ok(root)
}

fn uid_of(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map_or(0, |m| m.uid())
}

fn gid_of(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map_or(0, |m| m.gid())
}

fn current_uid() -> u32 {
    crate::sandbox::sys::uid()
}

#[cfg(test)]
mod tests {
    use super::refused_for_owner;

    #[test]
    fn gits_refusals_for_an_owner_name_the_folder() {
        let new = "fatal: detected dubious ownership in repository at '/work'\nTo add an exception for this directory, call:\n\n\tgit config --global --add safe.directory /work";
        assert_eq!(refused_for_owner(new).as_deref(), Some("/work"));
        let old = "fatal: unsafe repository ('/srv/my repo' is owned by someone else)\nTo add an exception...";
        assert_eq!(refused_for_owner(old).as_deref(), Some("/srv/my repo"));
        assert_eq!(
            refused_for_owner(
                "fatal: not a git repository (or any of the parent directories): .git"
            ),
            None
        );
    }
}
