//! Chat mode over a real WebSocket client against the scripted model.

use std::time::Duration;

use futures_util::SinkExt;
use picogent::chat;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::chat::*;
use crate::common::*;

fn of(frames: &[Value], id: &str) -> Vec<(String, String)> {
    frames
        .iter()
        .filter(|f| f["id"] == id)
        .map(|f| {
            (
                f["type"].as_str().unwrap().to_string(),
                f["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn frames_stream_tool_use_text_and_done_last_with_a_session_id() {
    let sb = Sandbox::new();
    sb.write("a.txt", "alpha");
    let llm = ScriptedLlm::start(vec![
        tool("read", json!({"path": "a.txt"})),
        text("It says **alpha**."),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "msg-1", "content": "What does a.txt say?"}),
    )
    .await;
    let frames = until_done(&mut ws, "msg-1").await;
    let kinds: Vec<(String, String)> = of(&frames, "msg-1");
    assert_eq!(
        kinds.first().unwrap(),
        &("tool_use".to_string(), "Read: a.txt".to_string())
    );
    assert_eq!(kinds.last().unwrap().0, "done");
    let streamed: String = kinds
        .iter()
        .filter(|(k, _)| k == "text")
        .map(|(_, c)| c.as_str())
        .collect();
    assert_eq!(streamed, "It says **alpha**.");
    assert!(
        kinds.iter().filter(|(k, _)| k == "text").count() > 1,
        "text is streamed in fragments"
    );
    let session = frames[0]["sessionId"].as_str().unwrap().to_string();
    assert!(frames.iter().all(|f| f["sessionId"] == session.as_str()));
    // Continuing with that session id carries the history.
    llm.push(text("Still alpha."));
    send(
        &mut ws,
        json!({"id": "msg-2", "content": "And now?", "sessionId": session}),
    )
    .await;
    until_done(&mut ws, "msg-2").await;
    let msgs = llm.requests()[2].body["messages"].as_array().unwrap().len();
    assert_eq!(msgs, 5);
    // Each model call's tokens reach the page, for the run's totals.
    llm.push(text("Once more."));
    send(
        &mut ws,
        json!({"id": "msg-3", "content": "Count?", "sessionId": session}),
    )
    .await;
    let usage = next_of(&mut ws, "usage").await;
    assert_eq!(usage["id"], "msg-3", "{usage}");
    assert!(usage["content"]["output"].as_u64().unwrap() > 0, "{usage}");
}

#[tokio::test]
async fn model_errors_and_tool_errors_become_frames() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("read", json!({"path": "missing.txt"})),
        Turn::Status(400, None),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::OpenAi, json!({}))).await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "e1", "content": "read missing.txt"})).await;
    let kinds = of(&until_done(&mut ws, "e1").await, "e1");
    assert_eq!(kinds[0].0, "tool_use");
    assert_eq!(kinds[1].0, "tool_result");
    assert!(
        kinds[1].1.starts_with("read: ") && kinds[1].1.contains("missing.txt"),
        "{kinds:?}"
    );
    assert_eq!(kinds[2].0, "error");
    assert!(kinds[2].1.contains("HTTP 400"), "{kinds:?}");
    assert_eq!(kinds[3].0, "done");
}

#[tokio::test]
async fn a_retried_model_call_says_which_attempt_comes_next_and_when() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Status(529, Some(1200)), text("back")]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "r1", "content": "hi"})).await;
    let frames = until_done(&mut ws, "r1").await;
    let retry = frames
        .iter()
        .find(|f| f["type"] == "retry")
        .expect("a retry frame");
    assert!(
        retry["content"].as_str().unwrap().contains("HTTP 529"),
        "{retry}"
    );
    // The second attempt of those the retry policy allows, 1.2 s away as the server asked.
    assert_eq!(retry["attempt"], 2, "{retry}");
    assert!(retry["of"].as_u64().is_some_and(|n| n > 2), "{retry}");
    assert_eq!(retry["delayMs"], 1200, "{retry}");
    assert!(of(&frames, "r1")
        .iter()
        .any(|(k, t)| k == "text" && t.contains("back")));
}

#[tokio::test]
async fn invalid_frames_get_errors_and_the_connection_stays_usable() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("fine")]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    ws.send(Message::Text("{not json".into())).await.unwrap();
    let f = next(&mut ws).await;
    assert_eq!(f["type"], "error");
    assert!(f["content"].as_str().unwrap().contains("not valid JSON"));
    send(&mut ws, json!({"content": "no id"})).await;
    assert!(next(&mut ws).await["content"]
        .as_str()
        .unwrap()
        .contains("`id`"));
    send(&mut ws, json!({"id": "x"})).await;
    let f = next(&mut ws).await;
    assert_eq!(
        (f["id"].as_str(), f["type"].as_str()),
        (Some("x"), Some("error"))
    );
    assert!(f["content"].as_str().unwrap().contains("`content`"));
    assert_eq!(next(&mut ws).await["type"], "done");
    let big = json!({"id": "big", "content": "x".repeat((1 << 20) + 1)});
    send(&mut ws, big).await;
    assert!(next(&mut ws).await["content"]
        .as_str()
        .unwrap()
        .contains("limit is 1 MiB"));
    send(&mut ws, json!({"type": "explode", "id": "q"})).await;
    assert!(next(&mut ws).await["content"]
        .as_str()
        .unwrap()
        .contains("unknown control frame"));
    // A known frame type with a missing field: the error names both.
    send(&mut ws, json!({"type": "rollback", "id": "r"})).await;
    let f = next(&mut ws).await;
    assert_eq!(
        (f["id"].as_str(), f["type"].as_str(), f["content"].as_str()),
        (
            Some("r"),
            Some("error"),
            Some("frame type \"rollback\": missing field `step`")
        ),
        "{f}"
    );
    send(&mut ws, json!({"id": "ok", "content": "hello"})).await;
    let kinds = of(&until_done(&mut ws, "ok").await, "ok");
    assert_eq!(
        kinds,
        vec![("text".into(), "fine".into()), ("done".into(), "".into())]
    );
}

#[tokio::test]
async fn cancel_ends_a_request_with_cancelled_then_done() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool("bash", json!({"command": "sleep 30"}))]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "c1", "content": "wait"})).await;
    assert_eq!(next(&mut ws).await["type"], "tool_use");
    send(&mut ws, json!({"type": "cancel", "id": "c1"})).await;
    let kinds = of(&until_done(&mut ws, "c1").await, "c1");
    assert_eq!(kinds.last().unwrap().0, "done");
    assert!(
        kinds.contains(&("error".into(), "cancelled".into())),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn two_sessions_run_side_by_side_on_one_connection() {
    let sb = Sandbox::new();
    let gate = sb.gate("side");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        tool("bash", json!({"command": gate.command()})),
        text("one"),
        text("two"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "a", "content": "first", "sessionId": "sa"}),
    )
    .await;
    assert_eq!(next(&mut ws).await["type"], "tool_use");
    send(
        &mut ws,
        json!({"id": "b", "content": "second", "sessionId": "sb"}),
    )
    .await;
    // b starts its command while a's still waits at the gate: they run side by side.
    let b = next(&mut ws).await;
    assert_eq!(
        (b["id"].as_str(), b["type"].as_str()),
        (Some("b"), Some("tool_use")),
        "{b}"
    );
    gate.open();
    let mut frames = until_done(&mut ws, "a").await;
    if !frames.iter().any(|f| f["id"] == "b" && f["type"] == "done") {
        frames.extend(until_done(&mut ws, "b").await);
    }
    assert!(frames
        .iter()
        .all(|f| f["sessionId"] == if f["id"] == "a" { "sa" } else { "sb" }));
}

#[tokio::test]
async fn two_messages_for_one_session_run_one_after_the_other() {
    let sb = Sandbox::new();
    let gate = sb.gate("first");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("first"),
        text("second"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "m1", "content": "one", "sessionId": "same"}),
    )
    .await;
    send(
        &mut ws,
        json!({"id": "m2", "content": "two", "sessionId": "same"}),
    )
    .await;
    // m2 arrived while m1 holds the session (its command waits at the gate).
    assert_eq!(next(&mut ws).await["id"], "m1");
    gate.open();
    let mut frames = until_done(&mut ws, "m1").await;
    assert!(
        frames.iter().all(|f| f["id"] == "m1"),
        "m2 ran while m1 was running: {frames:?}"
    );
    frames = until_done(&mut ws, "m2").await;
    assert_eq!(
        of(&frames, "m2")[0],
        ("text".to_string(), "second".to_string())
    );
    // m2's request carried m1's whole exchange.
    let msgs = llm.requests()[2].body["messages"].as_array().unwrap().len();
    assert_eq!(msgs, 5);
}

#[tokio::test]
async fn a_disconnect_mid_run_cancels_it_and_keeps_the_session_valid() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool("bash", json!({"command": "sleep 37"}))]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "d1", "content": "long", "sessionId": "drop"}),
    )
    .await;
    assert_eq!(next(&mut ws).await["type"], "tool_use");
    drop(ws);
    // The command dies with the run.
    let mut gone = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let ps = std::process::Command::new("pgrep")
            .args(["-f", "sleep 37"])
            .output()
            .unwrap();
        if ps.stdout.is_empty() {
            gone = true;
            break;
        }
    }
    assert!(gone, "the bash command outlived the connection");
    llm.push(text("back"));
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "d2", "content": "again", "sessionId": "drop"}),
    )
    .await;
    until_done(&mut ws, "d2").await;
    let msgs = llm.requests()[1].body["messages"].clone();
    assert_eq!(msgs[1]["content"][0]["type"], "tool_use");
    assert_eq!(
        msgs[2]["content"][0]["tool_use_id"],
        msgs[1]["content"][0]["id"]
    );
}

#[tokio::test]
async fn foreign_origins_are_refused_and_own_or_listed_ones_admitted() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let mut cfg = sb.config(&llm, Wire::Anthropic, json!({}));
    cfg.chat.allowed_origins = vec!["https://tools.example".into(), "null".into()];
    let c = start(cfg).await;
    let (status, reason) = refusal(c.addr, "/ws", &[("origin", "https://evil.example")]).await;
    assert_eq!(status, 403);
    assert_eq!(reason, "origin not allowed: set PICOGENT_ALLOWED_ORIGINS");
    // A DNS-rebinding page: Host and Origin agree, but neither is this server.
    let rebinding = [
        ("origin", "http://evil.example:3100"),
        ("host", "evil.example:3100"),
    ];
    assert_eq!(refusal(c.addr, "/ws", &rebinding).await.0, 403);
    assert_eq!(llm.request_count(), 0, "a refused connection ran a prompt");
    let own = format!("http://127.0.0.1:{}", c.addr.port());
    assert!(connect_with(c.addr, "/ws", &[("origin", &own)])
        .await
        .is_ok());
    let own = format!("http://localhost:{}", c.addr.port());
    assert!(connect_with(c.addr, "/", &[("origin", &own)]).await.is_ok());
    assert!(
        connect_with(c.addr, "/ws", &[("origin", "https://tools.example")])
            .await
            .is_ok()
    );
    assert!(connect_with(c.addr, "/ws", &[("origin", "null")])
        .await
        .is_ok());
    assert!(
        connect_with(c.addr, "/ws", &[]).await.is_ok(),
        "non-browser clients send no Origin"
    );
}

#[tokio::test]
async fn the_chat_token_is_required_when_set() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let mut cfg = sb.config(&llm, Wire::Anthropic, json!({}));
    cfg.chat.token = Some("s3cret/+=".into());
    let c = start(cfg).await;
    let (status, reason) = refusal(c.addr, "/ws", &[]).await;
    assert_eq!((status, reason.as_str()), (401, "token required"));
    assert_eq!(refusal(c.addr, "/ws?token=wrong", &[]).await.0, 401);
    // Not a valid WebSocket upgrade: refused over HTTP as before.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/ws?token=wrong", c.addr))
        .header("upgrade", "websocket")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 401);
    assert_eq!(llm.request_count(), 0, "a refused connection ran a prompt");
    assert!(connect_with(c.addr, "/ws?token=s3cret%2F%2B%3D", &[])
        .await
        .is_ok());
    assert!(
        connect_with(c.addr, "/ws", &[("authorization", "Bearer s3cret/+=")])
            .await
            .is_ok()
    );
    // Not on loopback without a token: refused at start, with the reason.
    let err = chat::bind("0.0.0.0", 0, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("PICOGENT_CHAT_TOKEN"), "{err}");
    assert!(chat::bind("0.0.0.0", 0, Some("t")).await.is_ok());
}

#[tokio::test]
async fn work_dir_must_exist_inside_the_allowed_paths() {
    let sb = Sandbox::new();
    let outside = sb.base().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(sb.work.join("sub")).unwrap();
    let llm = ScriptedLlm::start(vec![text("in sub")]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({"allowed_paths": [sb.work]}))).await;
    let mut ws = connect(&c).await;
    for (id, dir) in [
        ("w1", outside.display().to_string()),
        ("w2", sb.work.join("nope").display().to_string()),
    ] {
        send(&mut ws, json!({"id": id, "content": "hi", "workDir": dir})).await;
        let kinds = of(&until_done(&mut ws, id).await, id);
        assert_eq!(kinds[0].0, "error", "{kinds:?}");
        assert!(kinds[0].1.contains("workDir refused"), "{kinds:?}");
    }
    send(
        &mut ws,
        json!({"id": "w3", "content": "hi", "workDir": sb.work.join("sub").display().to_string()}),
    )
    .await;
    let kinds = of(&until_done(&mut ws, "w3").await, "w3");
    assert_eq!(kinds[0], ("text".into(), "in sub".into()));
    assert_eq!(llm.request_count(), 1);
}

#[tokio::test]
async fn the_page_and_health_are_served_over_plain_http() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let page = reqwest::get(format!("http://{}/", c.addr)).await.unwrap();
    assert_eq!(page.status(), 200);
    // Another origin may not frame the page.
    assert_eq!(
        page.headers()["content-security-policy"],
        "frame-ancestors 'self'"
    );
    assert_eq!(page.headers()["x-frame-options"], "SAMEORIGIN");
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("<title>picogent</title>"));
    let health: Value = reqwest::get(format!("http://{}/healthz", c.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    // A container's or orchestrator's liveness probe, as in agent mode.
    let live = reqwest::get(format!("http://{}/livez", c.addr))
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    assert_eq!(live.json::<Value>().await.unwrap()["status"], "alive");
}

#[tokio::test]
async fn pause_holds_at_a_boundary_and_instructions_reach_the_next_call() {
    let sb = Sandbox::new();
    let gate = sb.gate("pause");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("done, in small steps"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "p1", "content": "work"})).await;
    assert_eq!(next(&mut ws).await["type"], "tool_use");
    send(&mut ws, json!({"type": "pause", "id": "p1"})).await;
    settled(&mut ws).await;
    gate.open();
    let f = next(&mut ws).await;
    assert_eq!(
        (f["type"].as_str(), f["content"].as_str()),
        (Some("state"), Some("paused")),
        "{f}"
    );
    // The run waits at its boundary: a round trip later, still no further model call.
    settled(&mut ws).await;
    assert_eq!(llm.request_count(), 1, "a paused run made a model call");
    send(&mut ws, json!({"type": "pause", "id": "p1"})).await;
    assert!(next(&mut ws).await["content"]
        .as_str()
        .unwrap()
        .contains("cannot Pause a run that is Paused"));
    send(
        &mut ws,
        json!({"type": "instruct", "id": "p1", "content": "Prefer small steps", "as": "system"}),
    )
    .await;
    send(&mut ws, json!({"type": "resume", "id": "p1"})).await;
    let kinds = of(&until_done(&mut ws, "p1").await, "p1");
    assert_eq!(kinds[0], ("state".to_string(), "running".to_string()));
    assert_eq!(
        kinds[1],
        ("instruction".to_string(), "Prefer small steps".to_string())
    );
    assert_eq!(
        last_text(&llm.requests()[1].body),
        "<system-instruction>\nPrefer small steps\n</system-instruction>"
    );
}

#[tokio::test]
async fn stop_ends_a_paused_run_without_another_model_call() {
    let sb = Sandbox::new();
    let gate = sb.gate("stop");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("never"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "s1", "content": "work"})).await;
    assert_eq!(next(&mut ws).await["type"], "tool_use");
    send(&mut ws, json!({"type": "pause", "id": "s1"})).await;
    settled(&mut ws).await;
    gate.open();
    assert_eq!(next(&mut ws).await["content"], "paused");
    send(&mut ws, json!({"type": "stop", "id": "s1"})).await;
    let kinds = of(&until_done(&mut ws, "s1").await, "s1");
    assert!(
        kinds.contains(&("error".to_string(), "cancelled".to_string())),
        "{kinds:?}"
    );
    assert_eq!(llm.request_count(), 1);
    send(&mut ws, json!({"type": "resume", "id": "s1"})).await;
    assert!(next(&mut ws).await["content"]
        .as_str()
        .unwrap()
        .contains("no request"));
}

#[tokio::test]
async fn branch_compare_prefer_and_every_export_format() {
    let sb = Sandbox::new();
    // The command waits until the pause is in: the run pauses right after it.
    let gate = sb.gate("branch");
    let bash = format!("Bash: {}", gate.command());
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "f.txt", "content": "A\n"})),
        tool("bash", json!({"command": gate.command()})),
        tool("write", json!({"path": "f.txt", "content": "B\n"})),
        text("done with B"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({"checkpoints": true}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "b1", "content": "make f", "sessionId": "tree"}),
    )
    .await;
    loop {
        let f = next(&mut ws).await;
        if f["type"] == "tool_use" && f["content"] == bash {
            send(&mut ws, json!({"type": "pause", "id": "b1"})).await;
            settled(&mut ws).await;
            gate.open();
        }
        if f["type"] == "state" && f["content"] == "paused" {
            break;
        }
    }
    send(&mut ws, json!({"type": "branch", "id": "b1", "step": 1, "content": "Use B instead", "name": "try-b"})).await;
    let f = next(&mut ws).await;
    assert_eq!(
        (f["type"].as_str(), f["step"].as_u64()),
        (Some("rollback"), Some(1)),
        "{f}"
    );
    assert_eq!(sb.read("f.txt"), "A\n");
    send(&mut ws, json!({"type": "resume", "id": "b1"})).await;
    until_done(&mut ws, "b1").await;
    assert_eq!(sb.read("f.txt"), "B\n");

    send(&mut ws, json!({"type": "branches", "sessionId": "tree"})).await;
    let list = next(&mut ws).await;
    assert_eq!(
        list["content"],
        // Tool steps, as the page counts them (the final text is not a step).
        json!([{"name": "main", "steps": 2}, {"name": "try-b", "steps": 2}]),
        "{list}"
    );
    send(
        &mut ws,
        json!({"type": "compare", "sessionId": "tree", "a": "main", "b": "try-b"}),
    )
    .await;
    let cmp = next(&mut ws).await;
    assert_eq!(cmp["type"], "compare", "{cmp}");
    let content = &cmp["content"];
    assert_eq!(content["shared_steps"], 1);
    assert_eq!(content["a"]["steps"][0]["args_summary"], bash);
    assert_eq!(content["b"]["steps"][0]["args_summary"], "Write: f.txt");
    let diff = content["diff"].as_str().unwrap();
    assert!(diff.contains("-A") && diff.contains("+B"), "{diff}");

    send(&mut ws, json!({"type": "prefer", "sessionId": "tree", "chosen": "try-b", "rejected": "main", "note": "B is right"})).await;
    assert_eq!(next(&mut ws).await["content"], "recorded");
    send(
        &mut ws,
        json!({"type": "prefer", "sessionId": "tree", "chosen": "nope", "rejected": "main"}),
    )
    .await;
    assert!(next(&mut ws).await["content"]
        .as_str()
        .unwrap()
        .contains("no branch \"nope\""));

    let export = |format: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
            .args([
                "export",
                "--agent",
                &sb.home.display().to_string(),
                "--session",
                "tree",
                "--format",
                format,
            ])
            .env("HOME", &sb.user_home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let traj = export("trajectory");
    assert_eq!(traj.len(), 2);
    assert_eq!(
        (traj[0]["branch"].as_str(), traj[1]["branch"].as_str()),
        (Some("main"), Some("try-b"))
    );
    assert_eq!(traj[1]["task"], "make f");
    let kinds: Vec<&str> = traj[1]["interventions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["rollback", "branch", "resume", "instruct"]);
    assert!(traj[1]["steps"][1]["diff"].as_str().unwrap().contains("+B"));
    assert_eq!(traj[1]["outcome"]["text"], "done with B");
    let tree = export("tree");
    assert_eq!(tree.len(), 1);
    assert_eq!(tree[0]["branch_points"].as_array().unwrap().len(), 1);
    let dpo = export("dpo");
    assert_eq!(dpo.len(), 1);
    assert_eq!(dpo[0]["chosen"]["branch"], "try-b");
    assert_eq!(
        dpo[0]["prompt"]["shared_steps"].as_array().unwrap().len(),
        1
    );
    assert_eq!(dpo[0]["rejected"]["steps"][0]["args_summary"], bash);
    assert_eq!(dpo[0]["note"], "B is right");
    let prm = export("prm");
    let labels: Vec<(String, u64, String)> = prm
        .iter()
        .map(|l| {
            (
                l["branch"].as_str().unwrap().into(),
                l["step"].as_u64().unwrap(),
                l["label"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        labels,
        vec![
            ("try-b".to_string(), 0, "correct".to_string()),
            ("try-b".to_string(), 1, "correct".to_string()),
            ("try-b".to_string(), 2, "correct".to_string()),
            ("main".to_string(), 1, "error".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_reconnecting_client_replays_frames_after_its_last_seq_then_follows_live() {
    let sb = Sandbox::new();
    // The run's command lasts until the second client follows it.
    let gate = sb.gate("reconnect");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("finished while you were away"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "k1", "content": "long job", "sessionId": "keep", "keepAlive": true}),
    )
    .await;
    let first = next(&mut ws).await;
    // Seq 1 is the run's `context`, seq 2 the model call's `usage`: `next` passes
    // over both.
    assert_eq!(
        (first["type"].as_str(), first["seq"].as_u64()),
        (Some("tool_use"), Some(3))
    );
    // A keepAlive run is addressed from other connections by the id the server gave it.
    let run_id = first["runId"].as_str().unwrap().to_string();
    assert!(run_id.starts_with("run-"), "{first}");
    drop(ws); // gone mid-run: a keepAlive run goes on

    // A second client attaches before the end and gets the rest, in order.
    let mut ws2 = connect(&c).await;
    send(
        &mut ws2,
        json!({"type": "subscribe", "id": "k1", "after": 3}),
    )
    .await;
    assert!(
        next(&mut ws2).await["content"]
            .as_str()
            .unwrap()
            .contains("no request"),
        "the client's own id means nothing on another connection"
    );
    send(
        &mut ws2,
        json!({"type": "subscribe", "runId": run_id, "after": 3}),
    )
    .await;
    settled(&mut ws2).await;
    gate.open();
    let frames = until_done(&mut ws2, "k1").await;
    let seqs: Vec<u64> = frames.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    // Seq 4 is the tool's `tool_output`, which `until_done` passes over; text pieces
    // it caught up on come joined, under the last piece's seq.
    assert!(
        seqs[0] >= 5 && seqs.windows(2).all(|w| w[0] < w[1]),
        "{frames:?}"
    );
    let text: String = frames
        .iter()
        .filter(|f| f["type"] == "text")
        .map(|f| f["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "finished while you were away");

    // After the end, the whole log can still be replayed.
    let mut ws3 = connect(&c).await;
    send(
        &mut ws3,
        json!({"type": "subscribe", "runId": run_id, "after": 0}),
    )
    .await;
    let all = until_done(&mut ws3, "k1").await;
    assert_eq!(all[0]["type"], "tool_use");
    let replayed: String = all
        .iter()
        .filter(|f| f["type"] == "text")
        .map(|f| f["content"].as_str().unwrap())
        .collect();
    assert_eq!(replayed, text);
    assert_eq!(all.last().unwrap()["seq"], frames.last().unwrap()["seq"]);
    send(&mut ws3, json!({"type": "subscribe", "id": "nope"})).await;
    assert!(next(&mut ws3).await["content"]
        .as_str()
        .unwrap()
        .contains("no request"));
}

#[tokio::test]
async fn control_frames_the_engine_cannot_honour_get_an_error_saying_why() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    // A stand-in for the Claude Code CLI that keeps running until it is killed.
    let fake = sb.base().join("fake-claude");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 60\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = start(sb.config(
        &llm,
        Wire::Anthropic,
        json!({"provider": "claude-code", "claude_code_path": fake}),
    ))
    .await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "cc", "content": "work"})).await;
    for kind in ["pause", "instruct", "stop", "rollback"] {
        send(
            &mut ws,
            json!({"id": "cc", "type": kind, "content": "x", "step": 0}),
        )
        .await;
        let f = loop {
            let f = next(&mut ws).await;
            if f["type"] == "error" {
                break f;
            }
        };
        let msg = f["content"].as_str().unwrap();
        assert!(
            f["id"] == "cc" && msg.contains("claude-code") && msg.contains(kind),
            "{kind}: {f}"
        );
    }
    // What the engine can do, it does: cancel ends the run.
    send(&mut ws, json!({"id": "cc", "type": "cancel"})).await;
    let frames = until_done(&mut ws, "cc").await;
    assert_eq!(frames.last().unwrap()["type"], "done");
}

#[tokio::test]
async fn a_frame_too_large_for_the_connection_gets_an_error_first() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    let huge = "x".repeat(5 << 20);
    let _ = ws.send(Message::Text(huge.into())).await;
    let f = next(&mut ws).await;
    assert_eq!(f["type"], "error", "{f}");
    assert!(f["content"].as_str().unwrap().contains("1 MiB"), "{f}");
}

#[tokio::test]
async fn a_connection_cannot_reach_another_connections_requests() {
    let sb = Sandbox::new();
    // The first request runs until every attempt on it was made.
    let gate = sb.gate("hijack");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("mine, undisturbed"),
        text("yours"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut a = connect(&c).await;
    let mut b = connect(&c).await;
    send(
        &mut a,
        json!({"id": "msg-1", "content": "long", "sessionId": "sa"}),
    )
    .await;
    assert_eq!(next(&mut a).await["type"], "tool_use");
    // The same client id on another connection is another request...
    for kind in ["stop", "pause", "cancel", "instruct", "subscribe"] {
        send(
            &mut b,
            json!({"type": kind, "id": "msg-1", "content": "hijack"}),
        )
        .await;
        let f = next(&mut b).await;
        assert_eq!(f["type"], "error", "{kind}: {f}");
    }
    // ...and a made-up runId in the server's key format reaches nothing either.
    send(
        &mut b,
        json!({"type": "stop", "id": "msg-1", "runId": "c0/msg-1"}),
    )
    .await;
    assert_eq!(next(&mut b).await["type"], "error");
    // Meanwhile the first request finishes as if nothing happened.
    gate.open();
    let frames = until_done(&mut a, "msg-1").await;
    let text: String = frames
        .iter()
        .filter(|f| f["type"] == "text")
        .map(|f| f["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "mine, undisturbed");
    // And b may use the same id for a request of its own.
    send(
        &mut b,
        json!({"id": "msg-1", "content": "hi", "sessionId": "sb"}),
    )
    .await;
    let frames = until_done(&mut b, "msg-1").await;
    assert!(frames.iter().any(|f| f["content"] == "yours"), "{frames:?}");
}

/// A client that stops reading while its run streams megabytes is disconnected once
/// its queue is full, instead of making the server hold everything for it.
#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_not_buffered_for() {
    let sb = Sandbox::new();
    let long = "word ".repeat(400_000); // 2 MB of text, sent in 7-character pieces
    let llm = ScriptedLlm::start(vec![text(&long)]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "flood", "content": "talk a lot"})).await;
    // The client never reads. Once the server has given up on it, the connection is
    // closed and even sending fails.
    let mut closed = false;
    for _ in 0..600 {
        if ws.send(Message::Pong(Vec::new().into())).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        closed,
        "the server kept a connection whose client never read"
    );
}

/// A client that reads slower than the model writes (a tab in the background) is not
/// disconnected and misses nothing: once it is behind, the pieces it has not taken come
/// joined, so it gets the whole answer in fewer frames.
#[tokio::test]
async fn a_slow_reader_gets_the_whole_answer_in_fewer_frames() {
    let sb = Sandbox::new();
    let long = "word ".repeat(200_000); // 1 MB of text, in about 143,000 pieces
    let llm = ScriptedLlm::start(vec![text(&long)]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    // A small receive buffer, so the socket does not hide how far behind it is.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(c.addr).await.unwrap();
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{}/ws", c.addr), stream)
        .await
        .unwrap();
    send(&mut ws, json!({"id": "slow", "content": "talk a lot"})).await;
    // It reads nothing while the answer streams, then reads slowly.
    llm.wait_requests(1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut text = String::new();
    let mut frames = 0usize;
    let mut last_seq = 0;
    loop {
        let f = next(&mut ws).await;
        frames += 1;
        let seq = f["seq"].as_u64().unwrap_or(0);
        assert!(seq > last_seq, "out of order: {f}");
        last_seq = seq;
        match f["type"].as_str() {
            Some("text") => text.push_str(f["content"].as_str().unwrap()),
            Some("done") => break,
            Some("error" | "gap") => panic!("{f}"),
            _ => {}
        }
        if frames.is_multiple_of(5) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    assert_eq!(text.len(), long.len());
    assert_eq!(text, long);
    assert!(frames < 100_000, "{frames} frames: nothing was joined");
}

/// Replaying a long request (more frames than a connection's queue holds) waits for
/// the client instead of dropping it, and a control frame may name only the `runId`.
#[tokio::test]
async fn a_long_history_replays_in_full_and_run_ids_address_control_frames() {
    let sb = Sandbox::new();
    let long = "word ".repeat(12_000); // about 8,600 text frames
    let llm = ScriptedLlm::start(vec![text(&long)]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut a = connect(&c).await;
    send(
        &mut a,
        json!({"id": "hist", "content": "talk", "keepAlive": true}),
    )
    .await;
    let first = until_done(&mut a, "hist").await;
    assert!(first.len() > 5000, "{}", first.len());
    let run_id = first[0]["runId"].as_str().unwrap().to_string();
    let mut b = connect(&c).await;
    send(
        &mut b,
        json!({"type": "subscribe", "runId": run_id, "after": 0}),
    )
    .await;
    let replay = until_done(&mut b, "hist").await;
    // The whole answer, its pieces joined into a few frames, ending where it ended.
    let joined = |frames: &[Value]| -> String {
        frames
            .iter()
            .filter(|f| f["type"] == "text")
            .map(|f| f["content"].as_str().unwrap())
            .collect()
    };
    assert_eq!(joined(&replay), joined(&first));
    assert_eq!(joined(&replay), long);
    assert!(replay.len() < first.len() / 10, "{} frames", replay.len());
    assert_eq!(replay.last().unwrap()["seq"], first.last().unwrap()["seq"]);
    // A control frame with only the runId reaches the (finished) run and says so.
    send(&mut b, json!({"type": "stop", "runId": run_id})).await;
    let f = next(&mut b).await;
    assert!(
        f["type"] == "error" && f["content"].as_str().unwrap().contains("no request"),
        "{f}"
    );
    // Subscribing after the end gets nothing more and leaves nothing waiting.
    let last = replay.last().unwrap()["seq"].as_u64().unwrap();
    send(
        &mut b,
        json!({"type": "subscribe", "runId": run_id, "after": last}),
    )
    .await;
    send(&mut b, json!({"type": "branches"})).await;
    let f = next(&mut b).await;
    assert_eq!(f["type"], "error", "only the answer to the next frame: {f}");
}

/// Asking a paused run to roll back to a checkpoint it does not have is refused with
/// an error frame, and the tool call it was holding still runs after resume.
#[tokio::test]
async fn a_refused_rollback_keeps_the_held_call() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        // The model asks for a tool while the run is paused: the call is held.
        Turn::StallTools(
            Duration::from_millis(600),
            vec![(
                "write".into(),
                json!({"path": "kept.txt", "content": "ran"}),
            )],
        ),
        text("done"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({"checkpoints": true}))).await;
    let mut ws = connect(&c).await;
    send(&mut ws, json!({"id": "r", "content": "go"})).await;
    llm.wait_requests(1).await;
    send(&mut ws, json!({"type": "pause", "id": "r"})).await;
    send(&mut ws, json!({"type": "rollback", "id": "r", "step": 99})).await;
    let f = loop {
        let f = next(&mut ws).await;
        if f["type"] == "error" {
            break f;
        }
    };
    assert!(
        f["content"].as_str().unwrap().contains("no checkpoint 99"),
        "{f}"
    );
    send(&mut ws, json!({"type": "resume", "id": "r"})).await;
    until_done(&mut ws, "r").await;
    assert_eq!(sb.read("kept.txt"), "ran");
}

#[tokio::test]
async fn a_clients_system_prompt_is_added_to_the_agents_role_not_put_in_its_place() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let c = start(sb.config(
        &llm,
        Wire::Anthropic,
        json!({"prompt": "You are Coder, the agent's own role."}),
    ))
    .await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "s1", "content": "hi", "systemPrompt": "Answer in French."}),
    )
    .await;
    until_done(&mut ws, "s1").await;
    let system = llm.requests()[0].body["system"].to_string();
    let role = system.find("You are Coder, the agent's own role.");
    let extra = system.find("Answer in French.");
    assert!(
        matches!((role, extra), (Some(r), Some(e)) if r < e),
        "{system}"
    );
}

#[tokio::test]
async fn history_renders_a_session_and_a_running_request_reattaches_from_its_start() {
    let sb = Sandbox::new();
    // The second request runs until the reloaded page has followed it.
    let gate = sb.gate("history");
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "f.txt", "content": "A\n"})),
        text("first answer"),
        tool(
            "bash",
            json!({"command": format!("{}; echo slept", gate.command())}),
        ),
        text("second answer"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "h1", "content": "one", "sessionId": "hist", "keepAlive": true}),
    )
    .await;
    let frames = until_done_all(&mut ws, "h1").await;
    // Every tool call ends with a `tool_output` carrying its details: the write's diff.
    let out = frames.iter().find(|f| f["type"] == "tool_output").unwrap();
    assert_eq!(
        (&out["tool"], &out["isError"]),
        (&json!("write"), &json!(false))
    );
    assert!(
        out["details"]["diff"].as_str().unwrap().contains("+A"),
        "{out}"
    );
    let call = frames.iter().find(|f| f["type"] == "tool_use").unwrap();
    assert_eq!(call["args"], json!({"path": "f.txt", "content": "A\n"}));
    assert_eq!(call["callId"], out["callId"]);

    send(
        &mut ws,
        json!({"id": "h2", "content": "two", "sessionId": "hist", "keepAlive": true}),
    )
    .await;
    assert_eq!(next(&mut ws).await["type"], "tool_use");
    drop(ws); // a reload: the keepAlive run goes on

    let mut ws = connect(&c).await;
    send(&mut ws, json!({"type": "history", "sessionId": "hist"})).await;
    let h = next_of(&mut ws, "history").await;
    let items = h["content"]["items"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    // The model, folder and tokens too, as a page shows them during the run.
    assert_eq!(
        kinds,
        [
            "user",
            "context",
            "usage",
            "tool_use",
            "tool_output",
            "usage",
            "text"
        ],
        "{h}"
    );
    assert_eq!(items[0]["content"], "one");
    assert_eq!(items[1]["model"], "claude-scripted");
    assert_eq!(items[1]["workDir"], sb.work.display().to_string());
    assert!(items[2]["content"]["input"].as_u64().unwrap() > 0, "{h}");
    assert!(items[4]["details"]["diff"].as_str().unwrap().contains("+A"));
    assert_eq!(items[6]["content"], "first answer");
    // The running request is not in the items: it is replayed from its start.
    let running = &h["content"]["running"][0];
    assert_eq!(
        (&running["id"], &running["prompt"]),
        (&json!("h2"), &json!("two"))
    );
    send(
        &mut ws,
        json!({"type": "subscribe", "runId": running["runId"], "after": 0}),
    )
    .await;
    // The replay reaches the call the run is held in; then the run may finish.
    let mut frames = Vec::new();
    while frames
        .last()
        .is_none_or(|f: &Value| f["type"] != "tool_use")
    {
        frames.push(next_any(&mut ws).await);
    }
    gate.open();
    frames.extend(until_done_all(&mut ws, "h2").await);
    let kinds: Vec<&str> = frames
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .filter(|k| *k != "usage")
        .collect();
    assert_eq!(
        kinds.get(..2),
        Some(&["context", "tool_use"][..]),
        "replayed from seq 1: {kinds:?}"
    );
    let bash = frames.iter().find(|f| f["type"] == "tool_output").unwrap();
    assert_eq!(bash["details"]["exit_code"], 0);
    assert!(bash["content"].as_str().unwrap().contains("slept"));

    // Finished: the whole conversation is history, and the session is listed.
    send(&mut ws, json!({"type": "history", "sessionId": "hist"})).await;
    let h = next_of(&mut ws, "history").await;
    let users: Vec<&Value> = h["content"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "user")
        .map(|i| &i["content"])
        .collect();
    assert_eq!(users, [&json!("one"), &json!("two")]);
    assert_eq!(h["content"]["running"], json!([]));
    send(&mut ws, json!({"type": "sessions"})).await;
    let s = next_of(&mut ws, "sessions").await;
    assert_eq!(s["content"][0]["id"], "hist");
    assert_eq!(s["content"][0]["title"], "one");
    send(&mut ws, json!({"type": "delete", "sessionId": "hist"})).await;
    assert_eq!(next_of(&mut ws, "deleted").await["content"], "deleted");
}

#[tokio::test]
async fn a_person_labels_steps_and_rates_a_run_and_the_exports_use_them() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "g.txt", "content": "wrong\n"})),
        tool("bash", json!({"command": "true"})),
        text("all done"),
    ])
    .await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;
    send(
        &mut ws,
        json!({"id": "a1", "content": "make g", "sessionId": "ann", "keepAlive": true}),
    )
    .await;
    let frames = until_done(&mut ws, "a1").await;
    let calls: Vec<String> = frames
        .iter()
        .filter(|f| f["type"] == "tool_use")
        .map(|f| f["callId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(calls.len(), 2, "{frames:?}");

    send(&mut ws, json!({"type": "label", "id": "l1", "sessionId": "ann", "callId": calls[0], "label": "incorrect", "note": "wrong content"})).await;
    let f = next(&mut ws).await;
    assert_eq!(
        (f["type"].as_str(), f["content"].as_str(), f["id"].as_str()),
        (Some("annotated"), Some("recorded"), Some("l1")),
        "{f}"
    );
    send(
        &mut ws,
        json!({"type": "label", "sessionId": "ann", "callId": calls[1], "label": "unsure"}),
    )
    .await;
    assert_eq!(next(&mut ws).await["content"], "recorded");
    // Changing one's mind: the last label for a step wins.
    send(
        &mut ws,
        json!({"type": "label", "sessionId": "ann", "callId": calls[1], "label": "correct"}),
    )
    .await;
    assert_eq!(next(&mut ws).await["content"], "recorded");
    send(&mut ws, json!({"type": "rate", "sessionId": "ann", "run": "a1", "rating": "partial", "note": "half right"})).await;
    assert_eq!(next(&mut ws).await["type"], "annotated");
    // Refusals: an unknown step, a label that is not a verdict, a rating that is not one.
    send(
        &mut ws,
        json!({"type": "label", "sessionId": "ann", "callId": "nope", "label": "correct"}),
    )
    .await;
    let f = next(&mut ws).await;
    assert_eq!(f["type"], "error", "{f}");
    assert!(f["content"].as_str().unwrap().contains("no step"), "{f}");
    send(
        &mut ws,
        json!({"type": "label", "sessionId": "ann", "callId": calls[0], "label": "great"}),
    )
    .await;
    let f = next(&mut ws).await;
    assert!(
        f["type"] == "error" && f["content"].as_str().unwrap().contains("label"),
        "{f}"
    );
    send(
        &mut ws,
        json!({"type": "rate", "sessionId": "ann", "rating": "meh"}),
    )
    .await;
    assert_eq!(next(&mut ws).await["type"], "error");

    // The history still renders (annotations are not conversation).
    send(&mut ws, json!({"type": "history", "sessionId": "ann"})).await;
    assert_eq!(next_of(&mut ws, "history").await["type"], "history");

    let s = picogent::session::SessionStore::new(sb.home.join("sessions"))
        .snapshot("ann")
        .unwrap();
    let ann = picogent::session::branches::export(&s, "annotations".parse().unwrap());
    let rows: Vec<(String, Value, Value)> = ann
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_string(),
                r["label"].clone(),
                r["rating"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("step_label".into(), json!("incorrect"), Value::Null),
            ("step_label".into(), json!("unsure"), Value::Null),
            ("step_label".into(), json!("correct"), Value::Null),
            ("run_rating".into(), Value::Null, json!("partial")),
        ]
    );
    assert_eq!(ann[0]["call_id"], calls[0].as_str());
    assert_eq!(ann[0]["note"], "wrong content");
    assert_eq!(ann[0]["branch"], "main");
    assert_eq!(ann[0]["step"], 1, "numbered as the page numbers steps");
    assert_eq!(ann[0]["content"]["args_summary"], "Write: g.txt");
    assert_eq!(
        (ann[3]["run"].as_str(), ann[3]["note"].as_str()),
        (Some("a1"), Some("half right"))
    );

    let prm = picogent::session::branches::export(&s, "prm".parse().unwrap());
    let labels: Vec<(u64, &str, &str)> = prm
        .iter()
        .map(|l| {
            (
                l["step"].as_u64().unwrap(),
                l["label"].as_str().unwrap(),
                l["source"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        labels,
        vec![
            (0, "error", "person"),
            (1, "correct", "person"),
            (2, "correct", "rule")
        ]
    );
    assert_eq!(prm[0]["note"], "wrong content");
}
