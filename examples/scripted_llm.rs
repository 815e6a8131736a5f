//! The tests' scripted LLM server as a standalone program, for benchmarks:
//! `scripted_llm SCRIPT.json [--per-conversation] [--cache] [--latency-ms N]` serves the script's turns
//! over all three wire formats (starting over when it runs out) and prints
//! `listening on ADDR` once ready. `GET /_stats` says how many requests came, each
//! conversation's first request size, and the input tokens of all requests by how they
//! were billed (`fresh`, `cache_write`, `cache_read`). `--cache` parses requests to
//! simulate the APIs' prompt caching (off otherwise, so the server's own cost stays
//! flat in timing benchmarks; every request then counts as fresh).
//!
//! SCRIPT.json is a list of turns: `{"text": "..."}`, `{"tool": "read", "args": {...}}`, or
//! both (the text, then the call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use picogent_testkit::llm;

use serde_json::Value;

#[tokio::main]
async fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: scripted_llm SCRIPT.json");
    let script: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let turns: Vec<llm::Turn> = script
        .iter()
        .map(|t| match (t.get("text"), t.get("tool")) {
            // Text, then a tool call, in one turn.
            (Some(text), Some(name)) => llm::Turn::Tools(
                text.as_str().unwrap().to_string(),
                vec![(name.as_str().unwrap().to_string(), t["args"].clone())],
            ),
            (Some(text), _) => llm::text(text.as_str().unwrap()),
            (_, Some(name)) => llm::tool(name.as_str().unwrap(), t["args"].clone()),
            _ => panic!("a turn needs `text` or `tool`: {t}"),
        })
        .collect();
    let server = llm::ScriptedLlm::start(Vec::new()).await;
    server.light();
    if std::env::args().any(|a| a == "--cache") {
        server.cache_in_light_mode();
    }
    // --per-conversation: every conversation gets the script from its start, chosen by
    // how many assistant turns a request carries, so agents can run side by side.
    if std::env::args().any(|a| a == "--per-conversation") {
        server.per_conversation(turns);
    } else {
        server.cycle(turns);
    }
    // --latency-ms N: every answer waits N ms, as a real model thinks.
    let args: Vec<String> = std::env::args().collect();
    if let Some(ms) = args
        .iter()
        .position(|a| a == "--latency-ms")
        .and_then(|i| args.get(i + 1))
    {
        server.latency(std::time::Duration::from_millis(ms.parse().unwrap()));
    }
    println!("listening on {}", server.addr);
    tokio::signal::ctrl_c().await.unwrap();
}
