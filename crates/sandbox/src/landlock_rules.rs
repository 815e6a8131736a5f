//! The Landlock layer of `picogent sandbox-exec`: what a command may read and write,
//! its TCP under `network: "deny"`, and its signal and abstract-socket scopes. Every
//! rule is made from a descriptor opened without following links (what was checked is
//! what is granted), and at the Landlock level (no namespaces) picogent's own files are
//! carved out of both the readable and the writable trees (`carve`).

use crate::setup_error::SetupError;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use super::namespaces::HelperArgs;

/// File-system rights the helper handles (Linux 6.2+: truncate and cross-folder
/// rename are covered).
pub(super) const FS_ABI: ABI = ABI::V3;
/// Network rules need Linux 6.7+.
pub(super) const NET_ABI: ABI = ABI::V4;
/// Signal and abstract-socket scoping, Linux 6.12+.
pub(super) const SCOPE_ABI: i64 = 6;

/// Devices a shell needs to write to whatever the rules say.
pub(super) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
    "/dev/pts",
    "/dev/ptmx",
    "/dev/shm",
];

/// The Landlock ABI the running kernel offers (0 when it has none).
pub fn kernel_abi() -> i64 {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) returns the ABI.
    // SAFETY: with a null attribute pointer and this flag the call only reads a number.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    r.max(0)
}

/// Landlock for this process: returns an error when a requested rule is not enforced.
pub(super) fn restrict(h: &HelperArgs, in_namespace: bool) -> Result<(), SetupError> {
    let err = |e: landlock::RulesetError| e.to_string();
    let abi = kernel_abi();
    // Without namespaces to cover picogent's files, Landlock itself must keep them out
    // of reach, whatever the allowed paths are.
    let carve = !in_namespace && (!h.hidden.is_empty() || !h.read_only.is_empty());
    let restrict_fs = carve || (h.writable.is_some() && !h.writable_all());
    let scopes = abi >= SCOPE_ABI;
    if !restrict_fs && !h.deny_network && !scopes {
        return Ok(());
    }
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    if restrict_fs {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(FS_ABI))
            .map_err(err)?;
    }
    if h.deny_network {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(err)?;
    }
    if scopes {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    if restrict_fs {
        for (fd, access) in file_rules(h, in_namespace, carve) {
            created = created.add_rule(rule(fd, access)).map_err(err)?;
        }
    }
    let status = created.restrict_self().map_err(err)?;
    if !status.no_new_privs {
        return Err("no_new_privs could not be set".into());
    }
    if (restrict_fs || h.deny_network) && status.ruleset != RulesetStatus::FullyEnforced {
        return Err(SetupError::from(format!(
            "the kernel cannot fully enforce the sandbox ({:?}; Landlock ABI {abi} here, {} needed), so the command was not run. Use a newer kernel, or set sandbox: \"off\" to run commands without kernel confinement",
            status.ruleset,
            if h.deny_network { NET_ABI as i64 } else { FS_ABI as i64 }
        )));
    }
    Ok(())
}

/// The file rules: each a descriptor (opened without following links, so a rule goes
/// on exactly what was checked, whatever a running command renames meanwhile) and the
/// rights granted beneath it.
fn file_rules(
    h: &HelperArgs,
    in_namespace: bool,
    carve: bool,
) -> Vec<(OwnedFd, landlock::BitFlags<AccessFs>)> {
    use super::open::open_no_links;
    let read = AccessFs::from_read(FS_ABI);
    let all = AccessFs::from_all(FS_ABI);
    let whole = vec![PathBuf::from("/")];
    let writable: &[PathBuf] = match &h.writable {
        Some(w) if !h.writable_all() => w,
        _ => &whole,
    };
    let mut dirs: Vec<PathBuf> = writable.to_vec();
    dirs.extend(h.writable_within.iter().cloned());
    match (&h.tmp, in_namespace) {
        (_, true) => dirs.push(PathBuf::from("/tmp")),
        (Some(t), false) => dirs.push(t.clone()),
        (None, false) => {}
    }
    let devices = DEVICES
        .iter()
        .filter_map(|d| open_no_links(Path::new(d)).ok())
        .map(|fd| (fd, all));
    let mut rules: Vec<(OwnedFd, landlock::BitFlags<AccessFs>)> = Vec::new();
    if !carve {
        rules.extend(open_no_links(Path::new("/")).ok().map(|fd| (fd, read)));
        rules.extend(
            dirs.iter()
                .filter_map(|d| open_no_links(d).ok())
                .map(|fd| (fd, all)),
        );
        rules.extend(devices);
        return rules;
    }
    // Read: all of `/` but the hidden files; write: the writable folders but what is
    // hidden or read-only. The folders on the way to a hole can only be listed.
    let kept: Vec<PathBuf> = h.hidden.iter().chain(&h.read_only).cloned().collect();
    let readable = super::carve::carve(Path::new("/"), &h.hidden);
    rules.extend(readable.covered.into_iter().map(|fd| (fd, read)));
    rules.extend(
        readable
            .ancestors
            .into_iter()
            .map(|fd| (fd, AccessFs::ReadDir.into())),
    );
    rules.extend(devices);
    for d in dirs {
        // The private temporary folder may lie in picogent's state: it is the command's.
        let holes: &[PathBuf] = if h.tmp.as_ref() == Some(&d) {
            &[]
        } else {
            &kept
        };
        rules.extend(
            super::carve::carve(&d, holes)
                .covered
                .into_iter()
                .map(|fd| (fd, all)),
        );
    }
    rules
}

/// A rule for `fd`: on a file, only the rights a file can have.
fn rule(fd: OwnedFd, access: landlock::BitFlags<AccessFs>) -> PathBeneath<OwnedFd> {
    let access = if super::open::is_dir(&fd) {
        access
    } else {
        access & AccessFs::from_file(FS_ABI)
    };
    PathBeneath::new(fd, access)
}
