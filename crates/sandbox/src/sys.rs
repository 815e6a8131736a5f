//! The few plain system calls the rest of picogent makes, wrapped here so that every
//! `unsafe` block stays in this crate: who picogent runs as, whether a folder is
//! writable, a disk's room, the process's limits, the allocator's knobs, and the
//! fault points' kill.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: a plain getter that cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective group id.
pub fn egid() -> u32 {
    // SAFETY: a plain getter that cannot fail.
    unsafe { libc::getegid() }
}

/// The real user id.
pub fn uid() -> u32 {
    // SAFETY: a plain getter that cannot fail.
    unsafe { libc::getuid() }
}

/// Whether this process may write in `dir` (access(2) with the real ids).
pub fn can_write(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a plain system call on a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The room on the disk `dir` is on: (bytes free for unprivileged users, bytes in all).
pub fn disk_space(dir: &Path) -> std::io::Result<(u64, u64)> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `st` is written by the kernel before it is read.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a plain syscall on a C string and a valid buffer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(space_of(&st))
}

/// As [`disk_space`], for the disk an open file is on.
pub fn file_disk_space(file: &impl AsRawFd) -> std::io::Result<(u64, u64)> {
    // SAFETY: as in `disk_space`.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the file is open for as long as `file` is borrowed; `st` is valid.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(space_of(&st))
}

#[allow(clippy::unnecessary_cast)] // the field types differ between libc targets
fn space_of(st: &libc::statvfs) -> (u64, u64) {
    let unit = st.f_frsize as u64;
    (
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    )
}

/// Clock ticks a second and the page size in bytes (for /proc's figures).
pub fn ticks_and_page() -> (f64, f64) {
    // SAFETY: sysconf with valid names.
    unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_PAGESIZE) as f64,
        )
    }
}

/// The soft limit on open file descriptors; 0 when unknown.
pub fn max_open_fds() -> f64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0 {
        l.rlim_cur as f64
    } else {
        0.0
    }
}

/// Caps glibc's arenas at `n`; call once at start, before other threads exist.
pub fn limit_arenas(n: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets one allocator parameter; no pointer is involved.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, n);
    }
    let _ = n;
}

/// Asks glibc to return free memory to the system (it walks every heap: call it off
/// the runtime's threads).
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: asks the allocator to release free memory; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Kills this process with SIGKILL (a fault point: the instant a crash is tested at).
pub fn kill_self() {
    // SAFETY: a plain system call on this process.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Takes standard output for a protocol alone (`picogent acp`): returns a new
/// close-on-exec descriptor for what fd 1 was, and points fd 1 at standard error, so
/// nothing else written to standard output (a library's print, a child that inherits
/// it) can reach the protocol's reader, and no child inherits the protocol's channel.
pub fn take_stdout() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl on a descriptor number; the result is checked before it is owned.
    let fd = unsafe { libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: dup2 on two descriptor numbers; fd 1 is replaced atomically.
    if unsafe { libc::dup2(2, 1) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(owned)
}
