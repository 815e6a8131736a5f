//! The namespace probe: whether the helper can build the namespace sandbox here,
//! asked of the kernel for real, once per process and network setting (asked again
//! after a passing refusal), by a run that nothing in the environment steers.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use super::confine::Helper;

/// Whether the helper can build the namespace sandbox on this machine (`Err` says
/// why not).
pub fn namespaces_work(helper: &Path) -> Result<(), String> {
    match Helper::open(helper) {
        Ok(h) => probe_namespaces(&h, true).map_err(|e| match e {
            NoNamespaces::Lasting(why) | NoNamespaces::Passing(why) => why,
        }),
        Err(e) => Err(format!(
            "cannot open the sandbox helper {}: {e}",
            helper.display()
        )),
    }
}

/// Probed once per process by running the helper for real. Nothing of the place
/// picogent starts in steers the answer: not its working folder (one under `/tmp`
/// vanishes behind the private `/tmp`), not its environment, not what anyone mounted
/// under `TMPDIR` or how full it is: it writes nothing and is given no folder.
/// The probe's settled answers, with the network allowed and denied (a network
/// namespace is one more the kernel may refuse): the probe asks for what commands will
/// get. A passing refusal (the count of namespaces full for now) is never kept: it
/// would lower every later command's level for a moment's shortage.
static PROBE: [OnceLock<Result<(), String>>; 2] = [OnceLock::new(), OnceLock::new()];
/// One probe at a time per network setting.
static PROBING: [Mutex<()>; 2] = [Mutex::new(()), Mutex::new(())];

/// Why commands cannot have their namespaces.
#[derive(Debug, Clone)]
pub(crate) enum NoNamespaces {
    /// The kernel does not allow them here: the Landlock level.
    Lasting(String),
    /// Not now (the count is full): the commands of this moment are refused, and the
    /// next one asks again.
    Passing(String),
}

/// A command ran to its end in namespaces the helper built: that is the answer.
pub(crate) fn proven(deny_network: bool) {
    let _ = PROBE[usize::from(deny_network)].set(Ok(()));
}

/// The probe's settled answer, when it has one.
pub(crate) fn probe_answer(deny_network: bool) -> Option<&'static Result<(), String>> {
    PROBE[usize::from(deny_network)].get()
}

pub(crate) fn probe_namespaces(helper: &Helper, deny_network: bool) -> Result<(), NoNamespaces> {
    let i = usize::from(deny_network);
    let settled = |a: &Result<(), String>| a.clone().map_err(NoNamespaces::Lasting);
    if let Some(answer) = PROBE[i].get() {
        return settled(answer);
    }
    let _one = PROBING[i].lock().unwrap_or_else(|e| e.into_inner());
    if let Some(answer) = PROBE[i].get() {
        return settled(answer);
    }
    match run_probe(helper, deny_network) {
        Err(NoNamespaces::Passing(why)) => {
            tracing::warn!(
                level = "namespaces",
                "sandbox: namespaces cannot be made right now ({why}); commands are refused until they can, and the level is not lowered"
            );
            Err(NoNamespaces::Passing(why))
        }
        Err(NoNamespaces::Lasting(why)) => settled(PROBE[i].get_or_init(|| Err(why))),
        Ok(()) => settled(PROBE[i].get_or_init(|| Ok(()))),
    }
}

fn run_probe(helper: &Helper, deny_network: bool) -> Result<(), NoNamespaces> {
    let mut cmd = std::process::Command::new(helper.program());
    cmd.arg("sandbox-exec").arg("--ns").arg("--no-writes");
    if deny_network {
        cmd.arg("--deny-net");
    }
    let out = cmd
        .args(["--", "/bin/sh", "-c", "exit 0"])
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            NoNamespaces::Lasting(format!("cannot run {}: {e}", helper.shown().display()))
        })?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr)
        .trim()
        .replace("picogent sandbox: ", "");
    if out.status.code() == Some(i32::from(super::unshare::PASSING_STATUS)) {
        Err(NoNamespaces::Passing(why))
    } else {
        Err(NoNamespaces::Lasting(why))
    }
}
