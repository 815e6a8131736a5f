//! The namespace probe: whether the helper can build the namespace sandbox here,
//! asked of the kernel for real, once per process and network setting, by a run that
//! nothing in the environment steers.

use std::path::Path;
use std::sync::OnceLock;

use super::confine::Helper;

/// Whether the helper can build the namespace sandbox on this machine (`Err` says
/// why not).
pub fn namespaces_work(helper: &Path) -> Result<(), String> {
    match Helper::open(helper) {
        Ok(h) => probe_namespaces(&h, true),
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
/// The probe's answers, with the network allowed and denied (a network namespace is
/// one more the kernel may refuse): the probe asks for what commands will get.
static PROBE: [OnceLock<Result<(), String>>; 2] = [OnceLock::new(), OnceLock::new()];

/// A command ran to its end in namespaces the helper built: that is the answer.
pub(crate) fn proven(deny_network: bool) {
    let _ = PROBE[usize::from(deny_network)].set(Ok(()));
}

/// The probe's answer, when it has one.
pub(crate) fn probe_answer(deny_network: bool) -> Option<&'static Result<(), String>> {
    PROBE[usize::from(deny_network)].get()
}

pub(crate) fn probe_namespaces(helper: &Helper, deny_network: bool) -> Result<(), String> {
    PROBE[usize::from(deny_network)]
        .get_or_init(|| {
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
                .output();
            let out = out.map_err(|e| format!("cannot run {}: {e}", helper.shown().display()))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .replace("picogent sandbox: ", ""))
            }
        })
        .clone()
}
