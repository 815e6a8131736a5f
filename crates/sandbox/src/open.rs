//! Opening files for the file tools without a check-then-open race.
//!
//! The path policy (`Sandbox::check_*`) decides on the real path; the file is then
//! opened from a descriptor of the allowed root with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so the kernel walks the same path
//! again and refuses any symlink or `..` that appeared in between: a folder swapped
//! for a link after the check makes the open fail instead of leaving the root. Where
//! `openat2` is missing (Linux < 5.6) the same walk is done one component at a time
//! with `O_NOFOLLOW`. Only regular files are opened (never a FIFO or a device, which
//! would block), and the opened file is checked once more by what it is, not by name.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path has a NUL byte"))
}

/// Opens a folder to start walks from.
pub fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let c = cstring(root)?;
    // SAFETY: valid path; the fd returned is owned here.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat2(dir: &OwnedFd, rel: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cstring(rel)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: u64::from(mode),
        resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: valid fd, path and struct of the size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn openat_nofollow(dir: &OwnedFd, name: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cstring(name)?;
    // SAFETY: valid fd and path.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The plain names of `rel`; anything else (`..`, `/`) is refused.
fn names(rel: &Path) -> io::Result<Vec<&Path>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(Path::new(n)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path leaves its allowed folder",
            )),
        })
        .collect()
}

/// Opens `rel` beneath `dir` following no link at all.
pub fn open_beneath(dir: &OwnedFd, rel: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let parts = names(rel)?;
    if parts.is_empty() {
        return openat2(dir, Path::new("."), flags, mode).or_else(|e| match e.raw_os_error() {
            Some(libc::ENOSYS | libc::EPERM) => openat_nofollow(dir, Path::new("."), flags, mode),
            _ => Err(e),
        });
    }
    match openat2(dir, rel, flags, mode) {
        // Missing, or refused by a container's seccomp profile: walk instead.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {}
        other => return other,
    }
    // One component at a time, each refusing links.
    let (last, folders) = parts.split_last().ok_or(io::ErrorKind::InvalidInput)?;
    let mut cur: Option<OwnedFd> = None;
    for name in folders {
        let base = cur.as_ref().unwrap_or(dir);
        cur = Some(openat_nofollow(
            base,
            name,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )?);
    }
    openat_nofollow(cur.as_ref().unwrap_or(dir), last, flags, mode)
}

/// Creates the folders of `rel` beneath `dir` that do not exist yet, without following
/// links; returns the innermost folder.
pub fn create_folders(dir: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let mut cur = open_beneath(dir, Path::new(""), libc::O_PATH | libc::O_DIRECTORY, 0)?;
    for name in names(rel)? {
        cur = match open_beneath(&cur, name, libc::O_PATH | libc::O_DIRECTORY, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let c = cstring(name)?;
                // SAFETY: valid fd and name.
                if unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o777) } != 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
                open_beneath(&cur, name, libc::O_PATH | libc::O_DIRECTORY, 0)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(cur)
}

/// Turns an opened descriptor into a regular file, or says what it is instead. The
/// file was opened non-blocking (so a FIFO could not hang the open); that is undone.
pub fn regular_file(fd: OwnedFd, shown: &str) -> io::Result<(File, std::fs::Metadata)> {
    let file = File::from(fd);
    let meta = file.metadata()?;
    let ft = meta.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_dir() {
            return Err(io::Error::other(format!(
                "{shown} is a folder; use ls to list it"
            )));
        }
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(io::Error::other(format!(
            "{shown} is {what}; the file tools open regular files only"
        )));
    }
    // SAFETY: fcntl on a valid fd.
    unsafe {
        let fl = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok((file, meta))
}

/// The (device, inode) of a path, when it exists.
pub fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Opens the absolute path `abs` as an `O_PATH` descriptor without following any link
/// on the way (a folder swapped for a link after picogent resolved it is refused, not
/// followed): what the helper grants or mounts is what was checked.
pub fn open_no_links(abs: &Path) -> io::Result<OwnedFd> {
    let root = open_root(Path::new("/"))?;
    let rel = abs
        .strip_prefix("/")
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not an absolute path"))?;
    open_beneath(&root, rel, libc::O_PATH, 0)
}

/// Whether a descriptor is a folder.
pub fn is_dir(fd: &OwnedFd) -> bool {
    // SAFETY: fstat on a valid fd into a zeroed struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd.as_raw_fd(), &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
    }
}

impl super::Sandbox {
    /// Where an opened file or folder really is, by its descriptor, if that place is
    /// one the tools may read: the check after a walk that could have been raced.
    fn verify_opened(&self, file: &File) -> Option<std::path::PathBuf> {
        use std::os::fd::AsRawFd;
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
        self.readable_here(&real).then_some(real)
    }

    /// Opens a file a walk found (grep), for reading: a regular file, not through a
    /// final link, and checked again by where the opened file really is.
    pub fn open_found(&self, path: &Path) -> Option<File> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .ok()?;
        let (file, meta) = regular_file(file.into(), "").ok()?;
        self.verify_opened(&file)?;
        if meta.nlink() > 1 && self.is_protected_inode(&meta) {
            return None;
        }
        Some(file)
    }

    /// Opens a folder to list (ls), checked again by where it really is; `Err` says
    /// why not.
    pub fn open_folder(&self, dir: &Path, shown: &str) -> Result<File, super::SandboxError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(dir)
            .map_err(|e| super::SandboxError::io(dir, e))?;
        match self.verify_opened(&file) {
            Some(_) => Ok(file),
            None => Err(super::SandboxError::Denied(format!(
                "{shown} changed while it was being opened and now lies outside the allowed paths; refused"
            ))),
        }
    }
}
