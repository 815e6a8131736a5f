//! Removing a folder tree that a command made, whatever shape it has.
//!
//! `std::fs::remove_dir_all` recurses once per folder level: a 15,000-deep chain left
//! in a command's temporary folder overflows a 2 MiB worker stack and aborts the
//! daemon. [`remove_tree`] walks with an explicit stack of at most [`MAX_OPEN`] open
//! folders instead; a folder deeper than that is renamed up to the top of the tree
//! under a fresh name and removed from there later. Everything is relative to open
//! descriptors (`openat`/`unlinkat`/`renameat2` with `O_NOFOLLOW`), so a symlink is
//! removed, never followed, and nothing outside the tree is touched: no `..` walk, no
//! path longer than one name, no other file system (a mount point is left in place).
//! Folders the command made unreadable (`chmod 000`) are made accessible to their
//! owner first; what still cannot be removed is reported, never a panic.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How many folders of the tree may be open at once (each holds one descriptor).
const MAX_OPEN: usize = 32;

/// A tree that could not be removed entirely; what was removable is gone.
#[derive(Debug, thiserror::Error)]
#[error("cannot remove {} entirely: {source}", path.display())]
pub struct RemoveTreeError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// An open folder being read: a `DIR` stream that owns its descriptor.
struct Dir(std::ptr::NonNull<libc::DIR>);

impl Dir {
    fn from_fd(fd: OwnedFd) -> io::Result<Dir> {
        let raw = fd.as_raw_fd();
        // SAFETY: `raw` is an open descriptor; on success the stream owns it.
        let p = unsafe { libc::fdopendir(raw) };
        match std::ptr::NonNull::new(p) {
            Some(p) => {
                std::mem::forget(fd);
                Ok(Dir(p))
            }
            None => Err(io::Error::last_os_error()),
        }
    }

    fn fd(&self) -> RawFd {
        // SAFETY: the stream is open for as long as `self` lives.
        unsafe { libc::dirfd(self.0.as_ptr()) }
    }

    /// The next entry's name and type, other than `.` and `..`.
    fn next(&mut self) -> io::Result<Option<(CString, u8)>> {
        loop {
            // SAFETY: errno is thread-local; readdir reports errors only through it.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: the stream is open; the entry is copied before the next call.
            let e = unsafe { libc::readdir(self.0.as_ptr()) };
            if e.is_null() {
                let err = io::Error::last_os_error();
                return match err.raw_os_error() {
                    Some(0) | None => Ok(None),
                    Some(_) => Err(err),
                };
            }
            // SAFETY: `d_name` is a NUL-terminated name inside the entry just read.
            let (name, kind) = unsafe { (CStr::from_ptr((*e).d_name.as_ptr()), (*e).d_type) };
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                return Ok(Some((name.to_owned(), kind)));
            }
        }
    }

    fn rewind(&mut self) {
        // SAFETY: the stream is open.
        unsafe { libc::rewinddir(self.0.as_ptr()) }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the stream is open and closed only here.
        unsafe {
            libc::closedir(self.0.as_ptr());
        }
    }
}

/// One open folder on the walk's stack.
struct Frame {
    dir: Dir,
    /// Its name in the folder below it on the stack (`None` for the top of the tree).
    name: Option<CString>,
    /// The top of the tree only: a folder was moved in during this pass; read it again
    /// from the start, as entries added while the stream is open may not be listed.
    /// (Removals need no second pass: the entries that stay are each listed once.)
    moved_in: bool,
    /// Entries that could not be removed, skipped on later passes.
    failed: HashSet<CString>,
}

/// The walk's state: the stack of open folders and the first error met.
struct Walk {
    stack: Vec<Frame>,
    dev: libc::dev_t,
    first_error: Option<io::Error>,
}

/// Removes the tree at `path` (or the file or symlink there) without recursion, with
/// at most [`MAX_OPEN`] + 1 descriptors open, never following a symlink and never
/// leaving the tree. A missing path is already removed. Blocking and possibly long:
/// call it off the async runtime's threads.
pub fn remove_tree(path: &Path) -> Result<(), RemoveTreeError> {
    let fail = |source| RemoveTreeError {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fail(e)),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(path).map_err(fail),
        Ok(_) => {}
    }
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| fail(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let (dir, dev) = open_dir(libc::AT_FDCWD, &c_path).map_err(fail)?;
    let mut walk = Walk {
        stack: vec![Frame {
            dir,
            name: None,
            moved_in: false,
            failed: HashSet::new(),
        }],
        dev,
        first_error: None,
    };
    walk.run();
    let removed = unlinkat(libc::AT_FDCWD, &c_path, libc::AT_REMOVEDIR);
    match (removed, walk.first_error) {
        (Ok(()), _) => Ok(()),
        (Err(e), _) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        (Err(_), Some(first)) => Err(fail(first)),
        (Err(e), None) => Err(fail(e)),
    }
}

impl Walk {
    fn run(&mut self) {
        while let Some(top) = self.stack.last_mut() {
            match top.dir.next() {
                Ok(Some((name, kind))) => {
                    if !top.failed.contains(&name) {
                        self.entry(name, kind);
                    }
                }
                Ok(None) if top.moved_in => {
                    top.moved_in = false;
                    top.dir.rewind();
                }
                Ok(None) => self.finish_top(),
                Err(e) => {
                    self.note(e);
                    self.finish_top();
                }
            }
        }
    }

    /// Closes the folder on top of the stack and removes it from its parent.
    fn finish_top(&mut self) {
        let Some(done) = self.stack.pop() else {
            return;
        };
        let Frame { dir, name, .. } = done;
        drop(dir);
        let (Some(parent), Some(name)) = (self.stack.last_mut(), name) else {
            return;
        };
        match unlinkat(parent.dir.fd(), &name, libc::AT_REMOVEDIR) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                parent.failed.insert(name);
                self.note(e);
            }
        }
    }

    /// Removes one entry of the folder on top of the stack, or opens it to empty it.
    fn entry(&mut self, name: CString, kind: u8) {
        let Some(top) = self.stack.last_mut() else {
            return;
        };
        let fd = top.dir.fd();
        let is_dir = match kind {
            libc::DT_DIR => true,
            libc::DT_UNKNOWN => lstat_at(fd, &name).is_ok_and(|st| is_dir(&st)),
            _ => false,
        };
        if !is_dir {
            return self.unlink(name, 0);
        }
        // O_PATH needs no permission on the folder itself, only on the one holding it.
        let opened = openat(
            fd,
            &name,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        );
        let handle = match opened {
            Ok(h) => h,
            // Replaced by a file or a symlink since it was listed.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                return self.unlink(name, 0);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return self.skip(name, e),
        };
        let st = match fstat(handle.as_raw_fd()) {
            Ok(st) => st,
            Err(e) => return self.skip(name, e),
        };
        if st.st_dev != self.dev {
            // A mount point: never enter another file system; rmdir reports EBUSY.
            return self.unlink(name, libc::AT_REMOVEDIR);
        }
        make_accessible(&handle, &st);
        if self.stack.len() >= MAX_OPEN {
            return self.move_to_top(name);
        }
        match open_dir(handle.as_raw_fd(), c".") {
            Ok((dir, _)) => self.stack.push(Frame {
                dir,
                name: Some(name),
                moved_in: false,
                failed: HashSet::new(),
            }),
            Err(e) => self.skip(name, e),
        }
    }

    /// At the depth limit: the folder moves to the top of the tree under a fresh name,
    /// where the walk meets it again with the whole stack free.
    fn move_to_top(&mut self, name: CString) {
        let Some(top) = self.stack.last_mut() else {
            return;
        };
        let from = top.dir.fd();
        let Some(root) = self.stack.first() else {
            return;
        };
        let to_dir = root.dir.fd();
        let mut result = Err(io::Error::from(io::ErrorKind::AlreadyExists));
        for _ in 0..8 {
            let fresh = format!(".picogent-rm-{}", random_hex(16));
            let Ok(fresh) = CString::new(fresh) else {
                continue;
            };
            // SAFETY: both descriptors are open folders; both names are C strings.
            let r = unsafe {
                libc::renameat2(
                    from,
                    name.as_ptr(),
                    to_dir,
                    fresh.as_ptr(),
                    libc::RENAME_NOREPLACE,
                )
            };
            result = if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            };
            if !matches!(&result, Err(e) if e.kind() == io::ErrorKind::AlreadyExists) {
                break;
            }
        }
        match result {
            Ok(()) => {
                if let Some(root) = self.stack.first_mut() {
                    root.moved_in = true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => self.skip(name, e),
        }
    }

    /// Removes a name from the folder on top of the stack.
    fn unlink(&mut self, name: CString, flags: libc::c_int) {
        let Some(top) = self.stack.last_mut() else {
            return;
        };
        match unlinkat(top.dir.fd(), &name, flags) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => self.skip(name, e),
        }
    }

    /// Leaves an entry that cannot be removed, remembering why.
    fn skip(&mut self, name: CString, e: io::Error) {
        if let Some(top) = self.stack.last_mut() {
            top.failed.insert(name);
        }
        self.note(e);
    }

    fn note(&mut self, e: io::Error) {
        self.first_error.get_or_insert(e);
    }
}

/// Opens a folder for reading (`name` relative to `at`, never through a symlink),
/// making it accessible to its owner first if it is not; returns it and its device.
fn open_dir(at: RawFd, name: &CStr) -> io::Result<(Dir, libc::dev_t)> {
    let handle = openat(
        at,
        name,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )?;
    let st = fstat(handle.as_raw_fd())?;
    make_accessible(&handle, &st);
    let fd = openat(handle.as_raw_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)?;
    Ok((Dir::from_fd(fd)?, st.st_dev))
}

/// Gives the folder's owner read, write and search rights if it lacks any: a command
/// may leave `chmod 000` folders that picogent could not otherwise read or empty. The
/// change goes through the handle's `/proc/self/fd` link, which names exactly the
/// folder opened (never a symlink put there since). Failure is left to the reads and
/// removals that follow to report.
fn make_accessible(handle: &OwnedFd, st: &libc::stat) {
    if st.st_mode & 0o700 == 0o700 {
        return;
    }
    let Ok(link) = CString::new(format!("/proc/self/fd/{}", handle.as_raw_fd())) else {
        return;
    };
    // SAFETY: a plain syscall on a C string.
    unsafe {
        libc::chmod(link.as_ptr(), (st.st_mode & 0o7777) | 0o700);
    }
}

fn openat(at: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall on a C string; the result is a new descriptor we own.
    let fd = unsafe { libc::openat(at, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unlinkat(at: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain syscall on a C string.
    if unsafe { libc::unlinkat(at, name.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: `st` is written by the kernel before it is read.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is a valid buffer.
    if unsafe { libc::fstat(fd, &mut st) } == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn lstat_at(at: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a plain syscall on a C string and a valid buffer.
    let r = unsafe { libc::fstatat(at, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if r == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// `n` random hexadecimal digits (a name nobody else picks).
fn random_hex(n: usize) -> String {
    (0..n)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A chain of `depth` folders named `d` under `base`, made without long paths.
    fn chain(base: &Path, depth: usize) {
        let mut dir = std::fs::File::open(base).unwrap();
        for _ in 0..depth {
            let fd = dir.as_raw_fd();
            // SAFETY: test-only syscalls on an open folder.
            assert_eq!(unsafe { libc::mkdirat(fd, c"d".as_ptr(), 0o755) }, 0);
            let next = openat(fd, c"d", libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
            dir = std::fs::File::from(next);
        }
        std::fs::write(base.join("d/file"), "x").unwrap();
    }

    #[test]
    fn a_deep_chain_is_removed_without_recursion() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("tree");
        std::fs::create_dir(&root).unwrap();
        // Many times the open-folder limit, on a stack far too small for a recursion
        // per level.
        chain(&root, 3_000);
        let r = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn({
                let root = root.clone();
                move || remove_tree(&root)
            })
            .unwrap()
            .join()
            .unwrap();
        r.unwrap();
        assert!(!root.exists());
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_wide_tree_is_removed() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("tree");
        for i in 0..200 {
            let sub = root.join(format!("s{i}"));
            std::fs::create_dir_all(&sub).unwrap();
            chain(&sub, 40);
            for j in 0..20 {
                std::fs::write(sub.join(format!("f{j}")), "x").unwrap();
            }
        }
        remove_tree(&root).unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn unreadable_folders_are_removed() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("tree");
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("a/b/c/f"), "x").unwrap();
        std::fs::write(root.join("a/b/g"), "x").unwrap();
        for (p, mode) in [("a/b/c", 0o000), ("a/b", 0o000), ("a", 0o500), ("", 0o000)] {
            std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        remove_tree(&root).unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn symlinks_are_removed_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep/file"), "precious").unwrap();
        let root = t.path().join("tree");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub/link")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep/file"), root.join("file-link")).unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep/file")).unwrap(),
            "precious"
        );
        // The tree given as a symlink: the link goes, its target stays.
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        remove_tree(&link).unwrap();
        assert!(!link.exists() && outside.join("keep/file").is_file());
    }

    #[test]
    fn a_missing_tree_is_already_removed() {
        let t = tempfile::tempdir().unwrap();
        remove_tree(&t.path().join("nothing")).unwrap();
    }
}
