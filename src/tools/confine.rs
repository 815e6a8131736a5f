//! Kernel confinement of bash with Linux Landlock, the layer under the path checks.
//!
//! A confined command does not run `/bin/bash` directly: picogent re-executes itself as
//! `picogent sandbox-exec [--rw DIR]... [--deny-net] -- /bin/bash -c CMD`. That helper is
//! single-threaded (it runs before any async runtime exists), restricts itself — the
//! whole file system readable and executable, writes only under the allowed paths, a
//! private temporary folder and a few devices, and with `--deny-net` no TCP connect or
//! bind — and then `exec`s bash, so the rules bind bash and everything it starts. The
//! process-group handling of the bash tool is unchanged, since `exec` keeps the pid.
//!
//! It fails closed: when the kernel cannot enforce every requested rule, the helper
//! refuses to run the command and says why (`sandbox: "off"` is the explicit way out).
//!
//! Known limits: Landlock rules only add rights, so a folder inside an allowed path
//! (a skill folder, the agent's `state/`) stays writable to bash; UDP and other
//! non-TCP sockets are not covered by `network: "deny"`; a confined command can still
//! read every file picogent's user can read.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, ABI,
};

/// File-system rights the helper handles (Linux 6.2+: truncate and cross-folder
/// rename are covered).
const FS_ABI: ABI = ABI::V3;
/// Network rules need Linux 6.7+.
const NET_ABI: ABI = ABI::V4;

/// Devices a shell needs to write to whatever the rules say.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
    "/dev/pts",
    "/dev/ptmx",
];

/// How bash is confined: built once from the configuration.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The picogent binary that serves as the helper.
    pub helper: PathBuf,
    /// Folders bash may write in; `None` leaves the file system unrestricted (only the
    /// network is confined).
    pub writable: Option<Vec<PathBuf>>,
    pub deny_network: bool,
}

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

impl Confinement {
    /// The ABI a command needs for every rule to be enforced.
    pub fn needed_abi(&self) -> i64 {
        if self.deny_network {
            NET_ABI as i64
        } else {
            FS_ABI as i64
        }
    }

    /// `/bin/bash -c command`, wrapped in the helper; `tmp` is the private temporary folder.
    pub fn command(&self, command: &str, tmp: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.helper);
        cmd.arg("sandbox-exec");
        if let Some(dirs) = &self.writable {
            for d in dirs.iter().chain(std::iter::once(&tmp.to_path_buf())) {
                cmd.arg("--rw").arg(d);
            }
        }
        if self.deny_network {
            cmd.arg("--deny-net");
        }
        cmd.args(["--", "/bin/bash", "-c", command]);
        cmd
    }
}

struct HelperArgs {
    writable: Option<Vec<PathBuf>>,
    deny_network: bool,
    program: Vec<OsString>,
}

fn parse(args: impl Iterator<Item = OsString>) -> Result<HelperArgs, String> {
    let mut writable: Option<Vec<PathBuf>> = None;
    let mut deny_network = false;
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--rw") => {
                let dir = args.next().ok_or("--rw needs a folder")?;
                writable
                    .get_or_insert_with(Vec::new)
                    .push(PathBuf::from(dir));
            }
            Some("--deny-net") => deny_network = true,
            Some("--") => {
                let program: Vec<OsString> = args.collect();
                if program.is_empty() {
                    return Err("nothing to run after --".into());
                }
                return Ok(HelperArgs {
                    writable,
                    deny_network,
                    program,
                });
            }
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    Err("usage: picogent sandbox-exec [--rw DIR]... [--deny-net] -- PROGRAM [ARGS]...".into())
}

fn restrict(h: &HelperArgs) -> Result<RulesetStatus, String> {
    let err = |e: landlock::RulesetError| e.to_string();
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    if h.writable.is_some() {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(FS_ABI))
            .map_err(err)?;
    }
    if h.deny_network {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    if let Some(dirs) = &h.writable {
        created = created
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(FS_ABI)))
            .map_err(err)?
            .add_rules(path_beneath_rules(dirs, AccessFs::from_all(FS_ABI)))
            .map_err(err)?
            .add_rules(path_beneath_rules(DEVICES, AccessFs::from_all(FS_ABI)))
            .map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    if !status.no_new_privs {
        return Err("no_new_privs could not be set".into());
    }
    Ok(status.ruleset)
}

/// `picogent sandbox-exec`: confine this process, then become the program.
pub fn helper_main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let fail = |msg: String| {
        eprintln!("picogent sandbox: {msg}");
        ExitCode::from(126)
    };
    let h = match parse(args) {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    match restrict(&h) {
        Ok(RulesetStatus::FullyEnforced) => {}
        Ok(status) => {
            return fail(format!(
                "the kernel cannot fully enforce the sandbox ({status:?}; Landlock ABI {} here, {} needed), so the command was not run. Use a newer kernel, or set sandbox: \"off\" to run commands without kernel confinement",
                kernel_abi(),
                if h.deny_network { NET_ABI as i64 } else { FS_ABI as i64 }
            ))
        }
        Err(e) => return fail(format!("cannot apply the Landlock rules, so the command was not run: {e}")),
    }
    let err = std::process::Command::new(&h.program[0])
        .args(&h.program[1..])
        .exec();
    eprintln!("picogent sandbox: cannot run {:?}: {err}", h.program[0]);
    ExitCode::from(127)
}
