//! picogent's sandbox: the confinement of everything the agent does and of every
//! program picogent starts, and all of picogent's process-control `unsafe`.
//!
//! Path checks for `allowed_paths` (spec §5). A path is judged by where it really
//! leads: `..` and symlinks are resolved first (for a path that does not exist yet, its
//! nearest existing parent is resolved), and only then compared with the allowed roots.
//! Protected files (the configuration, `.env`, the agent's `state/`) are refused even
//! inside the allowed paths; skill folders stay readable outside them.
//!
//! The file tools open what the checks allowed without a race (`open`); commands run
//! under kernel confinement (`confine`, `namespaces`, `seccomp`), the layers under
//! these checks. `git` runs picogent's own git commands so that nothing the agent
//! planted in a repository runs; `check` is `picogent sandbox-check`.

mod carve;
pub mod confine;
mod exec;
pub mod git;
pub mod git_credential;
mod git_group;
pub mod git_program;
mod helper;
mod landlock_rules;
mod level;
mod mounts;
mod namespaces;
mod open;
mod probe;
pub mod programs;
mod seccomp;
pub mod secrets;
pub mod setup_error;
mod supervise;
pub mod sys;
pub mod tree;
mod unshare;

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use confine::{Confinement, Helper, Namespaces};
pub use probe::namespaces_work;
pub use probe::{probe_answer, probe_namespaces};
pub use supervise::{kill_group, kill_tree, supervise};
pub use unshare::PASSING_STATUS;

/// Why the sandbox refused a path or a command, or could not open what it allowed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Outside the allowed paths, protected, or not safe to run.
    #[error("{0}")]
    Denied(String),
    /// Allowed, but not what the caller can use (a folder for a file, a special file).
    #[error("{0}")]
    Failed(String),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl SandboxError {
    fn io(path: &Path, source: io::Error) -> Self {
        SandboxError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Sandbox {
    /// Canonical allowed roots; empty means no restriction.
    allowed: Vec<PathBuf>,
    /// Canonical files and folders no tool opens.
    protected: Vec<PathBuf>,
    /// Canonical folders readable even outside `allowed` (skills).
    readable: Vec<PathBuf>,
    /// Canonical folders the tools may read but never write (sessions, the worktrees).
    read_only: Vec<PathBuf>,
    /// Canonical folders inside `read_only` ones that stay writable (a run's own
    /// worktree among the other tasks').
    writable_within: Vec<PathBuf>,
    /// Kernel confinement for commands, when configured.
    confinement: Option<Confinement>,
    /// Why commands cannot run safely here (they are then refused).
    refusal: Option<String>,
}

/// How commands are confined (`sandbox`): namespaces where the kernel allows them,
/// Landlock alone (the relaxed level), or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Namespaces + Landlock + seccomp; without user namespaces, Landlock + seccomp,
    /// refusing configurations whose protected paths would be writable.
    Full,
    /// Landlock + seccomp only, accepting that protected paths inside an allowed path
    /// stay writable to commands.
    Landlock,
}

/// Resolves `p` (absolute) to the real path it leads to: `..` and symlinks resolved,
/// including a dangling symlink at the end (writing through it would create its
/// target). Components that do not exist yet are appended to their resolved parent.
fn real_path(p: &Path) -> io::Result<PathBuf> {
    real_path_depth(p, 0)
}

fn real_path_depth(p: &Path, depth: u32) -> io::Result<PathBuf> {
    if depth > 40 {
        return Err(io::Error::other("too many levels of symbolic links"));
    }
    if let Ok(c) = std::fs::canonicalize(p) {
        return Ok(c);
    }
    let parent = p
        .parent()
        .ok_or_else(|| io::Error::other("no parent folder"))?;
    if let Ok(meta) = std::fs::symlink_metadata(p) {
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(p)?;
            return real_path_depth(&parent.join(target), depth + 1);
        }
    }
    let name = p.file_name().ok_or_else(|| {
        io::Error::other("`..` after a folder that does not exist cannot be resolved")
    })?;
    Ok(real_path_depth(parent, depth)?.join(name))
}

/// Where `p` really leads (`..` and symlinks resolved, missing parts appended), or `p`
/// itself when that cannot be told.
pub fn resolved(p: &Path) -> PathBuf {
    real_path(p).unwrap_or_else(|_| p.to_path_buf())
}

fn canonical_list(paths: &[PathBuf], what: &str) -> Vec<PathBuf> {
    paths
        .iter()
        .filter_map(|p| match real_path(p) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("{what} {} cannot be resolved, skipped: {e}", p.display());
                None
            }
        })
        .collect()
}

impl Sandbox {
    pub fn new(allowed: &[PathBuf], protected: &[PathBuf], readable: &[PathBuf]) -> Self {
        let allowed_real = canonical_list(allowed, "allowed path");
        Sandbox {
            // A restriction whose every path is missing still restricts (to nothing),
            // rather than silently becoming "no restriction".
            allowed: if !allowed.is_empty() && allowed_real.is_empty() {
                vec![PathBuf::from("/nonexistent/picogent-allowed-paths-missing")]
            } else {
                allowed_real
            },
            protected: canonical_list(protected, "protected path"),
            readable: canonical_list(readable, "skill folder"),
            read_only: Vec::new(),
            writable_within: Vec::new(),
            confinement: None,
            refusal: None,
        }
    }

    /// Folders the tools may read but never write, and commands never write (sessions).
    pub fn with_read_only(mut self, paths: &[PathBuf]) -> Self {
        for p in paths {
            // Made now, so a command cannot make one of its own first.
            let _ = std::fs::create_dir_all(p);
        }
        self.read_only
            .extend(canonical_list(paths, "read-only path"));
        self
    }

    /// Confines commands at the full level: namespaces where the kernel allows them.
    pub fn with_confinement(self, helper: PathBuf, deny_network: bool) -> Self {
        self.with_confinement_level(helper, deny_network, Level::Full)
    }

    /// Confines commands: writes only under the allowed paths (when there are any),
    /// picogent's own files protected, with `deny_network` no network. `helper` is
    /// opened here and started through its descriptor from then on.
    pub fn with_confinement_level(
        mut self,
        helper: PathBuf,
        deny_network: bool,
        level: Level,
    ) -> Self {
        let helper = match Helper::open(&helper) {
            Ok(h) => h,
            Err(e) => {
                self.refusal = Some(format!(
                    "cannot open the sandbox helper {}: {e}",
                    helper.display()
                ));
                return self;
            }
        };
        let writable = (!self.allowed.is_empty()).then(|| self.allowed.clone());
        let choice = match level {
            Level::Full => Namespaces::Probed(helper.clone()),
            Level::Landlock => Namespaces::Off("sandbox: \"landlock\"".into()),
        };
        // picogent's configuration, `.env` and state (journal, outbox, checkpoint
        // repositories holding every file the agent saw, other runs' outputs) are hidden;
        // the sessions folder stays readable but not writable.
        let hidden = self.protected.clone();
        let read_only = self.read_only.clone();
        let exposed: Vec<String> = read_only
            .iter()
            .chain(&hidden)
            .filter(|p| self.inside_allowed(p))
            .map(|p| p.display().to_string())
            .collect();
        // Only this case needs the probe's answer now (to refuse at start); otherwise
        // the first command waits for it, and a run without commands never does.
        if level == Level::Full && writable.is_some() && !exposed.is_empty() {
            if let Err(probe::NoNamespaces::Lasting(why)) = probe_namespaces(&helper, deny_network)
            {
                self.refusal = Some(format!(
                    "this kernel does not allow user namespaces ({why}), and under Landlock alone picogent's own files inside the allowed paths ({}) would be out of reach of commands only by leaving the folders that hold them unable to get new files. Move the agent's state, sessions and configuration outside allowed_paths, or set sandbox: \"landlock\" to accept this",
                    exposed.join(", ")
                ));
            }
        }
        self.confinement = Some(Confinement {
            helper,
            writable,
            deny_network,
            choice,
            read_only,
            hidden,
            writable_within: Vec::new(),
            nested_user_namespaces: false,
        });
        self
    }

    /// Lets commands make user namespaces of their own (`nested_user_namespaces`:
    /// rootless containers, a browser's own sandbox), which they otherwise cannot.
    pub fn allowing_nested_user_namespaces(mut self, allow: bool) -> Self {
        if let Some(c) = &mut self.confinement {
            c.nested_user_namespaces = allow;
        }
        self
    }

    /// The sandbox of a run that works in a git worktree (`tree`) of the checkout at
    /// `top`: allowed paths inside the checkout move to the same place in the worktree,
    /// one that covers the whole checkout covers the worktree too, and the checkout
    /// itself becomes read-only, so the run cannot change the user's files, index or
    /// branches.
    pub fn for_worktree(&self, top: &Path, common: &Path, tree: &Path) -> Sandbox {
        let mut s = self.clone();
        // The checkout and the repository (which may lie elsewhere) are never the run's
        // to write, even when nothing else is restricted: a planted hook, filter or
        // `commondir` there would run with picogent's git.
        for p in [top, common] {
            if !s.read_only.iter().any(|r| p.starts_with(r)) {
                s.read_only.push(p.to_path_buf());
            }
        }
        // Among the other tasks' worktrees (read-only), its own is the run's to write.
        s.writable_within = vec![tree.to_path_buf()];
        if let Some(c) = &mut s.confinement {
            c.writable_within = s.writable_within.clone();
        }
        if self.allowed.is_empty() {
            if let Some(c) = &mut s.confinement {
                c.read_only = s.read_only.clone();
            }
            return s;
        }
        let mut allowed: Vec<PathBuf> = Vec::new();
        for a in &self.allowed {
            let moved = match a.strip_prefix(top) {
                Ok(rel) => tree.join(rel),
                Err(_) if top.starts_with(a) => {
                    allowed.push(a.clone());
                    tree.to_path_buf()
                }
                Err(_) => a.clone(),
            };
            allowed.push(moved);
        }
        allowed.dedup();
        s.allowed = allowed;
        if let Some(c) = &mut s.confinement {
            c.writable = Some(s.allowed.clone());
            c.read_only = s.read_only.clone();
        }
        s
    }

    /// `for_worktree` for a checkout picogent cloned itself (GitHub's `repos`), which
    /// no allowed path names: when anything is restricted, the run writes its worktree
    /// alone.
    pub fn for_own_clone(&self, top: &Path, common: &Path, tree: &Path) -> Sandbox {
        let mut s = self.clone();
        if !s.allowed.is_empty() {
            s.allowed = vec![top.to_path_buf()];
        }
        s.for_worktree(top, common, tree)
    }

    /// picogent's own files and folders (configuration, `.env`, state, sessions).
    pub fn own_paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.protected.iter().chain(&self.read_only)
    }

    /// Why commands are refused here, when they are.
    pub fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    pub fn confinement(&self) -> Option<&Confinement> {
        self.confinement.as_ref()
    }

    pub fn is_restricted(&self) -> bool {
        !self.allowed.is_empty()
    }

    pub fn allowed_paths(&self) -> &[PathBuf] {
        &self.allowed
    }

    fn inside_allowed(&self, real: &Path) -> bool {
        self.allowed.is_empty() || self.allowed.iter().any(|a| real.starts_with(a))
    }

    /// Whether the tools may read a resolved path: inside the allowed paths or a skill
    /// folder, and not protected.
    fn readable_here(&self, real: &Path) -> bool {
        !self.is_protected(real)
            && (self.inside_allowed(real) || self.readable.iter().any(|r| real.starts_with(r)))
    }

    /// Whether a resolved path lies in a read-only folder, and not deeper in a folder
    /// that stays writable there.
    fn is_read_only(&self, real: &Path) -> bool {
        let depth = |list: &[PathBuf]| {
            list.iter()
                .filter(|p| real.starts_with(p))
                .map(|p| p.components().count())
                .max()
        };
        match (depth(&self.read_only), depth(&self.writable_within)) {
            (Some(ro), Some(rw)) => ro > rw,
            (ro, _) => ro.is_some(),
        }
    }

    /// Whether a resolved path is one of the protected files or inside a protected folder.
    pub fn is_protected(&self, real: &Path) -> bool {
        self.protected.iter().any(|p| real.starts_with(p))
    }

    /// The path as the tool will open it: `~` expanded, relative to `work_dir`.
    fn join(work_dir: &Path, raw: &str) -> PathBuf {
        let expanded = match raw.strip_prefix("~/").or((raw == "~").then_some("")) {
            Some(rest) => match std::env::var_os("HOME") {
                Some(h) => PathBuf::from(h).join(rest),
                None => PathBuf::from(raw),
            },
            None => PathBuf::from(raw),
        };
        if expanded.is_absolute() {
            expanded
        } else {
            work_dir.join(expanded)
        }
    }

    fn resolve(&self, work_dir: &Path, raw: &str) -> Result<PathBuf, SandboxError> {
        if raw.is_empty() {
            return Err(SandboxError::Denied("the path is empty".into()));
        }
        let joined = Self::join(work_dir, raw);
        real_path(&joined).map_err(|e| SandboxError::Denied(format!("{raw}: {e}")))
    }

    fn outside(&self, raw: &str, real: &Path) -> SandboxError {
        let roots: Vec<String> = self
            .allowed
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        SandboxError::Denied(format!(
            "{raw} resolves to {}, which is outside the allowed paths ({})",
            real.display(),
            roots.join(", ")
        ))
    }

    fn protected_error(raw: &str) -> SandboxError {
        SandboxError::Denied(format!(
            "{raw} is picogent's own configuration or state and is not available to tools"
        ))
    }

    /// For read: inside the allowed paths or a skill folder, and not protected.
    fn check_read(&self, work_dir: &Path, raw: &str) -> Result<PathBuf, SandboxError> {
        let real = self.resolve(work_dir, raw)?;
        if self.is_protected(&real) {
            return Err(Self::protected_error(raw));
        }
        if self.readable_here(&real) {
            Ok(real)
        } else {
            Err(self.outside(raw, &real))
        }
    }

    /// For write and edit: inside the allowed paths and not protected.
    fn check_write(&self, work_dir: &Path, raw: &str) -> Result<PathBuf, SandboxError> {
        let real = self.resolve(work_dir, raw)?;
        if self.is_protected(&real) || self.is_read_only(&real) {
            return Err(Self::protected_error(raw));
        }
        if self.inside_allowed(&real) {
            Ok(real)
        } else {
            Err(self.outside(raw, &real))
        }
    }

    /// For the roots of grep, find, ls: like read.
    pub fn check_root(&self, work_dir: &Path, raw: Option<&str>) -> Result<PathBuf, SandboxError> {
        self.check_read(work_dir, raw.filter(|s| !s.is_empty()).unwrap_or("."))
    }

    /// For bash's working folder, and for a front door's requested working folder.
    pub fn check_work_dir(&self, dir: &Path) -> Result<PathBuf, SandboxError> {
        let real =
            real_path(dir).map_err(|e| SandboxError::Denied(format!("{}: {e}", dir.display())))?;
        if !real.is_dir() {
            return Err(SandboxError::Denied(format!(
                "the working folder {} does not exist or is not a folder",
                dir.display()
            )));
        }
        if self.inside_allowed(&real) {
            Ok(real)
        } else {
            Err(self.outside(&dir.display().to_string(), &real))
        }
    }

    /// The command that runs a bash command line, confined when configured; `tmp` is
    /// the command's private temporary folder.
    pub fn bash_command(
        &self,
        command: &str,
        tmp: &Path,
    ) -> Result<tokio::process::Command, SandboxError> {
        if let Some(r) = &self.refusal {
            return Err(SandboxError::Denied(format!("bash is not available: {r}")));
        }
        Ok(match &self.confinement {
            Some(c) => c.command(Path::new("/bin/bash"), ["-c", command], tmp),
            None => {
                let mut cmd = tokio::process::Command::new("/bin/bash");
                cmd.arg("-c").arg(command);
                cmd.env("TMPDIR", tmp).env("TMP", tmp).env("TEMP", tmp);
                cmd
            }
        })
    }

    /// The allowed root (or readable skill folder) a checked real path lies in.
    fn root_of(&self, real: &Path) -> PathBuf {
        self.allowed
            .iter()
            .chain(&self.readable)
            .filter(|r| real.starts_with(r))
            .max_by_key(|r| r.as_os_str().len())
            .cloned()
            .unwrap_or_else(|| PathBuf::from("/"))
    }

    /// Whether an opened file is one of the protected files under another name (a hard
    /// link made before picogent started).
    fn is_protected_inode(&self, meta: &std::fs::Metadata) -> bool {
        let id = (meta.dev(), meta.ino());
        self.protected.iter().chain(&self.read_only).any(|p| {
            if p.is_file() {
                return open::identity(p) == Some(id);
            }
            walkdir_identities(p).any(|i| i == id)
        })
    }

    /// Checks `raw` for reading and opens it in one step beneath its root: a regular
    /// file only. Blocking; call from `spawn_blocking`.
    pub fn open_read(&self, work_dir: &Path, raw: &str) -> Result<(File, PathBuf), SandboxError> {
        let real = self.check_read(work_dir, raw)?;
        let root = self.root_of(&real);
        let fail = |e: io::Error| opened_error(raw, &real, e);
        let rootfd = open::open_root(&root).map_err(fail)?;
        let rel = real.strip_prefix(&root).unwrap_or(Path::new(""));
        let fd =
            open::open_beneath(&rootfd, rel, libc::O_RDONLY | libc::O_NONBLOCK, 0).map_err(fail)?;
        let (file, meta) =
            open::regular_file(fd, raw).map_err(|e| SandboxError::Failed(e.to_string()))?;
        if meta.nlink() > 1 && self.is_protected_inode(&meta) {
            return Err(Self::protected_error(raw));
        }
        Ok((file, real))
    }

    /// Checks `raw` for writing and opens it read-write in one step beneath its root,
    /// creating missing folders (and the file, when `create`). Refuses a file with more
    /// than one hard link. Returns the file, its real path, and whether it existed.
    pub fn open_write(
        &self,
        work_dir: &Path,
        raw: &str,
        create: bool,
    ) -> Result<(File, PathBuf, bool), SandboxError> {
        let real = self.check_write(work_dir, raw)?;
        let root = self.root_of(&real);
        let fail = |e: io::Error| opened_error(raw, &real, e);
        let rootfd = open::open_root(&root).map_err(fail)?;
        let rel = real.strip_prefix(&root).unwrap_or(Path::new(""));
        let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
            return Err(SandboxError::Failed(format!(
                "{raw} is a folder; give a file path"
            )));
        };
        let dir = if create {
            open::create_folders(&rootfd, parent).map_err(fail)?
        } else {
            open::open_beneath(&rootfd, parent, libc::O_PATH | libc::O_DIRECTORY, 0)
                .map_err(fail)?
        };
        let name = Path::new(name);
        let flags = libc::O_RDWR | libc::O_NONBLOCK;
        let (fd, existed) = match open::open_beneath(&dir, name, flags, 0) {
            Ok(fd) => (fd, true),
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => (
                open::open_beneath(&dir, name, flags | libc::O_CREAT | libc::O_EXCL, 0o666)
                    .map_err(fail)?,
                false,
            ),
            Err(e) => return Err(fail(e)),
        };
        let (file, meta) =
            open::regular_file(fd, raw).map_err(|e| SandboxError::Failed(e.to_string()))?;
        // picogent may run as root, which keeps the bits on a write: filling a set-ID
        // file someone made would hand its content the file owner's rights.
        if meta.mode() & 0o6000 != 0 {
            return Err(SandboxError::Denied(format!(
                "{raw} has the set-user-ID or set-group-ID bit (mode {:o}); picogent never writes into such a file. Remove it first (rm), then write it",
                meta.mode() & 0o7777
            )));
        }
        if meta.nlink() > 1 {
            return Err(SandboxError::Denied(format!(
                "{raw} has {} hard links, and picogent cannot tell where the others lie (they may be outside the allowed paths), so it does not write through it. Remove the other links, or replace the file (delete it, then write it)",
                meta.nlink()
            )));
        }
        Ok((file, real, existed))
    }
}

/// The (device, inode) pairs of the files under a protected folder, bounded.
fn walkdir_identities(dir: &Path) -> impl Iterator<Item = (u64, u64)> {
    ignore::WalkBuilder::new(dir)
        .standard_filters(false)
        .follow_links(false)
        .build()
        .take(50_000)
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()))
}

/// An error from opening a checked path, said as what happened.
fn opened_error(raw: &str, real: &Path, e: io::Error) -> SandboxError {
    match e.raw_os_error() {
        Some(libc::EISDIR) => SandboxError::Failed(format!("{raw} is a folder; give a file path")),
        Some(libc::ELOOP) | Some(libc::EXDEV) => SandboxError::Denied(format!(
            "{raw} changed while it was being opened (a link appeared on the way to {}); refused",
            real.display()
        )),
        _ => SandboxError::io(real, e),
    }
}
