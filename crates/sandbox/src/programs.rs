//! Finding the programs picogent itself starts (git, MCP servers): by name on a `PATH`
//! that holds nothing a command could write. A folder on picogent's `PATH` that lies
//! inside an allowed path (a `~/bin` under an allowed home, a project's `node_modules/
//! .bin`), or a relative entry (the working folder), would let the agent put its own
//! `git` or `npx` where picogent looks, and have it run outside the sandbox.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// picogent's `PATH` without relative entries and without folders inside `writable`
/// (resolved). `writable` empty means commands may write anywhere: then only the
/// system's own folders are kept.
pub fn trusted_path(writable: &[PathBuf]) -> OsString {
    let raw = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    filter_path(&raw, writable)
}

fn filter_path(raw: &std::ffi::OsStr, writable: &[PathBuf]) -> OsString {
    let kept: Vec<PathBuf> = std::env::split_paths(raw)
        .filter(|p| p.is_absolute())
        .filter(|p| trusted_folder(p, writable))
        .collect();
    std::env::join_paths(kept).unwrap_or_default()
}

/// Whether no command can write the folder `dir` (resolved): it lies outside every
/// folder in `writable`, or, when commands may write anywhere (`writable` empty), it
/// is one of the system's own.
pub fn trusted_folder(dir: &Path, writable: &[PathBuf]) -> bool {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if writable.is_empty() {
        SYSTEM.iter().any(|s| real.starts_with(s))
    } else {
        !writable.iter().any(|w| real.starts_with(w))
    }
}

/// The variables of picogent's environment every program it starts for the agent
/// (git, MCP servers) keeps: who and where, nothing that points it at files.
pub const BASE_ENV: &[&str] = &["USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ"];

/// Where programs are installed by the system (kept when nothing else can be trusted).
const SYSTEM: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/opt",
    "/nix",
    "/snap",
];

/// `name` resolved on `path` (an absolute name is taken as it is): the first
/// executable regular file.
pub fn resolve(name: &str, path: &OsString) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let given = Path::new(name);
    if given.is_absolute() {
        return if runnable(given) {
            Ok(given.to_path_buf())
        } else {
            Err("no such command (not an executable file)".into())
        };
    }
    if name.contains('/') {
        return Err(format!(
            "{name:?} is a relative path; give a command name found on PATH or an absolute path"
        ));
    }
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| runnable(p))
        .ok_or_else(|| {
            format!(
                "no such command on PATH ({}; folders inside the allowed paths are not searched)",
                path.to_string_lossy()
            )
        })
}

/// The operator's home, when what programs read from it (git and ssh configuration,
/// Python's user site, `.npmrc`) is theirs: nothing is trusted when the agent's
/// commands may write anywhere, or when the home or any of those files lies inside an
/// allowed path.
pub fn trusted_home(home: Option<&Path>, allowed: &[PathBuf]) -> Option<PathBuf> {
    if allowed.is_empty() {
        return None;
    }
    let home = std::fs::canonicalize(home?).ok()?;
    let xdg = home.join(".config");
    // A file (or folder of them) an allowed path lies in, or that lies in one.
    let reachable = |p: &Path| {
        let real = super::resolved(p);
        allowed
            .iter()
            .any(|a| real.starts_with(a) || a.starts_with(&real))
    };
    if allowed.iter().any(|a| home.starts_with(a)) {
        return None;
    }
    let files = [
        home.join(".gitconfig"),
        xdg.join("git"),
        home.join(".ssh"),
        home.join(".git-credentials"),
        home.join(".local"),
        home.join(".npmrc"),
        home.join(".config"),
    ];
    (!files.iter().any(|f| reachable(f))).then_some(home)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_a_command_can_write_are_not_searched() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let allowed = std::fs::canonicalize(dir.path()).unwrap();
        let path = std::env::join_paths([bin.clone(), PathBuf::from("/usr/bin")]).unwrap();
        let t = filter_path(&path, &[allowed]);
        let kept: Vec<PathBuf> = std::env::split_paths(&t).collect();
        assert_eq!(kept, vec![PathBuf::from("/usr/bin")]);
        // Nothing trusted but the system's folders when commands may write anywhere.
        let t = filter_path(&path, &[]);
        assert_eq!(
            std::env::split_paths(&t).collect::<Vec<_>>(),
            vec![PathBuf::from("/usr/bin")]
        );
        assert!(resolve("./x", &OsString::new()).is_err());
    }
}
