//! `workspace: "shared"`: tasks work in the folder itself, and the result comment says
//! which files a run changed, from `git status` before and after it (with each changed
//! file's content hash, so a file already modified before the run counts only if the
//! run changed it again).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{git, run};

/// At most this many files are named in a comment.
const MAX_LISTED: usize = 50;

/// The repository a shared working folder is in.
pub(crate) struct SharedFolder {
    top: PathBuf,
}

/// Each modified or untracked path, with the hash of its content (none when deleted).
pub(crate) type Status = HashMap<String, Option<String>>;

impl SharedFolder {
    /// The repository `work_dir` is in, if any.
    pub(crate) fn find(work_dir: &Path) -> Option<SharedFolder> {
        let mut cmd = git(work_dir);
        cmd.args(["rev-parse", "--show-toplevel"]);
        let top = run(cmd).ok()?;
        Some(SharedFolder {
            top: PathBuf::from(top),
        })
    }

    fn status(&self) -> Status {
        let mut cmd = git(&self.top);
        // Reading only: the user's index is not refreshed, and no attribute names a
        // filter (the folder is the agent's to write).
        cmd.env("GIT_OPTIONAL_LOCKS", "0")
            .arg(format!("--attr-source={}", super::EMPTY_TREE))
            .args([
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--no-renames",
            ]);
        let Ok(out) = run(cmd) else {
            return Status::new();
        };
        let paths: Vec<String> = out
            .split('\0')
            .filter_map(|l| l.get(3..))
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        let mut hash = git(&self.top);
        hash.args(["hash-object", "--no-filters", "--stdin-paths"]);
        let present: Vec<&String> = paths
            .iter()
            .filter(|p| self.top.join(p).is_file())
            .collect();
        let hashes = hash_paths(hash, &present);
        paths
            .iter()
            .map(|p| (p.clone(), hashes.get(p).cloned()))
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

/// `git hash-object --stdin-paths` for `paths`: path → hash.
fn hash_paths(mut cmd: std::process::Command, paths: &[&String]) -> HashMap<String, String> {
    use std::io::Write;
    if paths.is_empty() {
        return HashMap::new();
    }
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let Ok(mut child) = cmd.spawn() else {
        return HashMap::new();
    };
    let input: String = paths.iter().map(|p| format!("{p}\n")).collect();
    // Written from a thread: git answers line by line and a large list would fill
    // both pipes.
    let writer = child.stdin.take().map(|mut stdin| {
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        })
    });
    let out = child.wait_with_output();
    if let Some(w) = writer {
        let _ = w.join();
    }
    let Ok(out) = out else {
        return HashMap::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .zip(paths)
        .map(|(h, p)| (p.to_string(), h.to_string()))
        .collect()
}
