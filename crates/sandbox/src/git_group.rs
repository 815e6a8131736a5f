//! git dies with picogent, and so does everything git started.
//!
//! A parent-death signal reaches only the process that asked for it: killed with
//! picogent, a `git push` died but its `git-receive-pack`, `pack-objects` and a remote
//! hook ran on for seconds, finishing a push nobody would record. So every git
//! picogent starts runs under a small supervisor: the process picogent forks forks git
//! into a process group of git's own and stays behind, doing nothing but wait. It asks
//! for SIGTERM when picogent dies and answers SIGTERM by killing git's whole group;
//! git asks for SIGKILL should the supervisor die first. picogent stops a git (a
//! timeout) the same way, with SIGTERM to the supervisor ([`stop`]): the supervisor
//! reaps git and ends as git did, so no zombie is left for anyone to reap (in a
//! container picogent is PID 1, where orphans would pile up).
//!
//! Chosen over the alternatives: a PID namespace needs a user namespace, which the
//! kernel may refuse where git must still run; a subreaper would outlive nothing, as
//! picogent itself is what dies. What leaves git's group on purpose (`setsid` in a
//! remote hook) is not followed.
//!
//! Between fork and exec only async-signal-safe calls run: the supervisor never
//! returns to Rust's `Command`, it `_exit`s with git's status.

use std::io;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// git's pid (and process group), as the supervisor knows it: read by its signal
/// handler. Each supervisor is a process of its own, so one value each.
static GIT: AtomicI32 = AtomicI32::new(0);

/// Makes `cmd` start under a supervisor (see the module docs).
pub fn supervised(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // The supervisor's own group: picogent's terminal signals do not reach it.
    cmd.process_group(0);
    // SAFETY: getpid is read before the fork. The closure runs in the forked child
    // and makes only async-signal-safe calls (fork, setpgid, prctl, getppid, getpid,
    // sigaction, sigprocmask, getrlimit, close_range/close, waitpid, kill, _exit); it
    // allocates nothing.
    let picogent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::getppid() != picogent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            let supervisor = libc::getpid();
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    // git, once this returns and Command execs it: a group of its own
                    // (set on both sides of the fork, so it is there whichever runs first).
                    libc::setpgid(0, 0);
                    libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0,
                        0,
                        0,
                    );
                    if libc::getppid() != supervisor {
                        return Err(io::Error::from_raw_os_error(libc::ESRCH));
                    }
                    Ok(())
                }
                git => {
                    libc::setpgid(git, git);
                    supervise(picogent, git)
                }
            }
        });
    }
}

/// Kills git's whole group: the supervisor's answer to SIGTERM (picogent died, or
/// stops this git). git's end then ends the supervisor's wait.
extern "C" fn kill_git(_: libc::c_int) {
    let git = GIT.load(Ordering::Relaxed);
    if git > 0 {
        // SAFETY: kill is async-signal-safe; a negative pid names git's group.
        unsafe {
            libc::kill(-git, libc::SIGKILL);
        }
    }
}

/// Closes every descriptor: with `close_range` (Linux 5.9), else one by one up to the
/// limit on descriptors.
///
/// # Safety
/// Only in a child forked by `Command`, between fork and exec.
unsafe fn close_all() {
    if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) == 0 {
        return;
    }
    let mut limit: libc::rlimit = std::mem::zeroed();
    let most = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
        limit.rlim_cur.min(1 << 20) as libc::c_int
    } else {
        1 << 16
    };
    for fd in 0..most {
        libc::close(fd);
    }
}

/// The supervisor's life: it holds no descriptor (so picogent's pipes see git's end,
/// and `Command` its exec), waits for git, and ends as git ended.
///
/// # Safety
/// Only in a child forked by `Command`, between fork and exec.
unsafe fn supervise(picogent: libc::pid_t, git: libc::pid_t) -> ! {
    GIT.store(git, Ordering::Relaxed);
    let mut on_term: libc::sigaction = std::mem::zeroed();
    on_term.sa_sigaction = kill_git as *const () as libc::sighandler_t;
    libc::sigemptyset(&mut on_term.sa_mask);
    libc::sigaction(libc::SIGTERM, &on_term, std::ptr::null_mut());
    let mut term: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut term);
    libc::sigaddset(&mut term, libc::SIGTERM);
    libc::sigprocmask(libc::SIG_UNBLOCK, &term, std::ptr::null_mut());
    libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGTERM as libc::c_ulong,
        0,
        0,
        0,
    );
    if libc::getppid() != picogent {
        kill_git(0);
    }
    close_all();
    let mut status = 0;
    while libc::waitpid(git, &mut status, 0) < 0 {
        if *libc::__errno_location() != libc::EINTR {
            libc::_exit(127);
        }
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

/// Stops a supervised git and everything it started: SIGTERM to its supervisor, which
/// kills git's group, reaps git, and ends (the caller still waits for the supervisor).
pub fn stop(child: &mut std::process::Child) {
    stop_pid(i32::try_from(child.id()).unwrap_or(0));
}

/// [`stop`] by the supervisor's pid, when the `Child` is with another thread.
pub fn stop_pid(supervisor: i32) {
    if supervisor > 0 {
        // SAFETY: a plain system call; the supervisor is not reaped yet (its waiter
        // has not answered), so the pid is still its.
        unsafe {
            libc::kill(supervisor, libc::SIGTERM);
        }
    }
}
