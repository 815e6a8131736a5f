//! Provider faults: retries with hints, broken streams, errors that must not be retried.

use picogent::agent::AgentEvent;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn rate_limits_overload_and_server_errors_are_retried() {
    for wire in Wire::ALL {
        let sb = Sandbox::new();
        let llm = ScriptedLlm::start(vec![
            Turn::Status(429, Some(10)),
            Turn::Status(529, Some(10)),
            Turn::Status(500, None),
            text("finally"),
        ])
        .await;
        let agent = sb.agent(&llm, wire, json!({}));
        let (events, outcome) = run(&agent, "hi", "p1").await;
        assert_eq!(final_text(&outcome), "finally", "{wire:?}");
        assert_eq!(llm.request_count(), 4);
        let retries: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::Retry { attempt, .. } => Some(*attempt),
                _ => None,
            })
            .collect();
        assert_eq!(retries, vec![1, 2, 3]);
    }
}

#[tokio::test]
async fn retry_after_ms_is_honoured() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Status(429, Some(700)), text("ok")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let (events, _) = run(&agent, "hi", "p2").await;
    let delay = events.iter().find_map(|e| match e {
        AgentEvent::Retry { delay_ms, .. } => Some(*delay_ms),
        _ => None,
    });
    // The hint (700 ms) wins over the fast test backoff (20 ms).
    assert_eq!(delay, Some(700));
}

#[tokio::test]
async fn a_stream_cut_midway_is_retried_as_a_whole_call() {
    for wire in Wire::ALL {
        let sb = Sandbox::new();
        let llm = ScriptedLlm::start(vec![Turn::Drop, text("complete answer")]).await;
        let agent = sb.agent(&llm, wire, json!({}));
        let (events, outcome) = run(&agent, "hi", "p3").await;
        assert_eq!(final_text(&outcome), "complete answer", "{wire:?}");
        assert_eq!(llm.request_count(), 2);
        assert!(events.iter().any(|e| matches!(e, AgentEvent::Retry { .. })));
    }
}

#[tokio::test]
async fn an_overloaded_error_event_mid_stream_is_retried() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::ErrorEvent, text("second try")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let (_, outcome) = run(&agent, "hi", "p4").await;
    assert_eq!(final_text(&outcome), "second try");
}

#[tokio::test]
async fn client_errors_are_not_retried_and_reach_the_user() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Status(400, None), text("never")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let (_, outcome) = run(&agent, "hi", "p5").await;
    assert_eq!(failure_kind(&outcome), picogent::agent::FailureKind::Model);
    let err = failure(&outcome);
    assert!(
        err.contains("HTTP 400") && err.contains("scripted failure"),
        "{err}"
    );
    assert_eq!(llm.request_count(), 1);
}

#[tokio::test]
async fn a_wrong_api_key_fails_with_the_servers_message() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("never")]).await;
    let mut cfg = sb.config(&llm, Wire::Anthropic, json!({}));
    cfg.api_key = Some("wrong".into());
    let agent = agent_from(cfg);
    let (_, outcome) = run(&agent, "hi", "p6").await;
    assert_eq!(failure_kind(&outcome), picogent::agent::FailureKind::Model);
    let err = failure(&outcome);
    assert!(
        err.contains("HTTP 401") && err.contains("invalid x-api-key"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_fails_after_retries_naming_the_url() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let mut cfg = sb.config(&llm, Wire::OpenAi, json!({}));
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    cfg.base_url = format!("http://127.0.0.1:{port}/v1");
    let agent = agent_from(cfg);
    let (events, outcome) = run(&agent, "hi", "p7").await;
    assert_eq!(failure_kind(&outcome), picogent::agent::FailureKind::Model);
    let err = failure(&outcome);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    let retries = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Retry { .. }))
        .count();
    assert_eq!(retries, 3);
}
