//! Prompt caching: the breakpoints picogent sends, what the scripted server's cache
//! (Anthropic's and OpenAI's rules) makes of them, and the cache usage recorded in the
//! session, the events and the run summary.

use std::time::Duration;

use picogent::agent::AgentEvent;
use picogent::message::Usage;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::llm::{system_text, CacheUse, LIFETIME, MIN_CACHEABLE_TOKENS};
use crate::common::*;

/// A role long enough that system + tools pass the minimum cacheable length alone.
fn long_role() -> String {
    "You are a careful agent. Look before you change anything. ".repeat(90)
}

/// Where a request carries `cache_control`: "system", "tools[i]", "messages[i][j]".
fn breakpoints(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let marked = |b: &Value| b.get("cache_control").is_some_and(|c| !c.is_null());
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if marked(t) {
            out.push(format!("tools[{i}]"));
        }
    }
    for b in body["system"].as_array().into_iter().flatten() {
        if marked(b) {
            out.push("system".into());
        }
    }
    for (i, m) in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            if marked(b) {
                out.push(format!("messages[{i}][{j}]"));
            }
        }
    }
    out
}

fn reads(n: usize) -> Vec<Turn> {
    let mut script: Vec<Turn> = (0..n)
        .map(|i| tool("read", json!({"path": "notes.txt", "limit": i + 1})))
        .collect();
    script.push(text("done"));
    script
}

fn usages(events: &[AgentEvent]) -> Vec<Usage> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Usage { usage, .. } => Some(usage.clone()),
            _ => None,
        })
        .collect()
}

/// The usage the scripted server reported for each request, as picogent records it.
fn as_recorded(c: &CacheUse) -> (u64, u64, u64) {
    (c.fresh as u64, c.write as u64, c.read as u64)
}

#[tokio::test]
async fn breakpoints_sit_on_the_system_prompt_and_the_two_newest_user_turns() {
    let sb = Sandbox::new();
    sb.write("notes.txt", "alpha\nbeta\ngamma\n");
    let llm = ScriptedLlm::start(reads(3)).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let (_, outcome) = run(&agent, "read the notes", "c1").await;
    assert_eq!(final_text(&outcome), "done");
    let got: Vec<Vec<String>> = llm
        .requests()
        .iter()
        .map(|r| breakpoints(&r.body))
        .collect();
    // Messages alternate user / assistant; each user turn has one block here.
    let expected: Vec<Vec<String>> = vec![
        vec!["system".into(), "messages[0][0]".into()],
        vec![
            "system".into(),
            "messages[0][0]".into(),
            "messages[2][0]".into(),
        ],
        vec![
            "system".into(),
            "messages[2][0]".into(),
            "messages[4][0]".into(),
        ],
        vec![
            "system".into(),
            "messages[4][0]".into(),
            "messages[6][0]".into(),
        ],
    ];
    assert_eq!(got, expected);
}

#[tokio::test]
async fn each_step_reads_the_previous_steps_prefix_and_writes_only_its_growth() {
    let sb = Sandbox::new();
    sb.write("notes.txt", &"a line of notes\n".repeat(40));
    let llm = ScriptedLlm::start(reads(5)).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"prompt": long_role()}));
    let (events, outcome) = run(&agent, "read the notes", "c2").await;
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    let used: Vec<CacheUse> = reqs.iter().map(|r| r.cache).collect();
    assert_eq!(used.len(), 6);
    assert_eq!(used[0].read, 0, "{used:?}");
    assert!(used[0].write >= MIN_CACHEABLE_TOKENS, "{used:?}");
    for k in 1..used.len() {
        // The previous request's whole cached prefix comes back; only the new turn is
        // written, and what is sent fresh is just the request's own framing.
        assert_eq!(
            used[k].read,
            used[k - 1].read + used[k - 1].write,
            "{used:?}"
        );
        assert!(
            used[k].write > 0 && used[k].write < used[0].write,
            "{used:?}"
        );
        assert!(used[k].fresh * 10 < used[k].read, "{used:?}");
    }

    // Recorded as reported: in the usage events, the session's assistant messages
    // (pi's cacheRead / cacheWrite) and the outcome's total.
    let from_events: Vec<(u64, u64, u64)> = usages(&events)
        .iter()
        .map(|u| (u.input, u.cache_write, u.cache_read))
        .collect();
    let from_server: Vec<(u64, u64, u64)> = used.iter().map(as_recorded).collect();
    assert_eq!(from_events, from_server);
    let lines = session_lines(&sb.home.join("sessions/c2.jsonl"));
    let from_session: Vec<(u64, u64, u64)> = lines
        .iter()
        .filter(|l| l["message"]["role"] == "assistant")
        .map(|l| {
            let u = &l["message"]["usage"];
            let n = |k: &str| u[k].as_u64().unwrap();
            (n("input"), n("cacheWrite"), n("cacheRead"))
        })
        .collect();
    assert_eq!(from_session, from_server);
    let total = match &outcome {
        picogent::agent::Outcome::Completed { usage, .. } => usage.clone(),
        other => panic!("{other:?}"),
    };
    let sum = |f: fn(&CacheUse) -> usize| used.iter().map(f).sum::<usize>() as u64;
    assert_eq!(
        (total.input, total.cache_write, total.cache_read),
        (sum(|c| c.fresh), sum(|c| c.write), sum(|c| c.read))
    );
}

#[tokio::test]
async fn after_a_compaction_the_new_prefix_is_cached_again() {
    let sb = Sandbox::new();
    let body: String = (0..100)
        .map(|i| format!("line {i} {}\n", "x".repeat(50)))
        .collect();
    for name in ["a", "b", "c", "d", "e", "f"] {
        sb.write(&format!("{name}.txt"), &body);
    }
    let mut script: Vec<Turn> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|n| tool("read", json!({"path": format!("{n}.txt")})))
        .collect();
    script.push(text("all read"));
    let llm = ScriptedLlm::start(script).await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"prompt": long_role(), "context_window": 10000, "max_tokens": 1000}),
    );
    let (events, outcome) = run(&agent, "read all six files", "c3").await;
    assert_eq!(final_text(&outcome), "all read");
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::Compacted { .. })));
    let reqs = llm.requests();
    // The summary call is a one-off: no breakpoints, nothing cached.
    let summary = reqs
        .iter()
        .position(|r| r.body.get("tools").is_none())
        .unwrap();
    assert_eq!(breakpoints(&reqs[summary].body), Vec::<String>::new());
    assert_eq!(
        (reqs[summary].cache.write, reqs[summary].cache.read),
        (0, 0)
    );
    // The first request after it starts from the summary: tools + system come from the
    // cache, the new conversation prefix is written; the next step reads it back.
    let (after, next) = (&reqs[summary + 1], &reqs[summary + 2]);
    let msgs = after.body["messages"].as_array().unwrap();
    assert!(msgs[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains(llm::SUMMARY));
    assert!(
        after.cache.read > 0 && after.cache.write > 0,
        "{:?}",
        after.cache
    );
    assert_eq!(next.cache.read, after.cache.read + after.cache.write);
}

/// An Anthropic request of `blocks` user text blocks of about 300 tokens each, with
/// breakpoints on the listed blocks.
fn raw_request(blocks: usize, marks: &[usize]) -> Value {
    let content: Vec<Value> = (0..blocks)
        .map(|i| {
            let mut b = json!({"type": "text", "text": format!("block {i} {}", "y".repeat(1200))});
            if marks.contains(&i) {
                b["cache_control"] = json!({"type": "ephemeral"});
            }
            b
        })
        .collect();
    json!({"model": "m", "max_tokens": 10, "stream": true, "system": "short",
        "tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": content}]})
}

/// Sends a request to the scripted server: the usage its `message_start` reports, or
/// the HTTP status of a refusal.
async fn send(llm: &ScriptedLlm, body: &Value) -> Result<(u64, u64, u64), u16> {
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/messages", llm.addr))
        .header("x-api-key", llm::API_KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    if !resp.status().is_success() {
        return Err(resp.status().as_u16());
    }
    let text = resp.text().await.unwrap();
    let data = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("data: ")
                .filter(|d| d.contains("message_start"))
        })
        .unwrap();
    let u = serde_json::from_str::<Value>(data).unwrap()["message"]["usage"].clone();
    let n = |k: &str| u[k].as_u64().unwrap();
    Ok((
        n("input_tokens"),
        n("cache_creation_input_tokens"),
        n("cache_read_input_tokens"),
    ))
}

#[tokio::test]
async fn the_scripted_cache_follows_anthropics_rules() {
    let llm = ScriptedLlm::start(vec![text("ok"); 12]).await;
    // Below the minimum cacheable length: processed without caching.
    let (_, write, read) = send(&llm, &raw_request(2, &[1])).await.unwrap();
    assert_eq!((write, read), (0, 0));
    // Written once, then read back whole.
    let (_, w1, r1) = send(&llm, &raw_request(5, &[4])).await.unwrap();
    assert!(w1 as usize >= MIN_CACHEABLE_TOKENS && r1 == 0, "{w1} {r1}");
    let (_, w2, r2) = send(&llm, &raw_request(5, &[4])).await.unwrap();
    assert_eq!((w2, r2), (0, w1));
    // Grown by a few blocks, marked only at the new end: found by the look-back.
    let (_, w3, r3) = send(&llm, &raw_request(8, &[7])).await.unwrap();
    assert_eq!(r3, w1);
    assert!(w3 > 0);
    // Grown past the look-back (20 blocks) with one breakpoint: a miss, all written.
    let (_, w4, r4) = send(&llm, &raw_request(30, &[29])).await.unwrap();
    assert_eq!(r4, 0);
    assert!(w4 > w1 + w3);
    // Each read renews the lifetime; past it, the entry is gone.
    llm.advance_clock(LIFETIME - Duration::from_secs(60));
    assert_eq!(send(&llm, &raw_request(5, &[4])).await.unwrap().2, w1);
    llm.advance_clock(LIFETIME - Duration::from_secs(60));
    assert_eq!(send(&llm, &raw_request(5, &[4])).await.unwrap().2, w1);
    llm.advance_clock(LIFETIME + Duration::from_secs(1));
    let (_, w5, r5) = send(&llm, &raw_request(5, &[4])).await.unwrap();
    assert_eq!((w5, r5), (w1, 0));
    // More than four breakpoints are refused, as the API does.
    assert_eq!(
        send(&llm, &raw_request(6, &[0, 1, 2, 3, 4])).await,
        Err(400)
    );
}

#[tokio::test]
async fn openai_cached_tokens_are_recorded_and_no_cache_key_goes_to_other_servers() {
    let sb = Sandbox::new();
    sb.write("notes.txt", &"a line of notes\n".repeat(40));
    let llm = ScriptedLlm::start(reads(3)).await;
    let agent = sb.agent(&llm, Wire::OpenAi, json!({"prompt": long_role()}));
    let (events, outcome) = run(&agent, "read the notes", "c5").await;
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    // The scripted server is not api.openai.com: no field it might refuse.
    assert!(reqs
        .iter()
        .all(|r| r.body.get("prompt_cache_key").is_none()));
    let used: Vec<CacheUse> = reqs.iter().map(|r| r.cache).collect();
    assert_eq!(used[0].read, 0);
    assert!(
        used[1..].iter().all(|c| c.read >= MIN_CACHEABLE_TOKENS),
        "{used:?}"
    );
    let from_events: Vec<(u64, u64, u64)> = usages(&events)
        .iter()
        .map(|u| (u.input, u.cache_write, u.cache_read))
        .collect();
    let from_server: Vec<(u64, u64, u64)> = used.iter().map(as_recorded).collect();
    assert_eq!(from_events, from_server);
}

/// The system prompt and the tool list of every request, as sent.
fn prefix_of(wire: Wire, body: &Value) -> (String, String) {
    let system = match wire {
        Wire::Anthropic => system_text(body),
        _ => body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    };
    (system, body["tools"].to_string())
}

#[tokio::test]
async fn system_prompt_and_tools_are_identical_from_step_to_step_and_run_to_run() {
    for wire in Wire::ALL {
        let sb = Sandbox::new();
        sb.write("notes.txt", "alpha\n");
        for name in ["zeta", "alpha", "mid"] {
            sb.add_skill(name, &format!("the {name} skill"), "body");
        }
        let mut script = reads(3);
        script.extend(reads(2));
        let llm = ScriptedLlm::start(script).await;
        let agent = sb.agent(&llm, wire, json!({}));
        run(&agent, "first", "c6").await;
        // A pause, so a clock in the prompt would show.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (_, outcome) = run(&agent, "second", "c6").await;
        assert_eq!(final_text(&outcome), "done");
        let reqs = llm.requests();
        assert_eq!(reqs.len(), 7, "{wire:?}");
        let first = prefix_of(wire, &reqs[0].body);
        assert!(first.0.contains("<name>alpha</name>"), "{wire:?}");
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(prefix_of(wire, &r.body), first, "{wire:?} request {i}");
        }
    }
}

#[tokio::test]
async fn the_run_summary_shows_cache_reads_and_writes() {
    let sb = Sandbox::new();
    sb.write("notes.txt", "alpha\n");
    let llm = ScriptedLlm::start(reads(2)).await;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    cmd.args(["run", "--dir", &sb.work.display().to_string(), "go"])
        .current_dir(sb.base())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sb.user_home)
        .env("RUST_LOG", "warn")
        .env("PICOGENT_PROVIDER", "anthropic")
        .env("PICOGENT_BASE_URL", llm.base_url(Wire::Anthropic))
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("AGENT_PROMPT", long_role());
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let t = llm.cache_totals();
    assert!(t.read > 0 && t.write > 0, "{t:?}");
    let expected = format!(
        "done: 3 steps, {} input ({} read from cache, {} written to cache) / 60 output tokens",
        t.fresh + t.read + t.write,
        t.read,
        t.write
    );
    assert!(stderr.contains(&expected), "{expected}\n{stderr}");
}
