//! The chat server killed with -9 mid-answer: the next server marks the run interrupted
//! in its session, says so to a page still following it by `runId`, and `history` ends
//! with it, so the page can offer to continue.

use std::time::Duration;

use serde_json::json;

use crate::common::chat::{connect_port, next_of, send, server_process};
use crate::common::*;

#[tokio::test]
async fn a_run_killed_with_the_server_is_marked_interrupted_and_can_be_continued() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        Turn::Stall(Duration::from_secs(300), "Never seen".into()),
        text("The rest."),
    ])
    .await;
    // The model never gives up on its stalled answer before the kill.
    sb.write_config(&llm, Wire::Anthropic, json!({"step_timeout_sec": 600}));
    let port = free_port();
    let mut first = server_process(&sb, port, &std::env::var("PATH").unwrap_or_default());
    let mut ws = connect_port(port).await;
    send(
        &mut ws,
        json!({"id": "m1", "content": "Write it all", "sessionId": "s-crash", "keepAlive": true}),
    )
    .await;
    let first_frame = next_of(&mut ws, "checkpoint").await;
    let run_id = first_frame["runId"]
        .as_str()
        .expect("a keepAlive run has a runId")
        .to_string();
    llm.wait_requests(1).await;
    // Killed while the model is still answering.
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let port = free_port();
    let _second = server_process(&sb, port, &std::env::var("PATH").unwrap_or_default());
    let mut ws = connect_port(port).await;
    // The page, reconnecting, asks for the run it was following.
    send(
        &mut ws,
        json!({"type": "subscribe", "runId": run_id, "after": 1}),
    )
    .await;
    let error = next_of(&mut ws, "error").await;
    assert_eq!(error["id"], run_id.as_str(), "{error}");
    assert!(
        error["content"]
            .as_str()
            .unwrap()
            .starts_with("interrupted"),
        "{error}"
    );
    let done = next_of(&mut ws, "done").await;
    assert_eq!(done["id"], run_id.as_str(), "{done}");
    // History ends with the interruption, after what the run wrote.
    send(&mut ws, json!({"type": "history", "sessionId": "s-crash"})).await;
    let h = next_of(&mut ws, "history").await;
    let items = h["content"]["items"].as_array().unwrap();
    assert_eq!(
        items[0],
        json!({"type": "user", "content": "Write it all"}),
        "{h}"
    );
    let last = items.last().unwrap();
    assert_eq!(last["type"], "interrupted", "{h}");
    assert_eq!(last["runId"], run_id.as_str(), "{h}");
    // Continuing it is a prompt in the same session, with what was done before.
    send(
        &mut ws,
        json!({"id": "m2", "content": "Continue where you left off.", "sessionId": "s-crash"}),
    )
    .await;
    let t = next_of(&mut ws, "text").await;
    assert!(t["content"].as_str().unwrap().starts_with("The"), "{t}");
    let reqs = llm.requests();
    let body = reqs.last().unwrap().body.to_string();
    assert!(body.contains("Write it all"), "{body:.400}");
    // Marked once: the run that continued it adds no second mark.
    send(&mut ws, json!({"type": "history", "sessionId": "s-crash"})).await;
    let h = next_of(&mut ws, "history").await;
    let marks = h["content"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "interrupted")
        .count();
    assert_eq!(marks, 1, "{h}");
}

/// A second server on the same agent folder never takes the first one's live run for a
/// leftover; a run the server's own stop cut short is marked at the next start.
#[tokio::test]
async fn a_live_run_is_not_a_leftover_and_a_stopped_one_is() {
    use crate::common::chat::{connect as chat_connect, start};
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Stall(
        Duration::from_secs(300),
        "Never seen".into(),
    )])
    .await;
    // A short drain: the stopped server cancels its run after a second.
    let cfg = || {
        sb.config(
            &llm,
            Wire::Anthropic,
            json!({"step_timeout_sec": 600, "shutdown_grace_sec": 1}),
        )
    };
    let first = start(cfg()).await;
    let mut ws = chat_connect(&first).await;
    send(
        &mut ws,
        json!({"id": "m1", "content": "Long one", "sessionId": "s-two", "keepAlive": true}),
    )
    .await;
    llm.wait_requests(1).await;
    send(&mut ws, json!({"type": "history", "sessionId": "s-two"})).await;
    let h = next_of(&mut ws, "history").await;
    let run_id = h["content"]["running"][0]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no running run: {h}"))
        .to_string();
    // Another server on the same folder while the run goes.
    let second = start(cfg()).await;
    let mut other = chat_connect(&second).await;
    send(&mut other, json!({"type": "history", "sessionId": "s-two"})).await;
    let h = next_of(&mut other, "history").await;
    assert!(
        !h.to_string().contains("interrupted"),
        "a live run was marked interrupted: {h}"
    );
    drop(other);
    drop(second);
    // The first server stops mid-run: the next start marks the run.
    drop(ws);
    drop(first);
    let mut third = None;
    for _ in 0..100 {
        let c = start(cfg()).await;
        let mut ws = chat_connect(&c).await;
        send(&mut ws, json!({"type": "history", "sessionId": "s-two"})).await;
        let h = next_of(&mut ws, "history").await;
        let items = h["content"]["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if items.last().is_some_and(|i| i["type"] == "interrupted") {
            assert_eq!(items.last().unwrap()["runId"], run_id.as_str(), "{h}");
            third = Some(c);
            break;
        }
        // The stopped run's task may not have ended yet: its file is still locked.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        third.is_some(),
        "the stopped run was never marked interrupted"
    );
}

/// Stopping the chat server drains it: a running request finishes (its page still
/// follows it), a new prompt is refused with a reason, then the server ends.
#[tokio::test]
async fn a_stop_lets_running_requests_finish_and_refuses_new_ones() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Stall(
        Duration::from_millis(1500),
        "Finished during the drain.".into(),
    )])
    .await;
    let config = sb.config(&llm, Wire::Anthropic, json!({"shutdown_grace_sec": 20}));
    let listener = picogent::chat::bind("127.0.0.1", 0, None).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(picogent::chat::serve(
        agent_from(config),
        listener,
        stop.clone(),
    ));
    let mut ws = connect_port(port).await;
    send(
        &mut ws,
        json!({"id": "d1", "content": "Take your time", "sessionId": "drain", "keepAlive": true}),
    )
    .await;
    llm.wait_requests(1).await;
    stop.cancel();
    send(
        &mut ws,
        json!({"id": "d2", "content": "One more", "sessionId": "other"}),
    )
    .await;
    let refused = next_of(&mut ws, "error").await;
    assert_eq!(refused["id"], "d2", "{refused}");
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{refused}"
    );
    let done = loop {
        let f = next_of(&mut ws, "done").await;
        if f["id"] == "d1" {
            break f;
        }
    };
    assert_eq!(done["id"], "d1");
    let session =
        std::fs::read_to_string(sb.home.join("sessions").join("drain.jsonl")).unwrap_or_default();
    assert!(
        session.contains("Finished during the drain."),
        "{session:.400}"
    );
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server ended after its drain")
        .unwrap()
        .unwrap();
    // Finished in the grace: nothing is left to be marked interrupted.
    let left = std::fs::read_dir(sb.home.join("state/chat-runs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0);
}

/// A run noted in the layout before the runs' log (a file of its own per run) by a
/// server that crashed before an upgrade is still marked interrupted by the new one.
#[tokio::test]
async fn a_run_file_from_before_the_log_is_still_marked_interrupted() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Done.")]).await;
    sb.write_config(&llm, Wire::Anthropic, json!({}));
    let path = std::env::var("PATH").unwrap_or_default();
    let port = free_port();
    let mut first = server_process(&sb, port, &path);
    let mut ws = connect_port(port).await;
    send(
        &mut ws,
        json!({"id": "m1", "content": "Start", "sessionId": "s-old"}),
    )
    .await;
    next_of(&mut ws, "done").await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let runs = sb.home.join("state/chat-runs");
    std::fs::create_dir_all(&runs).unwrap();
    let mark = json!({"session": "s-old", "run": "run-old", "prompt": "Go on",
        "started": "2026-12-01T00:00:00.000Z"});
    std::fs::write(runs.join("0123456789ab.json"), mark.to_string()).unwrap();
    let port = free_port();
    let _second = server_process(&sb, port, &path);
    let mut ws = connect_port(port).await;
    send(
        &mut ws,
        json!({"type": "subscribe", "runId": "run-old", "after": 0}),
    )
    .await;
    let error = next_of(&mut ws, "error").await;
    assert!(
        error["content"]
            .as_str()
            .unwrap()
            .starts_with("interrupted"),
        "{error}"
    );
    send(&mut ws, json!({"type": "history", "sessionId": "s-old"})).await;
    let h = next_of(&mut ws, "history").await;
    let last = h["content"]["items"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["type"], "interrupted", "{h}");
    assert!(
        !runs.join("0123456789ab.json").exists(),
        "the old file stays"
    );
}
