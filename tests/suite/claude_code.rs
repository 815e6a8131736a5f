//! `provider: "claude-code"`: the real Claude Code CLI against the scripted Anthropic
//! server, through `picogent run` and through agent mode.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::common::tracker::{FakeTracker, TOKEN};
use crate::common::*;

/// The version these tests were written against.
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1.197";

/// Claude Code, installed from the npm registry into an ignored cache folder when
/// missing. `None` (with the reason printed) only when it cannot be installed.
fn claude() -> Option<PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/claude-code");
        let bin = dir.join("node_modules/.bin/claude");
        if bin.exists() {
            return Some(bin);
        }
        eprintln!(
            "installing {CLAUDE_CODE} into {} for the claude-code tests",
            dir.display()
        );
        std::fs::create_dir_all(&dir).ok()?;
        let out = std::process::Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
            ])
            .arg(&dir)
            .arg(CLAUDE_CODE)
            .output();
        match out {
            Ok(o) if o.status.success() && bin.exists() => Some(bin),
            Ok(o) => {
                crate::common::skip(&format!(
                    "npm could not install {CLAUDE_CODE}: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
                None
            }
            Err(e) => {
                crate::common::skip(&format!(
                    "npm is not available to install {CLAUDE_CODE}: {e}"
                ));
                None
            }
        }
    })
    .clone()
}

fn env_for(sb: &Sandbox, llm: &ScriptedLlm, bin: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("PICOGENT_PROVIDER", "claude-code".into()),
        ("PICOGENT_BASE_URL", llm.base_url(Wire::Anthropic)),
        ("PICOGENT_API_KEY", llm::API_KEY.into()),
        ("PICOGENT_CLAUDE_CODE_PATH", bin.display().to_string()),
        ("PICOGENT_MODEL", "sonnet".into()),
        ("IS_SANDBOX", "1".into()),
        ("HOME", sb.user_home.display().to_string()),
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("RUST_LOG", "warn".into()),
    ]
}

use crate::common::llm;

/// `picogent run --json` in session `session` on the Claude Code engine.
async fn claude_run(
    sb: &Sandbox,
    llm: &ScriptedLlm,
    bin: &Path,
    session: &str,
    prompt: &str,
) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["run", "--json", "--dir"])
        .arg(&sb.work)
        .args(["--session", session, prompt])
        .current_dir(sb.base())
        .env_clear()
        .envs(env_for(sb, llm, bin))
        .output()
        .await
        .unwrap()
}

/// The requests picogent's Claude Code child made that carried a conversation (not the
/// CLI's own side requests), as the scripted server saw them.
fn conversation_requests(llm: &ScriptedLlm) -> Vec<Value> {
    llm.requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| b.get("tools").is_some())
        .collect()
}

#[tokio::test]
async fn picogent_run_drives_claude_code_through_a_tool_call() {
    let Some(bin) = claude() else { return };
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool(
            "Bash",
            json!({"command": "echo made-by-claude > made.txt", "description": "make a file"}),
        ),
        text("Claude Code made the file."),
    ])
    .await;
    let out = claude_run(&sb, &llm, &bin, "cc1", "Make a file").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sb.read("made.txt"), "made-by-claude\n");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"started"));
    let call = events.iter().find(|e| e["type"] == "tool_call").unwrap();
    assert_eq!(call["summary"], "Bash: echo made-by-claude > made.txt");
    let result = events.iter().find(|e| e["type"] == "tool_result").unwrap();
    assert_eq!(result["is_error"], false);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "text_delta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Claude Code made the file.");
    assert_eq!(events.last().unwrap()["outcome"]["status"], "completed");
    // picogent's own session records the conversation and the Claude Code session id.
    let lines = session_lines(&sb.user_home.join(".picogent/sessions/cc1.jsonl"));
    assert!(lines
        .iter()
        .any(|l| l["customType"] == "claude_code_session"));
    assert!(lines.iter().any(|l| l["message"]["role"] == "toolResult"));
    // The system prompt got picogent's role appended, and the model alias was resolved.
    let first = &conversation_requests(&llm)[0];
    assert_eq!(first["model"], "claude-sonnet-4-6");
}

/// With `allowed_paths`, the whole Claude Code child runs under Landlock (which also
/// lets it skip permission prompts as root).
/// Agent mode on the Claude Code engine against `tracker`: the stop token and the
/// daemon's task.
fn claude_daemon(
    sb: &Sandbox,
    llm: &ScriptedLlm,
    tracker: &FakeTracker,
    bin: &Path,
) -> (
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<Result<(), picogent::tracker::daemon::DaemonError>>,
) {
    sb.write_config(
        llm,
        Wire::Anthropic,
        json!({"tracker_url": tracker.url(), "listen_port": 0, "provider": "claude-code",
        "claude_code_path": bin, "model": "sonnet", "allowed_paths": [sb.work],
        // The CLI (node) can take over 10 s to say its first line on a loaded machine.
        "step_timeout_sec": 60}),
    );
    let mut pairs: Vec<(String, String)> = env_for(sb, llm, bin)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    pairs.push(("AGENT_TOKEN".into(), TOKEN.into()));
    let config = picogent::config::Config::load(
        Some(&sb.home),
        &picogent::config::Env::from_pairs(pairs),
        &sb.base(),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let daemon = tokio::spawn(picogent::tracker::daemon::run(
        agent_from(config),
        fast_timing(),
        stop.clone(),
    ));
    (stop, daemon)
}

#[tokio::test]
async fn agent_mode_on_claude_code_reports_resumes_and_cancels() {
    let Some(bin) = claude() else { return };
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        text("Task done by Claude Code."),
        text("Chat answered in the same session."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let (stop, daemon) = claude_daemon(&sb, &llm, &tracker, &bin);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &json!({"id": "e1", "type": "task.assigned", "data": {"task": {"id": "t1", "title": "Do it"}}})).await;
    tracker.wait_status("t1", "review", 60).await;
    assert_eq!(
        tracker.timeline("t1"),
        vec![
            "status:in_progress",
            "comment:Task done by Claude Code.",
            "status:review"
        ]
    );
    tracker.deliver(&cb, &json!({"id": "e2", "type": "chat.message", "data": {"task_id": "t1", "message": {"id": "m1", "content": "And the chat?"}}})).await;
    tracker
        .wait_for(60, "the reply", |t| t.comments("t1").len() == 2)
        .await;
    assert_eq!(
        tracker.comments("t1")[1],
        json!({"content": "Chat answered in the same session.", "reply_to": "m1"})
    );
    // --resume: the second conversation carried the first one.
    let reqs = conversation_requests(&llm);
    let last = reqs.last().unwrap().to_string();
    assert!(
        last.contains("Task done by Claude Code.") && last.contains("And the chat?"),
        "{last}"
    );

    // Cancellation interrupts the CLI's process group.
    llm.push(tool(
        "Bash",
        json!({"command": "sleep 45", "description": "wait"}),
    ));
    tracker.deliver(&cb, &json!({"id": "e3", "type": "task.assigned", "data": {"task": {"id": "t2", "title": "Wait"}}})).await;
    tracker.wait_status("t2", "in_progress", 30).await;
    let mut waited = 0;
    while std::process::Command::new("pgrep")
        .args(["-f", "sleep 45"])
        .output()
        .unwrap()
        .stdout
        .is_empty()
        && waited < 300
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waited += 1;
    }
    tracker.deliver(&cb, &json!({"id": "e4", "type": "task.cancelled", "data": {"task_id": "t2", "reason": "not needed"}})).await;
    tracker
        .wait_for(30, "the cancellation comment", |t| {
            t.comments("t2").len() == 1
        })
        .await;
    assert!(tracker.comments("t2")[0]["content"]
        .as_str()
        .unwrap()
        .contains("cancelled (not needed)"));
    let left = std::process::Command::new("pgrep")
        .args(["-af", "sleep 45"])
        .output()
        .unwrap()
        .stdout;
    let ps = std::process::Command::new("ps")
        .args(["-eo", "pid,ppid,pgid,stat,cmd"])
        .output()
        .unwrap()
        .stdout;
    assert!(
        left.is_empty(),
        "the CLI's command outlived the cancellation: {}\n{}",
        String::from_utf8_lossy(&left),
        String::from_utf8_lossy(&ps)
            .lines()
            .filter(|l| l.contains("sleep") || l.contains("claude"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    stop.cancel();
    daemon.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_missing_claude_binary_is_a_clear_failure() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"provider": "claude-code", "claude_code_path": sb.base().join("no-such-claude")}),
    );
    let (_, outcome) = run(&agent, "hi", "cc-missing").await;
    assert_eq!(failure_kind(&outcome), picogent::agent::FailureKind::Engine);
    let err = failure(&outcome);
    assert!(
        err.contains("Claude Code CLI (`claude`) was not found")
            && err.contains("npm install -g @anthropic-ai/claude-code"),
        "{err}"
    );
}

/// A chat message that arrives while a Claude Code run is going cannot be passed to it
/// (the CLI takes no instructions mid-run): it waits for the run and is answered after
/// it, in the same session, never lost.
#[tokio::test]
async fn a_chat_message_during_a_claude_code_run_is_answered_after_it() {
    let Some(bin) = claude() else { return };
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        Turn::Stall(std::time::Duration::from_secs(3), "Task done.".into()),
        text("Answered after the run."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let (stop, daemon) = claude_daemon(&sb, &llm, &tracker, &bin);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &json!({"id": "e1", "type": "task.assigned", "data": {"task": {"id": "t1", "title": "Do it"}}})).await;
    tracker.wait_status("t1", "in_progress", 30).await;
    // The model call of the run is under way (stalled) when the message comes. Waited
    // for within a bound: a CLI that failed before its call fails the test, saying how.
    tracker
        .wait_for(60, "Claude Code's model call", |t| {
            !conversation_requests(&llm).is_empty()
                || t.timeline("t1").iter().any(|e| e == "status:blocked")
        })
        .await;
    assert!(
        !conversation_requests(&llm).is_empty(),
        "the run ended before its model call: {:?}",
        tracker.timeline("t1")
    );
    tracker.deliver(&cb, &json!({"id": "e2", "type": "chat.message", "data": {"task_id": "t1", "message": {"id": "m1", "content": "Also mind the tests"}}})).await;
    tracker
        .wait_for(60, "the reply", |t| t.comments("t1").len() == 2)
        .await;
    let comments = tracker.comments("t1");
    assert_eq!(comments[0]["content"], "Task done.");
    assert_eq!(
        comments[1],
        json!({"content": "Answered after the run.", "reply_to": "m1"})
    );
    let last = conversation_requests(&llm).last().unwrap().to_string();
    assert!(last.contains("Also mind the tests"), "{last}");
    stop.cancel();
    daemon.await.unwrap().unwrap();
}

/// A session write that fails ends a Claude Code run with the session's error, as it
/// ends a native run (the engine used to drop the failure and report success).
#[tokio::test]
async fn a_failed_session_write_fails_a_claude_code_run() {
    let Some(bin) = claude() else { return };
    let sb = Sandbox::new();
    let dir = sb.user_home.join(".picogent/sessions");
    let Some(_tmpfs) = Tmpfs::mount(&dir, "64k") else {
        skip("cannot mount a small tmpfs here (needs root)");
        return;
    };
    let big = format!(
        "A long answer. {}",
        "Words that fill the disk. ".repeat(8000)
    );
    let llm = ScriptedLlm::start(vec![text(&big)]).await;
    let out = claude_run(&sb, &llm, &bin, "ccfull", "Say a lot").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    let error = last["outcome"]["error"].as_str().unwrap_or_default();
    assert_eq!(last["outcome"]["status"], "failed", "{stdout}");
    assert!(
        error.contains("ccfull.jsonl") && error.contains("No space left"),
        "{error}"
    );
}
