//! `GET /metrics`: Prometheus text on the agent-mode and chat servers, behind their
//! tokens.

use serde_json::json;

use crate::common::tracker::{FakeTracker, TOKEN};
use crate::common::*;

async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test]
async fn agent_mode_counts_runs_tools_model_calls_and_queues_behind_the_token() {
    let sb = Sandbox::new();
    sb.write("a.txt", "alpha");
    let llm = ScriptedLlm::start(vec![tool("read", json!({"path": "a.txt"})), text("Done.")]).await;
    let tracker = FakeTracker::start().await;
    // A process of its own: the counters are the process's.
    sb.write_config(
        &llm,
        Wire::Anthropic,
        json!({"tracker_url": tracker.url(), "listen_port": 0}),
    );
    let mut daemon = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    let event = json!({"id": "e1", "type": "task.assigned",
        "data": {"task": {"id": "m1", "title": "Read it"}}});
    tracker.deliver(&cb, &event).await;
    tracker.wait_status("m1", "review", 20).await;
    let url = cb.replace("/events", "/metrics");
    assert_eq!(get(&url, None).await.0, 401);
    assert_eq!(get(&url, Some("wrong")).await.0, 401);
    let (status, text) = get(&url, Some(TOKEN)).await;
    assert_eq!(status, 200);
    for line in [
        r#"picogent_runs_finished_total{outcome="completed",kind="none"} 1"#,
        r#"picogent_tool_calls_total{tool="read",result="ok"} 1"#,
        r#"picogent_model_calls_total{provider="anthropic",result="ok"} 2"#,
        "picogent_queued_jobs 0",
        "picogent_running_jobs 0",
        "# TYPE picogent_model_call_seconds histogram",
        // Prometheus text 0.0.4 by default: a counter's family has its samples' name.
        "# TYPE picogent_runs_started_total counter",
        "picogent_build_info{version=",
        "# TYPE process_resident_memory_bytes gauge",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    assert!(!text.contains("=\"\""), "an empty label value:\n{text}");
    assert!(!text.contains("# EOF"));
    // OpenMetrics for a scraper that asks for it.
    let open = reqwest::Client::new()
        .get(&url)
        .bearer_auth(TOKEN)
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap();
    assert!(open.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let open = open.text().await.unwrap();
    assert!(open.ends_with("# EOF\n"), "{open}");
    assert!(
        open.contains("# TYPE picogent_runs_started counter"),
        "{open}"
    );
    assert!(
        text.contains(r#"picogent_tokens_total{direction="output"}"#),
        "{text}"
    );
    let _ = daemon.kill().await;
}

#[tokio::test]
async fn chat_metrics_need_the_chat_token_when_one_is_set() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let mut config = sb.config(&llm, Wire::Anthropic, json!({}));
    config.chat.token = Some("chat-secret".into());
    let agent = agent_from(config);
    let stop = tokio_util::sync::CancellationToken::new();
    let listener = picogent::chat::bind("127.0.0.1", 0, Some("chat-secret"))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(picogent::chat::serve(agent, listener, stop.clone()));
    let url = format!("http://{addr}/metrics");
    assert_eq!(get(&url, None).await.0, 401);
    let (status, text) = get(&url, Some("chat-secret")).await;
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE picogent_runs_started_total counter"),
        "{text}"
    );
    stop.cancel();
    let _ = server.await;
}
