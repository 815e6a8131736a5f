//! A person's labels and ratings sent while a run holds its session: the run writes
//! them at its next boundary (even paused) and they are acknowledged then; `history`
//! shows them again after a reload.

use serde_json::json;

use super::chat::{connect, next, next_of, send, start, until_done};
use crate::common::*;

#[tokio::test]
async fn a_label_sent_during_a_paused_run_is_written_at_once_and_history_shows_it() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "g.txt", "content": "wrong\n"})),
        tool("bash", json!({"command": "sleep 0.3"})),
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
    let rows = picogent::session::branches::export(&s, "annotations").unwrap();
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
