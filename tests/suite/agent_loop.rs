//! The loop end to end through each provider's wire format.

use std::time::Duration;

use picogent::agent::{AgentEvent, Outcome, RunRequest};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::*;

fn four_step_script() -> Vec<Turn> {
    vec![
        tool("read", json!({"path": "greet.py"})),
        tool(
            "edit",
            json!({"path": "greet.py", "edits": [{"oldText": "Hello", "newText": "Goodbye"}]}),
        ),
        tool("bash", json!({"command": "grep -c Goodbye greet.py"})),
        text("Done: the greeting now says Goodbye."),
    ]
}

/// The tool results the model received in the last request, per wire format.
fn results_in_request(wire: Wire, body: &Value) -> Vec<(String, String)> {
    let msgs = body["messages"].as_array().unwrap();
    let mut out = Vec::new();
    for m in msgs {
        match wire {
            Wire::Responses => unreachable!("picogent has no Responses provider"),
            Wire::Anthropic => {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_result" {
                        let text = b["content"][0]["text"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        out.push((b["tool_use_id"].as_str().unwrap().to_string(), text));
                    }
                }
            }
            Wire::OpenAi => {
                if m["role"] == "tool" {
                    out.push((
                        m["tool_call_id"].as_str().unwrap().to_string(),
                        m["content"].as_str().unwrap().to_string(),
                    ));
                }
            }
            Wire::Ollama => {
                if m["role"] == "tool" {
                    out.push((
                        m["tool_name"].as_str().unwrap().to_string(),
                        m["content"].as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn read_edit_bash_answer_through_each_provider() {
    for wire in Wire::ALL {
        let sb = Sandbox::new();
        sb.write("greet.py", "print('Hello, world')\n");
        let llm = ScriptedLlm::start(four_step_script()).await;
        let agent = sb.agent(&llm, wire, json!({}));
        let (events, outcome) = run(&agent, "Change the greeting to Goodbye", "s1").await;

        assert_eq!(
            final_text(&outcome),
            "Done: the greeting now says Goodbye.",
            "{wire:?}"
        );
        assert_eq!(outcome.steps(), 4);
        assert_eq!(sb.read("greet.py"), "print('Goodbye, world')\n", "{wire:?}");
        let results = tool_results(&events);
        assert_eq!(results.len(), 3);
        assert!(
            results.iter().all(|(_, err, _)| !err),
            "{wire:?}: {results:?}"
        );
        assert_eq!(results[0].2, "print('Hello, world')\n");
        assert_eq!(results[2].2, "1");
        assert_eq!(
            streamed_text(&events),
            "Done: the greeting now says Goodbye."
        );
        assert!(matches!(events.first(), Some(AgentEvent::Started { .. })));
        assert!(matches!(events.last(), Some(AgentEvent::Finished { .. })));

        let reqs = llm.requests();
        assert_eq!(reqs.len(), 4, "{wire:?}");
        let last = &reqs[3].body;
        let sent = results_in_request(wire, last);
        assert_eq!(sent.len(), 3, "{wire:?}: {last}");
        assert_eq!(sent[2].1, "1");
        match wire {
            Wire::Responses => unreachable!("picogent has no Responses provider"),
            Wire::Anthropic => {
                assert!(crate::common::llm::system_text(last).contains("Working folder"));
                assert_eq!(last["tools"].as_array().unwrap().len(), 7);
                assert_eq!(last["stream"], true);
                assert_eq!(reqs[0].headers["x-api-key"], API_KEY);
                // Each tool_use is answered by a tool_result with its id in the next message.
                let msgs = last["messages"].as_array().unwrap();
                let use_id = msgs[1]["content"][0]["id"].as_str().unwrap();
                assert_eq!(msgs[2]["content"][0]["tool_use_id"], use_id);
                assert_eq!(msgs[1]["content"][0]["input"], json!({"path": "greet.py"}));
            }
            Wire::OpenAi => {
                assert_eq!(last["messages"][0]["role"], "system");
                assert_eq!(last["stream_options"]["include_usage"], true);
                let call = &last["messages"][2]["tool_calls"][0];
                assert_eq!(call["function"]["name"], "read");
                let args: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
                assert_eq!(args, json!({"path": "greet.py"}));
            }
            Wire::Ollama => {
                assert_eq!(
                    last["messages"][2]["tool_calls"][0]["function"]["arguments"],
                    json!({"path": "greet.py"})
                );
                assert_eq!(sent[0].0, "read");
            }
        }
    }
}

use crate::common::llm::API_KEY;

#[tokio::test]
async fn cancelling_mid_tool_kills_it_and_leaves_a_valid_session() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool(
        "bash",
        json!({"command": "touch .started && sleep 30"}),
    )])
    .await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let mut h = agent.start(RunRequest::new("wait", "c1"));
    let started = std::time::Instant::now();
    let mut events = Vec::new();
    while let Some(ev) = h.events.recv().await {
        if matches!(ev, AgentEvent::ToolCall { .. }) {
            // Cancelled while the command runs.
            sb.wait_file(".started").await;
            h.cancel();
        }
        events.push(ev);
    }
    let outcome = h.finish().await;
    assert!(matches!(outcome, Outcome::Cancelled { .. }), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the sleep was not killed"
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].1 && results[0].2.contains("aborted"),
        "{results:?}"
    );

    // The next run in the same session sends a valid history: the call has its result.
    llm.push(text("resumed"));
    let (_, outcome) = run(&agent, "go on", "c1").await;
    assert_eq!(final_text(&outcome), "resumed");
    let body = &llm.requests()[1].body;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"][0]["type"], "tool_use");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert_eq!(
        msgs[2]["content"][0]["tool_use_id"],
        msgs[1]["content"][0]["id"]
    );
}

#[tokio::test]
async fn cancel_during_a_model_call_is_prompt() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Stall(Duration::from_secs(30), "late".into())]).await;
    let agent = sb.agent(&llm, Wire::OpenAi, json!({"step_timeout_sec": 60}));
    let h = agent.start(RunRequest::new("hi", "c2"));
    // Cancelled while the model call is under way.
    llm.wait_requests(1).await;
    h.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), h.finish())
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Cancelled { .. }), "{outcome:?}");
}

#[tokio::test]
async fn max_steps_stops_the_run_with_an_error() {
    let sb = Sandbox::new();
    sb.write("a.txt", "a");
    let script = (0..5)
        .map(|i| tool("read", json!({"path": "a.txt", "offset": i + 1})))
        .collect();
    let llm = ScriptedLlm::start(script).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"max_steps": 2}));
    let (_, outcome) = run(&agent, "loop", "m1").await;
    assert!(failure(&outcome).contains("max_steps"), "{outcome:?}");
    assert_eq!(
        failure_kind(&outcome),
        picogent::agent::FailureKind::MaxSteps
    );
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn a_stalled_model_call_times_out_and_is_retried() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        Turn::Stall(Duration::from_secs(5), "too late".into()),
        text("on time"),
    ])
    .await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"step_timeout_sec": 1}));
    let (events, outcome) = run(&agent, "hi", "t1").await;
    assert_eq!(final_text(&outcome), "on time");
    let retry = events.iter().find_map(|e| match e {
        AgentEvent::Retry { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert!(retry.unwrap().contains("sent nothing"));
}

#[tokio::test]
async fn repeated_identical_calls_are_warned_then_stopped() {
    let sb = Sandbox::new();
    sb.write("a.txt", "same");
    let script = (0..6)
        .map(|_| tool("read", json!({"path": "a.txt"})))
        .collect();
    let llm = ScriptedLlm::start(script).await;
    let agent = sb.agent(&llm, Wire::OpenAi, json!({}));
    let (events, outcome) = run(&agent, "read it", "r1").await;
    assert!(
        failure(&outcome).contains("same arguments 5 times"),
        "{outcome:?}"
    );
    assert_eq!(
        failure_kind(&outcome),
        picogent::agent::FailureKind::RepeatLoop
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 5);
    assert!(!results[1].2.contains("exactly the same arguments"));
    assert!(results[2].2.contains("exactly the same arguments 3 times"));
    assert!(results[4].1 && results[4].2.starts_with("not run"));
    assert_eq!(llm.request_count(), 5);
}

#[tokio::test]
async fn a_tool_call_written_as_text_gets_one_nudge() {
    for wire in [Wire::Ollama, Wire::OpenAi] {
        let sb = Sandbox::new();
        let fake = "<tool_call>{\"name\": \"read\", \"arguments\": {\"path\": \"x\"}}</tool_call>";
        let llm = ScriptedLlm::start(vec![text(fake), text(fake)]).await;
        let agent = sb.agent(&llm, wire, json!({}));
        let (events, outcome) = run(&agent, "read x", "n1").await;
        // One nudge only: the second text answer ends the run as it is.
        assert_eq!(final_text(&outcome), fake);
        assert_eq!(llm.request_count(), 2);
        let body = &llm.requests()[1].body;
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["role"], "user");
        assert!(
            last["content"]
                .as_str()
                .unwrap()
                .contains("tool-calling interface"),
            "{last}"
        );
        assert!(events
            .iter()
            .any(|e| matches!(e, AgentEvent::Notice { .. })));
    }
}

#[tokio::test]
async fn long_conversations_are_compacted_without_splitting_tool_calls() {
    let sb = Sandbox::new();
    for name in ["a", "b", "c", "d", "e"] {
        let body: String = (0..100)
            .map(|i| format!("{name} line {i} {}\n", "x".repeat(50)))
            .collect();
        sb.write(&format!("{name}.txt"), &body);
    }
    let mut script: Vec<Turn> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| tool("read", json!({"path": format!("{n}.txt")})))
        .collect();
    script.push(text("all read"));
    let llm = ScriptedLlm::start(script).await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"context_window": 8000, "max_tokens": 1000}),
    );
    let (events, outcome) = run(&agent, "read all five files", "k1").await;
    assert_eq!(final_text(&outcome), "all read");
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::Compacted { .. })));

    // The summary request carried the transcript and no tools.
    let reqs = llm.requests();
    let summary_req = reqs.iter().find(|r| r.body.get("tools").is_none()).unwrap();
    assert!(summary_req.body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("<conversation>"));

    // The final request starts with the summary and every tool_use has its result.
    let last = &reqs.last().unwrap().body;
    let msgs = last["messages"].as_array().unwrap();
    assert!(msgs[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains(llm::SUMMARY));
    let mut open: Vec<String> = Vec::new();
    for m in msgs {
        for b in m["content"].as_array().unwrap() {
            match b["type"].as_str().unwrap() {
                "tool_use" => open.push(b["id"].as_str().unwrap().into()),
                "tool_result" => {
                    let id = b["tool_use_id"].as_str().unwrap();
                    assert_eq!(
                        open.first().map(String::as_str),
                        Some(id),
                        "result without its call"
                    );
                    open.remove(0);
                }
                _ => {}
            }
        }
    }
    assert!(open.is_empty());

    // The session file holds a pi-shaped compaction entry whose first kept entry is
    // an assistant message, never a tool result.
    let lines = session_lines(&sb.home.join("sessions/k1.jsonl"));
    let comp = lines.iter().find(|l| l["type"] == "compaction").unwrap();
    assert!(comp["tokensBefore"].as_u64().unwrap() > 0);
    let kept = lines
        .iter()
        .find(|l| l["id"] == comp["firstKeptEntryId"])
        .unwrap();
    assert_ne!(kept["message"]["role"], "toolResult");
}

use crate::common::llm;
