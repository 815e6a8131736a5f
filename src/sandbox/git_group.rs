//! git dies with picogent, and so does everything git started.
//!
//! A parent-death signal reaches only the process that asked for it: killed with
//! picogent, a `git push` died but its `git-receive-pack`, `pack-objects` and a remote
//! hook ran on for seconds, finishing a push nobody would record. So every git
//! picogent starts runs under a small supervisor: the process picogent forks leads a
//! process group of its own, forks git into that group, and stays behind, doing
//! nothing but wait. It asks for SIGTERM when picogent dies, and answers it by
//! killing its whole group, itself included; git asks for SIGKILL when the
//! supervisor dies. picogent's own stop of a git (a timeout) kills the group too
//! (`killpg` on the pid it knows, the supervisor's).
//!
//! Chosen over the alternatives: a PID namespace needs a user namespace, which the
//! kernel may refuse where git must still run; a subreaper would outlive nothing, as
//! picogent itself is what dies. What leaves the group on purpose (`setsid` in a
//! remote hook) is not followed.
//!
//! Between fork and exec only async-signal-safe calls run: the supervisor never
//! returns to Rust's `Command`, it `_exit`s with git's status.

use std::io;
use std::process::Command;

/// Makes `cmd` start under a supervisor (see the module docs). Needs
/// `process_group(0)`, which `Command` applies before this runs.
pub(crate) fn supervised(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    // SAFETY: getpid is read before the fork. The closure runs in the forked child
    // and makes only async-signal-safe calls (fork, prctl, getppid, getpid, sigaction,
    // sigprocmask, close_range/close, waitpid, kill, _exit); it allocates nothing.
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
                    // git, once this returns and Command execs it.
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
                git => supervise(picogent, git),
            }
        });
    }
}

/// Kills the caller's process group: the supervisor's answer to picogent's death.
extern "C" fn kill_group(_: libc::c_int) {
    // SAFETY: kill is async-signal-safe; 0 names the caller's own group.
    unsafe {
        libc::kill(0, libc::SIGKILL);
    }
}

/// The supervisor's life: it holds no descriptor (so picogent's pipes see git's end,
/// and `Command` its exec), waits for git, and ends as git ended.
///
/// # Safety
/// Only in a child forked by `Command`, between fork and exec.
unsafe fn supervise(picogent: libc::pid_t, git: libc::pid_t) -> ! {
    let mut on_term: libc::sigaction = std::mem::zeroed();
    on_term.sa_sigaction = kill_group as *const () as libc::sighandler_t;
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
        kill_group(0);
    }
    if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
        // Before Linux 5.9: one by one, as far as descriptors go here.
        for fd in 0..4096 {
            libc::close(fd);
        }
    }
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

/// Stops a supervised git and everything it started (its supervisor leads the group).
pub(crate) fn stop(child: &mut std::process::Child) {
    match i32::try_from(child.id()) {
        // SAFETY: a plain system call; the child is not reaped yet, so the group
        // (the supervisor's pid) is still its own.
        Ok(pgid) if pgid > 0 => unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        },
        _ => {
            let _ = child.kill();
        }
    }
}
