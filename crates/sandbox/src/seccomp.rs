//! The seccomp layer of `picogent sandbox-exec`: a small classic-BPF filter.
//!
//! - io_uring is refused always: its operations (including `IORING_OP_SOCKET`) would
//!   bypass the rules below. `openat2` is refused (its mode is out of reach; programs
//!   fall back to `openat`).
//! - No file gets the set-user-ID or set-group-ID bit (chmod, open, creat and mknod
//!   with such a mode): a command must not leave a program that runs as its user (root,
//!   say) for someone else.
//! - Under `network: "deny"`, `socket()` is refused for every family but IPv4 and IPv6
//!   inside a network namespace (which then reach only the namespace's own loopback),
//!   and for every family without one. That closes pathname and abstract UNIX sockets,
//!   UDP, raw and netlink sockets. `socketpair()` stays for streams (it connects to
//!   nothing); a datagram pair is refused, since it can `sendto` a pathname socket.
//! - Without namespaces (the Landlock level) and with the network allowed, no UNIX
//!   socket: nothing else keeps a command from the daemons' sockets under `/run`.
//! - Unless the configuration allows it (`nested_user_namespaces`), no user namespace:
//!   `unshare` and `clone` with `CLONE_NEWUSER` are refused, and `clone3` (whose flags
//!   lie in memory a filter cannot read) says it does not exist, so that C libraries
//!   fall back to `clone`; nor does `setns` join any namespace (another process's user
//!   namespace of picogent's user would make the command root again there).
//! - System calls of another architecture's ABI (32-bit compatibility, x32) are
//!   refused, since the numbers above would not apply to them.

use std::io;

const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const SECCOMP_DATA_ARG0: u32 = 16;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;

/// `fchmodat2` (Linux 6.6), the same number on every architecture.
const SYS_FCHMODAT2: i64 = 452;

/// S_ISUID | S_ISGID.
const SET_ID_BITS: u32 = 0o6000;

/// The system calls that set a file's mode, and which argument holds it.
fn mode_setters() -> Vec<(i64, u32)> {
    let mut v = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_openat, 3),
        // mknod makes regular files too, with whatever mode it is given.
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
    ]);
    v
}
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// System calls numbered at or above this belong to the x32 ABI on x86_64.
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;
#[cfg(not(target_arch = "x86_64"))]
const X32_BIT: u32 = u32::MAX;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// What the filter is for: the command's network policy, level, and whether it may
/// make user namespaces of its own.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub deny_network: bool,
    pub in_namespace: bool,
    pub nested_user_namespaces: bool,
}

/// The filter program for these settings.
fn program(policy: Policy) -> Vec<libc::sock_filter> {
    let Policy {
        deny_network,
        in_namespace,
        nested_user_namespaces,
    } = policy;
    let allow = stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    let mut p = vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump(BPF_JEQ_K, NATIVE_ARCH, 1, 0),
        stmt(BPF_RET_K, errno(libc::ENOSYS)),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
        jump(BPF_JGE_K, X32_BIT, 0, 1),
        stmt(BPF_RET_K, errno(libc::ENOSYS)),
    ];
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        p.push(jump(BPF_JEQ_K, nr as u32, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    }
    // openat2 hides its mode in a struct; programs fall back to openat.
    p.push(jump(BPF_JEQ_K, libc::SYS_openat2 as u32, 0, 1));
    p.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));
    if !nested_user_namespaces {
        p.push(jump(BPF_JEQ_K, libc::SYS_clone3 as u32, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));
        p.push(jump(BPF_JEQ_K, libc::SYS_setns as u32, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::EPERM)));
        // `flags` is the first argument of both.
        for nr in [libc::SYS_unshare, libc::SYS_clone] {
            p.push(jump(BPF_JEQ_K, nr as u32, 0, 4));
            p.push(stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARG0));
            p.push(jump(BPF_JSET_K, libc::CLONE_NEWUSER as u32, 0, 1));
            p.push(stmt(BPF_RET_K, errno(libc::EPERM)));
            p.push(allow);
        }
    }
    // No set-user-ID or set-group-ID file left behind for someone else to run.
    for (nr, arg) in mode_setters() {
        p.push(jump(BPF_JEQ_K, nr as u32, 0, 4));
        p.push(stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARG0 + 8 * arg));
        p.push(jump(BPF_JSET_K, SET_ID_BITS, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::EPERM)));
        p.push(allow);
    }
    if deny_network || !in_namespace {
        // Wherever UNIX sockets are refused, a datagram pair is too: one end could
        // `sendto` any pathname socket (journald's, systemd's notify socket).
        p.push(jump(BPF_JEQ_K, libc::SYS_socketpair as u32, 0, 5));
        p.push(stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARG0 + 8));
        p.push(stmt(BPF_ALU_AND_K, 0xf));
        p.push(jump(BPF_JEQ_K, libc::SOCK_DGRAM as u32, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::EACCES)));
        p.push(allow);
    }
    if deny_network {
        // if nr != socket: allow
        p.push(jump(BPF_JEQ_K, libc::SYS_socket as u32, 1, 0));
        p.push(allow);
        if in_namespace {
            p.push(stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARG0));
            p.push(jump(BPF_JEQ_K, libc::AF_INET as u32, 2, 0));
            p.push(jump(BPF_JEQ_K, libc::AF_INET6 as u32, 1, 0));
            p.push(stmt(BPF_RET_K, errno(libc::EACCES)));
            p.push(allow);
        } else {
            p.push(stmt(BPF_RET_K, errno(libc::EACCES)));
        }
    } else if !in_namespace {
        // Without namespaces nothing covers the daemons' sockets under /run (systemd,
        // D-Bus, Docker) or other users' under /tmp, and Landlock cannot refuse a
        // `connect` to them: no UNIX socket at all (`socketpair` stays).
        p.push(jump(BPF_JEQ_K, libc::SYS_socket as u32, 1, 0));
        p.push(allow);
        p.push(stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARG0));
        p.push(jump(BPF_JEQ_K, libc::AF_UNIX as u32, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::EACCES)));
        p.push(allow);
    } else {
        p.push(allow);
    }
    p
}

/// Installs the filter on this process (it is inherited across fork and exec).
/// `no_new_privs` must already be set.
pub fn install(policy: Policy) -> io::Result<()> {
    let prog = program(policy);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points at a live program of the stated length.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
