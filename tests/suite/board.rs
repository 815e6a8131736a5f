//! The local board (`cargo run --example board`) with the shipped `agents/coder`
//! configuration, both as real processes: a task typed at the board is worked in the
//! agent's workspace and its comment and status come back to the board's screen.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::*;

/// Lines of the board's output up to the first that contains `want` (panics after 30 s).
async fn until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    want: &str,
    seen: &mut Vec<String>,
) {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = lines.next_line().await {
            seen.push(l.clone());
            if l.contains(want) {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "no {want:?} from the board: {seen:#?}"
    );
}

#[tokio::test]
async fn a_task_typed_at_the_local_board_is_worked_by_agents_coder_and_reported_back() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "hello.txt", "content": "hi\n"})),
        text("Wrote hello.txt with a greeting."),
    ])
    .await;
    let bin = Path::new(env!("CARGO_BIN_EXE_picogent"));
    let examples = bin.parent().unwrap().join("examples");
    let mut board = tokio::process::Command::new(examples.join("board"))
        .args(["--port", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the board example is built with the tests");
    let mut lines = BufReader::new(board.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    until(&mut lines, "board on http://", &mut seen).await;
    until(&mut lines, "AGENT_TOKEN=", &mut seen).await;
    let url = seen[0].trim_start_matches("board on ").to_string();
    let token = seen
        .iter()
        .find_map(|l| {
            l.split("AGENT_TOKEN=")
                .nth(1)
                .filter(|_| l.starts_with("  "))
        })
        .and_then(|t| t.split_whitespace().next())
        .unwrap()
        .to_string();

    // The shipped configuration, as it is, in a folder of its own.
    let home = sb.base().join("coder");
    std::fs::create_dir_all(home.join("workspace")).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/coder/agent.json");
    std::fs::copy(shipped, home.join("agent.json")).unwrap();
    let _agent = tokio::process::Command::new(bin)
        .arg(&home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sb.user_home)
        .env("AGENT_TOKEN", &token)
        .env("TRACKER_URL", &url)
        .env("AGENT_PORT", free_port().to_string())
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("PICOGENT_BASE_URL", llm.base_url(Wire::Anthropic))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    until(&mut lines, "agent Coder registered", &mut seen).await;

    let mut stdin = board.stdin.take().unwrap();
    stdin
        .write_all(b"assign Write hello.txt | with a greeting\n")
        .await
        .unwrap();
    until(&mut lines, ": assigned", &mut seen).await;
    let task = seen
        .last()
        .and_then(|l| l.split(':').next())
        .unwrap()
        .to_string();
    until(&mut lines, &format!("{task}: status review"), &mut seen).await;
    let shown = seen.join("\n");
    assert!(
        shown.contains(&format!("{task}: status in_progress")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "{task}: comment:\n    Wrote hello.txt with a greeting."
        )),
        "{shown}"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("workspace/hello.txt")).unwrap(),
        "hi\n",
        "the agent works in its workspace, not in its own folder"
    );
    stdin.write_all(b"tasks\n").await.unwrap();
    until(&mut lines, &format!("{task}: review"), &mut seen).await;
}
