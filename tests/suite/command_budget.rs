//! What one command may take (issue 37, item 1): its processes stop at its own limit,
//! whoever picogent runs as (root included, whom `RLIMIT_NPROC` does not hold back),
//! and its processes are the OOM killer's first choice, never the daemon.

use std::path::PathBuf;
use std::time::Duration;

use picogent::sandbox::{Level, Sandbox as PathSandbox};
use picogent::tools::{execute, ToolContext};
use serde_json::json;

use crate::common::Sandbox;

fn confined(sb: &Sandbox, level: Level) -> ToolContext {
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_picogent"));
    let sandbox = PathSandbox::new(std::slice::from_ref(&sb.work), &[], &[])
        .with_confinement_level(helper, false, level);
    sb.tool_ctx(sandbox, Duration::from_secs(60))
}

/// Forks sleepers until the kernel refuses one (or 3,000 are running), then says how
/// many ran at once.
const FORK_STORM: &str = r#"python3 -c '
import os, sys, time
n = 0
try:
    for i in range(3000):
        if os.fork() == 0:
            time.sleep(20); os._exit(0)
        n += 1
except OSError as e:
    print("refused:", e.errno)
print("forked", n)
sys.stdout.flush()
os.killpg(0, 9)
'"#;

#[tokio::test]
async fn a_fork_storm_stops_at_the_commands_own_limit() {
    let sb = Sandbox::new();
    let ctx = confined(&sb, Level::Full);
    let out = execute("bash", &json!({"command": FORK_STORM}), &ctx).await;
    let forked: usize = out
        .text
        .lines()
        .find_map(|l| l.strip_prefix("forked "))
        .unwrap_or_else(|| panic!("{}", out.text))
        .trim()
        .parse()
        .unwrap();
    assert!(out.text.contains("refused: 11"), "{}", out.text);
    assert!(forked <= 1024, "{}", out.text);
    // The daemon's own processes and threads are not in that count: the next command
    // runs as ever.
    let next = execute("bash", &json!({"command": "echo next"}), &ctx).await;
    assert!(next.text.starts_with("next"), "{}", next.text);
}

#[tokio::test]
async fn commands_are_the_oom_killers_first_choice_at_either_level() {
    let sb = Sandbox::new();
    for level in [Level::Full, Level::Landlock] {
        let ctx = confined(&sb, level);
        let out = execute(
            "bash",
            &json!({"command": "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'"}),
            &ctx,
        )
        .await;
        assert!(
            out.text.starts_with("1000\n1000"),
            "{level:?}: {}",
            out.text
        );
    }
}
