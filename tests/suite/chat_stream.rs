//! A running command's output reaches the chat page as it comes (`tool_progress`),
//! bounded per command, before the step's `tool_output`; the model still gets only
//! the result.

use serde_json::{json, Value};

use crate::common::chat::{connect, send, start, until_done_all};
use crate::common::*;

/// The `tool_progress` pieces of call `id`, and whether they all came before its
/// `tool_output`.
fn pieces(frames: &[Value], id: &str) -> (Vec<String>, bool) {
    let of = |f: &&Value| f["callId"] == id;
    let progress: Vec<String> = frames
        .iter()
        .filter(|f| f["type"] == "tool_progress")
        .filter(of)
        .map(|f| f["content"].as_str().unwrap_or_default().to_string())
        .collect();
    let last_piece = frames
        .iter()
        .rposition(|f| f["type"] == "tool_progress" && f["callId"] == id);
    let output = frames
        .iter()
        .position(|f| f["type"] == "tool_output" && f["callId"] == id);
    let before = match (last_piece, output) {
        (Some(p), Some(o)) => p < o,
        (None, Some(_)) => true,
        _ => false,
    };
    (progress, before)
}

fn call_ids(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["type"] == "tool_use")
        .map(|f| f["callId"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_commands_output_streams_while_it_runs_and_a_flood_is_bounded() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool(
            "bash",
            json!({"command": "for i in 1 2 3; do echo line$i; sleep 0.3; done"}),
        ),
        tool(
            "bash",
            json!({"command": "yes 'é flood' | head -c 2000000"}),
        ),
        text("done"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "s1", "content": "run them", "sessionId": "stream"}),
    )
    .await;
    let frames = until_done_all(&mut ws, "s1").await;
    let ids = call_ids(&frames);
    assert_eq!(ids.len(), 2, "{frames:?}");

    // Three lines 300 ms apart arrive in more than one piece, all before the result.
    let (slow, before) = pieces(&frames, &ids[0]);
    assert!(slow.len() >= 2, "one piece per pause at least: {slow:?}");
    assert_eq!(slow.concat(), "line1\nline2\nline3\n");
    assert!(before, "pieces come before the step's tool_output");

    // 2 MB of output: 256 KiB live, cut between characters, then one note saying so.
    let (flood, before) = pieces(&frames, &ids[1]);
    assert!(before);
    let notes: Vec<&String> = flood
        .iter()
        .filter(|p| p.contains("live output stops"))
        .collect();
    assert_eq!(notes.len(), 1, "{} pieces", flood.len());
    let streamed: usize = flood
        .iter()
        .filter(|p| !p.contains("live output stops"))
        .map(String::len)
        .sum();
    // (less a character's first bytes that the bound cut off)
    assert!(
        (256 * 1024 - 3..=256 * 1024).contains(&streamed),
        "the live output's bound: {streamed}"
    );
    assert!(
        !flood.concat().contains('\u{FFFD}'),
        "no character was cut in two"
    );

    // The model saw results only: no piece became part of the conversation twice.
    let results: Vec<String> = llm.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].to_string())
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].matches("line2").count(), 1, "{}", results[0]);
}
