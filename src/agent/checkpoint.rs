//! Private git checkpoints of the working folder, for rollback.
//!
//! The snapshots live in a git repository of picogent's own, under its state folder
//! (`git --git-dir=<state>/checkpoints/<session>.git --work-tree=<work dir>`), never in
//! the folder's own `.git`, which git itself never descends into and which is left
//! untouched. The folder's `.gitignore` is honoured. Commits use a fixed identity and
//! ignore the user's git configuration, so hooks or signing settings cannot interfere;
//! git runs hardened and confined (`sandbox::git`), and the repository's config
//! is restored to picogent's own before each use, so nothing the agent plants in the
//! folder (a `.gitattributes` filter) or in the repository runs.
//! Rollback restores what the session's own steps changed since a checkpoint (deleting
//! files they created; another session's files in the same folder are left alone);
//! the tip it left is kept under `refs/picogent/abandoned/` so no path is ever lost.
//!
//! Sessions in one folder share its object store and its scans
//! (`checkpoint_store`): the session's repository holds its branch, its config and
//! the index a rollback works in, and reads the objects through `alternates`.
//! What a checkpoint writes is synced before the session records it (git's
//! `core.fsync`, picogent's own commits and refs likewise), and a lock a git killed
//! mid-checkpoint left behind is removed rather than failing every later run there.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::checkpoint_store::{self as store, Store};
use crate::sandbox::confine::Confinement;
use crate::sandbox::git;
use crate::sandbox::Sandbox;

pub use super::checkpoint_store::CheckpointError;

/// A commit and its tree.
type Head = (String, String);

#[derive(Clone)]
pub struct Checkpoints {
    git_dir: PathBuf,
    work_tree: PathBuf,
    /// How git is confined (the agent's own confinement), when it is.
    confine: Option<Confinement>,
    /// picogent's own files inside the folder (configuration, `.env`, state, sessions),
    /// relative to it: never snapshotted, never restored.
    excludes: Vec<String>,
    /// The folder's store, shared with the other sessions in it.
    store: Arc<Store>,
    /// The session's last commit and its tree, once known (`None` inside: no commit
    /// yet); shared by the clones a run hands to blocking threads.
    head: Arc<Mutex<Option<Option<Head>>>>,
}

impl Checkpoints {
    /// Opens (creating if needed) the session's checkpoint repository.
    pub fn open(
        state_dir: &Path,
        session_id: &str,
        work_tree: &Path,
        sandbox: &Sandbox,
    ) -> Result<Checkpoints, CheckpointError> {
        // Absolute: the sessions' `alternates` name the store by it.
        let checkpoints = std::path::absolute(state_dir.join("checkpoints"))
            .unwrap_or_else(|_| state_dir.join("checkpoints"));
        let git_dir = checkpoints.join(format!("{session_id}.git"));
        let io = |what: &Path, e: std::io::Error| CheckpointError::Git {
            args: "init".into(),
            message: format!("{}: {e}", what.display()),
        };
        let store = Store::for_folder(&checkpoints, work_tree).map_err(|e| io(&checkpoints, e))?;
        let created = store::create_repository(&git_dir).map_err(|e| io(&git_dir, e))?;
        let c = Checkpoints {
            git_dir,
            work_tree: work_tree.to_path_buf(),
            confine: sandbox.confinement().cloned(),
            excludes: match std::fs::canonicalize(work_tree) {
                Ok(real) => sandbox
                    .own_paths()
                    .filter_map(|p| p.strip_prefix(&real).ok())
                    .filter(|rel| !rel.as_os_str().is_empty())
                    .map(|rel| rel.display().to_string())
                    .collect(),
                Err(_) => Vec::new(),
            },
            store,
            head: Arc::new(Mutex::new(created.then_some(None))),
        };
        c.guard_own()?;
        Ok(c)
    }

    fn git(&self, args: &[&str]) -> Result<String, CheckpointError> {
        self.git_in(&self.git_dir, args)
    }

    /// git's output cut at `cap` bytes, git stopped there: a diff of a huge file the
    /// agent wrote is never held whole in picogent's memory.
    fn git_capped(&self, args: &[&str], cap: usize) -> Result<String, CheckpointError> {
        use std::io::Read;
        let mut child = self
            .command(&self.git_dir, args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| CheckpointError::NoGit(e.to_string()))?;
        let failed = |message: String| CheckpointError::Git {
            args: args.join(" "),
            message,
        };
        let mut out = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            let read = stdout.take(cap as u64 + 1).read_to_end(&mut out);
            if let Err(e) = read {
                git::stop(&mut child);
                let _ = child.wait();
                return Err(failed(e.to_string()));
            }
        }
        let cut = out.len() > cap;
        if cut {
            git::stop(&mut child);
        }
        let status = child.wait().map_err(|e| failed(e.to_string()))?;
        if !cut && !status.success() {
            return Err(failed(status.to_string()));
        }
        let text = String::from_utf8_lossy(&out);
        Ok(crate::util::truncate_bytes(&text, cap).to_string())
    }

    /// git on `git_dir` (the session's repository or the folder's store), hardened and
    /// confined, with no input.
    fn command(&self, git_dir: &Path, args: &[&str]) -> std::process::Command {
        let mut c = git::command(git_dir, &self.work_tree, self.confine.as_ref());
        // What a checkpoint wrote survives a power loss: the session records it as taken.
        for setting in crate::sandbox::git_program::fsync_settings() {
            c.args(["-c", setting]);
        }
        c.args(args).stdin(std::process::Stdio::null());
        git::die_with_picogent(&mut c);
        c
    }

    /// git on `git_dir` (the session's repository or the folder's store), waiting a
    /// little while another git (another picogent on the same state folder) holds one
    /// of its locks. A lock that was there before a git started, is the same file once
    /// it failed, and is open in no process, was left by a git that was killed (with
    /// picogent, mid-checkpoint): it is removed, as `git` itself advises, and git runs
    /// again. Wall clocks play no part: they can jump.
    fn git_in(&self, git_dir: &Path, args: &[&str]) -> Result<String, CheckpointError> {
        let deadline = std::time::Instant::now() + store::INDEX_WAIT;
        let mut named: Option<PathBuf> = None;
        loop {
            let before = named.as_deref().and_then(store::lock_id);
            let r = self.git_once(git_dir, args);
            let Err(CheckpointError::Git { message, .. }) = &r else {
                return r;
            };
            let Some(lock) = store::lock_named(message, &[git_dir, &self.store.git_dir]) else {
                return r;
            };
            let stale = before.is_some_and(|b| store::lock_id(&lock) == Some(b))
                && !crate::util::open_by_anyone(&lock);
            if stale {
                match std::fs::remove_file(&lock) {
                    Ok(()) => {
                        tracing::warn!(lock = %lock.display(), "removed a lock a killed git left in picogent's checkpoints")
                    }
                    Err(e) => {
                        tracing::warn!(lock = %lock.display(), "cannot remove a stale checkpoint lock: {e}")
                    }
                }
            }
            if std::time::Instant::now() >= deadline {
                return r;
            }
            if !stale {
                #[allow(
                    clippy::disallowed_methods,
                    reason = "checkpoints' git runs on blocking threads only"
                )]
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            named = Some(lock);
        }
    }

    /// git on `git_dir`, once.
    #[allow(
        clippy::disallowed_methods,
        reason = "checkpoints' git runs on blocking threads only"
    )]
    fn git_once(&self, git_dir: &Path, args: &[&str]) -> Result<String, CheckpointError> {
        let out = self
            .command(git_dir, args)
            .output()
            .map_err(|e| CheckpointError::NoGit(e.to_string()))?;
        if !out.status.success() {
            return Err(CheckpointError::Git {
                args: args.join(" "),
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Snapshots the folder; returns the commit, or the current one when nothing changed.
    pub fn snapshot(&self, message: &str) -> Result<String, CheckpointError> {
        let tree = self.store.tree(|| self.scan())?;
        self.guard_own()?;
        let mut head = self.head.lock().unwrap_or_else(|p| p.into_inner());
        let last = match head.clone() {
            Some(h) => h,
            None => self.read_head(),
        };
        if let Some((commit, t)) = &last {
            if *t == tree {
                *head = Some(last.clone());
                return Ok(commit.clone());
            }
        }
        let parent = last.as_ref().map(|(c, _)| c.as_str());
        let fail = |e: std::io::Error| CheckpointError::Git {
            args: "commit".into(),
            message: format!("{}: {e}", self.store.git_dir.display()),
        };
        let commit = self.store.commit(&tree, parent, message).map_err(fail)?;
        if !store::set_head(&self.git_dir, &commit).map_err(fail)? {
            self.git(&["update-ref", "HEAD", &commit])?;
        }
        *head = Some(Some((commit.clone(), tree)));
        Ok(commit)
    }

    /// The session's last commit and its tree, from git (`None`: no commit yet).
    fn read_head(&self) -> Option<Head> {
        let out = self
            .git(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
            .ok()?;
        let tree = self
            .git(&["rev-parse", "--verify", "--quiet", "HEAD^{tree}"])
            .ok()?;
        Some((out, tree))
    }

    /// git on the folder's store.
    fn git_store(&self, args: &[&str]) -> Result<String, CheckpointError> {
        self.git_in(&self.store.git_dir, args)
    }

    /// One scan of the folder into its store's index: the tree it holds now.
    fn scan(&self) -> Result<String, CheckpointError> {
        let store = self.store.git_dir.clone();
        // A repository the agent made in the folder is neither entered nor tracked.
        let nested = self.guard(&store, None)?;
        if !nested.is_empty() {
            let mut args = vec!["rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "--"];
            args.extend(nested.iter().map(String::as_str));
            self.git_store(&args)?;
        }
        self.git_store(&["add", "--all", "."])?;
        // On every scan, not only the first: a `.gitignore` in the folder outranks the
        // repository's own exclusions (`!/.env` would let `add` take picogent's files).
        if !self.excludes.is_empty() {
            let mut args = vec!["rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "--"];
            args.extend(self.excludes.iter().map(String::as_str));
            self.git_store(&args)?;
        }
        self.git_store(&["write-tree"])
    }

    /// Restores what this session's steps changed since `commit`, keeping the current
    /// tip reachable. Files the session never snapshotted as changed (another session
    /// or a person working in the same folder since) are left alone.
    pub fn restore(&self, commit: &str) -> Result<(), CheckpointError> {
        self.git(&["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .map_err(|_| CheckpointError::Unknown(commit.into()))?;
        // The session's own last checkpoint: what its steps changed ends there. A
        // session continued in another folder has it in that folder's store; then what
        // changed ends with the folder as it is now.
        let own_tip = self
            .git(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
            .ok();
        // Whatever is in the folder now (even unsnapshotted changes) is kept first.
        let tip = self.snapshot("Before rollback")?;
        let own_tip = own_tip.unwrap_or_else(|| tip.clone());
        // No scan of the folder while its files are put back; the session's index
        // starts as the folder is now, so `rm` finds what it removes.
        let _work = self.store.working();
        *self.head.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.git(&["read-tree", &tip])?;
        if tip != commit {
            let name = format!("refs/picogent/abandoned/{}", crate::util::now_millis());
            self.git(&["update-ref", &name, &tip])?;
        }
        let changed = self.git(&[
            "diff",
            "--name-status",
            "-z",
            "--no-renames",
            commit,
            &own_tip,
        ])?;
        let (mut added, mut back) = (Vec::new(), Vec::new());
        for (status, path) in self.changed_paths(&changed) {
            if status == "A" {
                added.push(path);
            } else {
                back.push(path);
            }
        }
        for chunk in added.chunks(200) {
            // Forced: the index was read from a commit, without the files' stat data.
            let mut args = vec!["rm", "-q", "-r", "-f", "--ignore-unmatch", "--"];
            args.extend(chunk.iter().copied());
            self.git(&args)?;
        }
        for chunk in back.chunks(200) {
            let mut args = vec!["checkout", commit, "--"];
            args.extend(chunk.iter().copied());
            self.git(&args)?;
        }
        self.git(&["read-tree", commit])?;
        self.git(&["update-ref", "HEAD", commit])?;
        Ok(())
    }

    /// The difference between two checkpoints' trees, cut at 100 KB.
    pub fn diff(&self, a: &str, b: &str) -> Result<String, CheckpointError> {
        self.guard_own()?;
        self.git_capped(
            &["diff", "--no-color", "--no-ext-diff", "--no-textconv", a, b],
            DIFF_CAP,
        )
    }

    /// Restores a repository's own config and attributes before git reads them:
    /// picogent's own files of the repository, its `alternates` (`objects`, for a
    /// session's: the store's), and for the store the repositories nested in the
    /// folder, which it excludes (git would run their `status`, with their own
    /// filters), returned.
    fn guard(
        &self,
        git_dir: &Path,
        objects: Option<&Path>,
    ) -> Result<Vec<String>, CheckpointError> {
        let nested = match objects {
            Some(_) => Vec::new(),
            None => git::nested_repositories(&self.work_tree),
        };
        let excludes: Vec<String> = self.excludes.iter().chain(&nested).cloned().collect();
        let changed = git::restore_own_repository(git_dir, &excludes, objects).map_err(|e| {
            CheckpointError::Git {
                args: "(restore config)".into(),
                message: format!("{}: {e}", git_dir.display()),
            }
        })?;
        if !changed.is_empty() {
            tracing::warn!(
                repository = %git_dir.display(),
                "something changed picogent's checkpoint repository ({}); restored",
                changed.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            );
        }
        Ok(nested)
    }

    /// `git diff --name-status -z` output as (status, path) pairs, without picogent's
    /// own files: a rollback never removes or puts them back, a preview never shows
    /// them, whatever a tree holds.
    fn changed_paths<'a>(&self, name_status: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut fields = name_status.split('\0').filter(|f| !f.is_empty());
        let mut out = Vec::new();
        while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
            if !self.is_own(path) {
                out.push((status, path));
            }
        }
        out
    }

    /// Whether a path (relative to the folder) is one of picogent's own files or lies
    /// inside one of its own folders.
    fn is_own(&self, path: &str) -> bool {
        self.excludes.iter().any(|ex| {
            path == ex
                || path
                    .strip_prefix(ex.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// [`Self::guard`] for the session's own repository.
    fn guard_own(&self) -> Result<(), CheckpointError> {
        let objects = self.store.git_dir.join("objects");
        self.guard(&self.git_dir, Some(&objects)).map(drop)
    }

    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The folder this repository snapshots.
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// What a rollback to `commit` changes: the files the session's steps changed
    /// since then (up to its last checkpoint), with their line counts, and the diff
    /// (cut at 100 KB). Read-only: nothing is snapshotted or restored.
    pub fn preview(&self, commit: &str) -> Result<Preview, CheckpointError> {
        self.guard_own()?;
        self.git(&["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .map_err(|_| CheckpointError::Unknown(commit.into()))?;
        let status = self.git(&preview_args(&["--name-status", "-z"], commit, &[]))?;
        // picogent's own files are never shown, even from a tree that holds them: the
        // counts and the diff are asked for the other paths only (pathspecs are literal).
        let changed = self.changed_paths(&status);
        if changed.is_empty() {
            return Ok(Preview {
                files: Vec::new(),
                diff: String::new(),
            });
        }
        let paths: Vec<&str> = changed.iter().map(|(_, p)| *p).take(1000).collect();
        let counts = self.git(&preview_args(&["--numstat", "-z"], commit, &paths))?;
        let mut lines = std::collections::HashMap::new();
        // numstat -z: "<added>\t<removed>\t<path>\0" per file ("-" for binary files).
        for rec in counts.split('\0').filter(|r| !r.is_empty()) {
            let mut f = rec.splitn(3, '\t');
            if let (Some(a), Some(r), Some(path)) = (f.next(), f.next(), f.next()) {
                lines.insert(path.to_string(), (a.parse().ok(), r.parse().ok()));
            }
        }
        let files = changed
            .iter()
            .map(|(st, path)| {
                let (added, removed) = lines.get(*path).copied().unwrap_or((None, None));
                PreviewFile {
                    path: path.to_string(),
                    status: match *st {
                        "A" => "added",
                        "D" => "deleted",
                        _ => "modified",
                    }
                    .to_string(),
                    added,
                    removed,
                }
            })
            .collect();
        let diff = self.git_capped(&preview_args(&[], commit, &paths), DIFF_CAP)?;
        Ok(Preview { files, diff })
    }
}

/// `git diff` from `commit` to the session's last checkpoint, for a preview: as text,
/// never through external diff programs or text conversions, renames not paired.
fn preview_args<'a>(extra: &[&'a str], commit: &'a str, paths: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[commit, "HEAD", "--"]);
    args.extend_from_slice(paths);
    args
}

/// The most of a diff a preview or compare shows.
const DIFF_CAP: usize = 100 * 1024;

pub use picogent_protocol::session::{Preview, PreviewFile};
