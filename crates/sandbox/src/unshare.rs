//! Making a command's namespaces, and telling a passing refusal from a lasting one.
//!
//! The kernel counts a user's namespaces (`/proc/sys/user/max_*_namespaces`), and any
//! program of picogent's user can hold many of them for a while, so `ENOSPC` (the count
//! is full), `EAGAIN` and `ENOMEM` say nothing about what the kernel allows: they pass.
//! Such a refusal is tried again briefly, then reported as passing (the helper's
//! [`PASSING_STATUS`]): the command is not run, and the level is never lowered for it.
//! A limit of 0, `EPERM` (no unprivileged user namespaces) and the rest last.
//!
//! Commands never make user namespaces of their own unless the configuration allows it
//! (`nested_user_namespaces`): in one, a command is root again, and a hostile one could
//! fill the count to push every later command down a level.

use std::fmt;
use std::time::Duration;

/// The helper's exit status when the namespaces could not be made for now.
pub const PASSING_STATUS: u8 = 75;

/// Why the namespaces were not made.
#[derive(Debug)]
pub struct NotMade {
    pub why: String,
    /// The refusal passes (the count was full for now), rather than lasts.
    pub passing: bool,
}

impl fmt::Display for NotMade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

impl NotMade {
    pub fn lasting(why: String) -> NotMade {
        NotMade {
            why,
            passing: false,
        }
    }
}

/// How long a passing refusal is tried again (the kernel frees a namespace a little
/// after its last process is gone: back to back commands can meet a full count).
const RETRIES: [Duration; 4] = [
    Duration::from_millis(20),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
];

/// `unshare(flags)`, tried again while its refusal passes.
pub fn unshare(flags: libc::c_int) -> Result<(), NotMade> {
    let mut waits = RETRIES.iter();
    loop {
        // SAFETY: the helper is single-threaded here (it runs before any runtime).
        if unsafe { libc::unshare(flags) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        let passing = passes(err.raw_os_error().unwrap_or(0), flags);
        match waits.next() {
            #[allow(
                clippy::disallowed_methods,
                reason = "the helper process: single-threaded, no runtime"
            )]
            Some(wait) if passing => std::thread::sleep(*wait),
            _ => {
                let mut why = format!("cannot create the sandbox namespaces: {err}");
                if passing {
                    why.push_str(
                        " (the kernel's count of this user's namespaces is full for now: other programs of picogent's user hold them)",
                    );
                }
                return Err(NotMade { why, passing });
            }
        }
    }
}

/// Whether `unshare`'s `errno` passes: the count full, or the kernel short of memory.
/// A count whose limit is 0 is the operator's choice, and lasts.
fn passes(errno: i32, flags: libc::c_int) -> bool {
    match errno {
        libc::EAGAIN | libc::ENOMEM => true,
        libc::ENOSPC => !limits_of(flags).iter().any(|name| limit(name) == Some(0)),
        _ => false,
    }
}

/// The `/proc/sys/user` limits that apply to the namespaces in `flags`.
fn limits_of(flags: libc::c_int) -> Vec<&'static str> {
    [
        (libc::CLONE_NEWUSER, "max_user_namespaces"),
        (libc::CLONE_NEWNS, "max_mnt_namespaces"),
        (libc::CLONE_NEWPID, "max_pid_namespaces"),
        (libc::CLONE_NEWIPC, "max_ipc_namespaces"),
        (libc::CLONE_NEWNET, "max_net_namespaces"),
    ]
    .into_iter()
    .filter(|(flag, _)| flags & flag != 0)
    .map(|(_, name)| name)
    .collect()
}

fn limit(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/sys/user/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Inside the command's own user namespace, as its root (before the capabilities are
/// dropped): no user namespace can be made beneath it. The kernel checks every level's
/// count on the way up, and the command, without capabilities here, cannot raise this
/// one (what bubblewrap's `--disable-userns` does).
pub fn forbid_nested_user_namespaces() -> Result<(), crate::setup_error::SetupError> {
    std::fs::write("/proc/sys/user/max_user_namespaces", "0").map_err(|e| {
        crate::setup_error::SetupError::from(format!("cannot keep the command from making user namespaces (user.max_user_namespaces = 0: {e})"))
    })
}

/// Inside the command's own PID namespace, as its root: at most `n` processes in it,
/// whoever runs them (`RLIMIT_NPROC` does not hold root back). Linux 6.14+ keeps a
/// `pid_max` per PID namespace; an older kernel refuses the write (the knob is the
/// host's there, out of a user namespace's reach), and only `RLIMIT_NPROC` is left.
pub fn cap_processes(n: u64) {
    // Before 6.14 the knob is the host's: root's user namespace (0 mapped to 0) could
    // pass its file permissions and lower every process's limit on the machine.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if !keeps_pid_max_per_namespace(&release) {
        return;
    }
    // The kernel's floor for pid_max.
    let max = (n + 1).max(301);
    let _ = std::fs::write("/proc/sys/kernel/pid_max", max.to_string());
}

/// Whether a kernel release (`6.14.2-arch1`) keeps `pid_max` per PID namespace.
fn keeps_pid_max_per_namespace(release: &str) -> bool {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (6, 14),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_count_passes_and_a_refusal_lasts() {
        assert!(passes(libc::EAGAIN, libc::CLONE_NEWUSER));
        assert!(passes(libc::ENOMEM, libc::CLONE_NEWNS));
        assert!(!passes(libc::EPERM, libc::CLONE_NEWUSER));
        assert!(!passes(libc::EINVAL, libc::CLONE_NEWUSER));
        assert_eq!(
            limits_of(libc::CLONE_NEWUSER | libc::CLONE_NEWNET),
            vec!["max_user_namespaces", "max_net_namespaces"]
        );
        // This machine allows user namespaces (the sandbox tests need them): a full
        // count of them passes.
        assert_ne!(limit("max_user_namespaces"), Some(0));
        assert!(passes(libc::ENOSPC, libc::CLONE_NEWUSER));
    }

    #[test]
    fn pid_max_is_written_only_where_it_is_the_namespace_s() {
        for (release, per_namespace) in [
            ("6.14.0", true),
            ("6.18.44-fc-v1147\n", true),
            ("7.0-rc1", true),
            ("6.13.12-200.fc41.x86_64", false),
            ("5.15.0-91-generic", false),
            ("6.1.0-27-amd64", false),
            ("", false),
            ("garbage", false),
        ] {
            assert_eq!(
                keeps_pid_max_per_namespace(release),
                per_namespace,
                "{release}"
            );
        }
    }
}
