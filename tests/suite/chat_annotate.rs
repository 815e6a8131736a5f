//! A person's labels and ratings sent while a run holds its session: the run writes
//! them at its next boundary (even paused) and they are acknowledged then; `history`
//! shows them again after a reload.

use serde_json::json;

use crate::common::chat::{connect, next, next_any, next_of, send, settled, start, until_done};
use crate::common::*;

#[tokio::test]
async fn a_label_sent_during_a_paused_run_is_written_at_once_and_history_shows_it() {
    let sb = Sandbox::new();
    let gate = sb.gate("label");
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "g.txt", "content": "wrong\n"})),
        tool("bash", json!({"command": gate.command()})),
        text("all done"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "a1", "content": "make g", "sessionId": "live-ann", "keepAlive": true}),
    )
    .await;
    let mut write_call = None;
    loop {
        let f = next(&mut ws).await;
        if f["type"] == "tool_use" && f["tool"] == "write" {
            write_call = f["callId"].as_str().map(str::to_string);
        }
        if f["type"] == "tool_use" && f["tool"] == "bash" {
            send(&mut ws, json!({"type": "pause", "id": "a1"})).await;
            settled(&mut ws).await;
            gate.open();
        }
        if f["type"] == "state" && f["content"] == "paused" {
            break;
        }
    }
    let call = write_call.unwrap();
    send(&mut ws, json!({"type": "label", "id": "l1", "sessionId": "live-ann", "callId": call, "label": "incorrect", "note": "wrong text"})).await;
    let f = next_of(&mut ws, "annotated").await;
    assert_eq!(
        (f["id"].as_str(), f["content"].as_str()),
        (Some("l1"), Some("recorded"))
    );
    // Written while the run is still paused: the session file has it now.
    let s = picogent::session::SessionStore::new(sb.home.join("sessions"))
        .snapshot("live-ann")
        .unwrap();
    let rows = picogent::session::branches::export(&s, "annotations".parse().unwrap());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["label"], "incorrect");

    send(&mut ws, json!({"type": "resume", "id": "a1"})).await;
    until_done(&mut ws, "a1").await;
    send(
        &mut ws,
        json!({"type": "rate", "sessionId": "live-ann", "rating": "partial", "note": "half"}),
    )
    .await;
    next_of(&mut ws, "annotated").await;

    send(&mut ws, json!({"type": "history", "sessionId": "live-ann"})).await;
    let h = next_of(&mut ws, "history").await;
    let items = h["content"]["items"].as_array().unwrap();
    let label = items.iter().find(|i| i["type"] == "label").unwrap();
    assert_eq!(
        (
            label["callId"].as_str(),
            label["label"].as_str(),
            label["note"].as_str()
        ),
        (Some(call.as_str()), Some("incorrect"), Some("wrong text"))
    );
    let rating = items.last().unwrap();
    assert_eq!(
        (
            rating["type"].as_str(),
            rating["rating"].as_str(),
            rating["note"].as_str()
        ),
        (Some("rating"), Some("partial"), Some("half")),
        "{h}"
    );
}

/// The session's `session_info` names, oldest first, read from the file as pi would.
fn names_in_file(sb: &Sandbox, session: &str) -> Vec<Option<String>> {
    let text =
        std::fs::read_to_string(sb.home.join("sessions").join(format!("{session}.jsonl"))).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "session_info")
        .map(|e| e["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_session_is_named_in_its_file_as_pi_names_it_even_while_a_run_holds_it() {
    let sb = Sandbox::new();
    let gate = sb.gate("rename");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("all done"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "n1", "content": "first prompt", "sessionId": "named", "keepAlive": true}),
    )
    .await;
    loop {
        if next(&mut ws).await["type"] == "tool_use" {
            break;
        }
    }
    // While the run holds the session it writes the name at its next boundary.
    send(
        &mut ws,
        json!({"type": "rename", "id": "r1", "sessionId": "named", "name": "  Fix\nthe   parser "}),
    )
    .await;
    settled(&mut ws).await;
    gate.open();
    // The rename's answer and the run's end come in either order: the rename is
    // answered by its own task, while the run goes on to its last turn.
    let (mut renamed, mut done) = (None, false);
    while renamed.is_none() || !done {
        let f = next_any(&mut ws).await;
        if f["type"] == "renamed" {
            renamed = Some(f);
        } else if f["id"] == "n1" && f["type"] == "done" {
            done = true;
        }
    }
    let f = renamed.unwrap_or_default();
    assert_eq!(
        (f["id"].as_str(), f["name"].as_str()),
        (Some("r1"), Some("Fix the parser"))
    );
    assert_eq!(
        names_in_file(&sb, "named"),
        [Some("Fix the parser".to_string())]
    );

    send(&mut ws, json!({"type": "sessions"})).await;
    let s = next_of(&mut ws, "sessions").await;
    assert_eq!(s["content"][0]["name"], "Fix the parser", "{s}");
    assert_eq!(s["content"][0]["title"], "first prompt");

    // Too long: refused naming the field; an unknown session: refused; nothing written.
    let long = "x".repeat(201);
    send(
        &mut ws,
        json!({"type": "rename", "id": "r2", "sessionId": "named", "name": long}),
    )
    .await;
    let e = next_of(&mut ws, "error").await;
    assert!(e["content"].as_str().unwrap().contains("`name`"), "{e}");
    send(
        &mut ws,
        json!({"type": "rename", "id": "r3", "sessionId": "nosuch", "name": "x"}),
    )
    .await;
    assert_eq!(next_of(&mut ws, "error").await["id"], "r3");
    send(
        &mut ws,
        json!({"type": "rename", "id": "r4", "sessionId": "named"}),
    )
    .await;
    let e = next_of(&mut ws, "error").await;
    assert!(e["content"].as_str().unwrap().contains("name"), "{e}");

    // An empty name clears it; the newest entry counts, including one pi wrote.
    send(
        &mut ws,
        json!({"type": "rename", "id": "r5", "sessionId": "named", "name": " "}),
    )
    .await;
    assert_eq!(
        next_of(&mut ws, "renamed").await["name"],
        serde_json::Value::Null
    );
    send(&mut ws, json!({"type": "sessions"})).await;
    let s = next_of(&mut ws, "sessions").await;
    assert!(s["content"][0].get("name").is_none(), "{s}");
    let path = sb.home.join("sessions").join("named.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    text.push_str(
        &json!({"type": "session_info", "id": "a1b2c3d4", "parentId": last["id"],
            "timestamp": "2026-12-01T10:00:00.000Z", "name": "Named in pi"})
        .to_string(),
    );
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    send(&mut ws, json!({"type": "sessions"})).await;
    let s = next_of(&mut ws, "sessions").await;
    assert_eq!(s["content"][0]["name"], "Named in pi", "{s}");
    assert_eq!(
        names_in_file(&sb, "named"),
        [
            Some("Fix the parser".to_string()),
            None,
            Some("Named in pi".to_string())
        ]
    );
}
