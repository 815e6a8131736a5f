//! Landlock rules that leave holes: Landlock can only grant, and a rule on a folder
//! grants everything beneath it, so "all of `/` but picogent's state" is said as rules
//! on every sibling along the way down to each hole. This is how the Landlock level
//! (no namespaces to cover files with) keeps picogent's configuration, `.env`, state
//! and sessions, and the checkout's git folder, out of commands' reach.
//!
//! The walk holds descriptors, never re-opens a path, and follows no link: a rule goes
//! on exactly what was looked at, whatever a running command renames meanwhile, and an
//! entry that is a link is never granted (what it leads to is reached, or not, through
//! its own place).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::open::{is_dir, open_no_links};

/// Bounds the walk: a folder with more entries than this along the way is not
/// granted (safe: less access, never more).
const MAX_ENTRIES: usize = 20_000;

/// What to grant under `root` so that nothing in `holes` is reached: `covered` gets a
/// rule each (everything beneath them); `ancestors` are the folders on the way down to
/// a hole, which can get no rule that reaches beneath.
#[derive(Debug, Default)]
pub struct Carved {
    pub covered: Vec<OwnedFd>,
    pub ancestors: Vec<OwnedFd>,
}

pub fn carve(root: &Path, holes: &[PathBuf]) -> Carved {
    let holes: Vec<&PathBuf> = holes.iter().filter(|h| h.starts_with(root)).collect();
    let mut out = Carved::default();
    if holes.iter().any(|h| h.as_path() == root) {
        return out;
    }
    let Ok(root_fd) = open_no_links(root) else {
        return out;
    };
    if holes.is_empty() {
        out.covered.push(root_fd);
        return out;
    }
    let mut stack = vec![(root.to_path_buf(), root_fd)];
    let mut seen = 0usize;
    while let Some((dir, fd)) = stack.pop() {
        for name in names(&fd) {
            seen += 1;
            if seen > MAX_ENTRIES {
                return out;
            }
            let path = dir.join(&name);
            if holes.iter().any(|h| **h == path) {
                continue;
            }
            let Some(child) = open_entry(&fd, &name) else {
                continue;
            };
            if is_dir(&child) && holes.iter().any(|h| h.starts_with(&path)) {
                stack.push((path, child));
            } else {
                out.covered.push(child);
            }
        }
        out.ancestors.push(fd);
    }
    out
}

/// The names in the folder `fd` refers to.
fn names(fd: &OwnedFd) -> Vec<std::ffi::OsString> {
    // The descriptor's own magic link: the very folder that was opened.
    std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

/// `name` in the folder `dir`, as an `O_PATH` descriptor; `None` for a link (or
/// anything that cannot be opened).
fn open_entry(dir: &OwnedFd, name: &std::ffi::OsStr) -> Option<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(name.as_bytes()).ok()?;
    // SAFETY: a valid folder descriptor and NUL-terminated name; the fd is owned here.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fstat on a valid fd into a zeroed struct.
    let is_link = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd.as_raw_fd(), &mut st) != 0 || st.st_mode & libc::S_IFMT == libc::S_IFLNK
    };
    (!is_link).then_some(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(fds: &[OwnedFd]) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fds
            .iter()
            .map(|f| std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn holes_are_left_out_and_links_are_never_granted() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let agent = root.join("agent");
        std::fs::create_dir_all(agent.join("state/x")).unwrap();
        std::fs::create_dir_all(agent.join("skills")).unwrap();
        std::fs::write(agent.join("agent.json"), "{}").unwrap();
        std::fs::write(agent.join("notes.md"), "n").unwrap();
        std::fs::create_dir_all(root.join("other")).unwrap();
        std::os::unix::fs::symlink(agent.join("state"), root.join("link-in")).unwrap();
        std::os::unix::fs::symlink(&root, agent.join("up")).unwrap();
        let holes = vec![agent.join("state"), agent.join("agent.json")];
        let c = carve(&root, &holes);
        assert_eq!(
            paths(&c.covered),
            vec![
                agent.join("notes.md"),
                agent.join("skills"),
                root.join("other")
            ]
        );
        assert_eq!(paths(&c.ancestors), vec![root.clone(), agent.clone()]);
        // No hole: the root itself; the root a hole: nothing.
        assert_eq!(
            paths(&carve(&root.join("other"), &holes).covered),
            vec![root.join("other")]
        );
        let none = carve(&agent.join("state"), &holes);
        assert!(none.covered.is_empty() && none.ancestors.is_empty());
        // A root reached through a link is not granted at all.
        assert!(carve(&root.join("link-in"), &[]).covered.is_empty());
    }
}
