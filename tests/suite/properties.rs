//! Property tests: whatever a tracker, a chat client, a session file or a
//! configuration file holds, picogent answers with a value or a clear error, never a
//! panic. (The stream parsers are checked at every byte boundary in
//! `provider::stream`.)

use futures_util::{SinkExt, StreamExt};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// Field names the parsers look for, so generated documents reach past the first check.
const KEYS: &[&str] = &[
    "customType",
    "parentId",
    "commit",
    "chosen",
    "rejected",
    "role",
    "toolCallId",
    "id",
    "type",
    "data",
    "task",
    "task_id",
    "message",
    "content",
    "title",
    "reason",
    "author",
    "name",
    "sessionId",
    "keepAlive",
    "step",
    "after",
    "runId",
    "workDir",
    "systemPrompt",
    "as",
    "provider",
    "model",
    "allowed_paths",
    "max_steps",
    "step_timeout_sec",
    "tracker_url",
    "transport",
    "sandbox",
    "network",
    "checkpoints",
];

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![
            "task.assigned",
            "chat.message",
            "task.cancelled",
            "pause",
            "rollback",
            "subscribe",
            "custom",
            "checkpoint",
            "preference",
            "branch",
            "intervention",
            "..",
            "",
        ])
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(KEYS).prop_map(String::from),
                        "[a-z_]{0,6}"
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    })
}

#[test]
fn tracker_envelopes_never_panic() {
    runner(512)
        .run(
            &(json(), prop::collection::vec(any::<u8>(), 0..64)),
            |(v, junk)| {
                let bytes = serde_json::to_vec(&v).unwrap_or_default();
                for body in [bytes.as_slice(), junk.as_slice()] {
                    if let Ok(env) = picogent::tracker::types::Envelope::from_slice(body) {
                        let _ = picogent::tracker::types::Event::parse(&env);
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn session_files_never_panic() {
    let sb = Sandbox::new();
    let store = picogent::session::SessionStore::new(sb.home.join("sessions"));
    std::fs::create_dir_all(sb.home.join("sessions")).unwrap();
    let header =
        r#"{"type":"session","version":3,"id":"p","timestamp":"2026-11-30T00:00:00Z","cwd":"/"}"#;
    runner(256)
        .run(
            &(prop::collection::vec(json(), 0..8), any::<bool>()),
            |(lines, torn)| {
                let mut text = format!("{header}\n");
                for l in &lines {
                    text.push_str(&l.to_string());
                    text.push('\n');
                }
                if torn {
                    text.push_str("{\"type\":\"message\",\"id\":");
                }
                // The last case's writer may still be writing: its lock is held until then.
                let lock = store.lock_blocking("p").unwrap();
                std::fs::write(store.path("p").unwrap(), &text).unwrap();
                if let Ok(s) = store.snapshot("p") {
                    let _ = s.context();
                    let _ = picogent::session::branches::branches(&s);
                    for format in picogent::session::branches::ExportFormat::ALL {
                        let _ = picogent::session::branches::export(&s, format);
                    }
                }
                if let Ok(mut s) = store.open(lock, &sb.work) {
                    let _ = s.context();
                    let _ = s.append_message(picogent::message::Message::user("x"));
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn configuration_files_never_panic() {
    let sb = Sandbox::new();
    runner(256)
        .run(&json(), |v| {
            std::fs::write(sb.home.join("agent.json"), v.to_string()).unwrap();
            let _ = picogent::config::Config::load(Some(&sb.home), &sb.env(), &sb.base());
            Ok(())
        })
        .unwrap();
}

/// Any text frame gets an answer (or is ignored), and the connection and the server
/// stay usable afterwards.
#[tokio::test]
async fn chat_frames_never_break_the_server() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let listener = picogent::chat::bind("127.0.0.1", 0, None).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let agent = sb.agent(&llm, Wire::Anthropic, serde_json::json!({}));
    tokio::spawn(picogent::chat::serve(agent, listener, stop.clone()));
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    let mut runner = runner(200);
    let strategy = json();
    for _ in 0..200 {
        let v = strategy
            .new_tree(&mut runner)
            .map(|t| t.current())
            .unwrap_or(Value::Null);
        // Message frames would start runs against an empty script: keep to the rest.
        let mut v = v;
        if let Some(o) = v.as_object_mut() {
            o.remove("content");
        }
        ws.send(Message::Text(v.to_string().into())).await.unwrap();
    }
    // Still answering: an unknown control frame gets its error.
    ws.send(Message::Text(r#"{"type":"nonsense","id":"last"}"#.into()))
        .await
        .unwrap();
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(20), ws.next())
            .await
            .expect("the server stopped answering")
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            if t.contains("nonsense") {
                break;
            }
        }
    }
    stop.cancel();
}
