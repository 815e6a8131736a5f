//! Path checks for `allowed_paths` (spec §5). A path is judged by where it really
//! leads: `..` and symlinks are resolved first (for a path that does not exist yet, its
//! nearest existing parent is resolved), and only then compared with the allowed roots.
//! Protected files (the configuration, `.env`, the agent's `state/`) are refused even
//! inside the allowed paths; skill folders stay readable outside them.
//!
//! Kernel confinement of bash (`confine`) is the layer under these checks.

use std::io;
use std::path::{Path, PathBuf};

use super::ToolError;

#[derive(Debug, Default, Clone)]
pub struct Sandbox {
    /// Canonical allowed roots; empty means no restriction.
    allowed: Vec<PathBuf>,
    /// Canonical files and folders no tool opens.
    protected: Vec<PathBuf>,
    /// Canonical folders readable even outside `allowed` (skills).
    readable: Vec<PathBuf>,
    /// Kernel confinement for bash, when configured.
    confinement: Option<super::confine::Confinement>,
}

/// Resolves `p` (absolute) to the real path it leads to: `..` and symlinks resolved,
/// including a dangling symlink at the end (writing through it would create its
/// target). Components that do not exist yet are appended to their resolved parent.
pub fn real_path(p: &Path) -> io::Result<PathBuf> {
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
            confinement: None,
        }
    }

    /// Confines bash with Landlock: writes only under the allowed paths (when there are
    /// any) and, with `deny_network`, no TCP.
    pub fn with_confinement(mut self, helper: PathBuf, deny_network: bool) -> Self {
        let writable = (!self.allowed.is_empty()).then(|| self.allowed.clone());
        if writable.is_some() || deny_network {
            self.confinement = Some(super::confine::Confinement {
                helper,
                writable,
                deny_network,
            });
        }
        self
    }

    pub fn confinement(&self) -> Option<&super::confine::Confinement> {
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

    /// Whether a resolved path is one of the protected files or inside a protected folder.
    pub fn is_protected(&self, real: &Path) -> bool {
        self.protected.iter().any(|p| real.starts_with(p))
    }

    /// The path as the tool will open it: `~` expanded, relative to `work_dir`.
    pub fn join(work_dir: &Path, raw: &str) -> PathBuf {
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

    fn resolve(&self, work_dir: &Path, raw: &str) -> Result<PathBuf, ToolError> {
        if raw.is_empty() {
            return Err(ToolError::Denied("the path is empty".into()));
        }
        let joined = Self::join(work_dir, raw);
        real_path(&joined).map_err(|e| ToolError::Denied(format!("{raw}: {e}")))
    }

    fn outside(&self, raw: &str, real: &Path) -> ToolError {
        let roots: Vec<String> = self
            .allowed
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        ToolError::Denied(format!(
            "{raw} resolves to {}, which is outside the allowed paths ({})",
            real.display(),
            roots.join(", ")
        ))
    }

    fn protected_error(raw: &str) -> ToolError {
        ToolError::Denied(format!(
            "{raw} is picogent's own configuration or state and is not available to tools"
        ))
    }

    /// For read: inside the allowed paths or a skill folder, and not protected.
    pub fn check_read(&self, work_dir: &Path, raw: &str) -> Result<PathBuf, ToolError> {
        let real = self.resolve(work_dir, raw)?;
        if self.is_protected(&real) {
            return Err(Self::protected_error(raw));
        }
        if self.inside_allowed(&real) || self.readable.iter().any(|r| real.starts_with(r)) {
            Ok(real)
        } else {
            Err(self.outside(raw, &real))
        }
    }

    /// For write and edit: inside the allowed paths and not protected.
    pub fn check_write(&self, work_dir: &Path, raw: &str) -> Result<PathBuf, ToolError> {
        let real = self.resolve(work_dir, raw)?;
        if self.is_protected(&real) {
            return Err(Self::protected_error(raw));
        }
        if self.inside_allowed(&real) {
            Ok(real)
        } else {
            Err(self.outside(raw, &real))
        }
    }

    /// For the roots of grep, find, ls: like read.
    pub fn check_root(&self, work_dir: &Path, raw: Option<&str>) -> Result<PathBuf, ToolError> {
        self.check_read(work_dir, raw.filter(|s| !s.is_empty()).unwrap_or("."))
    }

    /// For bash's working folder, and for a front door's requested working folder.
    pub fn check_work_dir(&self, dir: &Path) -> Result<PathBuf, ToolError> {
        let real =
            real_path(dir).map_err(|e| ToolError::Denied(format!("{}: {e}", dir.display())))?;
        if !real.is_dir() {
            return Err(ToolError::Denied(format!(
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
    /// the command's private temporary folder (writable under confinement).
    pub fn bash_command(&self, command: &str, tmp: &Path) -> tokio::process::Command {
        match &self.confinement {
            Some(c) => c.command(command, tmp),
            None => {
                let mut cmd = tokio::process::Command::new("/bin/bash");
                cmd.arg("-c").arg(command);
                cmd
            }
        }
    }
}
