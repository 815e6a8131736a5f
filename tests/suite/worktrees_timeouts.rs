//! Every git of a delivery is bounded by `git_timeout_sec` (issue 37): a commit or a
//! diff that hangs (a FIFO named by the repository's configuration, a stuck disk) is
//! stopped with everything it started, and the task ends saying its work could not be
//! committed, instead of waiting for good.

use serde_json::{json, Value};

use crate::common::tracker::FakeTracker;
use crate::common::*;

fn assigned(event: &str, task: &str, title: &str) -> Value {
    json!({"id": event, "type": "task.assigned",
           "data": {"task": {"id": task, "title": title, "description": "Do it.", "status": "todo"}}})
}

/// Whether a process is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
    }
}

/// Runs one task whose work is delivered with the `git SUB` chosen by `hang` (shell
/// for the stand-in, see `SlowGit::instead_of`) hanging: much longer than
/// `git_timeout_sec` (2 s) and than this test waits. Returns the task's comment once
/// it ended, after checking that the hung git was stopped.
async fn delivered_with_a_hung(sub: &str, hang: &str) -> String {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(vec![
        tool("bash", json!({"command": "echo work > work.txt"})),
        text("Done."),
    ]);
    let tracker = FakeTracker::start().await;
    let cfg = json!({"tracker_url": tracker.url(), "listen_port": 0,
                     "allowed_paths": [sb.work], "git_timeout_sec": 2});
    sb.write_config(&llm, Wire::Anthropic, cfg);
    let slow = SlowGit::new(&sb);
    slow.instead_of(sub, hang);
    let mut daemon = spawn_daemon_with_path(&sb, &slow.path());
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "h1", "Hang")).await;
    tracker.wait_status("h1", "review", 30).await;
    let pid: i32 = std::fs::read_to_string(sb.base().join("slow-git/hung.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Stopped before the task ended (its supervisor reaped it), not with the daemon.
    assert!(gone(pid), "the hung git {pid} still runs");
    let comment = tracker.comments("h1")[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    daemon.kill().await.unwrap();
    comment
}

/// The shell a stand-in runs to hang (`sleep`, in git's place: killed with git's group).
const HANG: &str = "echo $$ > \"$dir/hung.pid\"; exec sleep 120";

#[tokio::test]
async fn a_commit_that_hangs_is_stopped_after_git_timeout_sec() {
    let c = delivered_with_a_hung("commit", HANG).await;
    assert!(c.starts_with("Done."), "{c}");
    assert!(c.contains("could not be committed"), "{c}");
    assert!(c.contains("git commit"), "{c}");
    assert!(c.contains("did not finish within 2 s"), "{c}");
}

/// The diff of the work for the comment (after the commit, whose `--stat` ran).
#[tokio::test]
async fn a_diff_that_hangs_is_stopped_after_git_timeout_sec() {
    let hang = format!("case \"$*\" in *'--no-color HEAD^ HEAD'*) {HANG};; esac");
    let c = delivered_with_a_hung("diff", &hang).await;
    assert!(c.contains("could not be committed"), "{c}");
    assert!(c.contains("git diff"), "{c}");
    assert!(c.contains("did not finish within 2 s"), "{c}");
}
