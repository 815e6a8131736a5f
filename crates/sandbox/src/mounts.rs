//! The mount system calls the namespace layer uses, as small safe functions: the new
//! mount API (`open_tree`, `move_mount`, `mount_setattr`, `fsopen`/`fsmount`) and
//! `mount(2)`, and the covering built on them (`hide`, the daemons' sockets). Errors
//! are messages naming the path.

use crate::setup_error::SetupError;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

// Constants of the new mount API (linux/mount.h), stable since Linux 5.2 / 5.12.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub fn errno(what: impl std::fmt::Display) -> SetupError {
    SetupError::os(what)
}

fn cstr(p: &Path) -> Result<CString, SetupError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SetupError::from(format!("{} has a NUL byte", p.display())))
}

/// An empty, read-only file on a tmpfs that is mounted nowhere (so no path reaches
/// it), as a detached mount to bind over files.
pub fn blank_file() -> Result<OwnedFd, SetupError> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    let own = |fd: i64, what: &str| {
        if fd < 0 {
            Err(errno(what))
        } else {
            // SAFETY: a fresh fd from the kernel.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
        }
    };
    let tmpfs = c"tmpfs";
    // SAFETY: valid strings and fds; each returned fd is owned at once.
    let fs = own(
        unsafe { libc::syscall(libc::SYS_fsopen, tmpfs.as_ptr(), FSOPEN_CLOEXEC) },
        "fsopen tmpfs",
    )?;
    // SAFETY: as above.
    let created = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if created != 0 {
        return Err(errno("fsconfig tmpfs"));
    }
    // SAFETY: as above.
    let mnt = own(
        unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) },
        "fsmount tmpfs",
    )?;
    let name = c"blank";
    // SAFETY: valid fd and name.
    let f = own(
        unsafe {
            libc::openat(
                mnt.as_raw_fd(),
                name.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o444,
            ) as i64
        },
        "create the blank file",
    )?;
    drop(f);
    let blank = clone_at(mnt.as_raw_fd(), name, 0)
        .map_err(|e| SetupError::from(format!("cannot copy the blank file: {e}")))?;
    set_attr(
        Some(&blank),
        Path::new(""),
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
        false,
    )?;
    Ok(blank)
}

pub fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), SetupError> {
    let c = |s: Option<&str>| s.and_then(|s| CString::new(s).ok());
    let (src, fs, dat) = (c(source), c(fstype), c(data));
    let tgt = cstr(target)?;
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is null or a valid NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            ptr(&src),
            tgt.as_ptr(),
            ptr(&fs),
            flags,
            ptr(&dat) as *const libc::c_void,
        )
    };
    if r != 0 {
        return Err(errno(format!("mount {}", target.display())));
    }
    Ok(())
}

/// A detached copy of the mount tree at `p` (with everything mounted below it when
/// `recursive`).
pub fn open_tree(p: &Path, recursive: bool) -> Result<OwnedFd, SetupError> {
    let path = cstr(p)?;
    let flags = if recursive {
        libc::AT_RECURSIVE as libc::c_uint
    } else {
        0
    };
    clone_at(libc::AT_FDCWD, &path, flags)
        .map_err(|e| SetupError::from(format!("cannot copy the mount at {}: {e}", p.display())))
}

/// A detached copy of the mount tree at `p`, reached without following any link: a
/// path a command swapped for a link since picogent resolved it is not copied
/// (`None`). With whether it is a folder.
pub fn open_tree_no_links(
    p: &Path,
    recursive: bool,
) -> Result<Option<(OwnedFd, bool)>, SetupError> {
    let Ok(fd) = super::open::open_no_links(p) else {
        return Ok(None);
    };
    let is_dir = super::open::is_dir(&fd);
    let flags = libc::AT_EMPTY_PATH as libc::c_uint
        | if recursive {
            libc::AT_RECURSIVE as libc::c_uint
        } else {
            0
        };
    clone_at(fd.as_raw_fd(), c"", flags)
        .map(|t| Some((t, is_dir)))
        .map_err(|e| SetupError::from(format!("cannot copy the mount at {}: {e}", p.display())))
}

/// Another detached copy of a detached mount.
pub fn copy_of(fd: &OwnedFd) -> Result<OwnedFd, SetupError> {
    clone_at(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH as libc::c_uint)
        .map_err(|e| SetupError::from(format!("cannot copy a mount: {e}")))
}

/// `open_tree(dirfd, path, OPEN_TREE_CLONE | flags)`.
fn clone_at(dirfd: RawFd, path: &CStr, flags: libc::c_uint) -> std::io::Result<OwnedFd> {
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | flags;
    // SAFETY: valid fd and path pointer; the returned fd is owned here.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, dirfd, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

pub fn move_mount(fd: OwnedFd, target: &Path) -> Result<(), SetupError> {
    let tgt = cstr(target)?;
    let empty = c"";
    // SAFETY: valid fd and path pointers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            tgt.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(errno(format!("cannot mount over {}", target.display())));
    }
    Ok(())
}

/// Sets mount attributes on `path` (or on the detached tree `fd`).
pub fn set_attr(
    fd: Option<&OwnedFd>,
    path: &Path,
    set: u64,
    recursive: bool,
) -> Result<(), SetupError> {
    let p = cstr(path)?;
    let dirfd = fd.map_or(libc::AT_FDCWD, |f| f.as_raw_fd());
    let mut flags = 0u32;
    if fd.is_some() {
        flags |= libc::AT_EMPTY_PATH as u32;
    }
    if recursive {
        flags |= libc::AT_RECURSIVE as u32;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: valid pointers; the size is that of the struct passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            p.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(errno(format!("cannot make {} read-only", path.display())));
    }
    Ok(())
}

/// Where system and session daemons listen; a command reaching them (as root, or as
/// a member of their group) could have them act outside the sandbox.
const DAEMON_SOCKET_DIRS: &[&str] = &["/run", "/var/run"];

/// Covers every UNIX socket under the daemons' folders with the blank file, so a
/// command cannot `connect` to it (the network namespace does this under `deny`).
/// Best effort and bounded: a socket that cannot be covered stays reachable.
pub fn hide_daemon_sockets(blank: &OwnedFd) {
    use std::os::unix::fs::FileTypeExt;
    let mut seen = 0;
    for root in DAEMON_SOCKET_DIRS {
        let walk = ignore::WalkBuilder::new(root)
            .standard_filters(false)
            .follow_links(false)
            .max_depth(Some(5))
            .build();
        for entry in walk.filter_map(Result::ok) {
            seen += 1;
            if seen > 20_000 {
                return;
            }
            if entry.file_type().is_some_and(|t| t.is_socket()) {
                let _ = hide(entry.path(), blank);
            }
        }
    }
}

/// Creates an empty folder or file to mount over.
pub fn mount_point(p: &Path, is_dir: bool) -> std::io::Result<()> {
    if is_dir {
        return std::fs::create_dir_all(p);
    }
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::File::create(p).map(|_| ())
}

/// Makes `p` unreadable and unwritable: the empty read-only file `blank` over a file,
/// an empty read-only folder over a folder.
pub fn hide(p: &Path, blank: &OwnedFd) -> Result<(), SetupError> {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return Ok(());
    };
    if meta.is_dir() {
        return mount(
            Some("tmpfs"),
            p,
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=4k,mode=0500"),
        );
    }
    // A copy of the blank mount for each file it covers.
    move_mount(copy_of(blank)?, p)
}
