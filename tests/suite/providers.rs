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
    cfg.llm.api_key = Some("wrong".into());
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
    cfg.llm.base_url = format!("http://127.0.0.1:{port}/v1");
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

#[tokio::test]
async fn sampling_settings_reach_every_provider_and_ollama_gets_its_window() {
    for wire in Wire::ALL {
        let sb = Sandbox::new();
        let llm = ScriptedLlm::start(vec![text("ok")]).await;
        let agent = sb.agent(
            &llm,
            wire,
            json!({"temperature": 0.25, "keep_alive": "10m", "context_window": 50000}),
        );
        run(&agent, "hi", "s").await;
        let body = &llm.requests()[0].body;
        match wire {
            Wire::Ollama => {
                assert_eq!(body["options"]["num_ctx"], 50000, "{body}");
                assert_eq!(body["options"]["temperature"], 0.25, "{body}");
                assert_eq!(body["keep_alive"], "10m", "{body}");
            }
            _ => assert_eq!(body["temperature"], 0.25, "{wire:?}: {body}"),
        }
    }
}

#[tokio::test]
async fn openai_reasoning_models_get_max_completion_tokens() {
    // By name, and after a 400 that says so (once, then remembered).
    for model in ["o3-mini", "reasoner-1"] {
        let sb = Sandbox::new();
        let llm = ScriptedLlm::start(vec![text("one"), text("two")]).await;
        let agent = sb.agent(
            &llm,
            Wire::OpenAi,
            json!({"model": model, "max_tokens": 1000}),
        );
        run(&agent, "hi", "a").await;
        run(&agent, "again", "b").await;
        let bodies: Vec<_> = llm.requests().into_iter().map(|r| r.body).collect();
        let last = bodies.last().unwrap();
        assert_eq!(last["max_completion_tokens"], 1000, "{model}: {last}");
        assert!(last.get("max_tokens").is_none(), "{model}: {last}");
        assert_eq!(
            bodies.len(),
            2,
            "{model}: the refused call is not recorded as a turn"
        );
    }
}

#[tokio::test]
async fn an_anthropic_auth_token_is_sent_as_a_bearer_token() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let mut config = sb.config(&llm, Wire::Anthropic, json!({}));
    config.llm.api_key = None;
    let env = picogent::config::Env::from_pairs([
        ("HOME", sb.user_home.display().to_string()),
        ("ANTHROPIC_AUTH_TOKEN", llm::API_KEY.to_string()),
    ]);
    let token_config = picogent::config::Config::load(Some(&sb.home), &env, &sb.base()).unwrap();
    let agent = agent_from(token_config);
    let (_, outcome) = run(&agent, "hi", "t").await;
    assert!(outcome.is_success(), "{outcome:?}");
    let headers = &llm.requests()[0].headers;
    assert_eq!(
        headers.get("authorization").and_then(|v| v.to_str().ok()),
        Some(format!("Bearer {}", llm::API_KEY).as_str())
    );
    assert!(headers.get("x-api-key").is_none());
}
