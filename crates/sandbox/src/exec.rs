//! The helper's last steps before it becomes the command: no capabilities, its
//! process limits and OOM standing, `no_new_privs`, Landlock, seccomp, then `exec`.

use crate::setup_error::SetupError;
use std::os::unix::process::CommandExt;

use super::namespaces::HelperArgs;

/// The command keeps no capability: neither those a namespace gave the helper (it
/// could undo the read-only mounts) nor root's outside one (raw devices, the kernel).
fn drop_capabilities() -> Result<(), SetupError> {
    // SAFETY: prctl and capset on this process with valid arguments.
    unsafe {
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let bits = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        // Only a process with CAP_SETPCAP can (and needs to) lock these: without it,
        // as an ordinary user outside a namespace, there is no root to keep in check.
        if libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) != 0
            && libc::geteuid() == 0
        {
            return Err(SetupError::from(format!(
                "cannot lock the securebits: {}",
                std::io::Error::last_os_error()
            )));
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(SetupError::from(format!(
                "cannot drop capabilities: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// Applies the per-process layers and `exec`s the program; returns an exit status
/// only when that failed.
pub fn become_command(h: &HelperArgs, in_namespace: bool) -> i32 {
    // The OOM killer's first choice is the command, never picogent: a command's
    // allocation storm ends the command. Written while root (outside a namespace) still
    // has the capability that makes it the command's floor too.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    if let Err(e) = drop_capabilities() {
        eprintln!("picogent sandbox: {e}; the command was not run");
        return 126;
    }
    // Under namespaces the private folder is /tmp when writes are restricted; without
    // restriction /tmp is the system's own, writable like everything else.
    if in_namespace {
        for var in ["TMPDIR", "TMP", "TEMP"] {
            std::env::set_var(var, "/tmp");
        }
        // Counted per user namespace: the command's own processes, not the host's.
        let limit = libc::rlimit {
            rlim_cur: h.max_processes,
            rlim_max: h.max_processes,
        };
        // SAFETY: setrlimit on this process with a valid struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit) } != 0 {
            eprintln!(
                "picogent sandbox: cannot limit the number of processes; the command was not run"
            );
            return 126;
        }
    }
    // SAFETY: plain prctl on this process.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        eprintln!("picogent sandbox: cannot set no_new_privs; the command was not run");
        return 126;
    }
    if let Err(e) = super::landlock_rules::restrict(h, in_namespace) {
        eprintln!("picogent sandbox: {e}");
        return 126;
    }
    let policy = super::seccomp::Policy {
        deny_network: h.deny_network,
        in_namespace,
        nested_user_namespaces: h.nested_user_namespaces,
    };
    if let Err(e) = super::seccomp::install(policy) {
        eprintln!(
            "picogent sandbox: cannot install the seccomp filter, so the command was not run: {e}"
        );
        return 126;
    }
    let err = std::process::Command::new(&h.program[0])
        .args(&h.program[1..])
        .exec();
    eprintln!("picogent sandbox: cannot run {:?}: {err}", h.program[0]);
    127
}

/// Becomes the program as it is (`--pid-only`); returns only when that failed.
pub fn exec_unconfined(h: &HelperArgs) -> i32 {
    let err = std::process::Command::new(&h.program[0])
        .args(&h.program[1..])
        .exec();
    eprintln!("picogent sandbox: cannot run {:?}: {err}", h.program[0]);
    127
}
