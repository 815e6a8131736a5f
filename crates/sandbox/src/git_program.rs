//! Which git picogent runs, and what that git can do. Found once per process:
//! `PICOGENT_GIT` (an absolute path) or the first `git` on `PATH`; its version read
//! from `git --version`. picogent supports git 2.30 and newer (Debian 11's); features
//! newer than that, which picogent uses for safety, have a replacement on older gits
//! that keeps the same guarantee (see `supports_*` below and `git::set_config`).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The oldest git picogent runs.
pub const MINIMUM: Version = Version(2, 30, 0);

/// A git version, as `git --version` names it (`2.39.5`, `2.37.1 (Apple Git-137.1)`,
/// `2.43.0.windows.1`): its first three numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl Version {
    /// The version in `git --version`'s answer.
    pub fn parse(answer: &str) -> Option<Version> {
        let rest = answer.trim().strip_prefix("git version ")?;
        let mut numbers = rest
            .split(|c: char| !c.is_ascii_digit())
            .take_while(|s| !s.is_empty())
            .map(|s| s.parse::<u32>().ok());
        let major = numbers.next()??;
        let minor = numbers.next()??;
        let patch = numbers.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

/// Why there is no git picogent can use.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GitError {
    #[error("git not found: {0}")]
    Missing(String),
    #[error("{path} answered `--version` with {answer:?}, which names no git version")]
    Unknown { path: PathBuf, answer: String },
    #[error(
        "git {version} ({path}) is too old: picogent needs git {MINIMUM} or newer \
         (Debian 11, Ubuntu 22.04, Debian 12 and RHEL 9 ship one)"
    )]
    TooOld { path: PathBuf, version: Version },
    #[error(
        "the git found at {path} lies where a command could replace it ({why}) and have \
         picogent run it; install git elsewhere or set PICOGENT_GIT"
    )]
    Writable { path: PathBuf, why: &'static str },
}

/// The git picogent runs.
#[derive(Debug, Clone)]
pub struct GitProgram {
    pub path: PathBuf,
    pub version: Version,
}

impl GitProgram {
    /// `--attr-source` (git 2.40): attributes read from a given tree, none from the
    /// work tree. Older gits read the work tree's `.gitattributes`; every driver those
    /// could name is emptied either way, so they name no program on any git.
    pub fn supports_attr_source(&self) -> bool {
        self.version >= Version(2, 40, 0)
    }

    /// `core.fsync` (git 2.36): which files git syncs. Older gits sync objects with
    /// `core.fsyncObjectFiles` (which newer ones call deprecated).
    pub fn supports_core_fsync(&self) -> bool {
        self.version >= Version(2, 36, 0)
    }

    /// `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n` (git 2.31): settings in the environment
    /// whose keys may hold `=`. Older gits take `GIT_CONFIG_PARAMETERS` instead, which
    /// splits at the first `=`.
    pub fn supports_config_env(&self) -> bool {
        self.version >= Version(2, 31, 0)
    }
}

static FOUND: OnceLock<Result<GitProgram, GitError>> = OnceLock::new();

/// The git of this process (found on first use), whatever its version.
fn located() -> Result<&'static GitProgram, GitError> {
    FOUND
        .get_or_init(|| {
            let path = locate(
                std::env::var_os("PICOGENT_GIT"),
                std::env::var_os("PATH").unwrap_or_default(),
            )?;
            let version = version_of(&path)?;
            Ok(GitProgram { path, version })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The git of this process, when it is one picogent supports.
pub fn found() -> Result<&'static GitProgram, GitError> {
    let git = located()?;
    if git.version < MINIMUM {
        return Err(GitError::TooOld {
            path: git.path.clone(),
            version: git.version,
        });
    }
    Ok(git)
}

/// The program to run as git: the one found, or plain `git` (whose start then fails
/// with the system's own error) when none was.
pub fn program() -> OsString {
    located().map_or_else(|_| "git".into(), |g| g.path.clone().into_os_string())
}

/// Whether settings go in `GIT_CONFIG_COUNT` (see [`GitProgram::supports_config_env`]);
/// without a git the answer does not matter (its commands fail to start).
pub fn config_env() -> bool {
    located().map_or(true, GitProgram::supports_config_env)
}

/// The settings that make git sync what it writes before it says it is done: objects,
/// the index and refs on git 2.36 and newer (refs from 2.38), objects before.
pub fn fsync_settings() -> &'static [&'static str] {
    match located() {
        Ok(g) if !g.supports_core_fsync() => &["core.fsyncObjectFiles=true"],
        _ => &["core.fsync=added", "core.fsyncMethod=fsync"],
    }
}

/// Whether `--attr-source` can be given (see [`GitProgram::supports_attr_source`]).
pub fn attr_source() -> bool {
    located().is_ok_and(GitProgram::supports_attr_source)
}

/// Whether git can be trusted by a daemon whose commands write `writable` (the
/// allowed paths; empty: anywhere): found, new enough, and, as the program and where
/// a link to it leads, in a folder no command can write (`programs::trusted_folder`).
pub fn usable(writable: &[PathBuf]) -> Result<&'static GitProgram, GitError> {
    let git = found()?;
    let real = std::fs::canonicalize(&git.path).unwrap_or_else(|_| git.path.clone());
    let trusted = [&git.path, &real].iter().all(|p| {
        p.parent()
            .is_some_and(|d| super::programs::trusted_folder(d, writable))
    });
    if !trusted {
        return Err(GitError::Writable {
            path: git.path.clone(),
            why: if writable.is_empty() {
                "commands may write anywhere, and it is not in a system folder"
            } else {
                "inside the allowed paths"
            },
        });
    }
    Ok(git)
}

/// Logs, once per process, which git was found (or why none can be used).
pub fn announce() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| match found() {
        Ok(g) => tracing::info!(git = %g.path.display(), version = %g.version, "git {} at {}", g.version, g.path.display()),
        Err(e) => tracing::warn!("{e}"),
    });
}

/// `PICOGENT_GIT` when set (it must be an absolute path to a program), else the first
/// executable `git` in an absolute folder of `path`.
fn locate(given: Option<OsString>, path: OsString) -> Result<PathBuf, GitError> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if let Some(given) = given.filter(|g| !g.is_empty()) {
        let p = PathBuf::from(&given);
        if !p.is_absolute() {
            return Err(GitError::Missing(format!(
                "PICOGENT_GIT={} is not an absolute path",
                p.display()
            )));
        }
        return if runnable(&p) {
            Ok(p)
        } else {
            Err(GitError::Missing(format!(
                "PICOGENT_GIT={} is not an executable file",
                p.display()
            )))
        };
    }
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("git"))
        .find(|p| runnable(p))
        .ok_or_else(|| {
            GitError::Missing(format!(
                "no git on PATH ({}); install git {MINIMUM} or newer, or set PICOGENT_GIT",
                path.to_string_lossy()
            ))
        })
}

/// Runs `git --version` with nothing of the environment that could make git read a
/// file or run a program.
#[allow(
    clippy::disallowed_methods,
    reason = "once, at start, on a blocking thread (main's start-up, discover)"
)]
fn version_of(path: &Path) -> Result<Version, GitError> {
    let out = std::process::Command::new(path)
        .arg("--version")
        .env_clear()
        .env("LC_ALL", "C")
        .env("HOME", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| GitError::Missing(format!("{}: {e}", path.display())))?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Version::parse(&answer).ok_or_else(|| GitError::Unknown {
        path: path.to_path_buf(),
        answer: if answer.is_empty() {
            one_line(String::from_utf8_lossy(&out.stderr).trim(), 200)
        } else {
            answer
        },
    })
}

/// `s` on one line, at most `max` characters (for quoting git's words).
fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if flat.chars().count() > max => format!("{}…", &flat[..cut]),
        _ => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_git_and_its_packagers_print_them() {
        for (answer, want) in [
            ("git version 2.39.5\n", Version(2, 39, 5)),
            ("git version 2.30.2", Version(2, 30, 2)),
            ("git version 2.37.1 (Apple Git-137.1)", Version(2, 37, 1)),
            ("git version 2.43.0.windows.1", Version(2, 43, 0)),
            ("git version 2.40.0.rc1", Version(2, 40, 0)),
            ("git version 3.0", Version(3, 0, 0)),
        ] {
            assert_eq!(Version::parse(answer), Some(want), "{answer}");
        }
        for bad in ["", "hub version 2.14", "git version", "git version x.y"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
        assert!(Version(2, 29, 9) < MINIMUM && Version(2, 30, 0) >= MINIMUM);
        assert!(Version(2, 100, 0) > Version(2, 40, 0));
    }

    #[test]
    fn git_is_found_by_its_variable_or_on_path_and_a_relative_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let git = bin.join("git");
        std::fs::write(&git, "#!/bin/sh\necho git version 2.30.1\n").unwrap();
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([Path::new("relative"), &bin]).unwrap();
        assert_eq!(locate(None, path.clone()).unwrap(), git);
        assert_eq!(version_of(&git).unwrap(), Version(2, 30, 1));
        assert_eq!(locate(Some(git.clone().into()), "".into()).unwrap(), git);
        let e = locate(Some("bin/git".into()), path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("PICOGENT_GIT") && e.contains("absolute"), "{e}");
        let e = locate(None, "/nonexistent".into()).unwrap_err().to_string();
        assert!(e.contains("no git on PATH"), "{e}");
    }
}
