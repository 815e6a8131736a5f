//! The namespace probe: whether the helper can build the namespace sandbox here,
//! asked of the kernel for real, once per process and network setting (asked again
//! after a passing refusal), by a run that nothing in the environment steers.

use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::helper::Helper;

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
/// The last passing refusal and when it came: for a moment it is the answer (a count
/// that stays full must not cost every caller a probe of its own), and for a while it
/// is what health reports.
static LAST_PASSING: [Mutex<Option<(Instant, String)>>; 2] = [Mutex::new(None), Mutex::new(None)];
/// How long a passing refusal answers without a new probe.
const PASSING_ANSWERS: Duration = Duration::from_secs(1);
/// How long health reports a passing refusal after it came.
const PASSING_REPORTED: Duration = Duration::from_secs(60);

/// Why commands cannot have their namespaces.
#[derive(Debug, Clone)]
pub enum NoNamespaces {
    /// The kernel does not allow them here: the Landlock level.
    Lasting(String),
    /// Not now (the count is full): the commands of this moment are refused, and the
    /// next one asks again.
    Passing(String),
}

/// A command ran to its end in namespaces the helper built: that is the answer.
pub fn proven(deny_network: bool) {
    let _ = PROBE[usize::from(deny_network)].set(Ok(()));
}

/// The probe's settled answer, when it has one.
pub fn probe_answer(deny_network: bool) -> Option<&'static Result<(), String>> {
    PROBE[usize::from(deny_network)].get()
}

pub fn probe_namespaces(helper: &Helper, deny_network: bool) -> Result<(), NoNamespaces> {
    let i = usize::from(deny_network);
    let settled = |a: &Result<(), String>| a.clone().map_err(NoNamespaces::Lasting);
    if let Some(answer) = PROBE[i].get() {
        return settled(answer);
    }
    if let Some(why) = passing_within(deny_network, PASSING_ANSWERS) {
        return Err(NoNamespaces::Passing(why));
    }
    let _one = PROBING[i].lock().unwrap_or_else(|e| e.into_inner());
    if let Some(answer) = PROBE[i].get() {
        return settled(answer);
    }
    if let Some(why) = passing_within(deny_network, PASSING_ANSWERS) {
        return Err(NoNamespaces::Passing(why));
    }
    match run_probe(helper, deny_network) {
        Err(NoNamespaces::Passing(why)) => {
            tracing::warn!(
                level = "namespaces",
                "sandbox: namespaces cannot be made right now ({why}); commands are refused until they can, and the level is not lowered (if this lasts, see the user.max_*_namespaces limits here and in any container picogent runs in)"
            );
            *lock(&LAST_PASSING[i]) = Some((Instant::now(), why.clone()));
            Err(NoNamespaces::Passing(why))
        }
        Err(NoNamespaces::Lasting(why)) => settled(PROBE[i].get_or_init(|| Err(why))),
        Ok(()) => settled(PROBE[i].get_or_init(|| Ok(()))),
    }
}

/// The last passing refusal, when it came less than `within` ago.
fn passing_within(deny_network: bool, within: Duration) -> Option<String> {
    lock(&LAST_PASSING[usize::from(deny_network)])
        .as_ref()
        .filter(|(at, _)| at.elapsed() < within)
        .map(|(_, why)| why.clone())
}

/// Why the probe last found namespaces impossible for now, when that was lately (and
/// the level is still not settled): for health to report while commands are refused.
pub fn refusing_lately(deny_network: bool) -> Option<String> {
    if PROBE[usize::from(deny_network)].get().is_some() {
        return None;
    }
    passing_within(deny_network, PASSING_REPORTED)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[allow(
    clippy::disallowed_methods,
    reason = "the probe runs on a blocking thread of its own, off every run's path"
)]
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
            let why = format!("cannot run {}: {e}", helper.shown().display());
            // Out of processes or memory for a moment is no answer about the kernel.
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::ENOMEM | libc::EMFILE | libc::ENFILE | libc::EINTR) => {
                    NoNamespaces::Passing(why)
                }
                _ => NoNamespaces::Lasting(why),
            }
        })?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr)
        .trim()
        .replace("picogent sandbox: ", "");
    answer_of(
        out.status.code(),
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        why,
    )
}

/// The helper's passing refusal (75) and a probe the OOM killer or someone else
/// killed (SIGKILL) pass; every other end lasts, as before issue 37 (its own refusal,
/// 126; a shell that cannot run, 127; a death by another signal, such as a container's
/// seccomp profile's SIGSYS), so a level that cannot work settles instead of refusing
/// every command for good.
fn answer_of(code: Option<i32>, signal: Option<i32>, why: String) -> Result<(), NoNamespaces> {
    let passing = code == Some(i32::from(super::unshare::PASSING_STATUS));
    match (code, signal) {
        (Some(_), _) if passing => Err(NoNamespaces::Passing(why)),
        (None, Some(libc::SIGKILL)) => Err(NoNamespaces::Passing(
            "the probe was killed (SIGKILL)".into(),
        )),
        (Some(code), _) if why.is_empty() => Err(NoNamespaces::Lasting(format!(
            "the sandbox probe ended with status {code}"
        ))),
        (None, Some(sig)) => Err(NoNamespaces::Lasting(format!(
            "the sandbox probe was killed by signal {sig}{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        ))),
        _ => Err(NoNamespaces::Lasting(why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_passing_refusal_or_a_kill_passes() {
        let passing = |code, signal| {
            matches!(
                answer_of(code, signal, "x".into()),
                Err(NoNamespaces::Passing(_))
            )
        };
        assert!(passing(Some(75), None));
        assert!(passing(None, Some(libc::SIGKILL)));
        for (code, signal) in [
            (Some(126), None),
            (Some(127), None),
            (Some(125), None),
            (Some(101), None),
            (None, Some(libc::SIGSYS)),
            (None, Some(libc::SIGSEGV)),
        ] {
            assert!(!passing(code, signal), "{code:?} {signal:?}");
        }
    }
}
