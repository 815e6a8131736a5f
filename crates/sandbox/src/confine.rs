//! Kernel confinement of the commands picogent runs for the agent (bash, the Claude
//! Code CLI, picogent's own git), the layers under the path checks.
//!
//! A confined command does not start directly: picogent re-executes itself as
//! `picogent sandbox-exec [options] -- PROGRAM ARGS...`. That helper runs before any
//! async runtime exists (single-threaded), and then:
//! 1. with namespaces (`--ns`, the default where the kernel allows unprivileged user
//!    namespaces) builds the command's own view of the system (`namespaces`);
//! 2. drops every capability, sets `no_new_privs`, and applies Landlock: writes only
//!    under the allowed paths, the private `/tmp` and a few devices; no TCP under
//!    `deny`; no signals to and no abstract sockets of processes outside the sandbox
//!    (Landlock ABI 6);
//! 3. installs a seccomp filter (`seccomp`): no io_uring, and under `deny` no
//!    sockets but the namespace's own loopback;
//! 4. `exec`s the program.
//!
//! It fails closed: when the kernel cannot enforce a requested rule, the command is
//! not run and the helper says why (`sandbox: "off"` is the explicit way out).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use super::landlock_rules::kernel_abi;
use super::landlock_rules::{FS_ABI, NET_ABI};
use super::namespaces::HelperArgs;

pub use super::helper::Helper;

/// How commands are confined: built once from the configuration.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The picogent binary that serves as the helper.
    pub helper: Helper,
    /// Folders commands may write in; `None` leaves the file system writable (only
    /// the protected paths, the network and the process view are confined).
    pub writable: Option<Vec<PathBuf>>,
    pub deny_network: bool,
    /// Whether commands run in their own namespaces: asked of the kernel once (see
    /// `Namespaces`), or not asked for.
    pub choice: Namespaces,
    /// Never writable by commands, even inside `writable` (picogent's sessions).
    pub read_only: Vec<PathBuf>,
    /// Never readable or writable by commands (picogent's configuration file, `.env`,
    /// state).
    pub hidden: Vec<PathBuf>,
    /// Folders inside `read_only` ones that stay writable (a run's own worktree).
    pub writable_within: Vec<PathBuf>,
    /// Whether commands may make user namespaces of their own
    /// (`nested_user_namespaces`).
    pub nested_user_namespaces: bool,
}

/// How the namespace level is chosen. The probe (one real helper run, once per process)
/// is not on the way of a run that starts no command: it runs on a thread of its own
/// when the agent starts, and the first command waits for its answer if it has to.
/// Once chosen, the level never changes: a command whose namespaces then fail is
/// refused, never run at a lower level.
#[derive(Debug, Clone)]
pub enum Namespaces {
    /// Wherever the kernel allows them: the probe of this helper decides.
    Probed(Helper),
    /// Not used, and why.
    Off(String),
}

/// The private `/tmp` of a command under namespaces (MiB of a tmpfs).
pub const TMP_SIZE_MB: u64 = 512;
/// At most this many processes of a command's user inside its namespaces (a fork bomb
/// stops there, not at the host's limit).
pub const MAX_PROCESSES: u64 = 1024;

/// The level commands run at, as `sandbox-check`, the log and `/healthz` say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LevelInForce {
    Namespaces,
    Landlock,
    Off,
}

impl LevelInForce {
    pub fn as_str(self) -> &'static str {
        match self {
            LevelInForce::Namespaces => "namespaces",
            LevelInForce::Landlock => "landlock",
            LevelInForce::Off => "off",
        }
    }
}

impl Confinement {
    /// Whether commands run in their own namespaces. Waits for the probe when it has
    /// not answered yet (a few milliseconds, once per process): from async code, call
    /// `settle` first.
    pub fn namespaces(&self) -> bool {
        self.why_not_namespaces().is_none()
    }

    /// Why commands run without namespaces, when they do (waits like `namespaces`). A
    /// passing refusal (the count of namespaces full for now) is not a reason: the level
    /// stays, and the commands of that moment are refused.
    pub fn why_not_namespaces(&self) -> Option<String> {
        match &self.choice {
            Namespaces::Probed(h) => match super::probe_namespaces(h, self.deny_network) {
                Err(super::probe::NoNamespaces::Lasting(why)) => Some(why),
                Ok(()) | Err(super::probe::NoNamespaces::Passing(_)) => None,
            },
            Namespaces::Off(why) => Some(why.clone()),
        }
    }

    /// Whether commands run in namespaces, without waiting: until the probe answers,
    /// the optimistic yes of a first command (see `tools::bash`).
    pub fn namespaces_now(&self) -> bool {
        match &self.choice {
            Namespaces::Probed(_) => {
                super::probe_answer(self.deny_network).is_none_or(|r| r.is_ok())
            }
            Namespaces::Off(_) => false,
        }
    }

    /// Logs the level in force (known: see `settled`) and why, once per process and
    /// network setting: at a daemon's start, or after a one-off run's first command.
    pub fn say_level(&self, files: &'static str) {
        static SAID: [std::sync::OnceLock<()>; 2] = [const { std::sync::OnceLock::new() }; 2];
        SAID[usize::from(self.deny_network)].get_or_init(|| self.say_level_now(files));
    }

    fn say_level_now(&self, files: &'static str) {
        let abi = kernel_abi();
        let network = if self.deny_network { "deny" } else { "allow" };
        match self.why_not_namespaces() {
            None => tracing::info!(
                level = "namespaces",
                landlock_abi = abi,
                network,
                writes = files,
                "sandbox level: namespaces; commands run in their own user, mount, PID{} namespaces, under Landlock and seccomp",
                if self.deny_network { " and network" } else { "" }
            ),
            Some(why) => tracing::warn!(
                level = "landlock",
                landlock_abi = abi,
                network,
                writes = files,
                "sandbox level: landlock; commands run under Landlock and seccomp without namespaces ({why}): they can see other processes and read what picogent's user can read; no UNIX sockets, and UDP closed only under network: deny"
            ),
        }
    }

    /// Whether the level is known without waiting.
    pub fn settled(&self) -> bool {
        match &self.choice {
            Namespaces::Probed(_) => super::probe_answer(self.deny_network).is_some(),
            Namespaces::Off(_) => true,
        }
    }

    /// Waits (off the runtime's threads) until the level is known.
    pub async fn settle(&self) {
        if !self.settled() {
            let c = self.clone();
            let _ = tokio::task::spawn_blocking(move || c.namespaces()).await;
        }
    }

    /// The level commands run at (waits like `namespaces`).
    pub fn level(&self) -> LevelInForce {
        if self.namespaces() {
            LevelInForce::Namespaces
        } else {
            LevelInForce::Landlock
        }
    }

    /// The ABI a command needs for every requested Landlock rule to be enforced.
    pub fn needed_abi(&self) -> i64 {
        if self.deny_network {
            NET_ABI as i64
        } else if self.writable.is_some() {
            FS_ABI as i64
        } else {
            0
        }
    }

    /// `program args...`, wrapped in the helper; `tmp` is the command's private
    /// temporary folder (its `/tmp` under namespaces, writable under Landlock).
    pub fn command<I, S>(&self, program: &Path, args: I, tmp: &Path) -> tokio::process::Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command_showing(program, args, tmp, &[], None)
    }

    /// `program` unconfined, but in a PID namespace of its own where namespaces work:
    /// whatever it starts, even in a session of its own, dies with it and with picogent.
    /// `None` where they do not (then only its process group is killed).
    pub fn supervised_command(
        &self,
        program: &Path,
        args: &[String],
    ) -> Option<tokio::process::Command> {
        if !self.namespaces() {
            return None;
        }
        let mut cmd = tokio::process::Command::new(self.helper.program());
        cmd.args(["sandbox-exec", "--pid-only", "--"])
            .arg(program)
            .args(args);
        Some(cmd)
    }

    /// `command`, with folders of the operator's configuration (never the agent's)
    /// that stay visible, read-only, when they lie under `/tmp`, and one more folder it
    /// may write where writes are restricted (`cache`: an MCP server's package cache,
    /// which the agent's commands cannot write, kept between its starts).
    pub fn command_showing<I, S>(
        &self,
        program: &Path,
        args: I,
        tmp: &Path,
        shown: &[PathBuf],
        cache: Option<&Path>,
    ) -> tokio::process::Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let namespaces = self.namespaces_now();
        let mut cmd = tokio::process::Command::new(self.helper.program());
        cmd.arg("sandbox-exec");
        if namespaces {
            cmd.arg("--ns");
        }
        for d in self.writable.iter().flatten() {
            cmd.arg("--rw").arg(d);
        }
        // Only where writes are restricted: without them a first `--rw` would restrict.
        if let (Some(_), Some(c)) = (&self.writable, cache) {
            cmd.arg("--rw").arg(c);
        }
        cmd.arg("--tmp").arg(tmp);
        for d in &self.read_only {
            cmd.arg("--ro").arg(d);
        }
        for d in &self.writable_within {
            cmd.arg("--rw-in").arg(d);
        }
        for d in &self.hidden {
            cmd.arg("--hide").arg(d);
        }
        if self.deny_network {
            cmd.arg("--deny-net");
        }
        if self.nested_user_namespaces {
            cmd.arg("--nested-userns");
        }
        cmd.arg("--tmp-size").arg(TMP_SIZE_MB.to_string());
        cmd.arg("--max-procs").arg(MAX_PROCESSES.to_string());
        // A program installed under /tmp (a checkout there, a package cache) stays
        // runnable inside the private /tmp: its top folder there is shown read-only,
        // and so are the `shown` folders picogent itself names (an MCP server's script
        // from its configuration). Never anything derived from what the agent wrote:
        // a command line naming a path is not a reason to show it.
        let mut folders: Vec<PathBuf> = tmp_top_folder(program).into_iter().collect();
        folders.extend(shown.iter().filter_map(|p| tmp_top_folder(p)));
        folders.sort();
        folders.dedup();
        for top in folders {
            cmd.arg("--show").arg(top);
        }
        cmd.arg("--").arg(program).args(args);
        // Under namespaces the private folder is mounted at /tmp.
        let tmp_env = if namespaces { Path::new("/tmp") } else { tmp };
        cmd.env("TMPDIR", tmp_env)
            .env("TMP", tmp_env)
            .env("TEMP", tmp_env);
        cmd
    }

    /// The same confinement with more writable folders (a tool's own state).
    pub fn with_writable(&self, extra: impl IntoIterator<Item = PathBuf>) -> Confinement {
        let mut c = self.clone();
        if let Some(w) = c.writable.as_mut() {
            // As the helper compares them: resolved.
            w.extend(
                extra
                    .into_iter()
                    .map(|p| std::fs::canonicalize(&p).unwrap_or(p)),
            );
        }
        c
    }
}

/// The folder directly under `/tmp` that holds `path`, taken as given (absolute,
/// no `..`): a real folder there, not a link, so nothing resolved through a link
/// someone made decides what becomes visible.
pub fn tmp_top_folder(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let rest = path.strip_prefix("/tmp").ok()?;
    if rest
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let first = rest.components().next()?;
    let top = Path::new("/tmp").join(first);
    std::fs::symlink_metadata(&top)
        .is_ok_and(|m| m.is_dir())
        .then_some(top)
}

const USAGE: &str = "usage: picogent sandbox-exec [--ns | --pid-only] [--rw DIR]... [--tmp DIR] [--ro PATH]... [--rw-in DIR]... [--hide PATH]... [--show DIR]... [--deny-net] [--nested-userns] [--no-writes] [--tmp-size MIB] [--max-procs N] -- PROGRAM [ARGS]...";

fn parse(args: impl Iterator<Item = OsString>) -> Result<HelperArgs, String> {
    let mut h = HelperArgs {
        namespaces: false,
        pid_only: false,
        writable: None,
        tmp: None,
        read_only: Vec::new(),
        writable_within: Vec::new(),
        hidden: Vec::new(),
        shown: Vec::new(),
        deny_network: false,
        tmp_size_mb: TMP_SIZE_MB,
        max_processes: MAX_PROCESSES,
        nested_user_namespaces: false,
        program: Vec::new(),
    };
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{flag} needs a path"))
        };
        match a.to_str() {
            Some("--ns") => h.namespaces = true,
            Some("--pid-only") => h.pid_only = true,
            Some("--rw") => {
                let d = value("--rw")?;
                h.writable.get_or_insert_with(Vec::new).push(d);
            }
            Some("--tmp") => h.tmp = Some(value("--tmp")?),
            Some("--ro") => h.read_only.push(value("--ro")?),
            Some("--rw-in") => h.writable_within.push(value("--rw-in")?),
            Some("--hide") => h.hidden.push(value("--hide")?),
            Some("--show") => h.shown.push(value("--show")?),
            Some("--deny-net") => h.deny_network = true,
            Some("--nested-userns") => h.nested_user_namespaces = true,
            // Nothing writable but the private /tmp (a read-only git).
            Some("--no-writes") => {
                h.writable.get_or_insert_with(Vec::new);
            }
            Some(flag @ ("--tmp-size" | "--max-procs")) => {
                let n = args
                    .next()
                    .and_then(|v| v.to_str().and_then(|v| v.parse::<u64>().ok()))
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{flag} needs a positive number"))?;
                if flag == "--tmp-size" {
                    h.tmp_size_mb = n;
                } else {
                    h.max_processes = n;
                }
            }
            Some("--") => {
                h.program = args.collect();
                if h.program.is_empty() {
                    return Err("nothing to run after --".into());
                }
                return Ok(h);
            }
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    Err(USAGE.into())
}

/// `picogent sandbox-exec`: confine this process, then become the program.
pub fn helper_main(args: impl Iterator<Item = OsString>) -> ExitCode {
    // Nothing picogent's own parent left open reaches the command.
    // SAFETY: closes descriptors this process does not use (it holds only stdio).
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    // A session keyring of its own: picogent's keys are not the command's.
    // SAFETY: KEYCTL_JOIN_SESSION_KEYRING with a null name makes a new anonymous one.
    unsafe {
        libc::syscall(libc::SYS_keyctl, 1, std::ptr::null::<libc::c_char>());
    }
    let h = match parse(args) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("picogent sandbox: {e}");
            return ExitCode::from(126);
        }
    };
    if h.pid_only {
        // Returns only when the namespace could not be made.
        // Supervision is a best effort for a program that runs unconfined anyway (root
        // without CAP_SYS_ADMIN cannot make a PID namespace alone): it still runs.
        let Err(e) = super::namespaces::run(&h, &|h: &HelperArgs| super::exec::exec_unconfined(h));
        eprintln!("picogent sandbox: {e}; running it without a PID namespace of its own");
        return ExitCode::from(super::exec::exec_unconfined(&h).clamp(0, 255) as u8);
    }
    if h.namespaces {
        // Returns only when the namespaces could not be made.
        let Err(e) =
            super::namespaces::run(&h, &|h: &HelperArgs| super::exec::become_command(h, true));
        if e.passing {
            // The level stays: this command waits for nothing and is not run lower.
            eprintln!("picogent sandbox: {e}; this passes, and no command is ever run at a lower level for it: try again shortly; the command was not run");
            return ExitCode::from(super::unshare::PASSING_STATUS);
        }
        eprintln!("picogent sandbox: {e}; the command was not run");
        return ExitCode::from(126);
    }
    ExitCode::from(super::exec::become_command(&h, false).clamp(0, 255) as u8)
}
