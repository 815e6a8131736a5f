//! Disks that fill at the wrong moment: while a task starts (its worktree, its session,
//! its state) the task waits for room and then runs, as one that arrives while the disk
//! is full does; a chat prompt on a new session leaves no session that cannot be
//! loaded.

use serde_json::{json, Value};

use crate::common::slow_git::SlowGit;
use crate::common::tracker::FakeTracker;
use crate::common::*;

fn assigned(event: &str, task: &str, title: &str) -> Value {
    json!({"id": event, "type": "task.assigned",
           "data": {"task": {"id": task, "title": title, "description": "Do it.", "status": "todo"}}})
}

/// Agent mode with worktrees, `disk` (a folder of the agent's home) a small tmpfs that
/// fills while `git worktree add` is about to run for the task: the task waits for
/// room (`/healthz` says so) instead of failing, and runs once when there is room.
async fn filled_while_the_task_starts(disk: &str) {
    let sb = Sandbox::new();
    sb.write("shared.txt", "original\n");
    git(&sb.work, &["init", "-q", "-b", "main"]);
    git(&sb.work, &["add", "."]);
    git(&sb.work, &["commit", "-q", "-m", "first"]);
    let dir = sb.home.join(disk);
    let Some(_tmpfs) = Tmpfs::mount(&dir, "512k") else {
        skip("cannot mount a small tmpfs here (needs root)");
        return;
    };
    let llm = ScriptedLlm::start(vec![text("Done.")]).await;
    let tracker = FakeTracker::start().await;
    let cfg = json!({"tracker_url": tracker.url(), "listen_port": 0, "allowed_paths": [sb.work]});
    sb.write_config(&llm, Wire::Anthropic, cfg);
    let slow = SlowGit::new(&sb);
    slow.pause_at("worktree", ":");
    let mut daemon = spawn_daemon_with_path(&sb, &slow.path());
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "d1", "Start")).await;
    slow.reached().await;
    // The room was there when the task began; now it is gone.
    let filler = fill_disk(&dir);
    slow.go();
    let health = cb.replace("/events", "/healthz");
    let degraded = degraded_with(&health, "disk_full").await;
    assert!(
        degraded["reason"]
            .as_str()
            .unwrap_or("")
            .contains("wait for disk space"),
        "{degraded}"
    );
    assert_eq!(tracker.timeline("d1"), vec!["status:in_progress"]);
    std::fs::remove_file(&filler).unwrap();
    tracker.wait_status("d1", "review", 60).await;
    let timeline = tracker.timeline("d1");
    assert_eq!(
        timeline.first().map(String::as_str),
        Some("status:in_progress")
    );
    assert!(
        timeline.iter().all(|t| !t.contains("blocked")),
        "{timeline:?}"
    );
    let comment = tracker.comments("d1")[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(comment.starts_with("Done."), "{comment}");
    assert!(comment.contains("branch `picogent/d1`"), "{comment}");
    assert_eq!(llm.requests().len(), 1, "the run was repeated");
    daemon.kill().await.unwrap();
}

#[tokio::test]
async fn a_worktree_disk_that_fills_while_the_task_starts_makes_it_wait() {
    filled_while_the_task_starts("worktrees").await;
}

#[tokio::test]
async fn a_sessions_disk_that_fills_while_the_task_starts_makes_it_wait() {
    filled_while_the_task_starts("sessions").await;
}

#[tokio::test]
async fn a_state_disk_that_fills_while_the_task_starts_makes_it_wait() {
    filled_while_the_task_starts("state").await;
}

/// A chat prompt on a new session while the sessions disk is full gets an error that
/// says so and leaves no session file that cannot be loaded: once there is room, a
/// prompt in that session runs and the session loads.
#[tokio::test]
async fn a_chat_prompt_on_a_full_disk_leaves_no_session_that_cannot_be_continued() {
    use crate::common::chat::*;
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Here now.")]).await;
    let config = sb.config(&llm, Wire::Anthropic, json!({}));
    let dir = config.sessions_dir();
    let Some(_tmpfs) = Tmpfs::mount(&dir, "256k") else {
        skip("cannot mount a small tmpfs here (needs root)");
        return;
    };
    let c = start(config).await;
    let mut ws = connect(&c).await;
    let filler = fill_disk(&dir);
    send(
        &mut ws,
        json!({"id": "m1", "content": "Hello", "sessionId": "s-full"}),
    )
    .await;
    let frames = until_done(&mut ws, "m1").await;
    let error = frames
        .iter()
        .find(|f| f["type"] == "error")
        .unwrap_or_else(|| panic!("no error: {frames:?}"));
    let said = error["content"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("the disk is full") && said.contains("No space left on device"),
        "{error}"
    );
    let file = dir.join("s-full.jsonl");
    assert!(
        !file.exists() || !std::fs::read(&file).unwrap().is_empty(),
        "an empty session file was left"
    );
    std::fs::remove_file(&filler).unwrap();
    send(
        &mut ws,
        json!({"id": "m2", "content": "Again", "sessionId": "s-full"}),
    )
    .await;
    let frames = until_done(&mut ws, "m2").await;
    assert!(frames.iter().all(|f| f["type"] != "error"), "{frames:?}");
    let text: String = frames
        .iter()
        .filter(|f| f["type"] == "text")
        .filter_map(|f| f["content"].as_str())
        .collect();
    assert_eq!(text, "Here now.");
    let lines = session_lines(&file);
    assert_eq!(lines[0]["type"], "session", "{lines:?}");
}
