//! Live control with private git checkpoints: rollback restores files and conversation.

use std::time::Duration;

use picogent::agent::{AgentEvent, Outcome, RunRequest};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn rollback_restores_files_and_the_history_up_to_that_step() {
    let sb = Sandbox::new();
    sb.write("a.txt", "v1\n");
    sb.write(".gitignore", "ignored.log\n");
    sb.write("ignored.log", "kept as is\n");
    // The folder's own repository, which checkpoints must never touch.
    git(&sb.work, &["init", "-q"]);
    git(
        &sb.work,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "user's own",
        ],
    );
    let own_head = git(&sb.work, &["rev-parse", "HEAD"]);
    let own_status = git(&sb.work, &["status", "--porcelain"]);

    // The command waits until the pause is in (outside the folder, which must hold
    // only the run's own files).
    let gate = sb.gate_outside("live1");
    let bash = format!("{}; echo created later > new.txt", gate.command());
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "a.txt", "content": "v2\n"})),
        tool("bash", json!({"command": bash})),
        text("done after the rollback"),
    ])
    .await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"checkpoints": true}));
    let mut h = agent.start(RunRequest::new("edit things", "live1"));
    let control = h.control.clone();
    let mut seen = Vec::new();
    let mut outcome = None;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(30), h.events.recv())
        .await
        .unwrap()
    {
        match &ev {
            // Paused while the command runs, so the run holds at the next boundary.
            AgentEvent::ToolCall { name, .. } if name == "bash" => {
                control.pause().unwrap();
                gate.open();
            }
            AgentEvent::State { state } if format!("{state:?}") == "Paused" => {
                // Held at the boundary: no new model call while paused.
                assert_eq!(llm.request_count(), 2);
                assert_eq!(sb.read("new.txt"), "created later\n");
                control.rollback(1).unwrap();
            }
            AgentEvent::RolledBack { step: 1, .. } => {
                assert_eq!(sb.read("a.txt"), "v2\n");
                assert!(
                    !sb.work.join("new.txt").exists(),
                    "a file created after the checkpoint survived"
                );
                control.resume().unwrap();
            }
            AgentEvent::Finished { outcome: o } => outcome = Some(o.clone()),
            _ => {}
        }
        seen.push(ev);
    }
    assert!(
        matches!(outcome, Some(Outcome::Completed { .. })),
        "{outcome:?}"
    );
    let steps: Vec<(u64, String)> = seen
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Checkpoint { step, message, .. } => Some((*step, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(steps[0], (0, "Step 0: start: edit things".to_string()));
    assert_eq!(steps[1], (1, "Step 1: Write: a.txt".to_string()));
    assert_eq!(
        steps[2],
        (
            2,
            format!("Step 2: Bash: {}", picogent::util::one_line(&bash, 120))
        )
    );

    // The next request held exactly the history up to step 1.
    let body = &llm.requests()[2].body;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{msgs:#?}");
    assert_eq!(
        msgs[1]["content"][0]["input"],
        json!({"path": "a.txt", "content": "v2\n"})
    );
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");

    // Ignored files and the folder's own repository are untouched.
    assert_eq!(sb.read("ignored.log"), "kept as is\n");
    assert_eq!(git(&sb.work, &["rev-parse", "HEAD"]), own_head);
    assert_eq!(git(&sb.work, &["status", "--porcelain"]), own_status);

    // The abandoned path stays reachable in the private repository.
    let private = sb.home.join("state/checkpoints/live1.git");
    let refs = git(
        &sb.work,
        &[
            &format!("--git-dir={}", private.display()),
            "for-each-ref",
            "refs/picogent/abandoned",
        ],
    );
    assert_eq!(refs.lines().count(), 1, "{refs}");
    // The session records the rollback as a child of the checkpoint entry.
    let lines = session_lines(&sb.home.join("sessions/live1.jsonl"));
    let rb = lines
        .iter()
        .find(|l| l["customType"] == "rollback")
        .unwrap();
    let target = lines.iter().find(|l| l["id"] == rb["parentId"]).unwrap();
    assert_eq!(
        (
            target["customType"].as_str(),
            target["data"]["step"].as_u64()
        ),
        (Some("checkpoint"), Some(1))
    );
}

#[tokio::test]
async fn rollback_is_refused_unless_paused() {
    let sb = Sandbox::new();
    let gate = sb.gate("running");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("ok"),
    ])
    .await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"checkpoints": true}));
    let h = agent.start(RunRequest::new("x", "live2"));
    let err = h.control.rollback(0).unwrap_err();
    gate.open();
    assert!(err.to_string().contains("Running"), "{err}");
    let outcome = h.finish().await;
    assert!(outcome.is_success());
}

#[tokio::test]
async fn a_failed_bash_command_auto_pauses_the_run_when_asked() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "exit 3"})),
        text("after resume"),
    ])
    .await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"auto_pause_on_error": true}));
    let mut h = agent.start(RunRequest::new("x", "live3"));
    let mut paused = false;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(30), h.events.recv())
        .await
        .unwrap()
    {
        if let AgentEvent::State { state } = &ev {
            if format!("{state:?}") == "Paused" {
                paused = true;
                // Held at the boundary: the pause is the run's state until resumed.
                assert_eq!(llm.request_count(), 1);
                h.control.resume().unwrap();
            }
        }
        if let AgentEvent::Finished { outcome } = ev {
            assert!(outcome.is_success(), "{outcome:?}");
        }
    }
    assert!(paused);
}

#[tokio::test]
async fn loop_action_pause_hands_a_repeating_model_to_a_person() {
    let sb = Sandbox::new();
    sb.write("a.txt", "same");
    let mut script: Vec<Turn> = (0..5)
        .map(|_| tool("read", json!({"path": "a.txt"})))
        .collect();
    script.push(text("finally different"));
    let llm = ScriptedLlm::start(script).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"loop_action": "pause"}));
    let mut h = agent.start(RunRequest::new("x", "live4"));
    let mut outcome = None;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(30), h.events.recv())
        .await
        .unwrap()
    {
        match ev {
            AgentEvent::State { state } if format!("{state:?}") == "Paused" => {
                h.control
                    .instruct("Stop reading a.txt", picogent::agent::control::Role::User)
                    .unwrap();
                h.control.resume().unwrap();
            }
            AgentEvent::Finished { outcome: o } => outcome = Some(o),
            _ => {}
        }
    }
    assert!(
        matches!(outcome, Some(Outcome::Completed { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        last_text(&llm.requests().last().unwrap().body),
        "Stop reading a.txt"
    );
}
