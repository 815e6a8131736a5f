//! Every child picogent starts is supervised: its own session and process group (no
//! controlling terminal, killed as a group), a parent-death signal, killed when its
//! handle is dropped, and started without picogent's secrets.

use std::io;

/// Makes a child supervised: its own session (so it has no controlling terminal to
/// inject keystrokes into, and its process group is its pid for `killpg`), killed when
/// picogent dies (parent-death signal, checked against a parent that died during the
/// fork) or drops it, and without picogent's secrets.
pub fn supervise(cmd: &mut tokio::process::Command) {
    for (k, _) in std::env::vars_os() {
        if crate::secrets::is_secret(&k.to_string_lossy()) {
            cmd.env_remove(&k);
        }
    }
    cmd.kill_on_drop(true);
    // SAFETY: getpid is read before the fork; setsid, prctl and getppid are
    // async-signal-safe, and nothing else runs between fork and exec.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            if libc::getppid() != parent {
                return Err(io::Error::other(
                    "picogent exited while starting the command",
                ));
            }
            Ok(())
        });
    }
}

/// Kills a supervised child's process group (its pid: the child leads its own session).
pub fn kill_group(pgid: i32) {
    // SAFETY: a plain system call. The group is the child's own (setsid), and a group
    // id is not reused while any member of the group lives.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Kills a supervised child's group and every process below it: programs that run
/// their commands in process groups of their own (Claude Code does) escape a group kill.
pub fn kill_tree(pgid: i32) {
    for p in descendants(pgid) {
        // SAFETY: a plain system call on a process this child started.
        unsafe {
            libc::kill(p, libc::SIGKILL);
        }
    }
    kill_group(pgid);
}

/// Every process below `pid` (children, their children, ...), read from `/proc`.
/// Programs that put their commands in process groups of their own escape a group
/// kill; walking the tree finds them while their parent is still alive.
fn descendants(pid: i32) -> Vec<i32> {
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            // The command name may hold spaces or parentheses: fields follow the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|f| f.parse::<i32>().ok());
            if let Some(pp) = ppid {
                parent_of.push((p, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(cur) = frontier.pop() {
        for &(child, parent) in &parent_of {
            if parent == cur && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}
