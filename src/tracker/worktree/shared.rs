//! `workspace: "shared"`: tasks work in the folder itself, and the result comment says
//! which files a run changed, from `git status` before and after it (with each changed
//! file's content hash, so a file already modified before the run counts only if the
//! run changed it again).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{git, run};
use crate::sandbox::confine::Confinement;
use crate::sandbox::git as sandbox_git;
use crate::sandbox::Sandbox;

/// At most this many files are named in a comment.
const MAX_LISTED: usize = 50;

/// The repository a shared working folder is in.
pub(crate) struct SharedFolder {
    top: PathBuf,
    /// What the agent's commands can write (no git is taken from there).
    writable: Vec<PathBuf>,
    /// The agent's confinement: `git status` runs under it, read-only.
    confine: Option<Confinement>,
    /// How long one git command may take (`git_timeout_sec`).
    limit: std::time::Duration,
}

/// Each modified or untracked path, with the hash of its content (none when deleted).
pub(crate) type Status = HashMap<String, Option<String>>;

impl SharedFolder {
    /// The repository `work_dir` is in, if any.
    pub(crate) fn find(
        work_dir: &Path,
        sandbox: &Sandbox,
        limit: std::time::Duration,
    ) -> Option<SharedFolder> {
        let writable = sandbox.allowed_paths().to_vec();
        let mut cmd = git(work_dir, &writable);
        cmd.args(["rev-parse", "--show-toplevel"]);
        let top = std::fs::canonicalize(run(cmd, limit).ok()?).ok()?;
        // The repository's configuration is the agent's to write: a `core.worktree`
        // pointing elsewhere would have picogent hash files there.
        let work = std::fs::canonicalize(work_dir).ok()?;
        if !work.starts_with(&top) {
            tracing::warn!(folder = %work.display(), top = %top.display(), "the working folder's repository names a work tree that does not hold it; result comments will not list changed files");
            return None;
        }
        Some(SharedFolder {
            top,
            writable,
            confine: sandbox.confinement().cloned(),
            limit,
        })
    }

    fn status(&self) -> Status {
        let mut cmd = sandbox_git::read_only_command(&self.top, self.confine.as_ref());
        // The repository is the agent's to write: no filter or driver it names runs
        // (and one missed runs confined, unable to write), nothing nested is entered,
        // and the user's index is not refreshed.
        super::neutral(
            &mut cmd,
            &self.top,
            None,
            &self.writable,
            self.confine.as_ref(),
            self.limit,
        );
        cmd.env("GIT_OPTIONAL_LOCKS", "0").args([
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=all",
        ]);
        let Ok(out) = run(cmd, self.limit) else {
            return Status::new();
        };
        out.split('\0')
            .filter_map(|l| l.get(3..))
            .filter(|p| !p.is_empty())
            .map(|p| (p.to_string(), content_hash(&self.top.join(p))))
            .collect()
    }

    /// The status before a run (off the runtime's threads).
    pub(crate) async fn before(self: &Arc<Self>) -> Status {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.status())
            .await
            .unwrap_or_default()
    }

    /// The comment's section naming what changed since `before`; `None` when nothing did.
    pub(crate) async fn changed_since(self: &Arc<Self>, before: Status) -> Option<String> {
        let me = self.clone();
        let after = tokio::task::spawn_blocking(move || me.status())
            .await
            .unwrap_or_default();
        let mut changed: Vec<&String> = after
            .iter()
            .filter(|(p, h)| before.get(*p) != Some(*h))
            .map(|(p, _)| p)
            .chain(before.keys().filter(|p| !after.contains_key(*p)))
            .collect();
        if changed.is_empty() {
            return None;
        }
        changed.sort();
        let more = changed.len().saturating_sub(MAX_LISTED);
        let list: Vec<String> = changed
            .iter()
            .take(MAX_LISTED)
            .map(|p| format!("- `{p}`"))
            .collect();
        let mut text = format!(
            "---\nFiles this run changed in the working folder ({}):\n{}",
            self.top.display(),
            list.join("\n")
        );
        if more > 0 {
            text.push_str(&format!("\n- … and {more} more"));
        }
        Some(text)
    }
}

/// A hash of what a path holds, to see whether a run changed it: a file's bytes (read
/// without following a final symlink: a link's own target is hashed), none when gone.
fn content_hash(path: &Path) -> Option<String> {
    use std::hash::{DefaultHasher, Hasher};
    let meta = std::fs::symlink_metadata(path).ok()?;
    let mut h = DefaultHasher::new();
    if meta.file_type().is_symlink() {
        h.write(
            std::fs::read_link(path)
                .ok()?
                .as_os_str()
                .as_encoded_bytes(),
        );
    } else if meta.is_file() {
        use std::os::unix::fs::OpenOptionsExt;
        // Not a FIFO swapped in after the check, not through a link; at most 64 MB
        // read (the size and change time stand for the rest).
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        if let Ok(modified) = meta.modified() {
            h.write(format!("{modified:?}").as_bytes());
        }
        let mut f = std::io::Read::take(f, 64 << 20);
        let mut buf = [0u8; 64 * 1024];
        loop {
            match std::io::Read::read(&mut f, &mut buf) {
                Ok(0) => break,
                Ok(n) => h.write(buf.get(..n).unwrap_or_default()),
                Err(_) => return None,
            }
        }
    }
    Some(format!("{:016x}-{}", h.finish(), meta.len()))
}
