//! The namespace layer of `picogent sandbox-exec`: a command's own user, mount, PID and
//! IPC namespaces (and network namespace under `network: "deny"`), set up the way
//! bubblewrap does it, by the single-threaded helper before it becomes the command.
//!
//! Inside, the command sees:
//! - the whole file system read-only (and `nosuid`), except the allowed paths;
//! - picogent's protected folders (state, sessions, checkpoints) read-only and its
//!   configuration file and `.env` replaced by empty files, even inside an allowed path;
//! - a private `/tmp` (a fresh tmpfs of limited size) and a minimal `/dev`;
//! - a fresh `/proc` of its own PID namespace, in which picogent does not exist;
//! - under `deny`, a network namespace with only its own loopback.
//!
//! Process tree: the helper unshares, forks a child that is PID 1 of the new namespace,
//! which mounts, reaps orphans and forks PID 2, the parent of the command. When the command exits, PID 1
//! exits and the kernel kills everything left in the namespace, whatever it did with
//! process groups or `setsid`. PID 1 dies with the helper (parent-death signal), and the
//! helper with picogent.

use crate::setup_error::SetupError;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::mounts::{
    blank_file, errno, hide, hide_daemon_sockets, mount, mount_point, move_mount, open_tree,
    open_tree_no_links, set_attr, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};
use super::unshare::NotMade;

/// Devices the minimal `/dev` offers (bound from the host's).
const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// What `picogent sandbox-exec` was asked to do.
pub struct HelperArgs {
    pub namespaces: bool,
    /// Only a PID namespace, to supervise a program that runs unconfined (an MCP
    /// server with `"sandbox": false`): everything it starts dies with it and with
    /// picogent, whatever it does with sessions; nothing else about it changes.
    pub pid_only: bool,
    pub writable: Option<Vec<PathBuf>>,
    pub tmp: Option<PathBuf>,
    pub read_only: Vec<PathBuf>,
    /// Folders inside `read_only` ones that stay writable (a run's own worktree among
    /// the other tasks').
    pub writable_within: Vec<PathBuf>,
    pub hidden: Vec<PathBuf>,
    /// Folders under `/tmp` that stay visible, read-only, in the private `/tmp` (the
    /// one holding the program being run).
    pub shown: Vec<PathBuf>,
    pub deny_network: bool,
    /// The private `/tmp`'s size (MiB).
    pub tmp_size_mb: u64,
    /// At most this many processes of the command's user in its namespace.
    pub max_processes: u64,
    /// Whether the command may make user namespaces of its own.
    pub nested_user_namespaces: bool,
    pub program: Vec<std::ffi::OsString>,
}

impl HelperArgs {
    /// Whether the whole file system was allowed (`allowed_paths: ["/"]`).
    pub fn writable_all(&self) -> bool {
        self.writable
            .as_ref()
            .is_some_and(|w| w.iter().any(|p| p == Path::new("/")))
    }
}

/// How the command itself starts once its view is built (the per-process layers and
/// `exec`); returns an exit status only when that failed.
pub type Become<'a> = &'a dyn Fn(&HelperArgs) -> i32;

/// Runs the command in new namespaces. Returns only on failure before the command
/// started; otherwise exits with the command's status.
pub fn run(h: &HelperArgs, become_command: Become) -> Result<std::convert::Infallible, NotMade> {
    let cwd = std::env::current_dir()
        .map_err(|e| NotMade::lasting(format!("cannot read the working folder: {e}")))?;
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
    if h.deny_network {
        flags |= libc::CLONE_NEWNET;
    }
    if h.pid_only {
        // root keeps its own user (a user namespace would map away its privileges).
        flags = libc::CLONE_NEWPID;
        if uid != 0 {
            flags |= libc::CLONE_NEWUSER;
        }
    }
    super::unshare::unshare(flags)?;
    if flags & libc::CLONE_NEWUSER != 0 {
        let map = |file: &str, text: String| {
            std::fs::write(format!("/proc/self/{file}"), text)
                .map_err(|e| NotMade::lasting(format!("{file}: {e}")))
        };
        map("setgroups", "deny".into())?;
        map("uid_map", format!("{uid} {uid} 1"))?;
        map("gid_map", format!("{gid} {gid} 1"))?;
    }
    // A pipe whose write end only the helper holds: PID 1 sees it close if the helper
    // died before PID 1 could ask for its parent-death signal.
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(NotMade::lasting(errno("pipe").to_string()));
    }
    // SAFETY: both fds were just created and are owned here.
    let (alive_r, alive_w) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: single-threaded; the child continues with ordinary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let err = io::Error::last_os_error();
        return Err(NotMade {
            passing: matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM)),
            why: format!("fork: {err}"),
        });
    }
    if pid == 0 {
        drop(alive_w);
        init(h, &cwd, alive_r, become_command)
    }
    drop(alive_r);
    let code = wait_exit_code(pid);
    drop(alive_w);
    std::process::exit(code)
}

/// The exit status of `pid` as a shell reports it (128 + signal when killed).
fn wait_exit_code(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid int.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return 125;
        }
    }
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

/// PID 1 of the new namespace: mounts, starts the command, reaps, exits with it.
fn init(h: &HelperArgs, cwd: &Path, alive: OwnedFd, become_command: Become) -> ! {
    // SAFETY: plain prctl calls on this process.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let mut p = libc::pollfd {
        fd: alive.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut p, 1, 0) } != 0 {
        // The helper is gone: nobody waits for this command.
        std::process::exit(125);
    }
    drop(alive);
    // Supervision only: the view stays the host's.
    let view = if h.pid_only { Ok(()) } else { setup(h, cwd) };
    if let Err(e) = view {
        eprintln!("picogent sandbox: {e}; the command was not run");
        std::process::exit(126);
    }
    // SAFETY: PID 1 is single-threaded.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fork_failed()
    }
    if child == 0 {
        parent_of_command(h, become_command)
    }
    loop {
        let mut status = 0;
        // SAFETY: reaps any child; status is a valid int.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r == child {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            };
            // Exiting PID 1 kills every other process of the namespace.
            std::process::exit(code);
        }
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            std::process::exit(125);
        }
    }
}

/// A fork inside the namespaces failed: out of processes or memory for now passes
/// (the level stays), anything else lasts; either way the command was not run.
fn fork_failed() -> ! {
    let err = io::Error::last_os_error();
    if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM)) {
        eprintln!("picogent sandbox: fork: {err}; this passes: try again shortly; the command was not run");
        std::process::exit(i32::from(super::unshare::PASSING_STATUS));
    }
    eprintln!("picogent sandbox: fork: {err}; the command was not run");
    std::process::exit(126)
}

/// PID 2: the command's parent. Programs that take a parent PID of 1 to mean that
/// their parent died (Node CLIs do) would otherwise exit at once.
fn parent_of_command(h: &HelperArgs, become_command: Become) -> ! {
    // SAFETY: single-threaded.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fork_failed()
    }
    if child == 0 {
        std::process::exit(become_command(h));
    }
    std::process::exit(wait_exit_code(child))
}

/// Detached copies of what the new view keeps from the old one, taken before anything
/// is made read-only or covered.
struct Sources {
    /// The allowed paths (path, is a folder, copy), when writes are restricted.
    writable: Vec<(PathBuf, bool, OwnedFd)>,
    /// Read-only copies of the folders under `/tmp` that stay visible.
    shown: Vec<(PathBuf, bool, OwnedFd)>,
    /// Device nodes for the minimal `/dev`.
    dev: Vec<(&'static str, OwnedFd)>,
    /// Writable copies of the folders that stay writable inside read-only ones.
    within: Vec<(PathBuf, OwnedFd)>,
    /// An empty read-only file to cover hidden files and sockets with (writes fail,
    /// reads are empty), on a tmpfs mounted nowhere, so nothing can fill it.
    blank: OwnedFd,
}

fn sources(h: &HelperArgs, restricted: bool) -> Result<Sources, SetupError> {
    let mut writable = Vec::new();
    if restricted {
        for d in h.writable.iter().flatten() {
            // Only a path that is still what picogent resolved, reached without a link
            // (a command may since have put one where a folder was).
            if let Some((fd, is_dir)) = open_tree_no_links(d, true)? {
                writable.push((d.clone(), is_dir, fd));
            }
        }
    }
    let mut shown = Vec::new();
    if restricted {
        // Read-only paths under /tmp (a checkout there, picogent's sessions) stay as
        // visible as anywhere else: copied read-only into the private /tmp.
        let read_only = h.read_only.iter().filter(|p| p.starts_with("/tmp"));
        for d in h.shown.iter().chain(read_only) {
            if let Some((fd, true)) = open_tree_no_links(d, true)? {
                shown.push((d.clone(), true, made_read_only(fd)?));
            }
        }
    }
    // The minimal /dev's nodes: read-only binds (device I/O still works, but nothing
    // can change the host's nodes).
    let mut dev = Vec::new();
    for n in DEV_NODES {
        if let Ok(fd) = open_tree(&Path::new("/dev").join(n), false) {
            set_attr(
                Some(&fd),
                Path::new(""),
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
                false,
            )?;
            dev.push((*n, fd));
        }
    }
    let mut within = Vec::new();
    for d in &h.writable_within {
        if let Some((fd, true)) = open_tree_no_links(d, true)? {
            within.push((d.clone(), fd));
        }
    }
    let blank = blank_file()?;
    Ok(Sources {
        writable,
        shown,
        dev,
        within,
        blank,
    })
}

fn setup(h: &HelperArgs, cwd: &Path) -> Result<(), SetupError> {
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    let restricted = h.writable.is_some() && !h.writable_all();
    let Sources {
        mut writable,
        shown,
        dev,
        within,
        blank,
    } = sources(h, restricted)?;
    let attr = if restricted {
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID
    } else {
        MOUNT_ATTR_NOSUID
    };
    set_attr(None, Path::new("/"), attr, true)?;
    // The kernel's own settings are never writable: as root they would reach the host.
    if Path::new("/sys").is_dir() {
        set_attr(
            None,
            Path::new("/sys"),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
            true,
        )?;
    }
    minimal_dev(dev)?;
    if restricted {
        // A fresh, size-limited tmpfs: nothing of the host's /tmp (nor anything anyone
        // mounted there) is copied, it cannot fill picogent's disk, and it vanishes
        // with the command's mount namespace.
        mount(
            Some("tmpfs"),
            Path::new("/tmp"),
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&format!("mode=1777,size={}m", h.tmp_size_mb)),
        )?;
    }
    // Shown folders first: allowed paths inside them go on top, writable.
    let mut writable: Vec<_> = shown.into_iter().chain(writable.drain(..)).collect();
    writable.sort_by_key(|(p, _, _)| p.components().count());
    for (p, is_dir, fd) in writable {
        if std::fs::symlink_metadata(&p).is_err() {
            // Under the private /tmp: recreate the mount point.
            mount_point(&p, is_dir)
                .map_err(|e| SetupError::from(format!("{}: {e}", p.display())))?;
        }
        move_mount(fd, &p)?;
    }
    protect(h, restricted, within, &blank)?;
    if !h.deny_network {
        hide_daemon_sockets(&blank);
    }
    fresh_proc(h)?;
    if h.deny_network {
        loopback_up();
    }
    // The old working folder is a reference into the mounts as they were; resolve it
    // again so writes go through the new (possibly read-only) mounts.
    std::env::set_current_dir(cwd)
        .map_err(|e| SetupError::from(format!("cd {}: {e}", cwd.display())))?;
    Ok(())
}

/// picogent's own files: read-only or hidden, and every folder between them and a
/// writable root pinned in place (a mount point cannot be renamed), so that a command
/// cannot move a parent folder away and put its own files where picogent looks.
fn protect(
    h: &HelperArgs,
    restricted: bool,
    within: Vec<(PathBuf, OwnedFd)>,
    blank: &OwnedFd,
) -> Result<(), SetupError> {
    let in_writable = |p: &Path| {
        !restricted
            || h.writable
                .iter()
                .flatten()
                .any(|w| p.starts_with(w) && p != w.as_path())
    };
    let mut pins: Vec<&Path> = h
        .read_only
        .iter()
        .chain(&h.hidden)
        .flat_map(|p| p.ancestors().skip(1))
        .filter(|a| *a != Path::new("/") && in_writable(a) && a.is_dir())
        .collect();
    pins.sort_by_key(|p| (p.components().count(), p.to_path_buf()));
    pins.dedup();
    for a in pins {
        move_mount(open_tree(a, true)?, a)?;
    }
    for p in &h.read_only {
        if std::fs::symlink_metadata(p).is_ok() {
            remount_read_only(p)?;
        }
    }
    // On top of the read-only copies, as they were before; what is read-only inside
    // them is made so again (the copies were taken before the remounts above).
    let tops: Vec<PathBuf> = within.iter().map(|(p, _)| p.clone()).collect();
    for (p, fd) in within {
        move_mount(fd, &p)?;
    }
    for p in &h.read_only {
        let inside = tops.iter().any(|t| p.starts_with(t) && p != t);
        if inside && std::fs::symlink_metadata(p).is_ok() {
            remount_read_only(p)?;
        }
    }
    for p in &h.hidden {
        hide(p, blank)?;
    }
    Ok(())
}

/// A detached, read-only copy of the mount tree at `p`.
fn read_only_copy(p: &Path) -> Result<OwnedFd, SetupError> {
    made_read_only(open_tree(p, true)?)
}

/// The detached tree `fd`, made read-only (and `nosuid`) throughout.
fn made_read_only(fd: OwnedFd) -> Result<OwnedFd, SetupError> {
    set_attr(
        Some(&fd),
        Path::new(""),
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
        true,
    )?;
    Ok(fd)
}

/// Covers `p` (and everything mounted below it) with a read-only copy of itself.
fn remount_read_only(p: &Path) -> Result<(), SetupError> {
    move_mount(read_only_copy(p)?, p)
}

/// A `/proc` of the new PID namespace, with the kernel's knobs in it read-only.
fn fresh_proc(h: &HelperArgs) -> Result<(), SetupError> {
    // The kernel gives a user namespace a procfs of its own only where the /proc it
    // can see has nothing mounted over parts of it: systemd's ProtectKernelTunables=
    // and ProtectKernelLogs= do that, as do container runtimes' masked paths.
    mount(
        Some("proc"),
        Path::new("/proc"),
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(|e| {
        let covered = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|m| {
                m.lines()
                    .filter_map(|l| l.split(' ').nth(4))
                    .filter(|p| p.starts_with("/proc/"))
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        if covered.is_empty() || e.raw_os_error() != Some(libc::EPERM) {
            e
        } else {
            SetupError::from(format!(
                "{e}: parts of /proc are mounted over ({covered}), so the kernel refuses a fresh /proc \
                 (systemd: drop ProtectKernelTunables= and ProtectKernelLogs=, see deploy/picogent@.service)"
            ))
        }
    })?;
    // While /proc/sys is still writable to the namespace's root.
    if !h.nested_user_namespaces {
        super::unshare::forbid_nested_user_namespaces()?;
    }
    super::unshare::cap_processes(h.max_processes);
    for knob in ["sys", "sysrq-trigger", "irq", "bus"] {
        let p = Path::new("/proc").join(knob);
        if p.exists() {
            remount_read_only(&p)?;
        }
    }
    Ok(())
}

/// A tmpfs `/dev` with the usual devices bound from the host, a private `devpts` and
/// `shm`, and the standard links.
fn minimal_dev(nodes: Vec<(&'static str, OwnedFd)>) -> Result<(), SetupError> {
    let dev = Path::new("/dev");
    mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )?;
    for (name, fd) in nodes {
        let target = dev.join(name);
        std::fs::File::create(&target)
            .map_err(|e| SetupError::from(format!("{}: {e}", target.display())))?;
        move_mount(fd, &target)?;
    }
    for d in ["pts", "shm"] {
        std::fs::create_dir(dev.join(d)).map_err(|e| SetupError::from(format!("/dev/{d}: {e}")))?;
    }
    // A private pseudo-terminal instance; optional (some kernels refuse it in a
    // user namespace), programs without a terminal do not need it.
    if mount(
        Some("devpts"),
        &dev.join("pts"),
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .is_ok()
    {
        let _ = std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx"));
    }
    mount(
        Some("tmpfs"),
        &dev.join("shm"),
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777,size=64m"),
    )?;
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let _ = std::os::unix::fs::symlink(target, dev.join(link));
    }
    Ok(())
}

/// Brings up `lo` in the new network namespace, as programs expect one (TCP on it is
/// still refused by Landlock under `deny`).
fn loopback_up() {
    // SAFETY: a throwaway socket and two ioctls on a zeroed, NUL-terminated ifreq.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(s, libc::SIOCSIFFLAGS, &req);
        }
        libc::close(s);
    }
}
