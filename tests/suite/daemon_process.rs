//! Agent mode as a real child process: crash recovery and graceful shutdown.

use std::time::Duration;

use serde_json::json;

use crate::common::tracker::FakeTracker;
use crate::common::*;

fn config(sb: &Sandbox, llm: &ScriptedLlm, tracker: &FakeTracker) {
    sb.write_config(
        llm,
        Wire::Anthropic,
        json!({"tracker_url": tracker.url(), "listen_port": 0}),
    );
}

fn task(event: &str, id: &str) -> serde_json::Value {
    json!({"id": event, "type": "task.assigned", "data": {"task": {"id": id, "title": "Survive a crash"}}})
}

/// A daemon process working on task `id` (its model asked for `sleep 30`): the agent
/// folder, the model, the tracker, the process and the events URL.
async fn running_task(
    event: &str,
    id: &str,
) -> (
    Sandbox,
    ScriptedLlm,
    FakeTracker,
    tokio::process::Child,
    String,
) {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool(
        "bash",
        json!({"command": "touch .started && sleep 30"}),
    )])
    .await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker);
    let child = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    assert_eq!(tracker.deliver(&cb, &task(event, id)).await.0, 202);
    tracker.wait_status(id, "in_progress", 20).await;
    // The task's command is running.
    sb.wait_file(".started").await;
    (sb, llm, tracker, child, cb)
}

#[tokio::test]
async fn a_killed_daemon_resumes_its_task_after_restart() {
    let (sb, llm, tracker, mut child, _) = running_task("evt_k", "t_k").await;
    child.kill().await.unwrap(); // SIGKILL: no chance to clean up

    llm.push(text("Resumed and finished."));
    let mut child = restarted(&tracker, || spawn_daemon(&sb)).await;
    tracker.wait_status("t_k", "review", 30).await;
    assert_eq!(
        tracker.timeline("t_k"),
        vec![
            "status:in_progress",
            "status:in_progress",
            "comment:Resumed and finished.",
            "status:review"
        ]
    );
    // The resumed run continued the task's session: the interrupted call has a result,
    // and the model was told what happened.
    let body = &llm.requests()[1].body;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"][0]["type"], "tool_use");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    let last = last_text(body);
    assert!(
        last.contains("restarted") && last.contains("Survive a crash"),
        "{last}"
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn sigterm_lets_the_running_task_finish_then_exits_0() {
    let sb = Sandbox::new();
    // The model call is under way until the drain has been seen.
    let gate = ModelGate::new();
    let llm = ScriptedLlm::start(vec![Turn::Held(
        gate.clone(),
        "Finished during the drain.".into(),
    )])
    .await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker);
    let mut child = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &task("evt_t", "t_t")).await;
    llm.wait_requests(1).await;
    let pid = child.id().unwrap() as i32;
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    // Draining: the health check says so (503, for a load balancer), and no new
    // work is taken.
    wait_draining(&cb).await;
    let (status, _) = tracker.deliver(&cb, &task("evt_late", "t_late")).await;
    assert_eq!(status, 503);
    gate.open();
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    let log = std::fs::read_to_string(sb.base().join("daemon.log")).unwrap();
    assert_eq!(exit.code(), Some(0), "{exit:?} {log}");
    assert_eq!(
        tracker.timeline("t_t"),
        vec![
            "status:in_progress",
            "comment:Finished during the drain.",
            "status:review"
        ]
    );
    assert!(
        log.contains("picogent agent mode starting") && log.contains("slug=test"),
        "{log}"
    );
}

/// A chat message passed to a running task is not done until the run has it in its
/// session: a crash before that replays it after the restart, and it is answered.
#[tokio::test]
async fn a_chat_message_survives_a_crash_before_the_run_reads_it() {
    let (sb, llm, tracker, mut child, cb) = running_task("evt_t", "t_m").await;
    let chat = json!({"id": "evt_m", "type": "chat.message", "data": {"task_id": "t_m",
        "message": {"id": "m_crash", "content": "Please also update the changelog"}}});
    assert_eq!(tracker.deliver(&cb, &chat).await.0, 202);
    child.kill().await.unwrap(); // before the run reaches a step boundary

    llm.push(text("Resumed and finished."));
    llm.push(text("The changelog is updated too."));
    let _child = spawn_daemon(&sb);
    tracker
        .wait_for(40, "the reply to the message", |t| {
            t.comments("t_m").iter().any(|c| c["reply_to"] == "m_crash")
        })
        .await;
    let asked = llm.requests().iter().any(|r| {
        r.body
            .to_string()
            .contains("Please also update the changelog")
    });
    assert!(asked, "the message never reached the model");
    assert!(
        !tracker
            .comments("t_m")
            .iter()
            .any(|c| c["content"].as_str().unwrap_or("").starts_with("Noted")),
        "it was acknowledged before it was safe"
    );
}

/// Two daemons on one agent directory would both accept every event and report it
/// twice: the second exits at start, naming the first.
#[tokio::test]
async fn a_second_daemon_on_the_same_agent_directory_exits_naming_the_first() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker);
    let first = spawn_daemon(&sb);
    tracker.callback_url().await;
    let second = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .arg(&sb.home)
        .current_dir(sb.base())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sb.user_home)
        .env("AGENT_TOKEN", crate::common::tracker::TOKEN)
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .output();
    let second = tokio::time::timeout(Duration::from_secs(20), second)
        .await
        .expect("the second daemon kept running")
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    let pid = first.id().unwrap().to_string();
    assert!(
        stderr.contains("already running") && stderr.contains(&format!("pid {pid}")),
        "{stderr}"
    );
    assert_eq!(tracker.ok_calls("/api/v1/agents/register").len(), 1);
}

/// Waits until the daemon behind `cb` says it is draining.
async fn wait_draining(cb: &str) {
    let health = cb.replace("/events", "/healthz");
    for _ in 0..500 {
        let r = reqwest::get(&health).await.unwrap();
        let body: serde_json::Value = r.json().await.unwrap_or_default();
        if body["status"] == "draining" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the daemon never said it was draining");
}

/// A second SIGTERM during the drain quits at once, with the status a SIGTERM stands
/// for (143), as `picogent run` does.
#[tokio::test]
async fn a_second_sigterm_quits_at_once_with_143() {
    let sb = Sandbox::new();
    let gate = ModelGate::new();
    let llm = ScriptedLlm::start(vec![Turn::Held(gate, "Never finished.".into())]).await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker);
    let mut child = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &task("evt_2", "t_2")).await;
    llm.wait_requests(1).await;
    let pid = child.id().unwrap() as i32;
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    wait_draining(&cb).await;
    // SAFETY: as above.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.code(), Some(143), "{exit:?}");
}
