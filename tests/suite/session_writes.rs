//! A session write that fails (here: a full disk under the sessions folder) ends the
//! run with an error naming the session file, in both engines, and the session stays
//! usable: the next run drops the torn line and goes on.

use serde_json::json;

use crate::common::*;

/// An answer far larger than the room the small sessions disk leaves.
fn big_answer() -> String {
    format!(
        "A long answer. {}",
        "Words that fill the disk. ".repeat(8000)
    )
}

#[tokio::test]
async fn a_failed_session_write_fails_the_native_run_and_the_session_recovers() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text(&big_answer()), text("Short and fine.")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let dir = agent.config().sessions_dir();
    let Some(_tmpfs) = Tmpfs::mount(&dir, "64k") else {
        skip("cannot mount a small tmpfs here (needs root)");
        return;
    };
    let (_, outcome) = run(&agent, "Say a lot", "full").await;
    let error = failure(&outcome);
    let file = dir.join("full.jsonl");
    assert!(
        error.contains(&file.display().to_string()) && error.contains("No space left"),
        "{error}"
    );
    assert_eq!(
        failure_kind(&outcome),
        picogent::agent::FailureKind::Infrastructure
    );
    // The next run in the session cuts the torn line off (freeing the room it took)
    // and continues from the prompt that was written.
    let (_, outcome) = run(&agent, "Say little", "full").await;
    assert_eq!(final_text(&outcome), "Short and fine.");
    let lines = session_lines(&file);
    let prompts: Vec<&str> = lines
        .iter()
        .filter(|l| l["message"]["role"] == "user")
        .filter_map(|l| l["message"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(prompts, ["Say a lot", "Say little"]);
    let last_request = llm.requests().pop().unwrap().body.to_string();
    assert!(
        last_request.contains("Say a lot") && !last_request.contains("fill the disk"),
        "the failed answer must not reach the model again: {last_request:.300}"
    );
}
