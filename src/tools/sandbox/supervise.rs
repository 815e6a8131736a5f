//! Every child picogent starts is supervised: its own session and process group (no
//! controlling terminal, killed as a group), a parent-death signal, killed when its
//! handle is dropped, and started without picogent's secrets.

use std::io;

/// Makes a child supervised: its own session (so it has no controlling terminal to
/// inject keystrokes into, and its process group is its pid for `killpg`), killed when
/// picogent dies (parent-death signal, checked against a parent that died during the
/// fork) or drops it, and without picogent's secrets.
pub(crate) fn supervise(cmd: &mut tokio::process::Command) {
    for (k, _) in std::env::vars_os() {
        if crate::config::secrets::is_secret(&k.to_string_lossy()) {
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
