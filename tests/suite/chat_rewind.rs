//! Rollback and branch of a chat session after its run has ended, addressed by
//! `sessionId`, with the preview of what a rollback changes: a real folder, real
//! checkpoints, and the next prompt's model request read back from the scripted model.

use serde_json::{json, Value};

use crate::common::chat::{connect, next, next_of, send, start, until_done};
use crate::common::*;

/// A finished run in session `rw`: f.txt written A (step 1), new.txt made (step 2),
/// f.txt rewritten B (step 3), then the answer.
fn three_steps() -> Vec<Turn> {
    vec![
        tool("write", json!({"path": "f.txt", "content": "A\n"})),
        tool("write", json!({"path": "new.txt", "content": "N\n"})),
        tool("write", json!({"path": "f.txt", "content": "B\n"})),
        text("done with B"),
    ]
}

/// The answer the frames streamed.
fn answer(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "text")
        .filter_map(|f| f["content"].as_str())
        .collect()
}

fn file_rows(preview: &Value) -> Vec<(String, String, Value, Value)> {
    preview["content"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["status"].as_str().unwrap().to_string(),
                f["added"].clone(),
                f["removed"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_finished_run_rolls_back_and_the_next_message_continues_from_the_checkpoint() {
    let sb = Sandbox::new();
    sb.write("keep.txt", "a person's file\n");
    let mut turns = three_steps();
    turns.push(text("continued from A"));
    let llm = ScriptedLlm::start(turns).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({"checkpoints": true}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "r1", "content": "make f", "sessionId": "rw"}),
    )
    .await;
    until_done(&mut ws, "r1").await;
    assert_eq!(sb.read("f.txt"), "B\n");
    assert_eq!(sb.read("new.txt"), "N\n");

    // The preview lists what a rollback to step 1 puts back, and changes nothing.
    send(
        &mut ws,
        json!({"type": "preview", "id": "p", "sessionId": "rw", "step": 1}),
    )
    .await;
    let p = next_of(&mut ws, "preview").await;
    assert_eq!((p["id"].as_str(), p["step"].as_u64()), (Some("p"), Some(1)));
    assert_eq!(
        file_rows(&p),
        vec![
            ("f.txt".into(), "modified".into(), json!(1), json!(1)),
            ("new.txt".into(), "added".into(), json!(1), json!(0)),
        ],
        "{p}"
    );
    let diff = p["content"]["diff"].as_str().unwrap();
    assert!(diff.contains("-A") && diff.contains("+B"), "{diff}");
    assert_eq!(sb.read("f.txt"), "B\n");

    send(
        &mut ws,
        json!({"type": "rollback", "id": "rb", "sessionId": "rw", "step": 1}),
    )
    .await;
    let f = next(&mut ws).await;
    assert_eq!(
        (f["type"].as_str(), f["id"].as_str(), f["step"].as_u64()),
        (Some("rollback"), Some("rb"), Some(1)),
        "{f}"
    );
    assert_eq!(sb.read("f.txt"), "A\n");
    assert!(!sb.work.join("new.txt").exists());
    assert_eq!(sb.read("keep.txt"), "a person's file\n");
    // The abandoned tip stays reachable.
    let refs = std::process::Command::new(crate::common::git_program())
        .arg("--git-dir")
        .arg(sb.home.join("state/checkpoints/rw.git"))
        .args(["for-each-ref", "refs/picogent/abandoned/"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&refs.stdout).lines().count(), 1);

    // The next message continues from the checkpoint: the model sees the first write,
    // not what came after it.
    send(
        &mut ws,
        json!({"id": "r2", "content": "go on", "sessionId": "rw"}),
    )
    .await;
    let frames = until_done(&mut ws, "r2").await;
    assert_eq!(answer(&frames), "continued from A");
    let body = llm.requests().last().unwrap().body.clone();
    let sent = body["messages"].to_string();
    assert!(sent.contains("f.txt") && sent.contains("A\\n"), "{sent}");
    assert!(!sent.contains("new.txt"), "{sent}");
    assert!(!sent.contains("done with B"), "{sent}");
    assert_eq!(last_text(&body), "go on");

    // The history shows what the rollback undid before it (the page greys it, as it
    // did live), then the path from the checkpoint on.
    send(&mut ws, json!({"type": "history", "sessionId": "rw"})).await;
    let h = next_of(&mut ws, "history").await;
    let items = h["content"]["items"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    let at = kinds.iter().position(|k| *k == "rollback").unwrap();
    assert_eq!(kinds[at + 1], "user", "{kinds:?}");
    let undone = items
        .iter()
        .position(|i| i["type"] == "text" && i["content"] == "done with B")
        .expect("the undone answer is in the history");
    assert!(undone < at, "{kinds:?}");
    assert_eq!(
        items
            .iter()
            .filter(|i| i["content"] == "done with B")
            .count(),
        1,
        "{h}"
    );
}

#[tokio::test]
async fn a_branch_after_the_run_names_the_new_path_and_starts_a_request_there() {
    let sb = Sandbox::new();
    let mut turns = three_steps();
    turns.push(tool("write", json!({"path": "f.txt", "content": "C\n"})));
    turns.push(text("done with C"));
    let llm = ScriptedLlm::start(turns).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({"checkpoints": true}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "r1", "content": "make f", "sessionId": "br"}),
    )
    .await;
    until_done(&mut ws, "r1").await;
    send(&mut ws, json!({"type": "branch", "id": "b2", "sessionId": "br", "step": 1, "name": "try-c", "content": "Use C instead", "keepAlive": true})).await;
    let f = next(&mut ws).await;
    assert_eq!(
        (f["type"].as_str(), f["id"].as_str()),
        (Some("rollback"), Some("b2")),
        "{f}"
    );
    let frames = until_done(&mut ws, "b2").await;
    assert_eq!(answer(&frames), "done with C");
    assert!(frames.iter().all(|f| f["sessionId"] == "br"));
    assert!(frames.iter().any(|f| f["runId"].is_string()));
    assert_eq!(sb.read("f.txt"), "C\n");
    assert!(!sb.work.join("new.txt").exists());
    let sent = llm.requests().last().unwrap().body["messages"].to_string();
    assert!(sent.contains("Use C instead") && !sent.contains("new.txt"));

    send(&mut ws, json!({"type": "branches", "sessionId": "br"})).await;
    let list = next_of(&mut ws, "branches").await;
    let names: Vec<&str> = list["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["main", "try-c"], "{list}");
}

#[tokio::test]
async fn rollback_by_session_is_refused_while_a_run_is_active_or_without_the_checkpoint() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "f.txt", "content": "A\n"})),
        tool("bash", json!({"command": "sleep 30"})),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({"checkpoints": true}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "r1", "content": "work", "sessionId": "busy", "keepAlive": true}),
    )
    .await;
    loop {
        let f = next(&mut ws).await;
        if f["type"] == "tool_use" && f["content"] == "Bash: sleep 30" {
            break;
        }
    }
    for frame in [
        json!({"type": "rollback", "id": "x", "sessionId": "busy", "step": 1}),
        json!({"type": "branch", "id": "x", "sessionId": "busy", "step": 1, "content": "y"}),
    ] {
        let starts_request = frame["content"].is_string();
        send(&mut ws, frame).await;
        let f = next_of(&mut ws, "error").await;
        let msg = f["content"].as_str().unwrap();
        assert!(
            f["id"] == "x" && msg.contains("running") && msg.contains("runId"),
            "{f}"
        );
        // A refused branch that would have started a request ends it.
        if starts_request {
            let f = next(&mut ws).await;
            assert_eq!(
                (f["id"].as_str(), f["type"].as_str()),
                (Some("x"), Some("done"))
            );
        }
    }
    assert_eq!(sb.read("f.txt"), "A\n");
    send(&mut ws, json!({"type": "cancel", "id": "r1"})).await;
    until_done(&mut ws, "r1").await;

    for frame in [
        json!({"type": "rollback", "id": "x", "sessionId": "busy", "step": 99}),
        json!({"type": "preview", "id": "x", "sessionId": "busy", "step": 99}),
    ] {
        send(&mut ws, frame).await;
        let f = next_of(&mut ws, "error").await;
        assert!(
            f["content"].as_str().unwrap().contains("no checkpoint 99"),
            "{f}"
        );
    }
    send(
        &mut ws,
        json!({"type": "rollback", "id": "x", "sessionId": "nope", "step": 1}),
    )
    .await;
    assert_eq!(next_of(&mut ws, "error").await["id"], "x");
}

#[tokio::test]
async fn an_engine_without_checkpoints_refuses_rollback_after_a_run_with_a_reason() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let c = start(sb.config(
        &llm,
        Wire::Anthropic,
        json!({"provider": "claude-code", "claude_code_path": "/bin/false"}),
    ))
    .await;
    let mut ws = connect(&c).await;
    for kind in ["rollback", "preview"] {
        send(
            &mut ws,
            json!({"type": kind, "id": "x", "sessionId": "cc", "step": 1}),
        )
        .await;
        let f = next_of(&mut ws, "error").await;
        let msg = f["content"].as_str().unwrap();
        assert!(
            msg.contains("claude-code") && msg.contains("no checkpoints"),
            "{f}"
        );
    }
}
