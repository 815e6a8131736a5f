//! Private git checkpoints of the working folder, for rollback.
//!
//! The snapshots live in a git repository of picogent's own, under its state folder
//! (`git --git-dir=<state>/checkpoints/<session>.git --work-tree=<work dir>`), never in
//! the folder's own `.git`, which git itself never descends into and which is left
//! untouched. The folder's `.gitignore` is honoured. Commits use a fixed identity and
//! ignore the user's git configuration, so hooks or signing settings cannot interfere;
//! git runs hardened and confined (`tools::sandbox::git`), and the repository's config
//! is restored to picogent's own before each use, so nothing the agent plants in the
//! folder (a `.gitattributes` filter) or in the repository runs.
//! Rollback restores what the session's own steps changed since a checkpoint (deleting
//! files they created; another session's files in the same folder are left alone);
//! the tip it left is kept under `refs/picogent/abandoned/` so no path is ever lost.

use std::path::{Path, PathBuf};

use crate::tools::confine::Confinement;
use crate::tools::sandbox::git;
use crate::tools::Sandbox;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoints need git, which was not found ({0}); install git or set \"checkpoints\": false")]
    NoGit(String),
    #[error("git {args} failed: {message}")]
    Git { args: String, message: String },
    #[error("no checkpoint {0}")]
    Unknown(String),
}

#[derive(Clone)]
pub struct Checkpoints {
    git_dir: PathBuf,
    work_tree: PathBuf,
    /// How git is confined (the agent's own confinement), when it is.
    confine: Option<Confinement>,
    /// picogent's own files inside the folder (configuration, `.env`, state, sessions),
    /// relative to it: never snapshotted, never restored.
    excludes: Vec<String>,
}

impl Checkpoints {
    /// Opens (creating if needed) the session's checkpoint repository.
    pub fn open(
        state_dir: &Path,
        session_id: &str,
        work_tree: &Path,
        sandbox: &Sandbox,
    ) -> Result<Checkpoints, CheckpointError> {
        let git_dir = state_dir
            .join("checkpoints")
            .join(format!("{session_id}.git"));
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
        };
        if !c.git_dir.join("HEAD").exists() {
            std::fs::create_dir_all(&c.git_dir).map_err(|e| CheckpointError::Git {
                args: "init".into(),
                message: format!("{}: {e}", c.git_dir.display()),
            })?;
            c.git(&["init", "--quiet"])?;
            git::restore_own_repository(&c.git_dir, &c.excludes).map_err(|e| {
                CheckpointError::Git {
                    args: "init".into(),
                    message: format!("{}: {e}", c.git_dir.display()),
                }
            })?;
        }
        Ok(c)
    }

    fn git(&self, args: &[&str]) -> Result<String, CheckpointError> {
        let out = git::command(&self.git_dir, &self.work_tree, self.confine.as_ref())
            .args(args)
            .stdin(std::process::Stdio::null())
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
        // A repository the agent made in the folder is neither entered nor tracked.
        let nested = self.guard()?;
        if !nested.is_empty() {
            let mut args = vec!["rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "--"];
            args.extend(nested.iter().map(String::as_str));
            self.git(&args)?;
        }
        self.git(&["add", "--all", "."])?;
        if !self.excludes.is_empty() {
            // Repositories from before the exclusions may still track them.
            let mut args = vec!["rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "--"];
            args.extend(self.excludes.iter().map(String::as_str));
            self.git(&args)?;
        }
        let has_head = self
            .git(&["rev-parse", "--verify", "--quiet", "HEAD"])
            .is_ok();
        let changed = !has_head || self.git(&["diff", "--cached", "--quiet"]).is_err();
        if changed {
            self.git(&["commit", "--quiet", "--allow-empty", "-m", message])?;
        }
        self.git(&["rev-parse", "HEAD"])
    }

    /// Restores what this session's steps changed since `commit`, keeping the current
    /// tip reachable. Files the session never snapshotted as changed (another session
    /// or a person working in the same folder since) are left alone.
    pub fn restore(&self, commit: &str) -> Result<(), CheckpointError> {
        self.git(&["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .map_err(|_| CheckpointError::Unknown(commit.into()))?;
        // The session's own last checkpoint: what its steps changed ends there.
        let own_tip = self.git(&["rev-parse", "HEAD"])?;
        // Whatever is in the folder now (even unsnapshotted changes) is kept first.
        let tip = self.snapshot("Before rollback")?;
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
        let mut fields = changed.split('\0').filter(|f| !f.is_empty());
        let (mut added, mut back) = (Vec::new(), Vec::new());
        while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
            if status == "A" {
                added.push(path);
            } else {
                back.push(path);
            }
        }
        for chunk in added.chunks(200) {
            let mut args = vec!["rm", "-q", "-r", "--ignore-unmatch", "--"];
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
        self.guard()?;
        let d = self.git(&["diff", "--no-color", "--no-ext-diff", "--no-textconv", a, b])?;
        Ok(crate::util::truncate_bytes(&d, 100 * 1024).to_string())
    }

    /// Restores the repository's own config and attributes before git reads them.
    /// Restores picogent's own files of the repository; the repositories nested in the
    /// folder, which it excludes (git would run their `status`, with their own filters).
    fn guard(&self) -> Result<Vec<String>, CheckpointError> {
        let nested = git::nested_repositories(&self.work_tree);
        let excludes: Vec<String> = self.excludes.iter().chain(&nested).cloned().collect();
        let changed = git::restore_own_repository(&self.git_dir, &excludes).map_err(|e| {
            CheckpointError::Git {
                args: "(restore config)".into(),
                message: format!("{}: {e}", self.git_dir.display()),
            }
        })?;
        if !changed.is_empty() {
            tracing::warn!(
                repository = %self.git_dir.display(),
                "something changed picogent's checkpoint repository ({}); restored",
                changed.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            );
        }
        Ok(nested)
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
        self.guard()?;
        self.git(&["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .map_err(|_| CheckpointError::Unknown(commit.into()))?;
        let base = [
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
        ];
        let with = |extra: &[&str]| {
            let mut args: Vec<&str> = base.to_vec();
            args.extend_from_slice(extra);
            args.extend_from_slice(&[commit, "HEAD"]);
            self.git(&args)
        };
        let status = with(&["--name-status", "-z"])?;
        let counts = with(&["--numstat", "-z"])?;
        let mut lines = std::collections::HashMap::new();
        // numstat -z: "<added>\t<removed>\t<path>\0" per file ("-" for binary files).
        for rec in counts.split('\0').filter(|r| !r.is_empty()) {
            let mut f = rec.splitn(3, '\t');
            if let (Some(a), Some(r), Some(path)) = (f.next(), f.next(), f.next()) {
                lines.insert(path.to_string(), (a.parse().ok(), r.parse().ok()));
            }
        }
        let mut files = Vec::new();
        let mut fields = status.split('\0').filter(|f| !f.is_empty());
        while let (Some(st), Some(path)) = (fields.next(), fields.next()) {
            let (added, removed) = lines.get(path).copied().unwrap_or((None, None));
            files.push(PreviewFile {
                path: path.to_string(),
                status: match st {
                    "A" => "added",
                    "D" => "deleted",
                    _ => "modified",
                }
                .to_string(),
                added,
                removed,
            });
        }
        let diff = with(&[])?;
        Ok(Preview {
            files,
            diff: crate::util::truncate_bytes(&diff, 100 * 1024).to_string(),
        })
    }
}

/// What a rollback would change: [`Checkpoints::preview`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Preview {
    pub files: Vec<PreviewFile>,
    pub diff: String,
}

/// One file a rollback puts back: how the session's steps changed it since the
/// checkpoint (`added`: the rollback deletes it; `deleted`: it comes back), and the
/// lines they added and removed (none for a binary file).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PreviewFile {
    pub path: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
}
