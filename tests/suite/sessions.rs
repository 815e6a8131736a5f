//! Sessions: pi v3 shape, resume, crash tolerance.

use std::io::Write;

use picogent::message::Message;
use picogent::session::{Body, Known, SessionStore};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn the_session_file_has_the_pi_v3_shape() {
    let sb = Sandbox::new();
    sb.write("a.txt", "A");
    let llm = ScriptedLlm::start(vec![
        tool("read", json!({"path": "a.txt"})),
        text("It says A."),
    ])
    .await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    run(&agent, "What does a.txt say?", "shape").await;
    let lines = session_lines(&sb.home.join("sessions/shape.jsonl"));
    assert_eq!(lines.len(), 6);
    let h = &lines[0];
    assert_eq!(
        (h["type"].as_str(), h["version"].as_u64(), h["id"].as_str()),
        (Some("session"), Some(3), Some("shape"))
    );
    assert_eq!(h["cwd"], sb.work.display().to_string());
    // A new session starts with the model it uses, as pi's do.
    assert_eq!(lines[1]["type"], "model_change");
    assert_eq!(
        (&lines[1]["provider"], &lines[1]["modelId"]),
        (&json!("anthropic"), &json!("scripted-model"))
    );
    assert_eq!(lines[1]["parentId"], serde_json::Value::Null);
    let mut parent = lines[1]["id"].clone();
    // The rest without it: the messages.
    let lines: Vec<serde_json::Value> = [&lines[..1], &lines[2..]].concat();
    for l in &lines[1..] {
        assert_eq!(l["type"], "message");
        let id = l["id"].as_str().unwrap();
        assert!(
            id.len() == 8 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
        assert_eq!(l["parentId"], parent);
        assert!(l["timestamp"].as_str().unwrap().ends_with('Z'));
        parent = json!(id);
    }
    assert_eq!(lines[1]["message"]["role"], "user");
    assert_eq!(
        lines[1]["message"]["content"][0],
        json!({"type": "text", "text": "What does a.txt say?"})
    );
    let a = &lines[2]["message"];
    assert_eq!(a["role"], "assistant");
    assert_eq!(a["stopReason"], "toolUse");
    assert_eq!(a["provider"], "anthropic");
    assert_eq!(a["content"][0]["type"], "toolCall");
    assert_eq!(a["content"][0]["name"], "read");
    assert_eq!(a["content"][0]["arguments"], json!({"path": "a.txt"}));
    assert!(a["usage"]["input"].as_u64().unwrap() > 0);
    let r = &lines[3]["message"];
    assert_eq!(r["role"], "toolResult");
    assert_eq!(r["toolCallId"], a["content"][0]["id"]);
    assert_eq!(r["toolName"], "read");
    assert_eq!(r["isError"], false);
    assert_eq!(r["content"][0]["text"], "A\n");
    assert_eq!(lines[4]["message"]["stopReason"], "stop");
}

#[tokio::test]
async fn resuming_a_session_carries_its_history() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        text("Nice to meet you, Ada."),
        text("Your name is Ada."),
    ])
    .await;
    let agent = sb.agent(&llm, Wire::OpenAi, json!({}));
    run(&agent, "My name is Ada.", "mem").await;
    let (_, outcome) = run(&agent, "What is my name?", "mem").await;
    assert_eq!(final_text(&outcome), "Your name is Ada.");
    let msgs = llm.requests()[1].body["messages"].clone();
    let roles: Vec<&str> = msgs
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(msgs[1]["content"], "My name is Ada.");
    assert_eq!(msgs[2]["content"], "Nice to meet you, Ada.");
}

#[test]
fn a_torn_last_line_is_dropped_and_the_session_stays_usable() {
    let sb = Sandbox::new();
    let store = SessionStore::new(sb.home.join("sessions"));
    let mut s = store
        .open(store.lock_blocking("torn").unwrap(), &sb.work)
        .unwrap();
    let first = s.append_message(Message::user("hello")).unwrap();
    drop(s);
    // The lock comes back once the writer's line is in the file.
    let lock = store.lock_blocking("torn").unwrap();
    let path = store.path("torn").unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(br#"{"type":"message","id":"deadbeef","parentId":"#)
        .unwrap();
    drop(f);

    let mut s = store.open(lock, &sb.work).unwrap();
    assert_eq!(s.entries().len(), 1);
    assert_eq!(s.leaf(), Some(first.as_str()));
    let second = s.append_message(Message::user("again")).unwrap();
    drop(s);
    let s = store
        .open(store.lock_blocking("torn").unwrap(), &sb.work)
        .unwrap();
    assert_eq!(s.entries().len(), 2);
    assert_eq!(s.entries()[1].parent_id.as_deref(), Some(first.as_str()));
    assert_eq!(s.leaf(), Some(second.as_str()));
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
}

#[test]
fn branching_appends_a_child_of_an_earlier_entry() {
    let sb = Sandbox::new();
    let store = SessionStore::new(sb.home.join("sessions"));
    let mut s = store
        .open(store.lock_blocking("tree").unwrap(), &sb.work)
        .unwrap();
    let a = s.append_message(Message::user("a")).unwrap();
    s.append_message(Message::user("b")).unwrap();
    s.branch_from(Some(&a)).unwrap();
    let c = s.append_message(Message::user("c")).unwrap();
    let ctx = s.context();
    let texts: Vec<String> = ctx
        .messages
        .iter()
        .map(|(_, m)| match m.as_ref() {
            Message::User(u) => picogent::message::blocks_text(&u.content),
            _ => String::new(),
        })
        .collect();
    assert_eq!(texts, ["a", "c"]);
    // Reopened, the leaf is the last entry in the file: the branch.
    drop(s);
    let s = store
        .open(store.lock_blocking("tree").unwrap(), &sb.work)
        .unwrap();
    assert_eq!(s.leaf(), Some(c.as_str()));
    assert_eq!(s.context().messages.len(), 2);
}

#[test]
fn unknown_entry_types_are_kept_and_pi_files_load() {
    let sb = Sandbox::new();
    let store = SessionStore::new(sb.home.join("sessions"));
    let path = store.path("pi").unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        concat!(
            r#"{"type":"session","version":3,"id":"pi","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}"#, "\n",
            r#"{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"plain string content","timestamp":1}}"#, "\n",
            r#"{"type":"label","id":"b2c3d4e5","parentId":"a1b2c3d4","timestamp":"2026-01-01T00:00:02.000Z","targetId":"a1b2c3d4","label":"start"}"#, "\n",
        ),
    )
    .unwrap();
    let s = store
        .open(store.lock_blocking("pi").unwrap(), &sb.work)
        .unwrap();
    assert_eq!(s.entries().len(), 2);
    assert_eq!(s.entries()[1].body, Body::Other("label".into()));
    assert!(matches!(
        &s.entries()[0].body,
        Body::Known(Known::Message { .. })
    ));
    assert_eq!(s.context().messages.len(), 1);
}

#[test]
fn session_ids_cannot_escape_the_sessions_folder() {
    let store = SessionStore::new("/tmp/x");
    for bad in ["../evil", "a/b", "", ".hidden", "x y"] {
        assert!(store.path(bad).is_err(), "{bad:?}");
    }
    assert!(store.path("task-t_12.v2").is_ok());
}

/// A reader (an export, a compare in chat) that opens a session while its writer is
/// in the middle of a line sees the complete entries and leaves the file as it is.
#[test]
fn a_read_during_a_write_leaves_the_file_intact() {
    let sb = Sandbox::new();
    let store = SessionStore::new(sb.home.join("sessions"));
    let mut s = store
        .open(store.lock_blocking("live").unwrap(), &sb.work)
        .unwrap();
    s.append_message(Message::user("hello")).unwrap();
    // Closed (its line written) before the next writer's half line appears.
    drop(s);
    let lock = store.lock_blocking("live").unwrap();
    let path = store.path("live").unwrap();
    // The writer's next line, half written.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(br#"{"type":"message","id":"cafe0001","parentId":"#)
        .unwrap();
    let before = std::fs::read(&path).unwrap();

    let snap = store.snapshot("live").unwrap();
    assert_eq!(snap.entries().len(), 1);
    // The same through the command line's export.
    std::fs::write(
        sb.home.join("agent.json"),
        r#"{"provider": "ollama", "model": "m"}"#,
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["export", "--session", "live", "--agent"])
        .arg(&sb.home)
        .env("HOME", &sb.user_home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a reader changed the file"
    );

    // The writer finishes its line: nothing was lost.
    f.write_all(b"null}\n").unwrap();
    drop(f);
    let s = store.open(lock, &sb.work).unwrap();
    assert_eq!(s.entries().len(), 1 + 1);
}

#[test]
fn custom_entries_of_another_shape_or_tool_are_skipped_not_fatal() {
    use picogent::session::records::Checkpoint;
    use picogent::session::Record;
    let sb = Sandbox::new();
    let store = SessionStore::new(sb.home.join("sessions"));
    let mut s = store
        .open(store.lock_blocking("odd").unwrap(), &sb.work)
        .unwrap();
    s.append_message(Message::user("task")).unwrap();
    let good = Record::Checkpoint(Checkpoint {
        step: 0,
        commit: "c0".into(),
        message: "start".into(),
        dir: None,
    });
    let good_id = s.append_record(&good).unwrap();
    let leaf = s.leaf().unwrap().to_string();
    drop(s);
    let _written = store.lock_blocking("odd").unwrap();
    // A hand-edited checkpoint, another tool's custom entry, a preference whose branch
    // names are numbers, and a record with no data at all.
    let path = store.path("odd").unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let mut parent = leaf;
    for (i, (kind, data)) in [
        ("checkpoint", json!({"step": "one", "commit": 7})),
        ("pi-bookmark", json!({"label": "look here"})),
        ("preference", json!({"chosen": 1, "rejected": 2})),
        ("intervention", serde_json::Value::Null),
        ("branch", json!(["not", "an", "object"])),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("0000000{i}");
        let line = json!({"type": "custom", "customType": kind, "data": data, "id": id,
            "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z"});
        writeln!(f, "{line}").unwrap();
        parent = id;
    }
    drop(f);

    let s = store.snapshot("odd").unwrap();
    assert_eq!(s.entries().len(), 7, "every entry is kept in the tree");
    let records: Vec<Record> = s.records().map(|(_, r)| r).collect();
    assert_eq!(records, vec![good]);
    assert_eq!(
        s.checkpoint(0).map(|(id, c)| (id.to_string(), c.commit)),
        Some((good_id, "c0".into()))
    );
    assert!(s.checkpoint(1).is_none());
    let names: Vec<String> = picogent::session::branches::branches(&s)
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, vec!["main".to_string()]);
    for format in ["trajectory", "tree", "dpo", "prm"] {
        let rows = picogent::session::branches::export(&s, format.parse().unwrap());
        if format == "tree" {
            let kinds: Vec<&str> = rows[0]["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|n| n["kind"].as_str())
                .collect();
            assert!(kinds.contains(&"pi-bookmark"), "{kinds:?}");
        }
        if format == "dpo" {
            assert!(rows.is_empty(), "a malformed preference is not exported");
        }
    }
}

#[test]
fn pi_entries_the_model_sees_are_sent_as_user_text_and_failed_turns_are_left_out() {
    use picogent::message::Message as M;
    let sb = Sandbox::new();
    let store = SessionStore::new(sb.home.join("sessions"));
    let path = store.path("pi2").unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let lines = [
        r#"{"type":"session","version":3,"id":"pi2","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}"#,
        r#"{"type":"message","id":"00000001","parentId":null,"timestamp":"t","message":{"role":"user","content":"first","timestamp":1}}"#,
        r#"{"type":"message","id":"00000002","parentId":"00000001","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"half an answer"}],"api":"x","provider":"x","model":"x","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"aborted","timestamp":2}}"#,
        r#"{"type":"message","id":"00000003","parentId":"00000002","timestamp":"t","message":{"role":"bashExecution","command":"ls","output":"a.txt","exitCode":2,"cancelled":false,"truncated":false,"timestamp":3}}"#,
        r#"{"type":"message","id":"00000004","parentId":"00000003","timestamp":"t","message":{"role":"bashExecution","command":"secret","output":"x","exitCode":0,"cancelled":false,"truncated":false,"excludeFromContext":true,"timestamp":4}}"#,
        r#"{"type":"custom_message","id":"00000005","parentId":"00000004","timestamp":"t","customType":"ext","content":"from an extension","display":true}"#,
        r#"{"type":"message","id":"00000006","parentId":"00000005","timestamp":"t","message":{"role":"custom","customType":"ext","content":[{"type":"text","text":"custom role"}],"display":false,"timestamp":6}}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let s = store.snapshot("pi2").unwrap();
    let texts: Vec<String> = s
        .context()
        .messages
        .iter()
        .map(|(_, m)| match m.as_ref() {
            M::User(u) => format!("user: {}", picogent::message::blocks_text(&u.content)),
            M::Assistant(_) => "assistant".into(),
            M::ToolResult(_) => "tool".into(),
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            "user: first".to_string(),
            "user: Ran `ls`\n```\na.txt\n```\n\nCommand exited with code 2".into(),
            "user: from an extension".into(),
            "user: custom role".into(),
        ]
    );
}

/// The messages of a context, for comparing two views of one session (without the
/// time stamps synthetic messages such as the summary get when they are made).
fn context_messages(s: &picogent::session::Session) -> Vec<(String, serde_json::Value)> {
    s.context()
        .messages
        .iter()
        .map(|(id, m)| {
            let mut v = serde_json::to_value(m.as_ref()).unwrap();
            v["timestamp"] = json!(0);
            (id.to_string(), v)
        })
        .collect()
}

#[tokio::test]
async fn a_writer_keeps_only_messages_since_the_last_compaction_in_memory() {
    let sb = Sandbox::new();
    let body: String = (0..100)
        .map(|i| format!("line {i} {}\n", "x".repeat(50)))
        .collect();
    let names = ["a", "b", "c", "d", "e", "f"];
    for name in names {
        sb.write(&format!("{name}.txt"), &body);
    }
    let mut script: Vec<Turn> = names
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
    run(&agent, "read all six files", "ev").await;
    let store = SessionStore::new(sb.home.join("sessions"));
    let reader = store.snapshot("ev").unwrap();
    let mut writer = store
        .open(store.lock("ev").await.unwrap(), &sb.work)
        .unwrap();
    // Every message before the newest compaction's first kept entry is out of memory,
    // none after it.
    let comp = writer
        .entries()
        .iter()
        .rev()
        .find_map(|e| match &e.body {
            Body::Known(Known::Compaction {
                first_kept_entry_id,
                ..
            }) => Some(first_kept_entry_id.clone()),
            _ => None,
        })
        .expect("the run compacted");
    let kept_at = writer
        .entries()
        .iter()
        .position(|e| e.id() == comp)
        .unwrap();
    let is_message = |b: &Body| matches!(b, Body::Known(Known::Message { .. }));
    let evicted = |b: &Body| matches!(b, Body::Evicted { .. });
    let (before, after) = writer.entries().split_at(kept_at);
    assert!(before.iter().any(|e| evicted(&e.body)));
    assert!(!before.iter().any(|e| is_message(&e.body)));
    assert!(!after.iter().any(|e| evicted(&e.body)));
    // The model sees the same, and so does a branch from before the compaction, whose
    // messages are read back from the file.
    assert_eq!(context_messages(&writer), context_messages(&reader));
    // The first message (the session starts with its model_change, as pi's do).
    let first = reader.entries()[1].id().to_string();
    let mut reader = reader;
    for s in [&mut writer, &mut reader] {
        s.branch_from(Some(&first)).unwrap();
    }
    let early = context_messages(&writer);
    assert_eq!(early.len(), 1);
    assert_eq!(early, context_messages(&reader));
    // Appending after a branch into evicted history keeps working, and a new writer
    // reads the file the same way.
    writer.append_message(Message::user("again")).unwrap();
    drop(writer);
    let again = store
        .open(store.lock("ev").await.unwrap(), &sb.work)
        .unwrap();
    assert_eq!(context_messages(&again).len(), 2);
}

/// An assistant line of a pi session with `content` from `api`/`model`.
fn assistant_line(
    id: &str,
    parent: &str,
    api: &str,
    model: &str,
    content: serde_json::Value,
) -> String {
    json!({"type":"message","id":id,"parentId":parent,"timestamp":"t","message":{
        "role":"assistant","content":content,"api":api,"provider":"x","model":model,
        "usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,
            "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},
        "stopReason":"toolUse","timestamp":2}})
    .to_string()
}

#[tokio::test]
async fn content_from_another_provider_is_converted_before_it_is_sent() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("done")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let dir = sb.home.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let lines = [
        r#"{"type":"session","version":3,"id":"mixed","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}"#.to_string(),
        r#"{"type":"message","id":"00000001","parentId":null,"timestamp":"t","message":{"role":"user","content":"go","timestamp":1}}"#.to_string(),
        assistant_line("00000002", "00000001", "openai-responses", "gpt-5", json!([
            {"type":"thinking","thinking":"openai reasoning","thinkingSignature":"{\"id\":\"rs_1\"}"},
            {"type":"toolCall","id":"call_x|fc_y","name":"bash","arguments":{"command":"true"}}])),
        r#"{"type":"message","id":"00000003","parentId":"00000002","timestamp":"t","message":{"role":"toolResult","toolCallId":"call_x|fc_y","toolName":"bash","content":[{"type":"text","text":"ok"}],"isError":false,"timestamp":3}}"#.to_string(),
        assistant_line("00000004", "00000003", "anthropic-messages", "scripted", json!([
            {"type":"thinking","thinking":"","thinkingSignature":"opaque","redacted":true},
            {"type":"thinking","thinking":"signed","thinkingSignature":"sig"},
            {"type":"toolCall","id":"toolu_1","name":"bash","arguments":{"command":"true"}}])),
        r#"{"type":"message","id":"00000005","parentId":"00000004","timestamp":"t","message":{"role":"toolResult","toolCallId":"toolu_1","toolName":"bash","content":[{"type":"text","text":"ok"}],"isError":false,"timestamp":5}}"#.to_string(),
    ];
    std::fs::write(dir.join("mixed.jsonl"), lines.join("\n") + "\n").unwrap();
    run(&agent, "continue", "mixed").await;
    let msgs = llm.requests()[0].body["messages"].clone();
    let first = &msgs[1]["content"];
    assert_eq!(
        first[0],
        json!({"type":"text","text":"openai reasoning"}),
        "{msgs}"
    );
    assert_eq!(first[1]["id"], "call_x_fc_y");
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], "call_x_fc_y");
    let second = &msgs[3]["content"];
    assert_eq!(
        second[0],
        json!({"type":"redacted_thinking","data":"opaque"}),
        "{msgs}"
    );
    assert_eq!(
        second[1],
        json!({"type":"thinking","thinking":"signed","signature":"sig"})
    );
}

#[tokio::test]
async fn version_1_and_2_pi_files_are_migrated_as_pi_migrates_them() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("still here")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    let dir = sb.home.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    // Version 1: no ids, a compaction keeping entries from index 3 (the header is 0).
    let v1 = [
        r#"{"type":"session","id":"old1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"forgotten","timestamp":1}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"also forgotten","timestamp":2}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"kept","timestamp":3}}"#,
        r#"{"type":"compaction","timestamp":"t","summary":"the early part","firstKeptEntryIndex":3,"tokensBefore":10}"#,
    ];
    std::fs::write(dir.join("old1.jsonl"), v1.join("\n") + "\n").unwrap();
    let store = SessionStore::new(&dir);
    let texts: Vec<String> = store
        .snapshot("old1")
        .unwrap()
        .context()
        .messages
        .iter()
        .map(|(_, m)| match m.as_ref() {
            Message::User(u) => picogent::message::blocks_text(&u.content),
            _ => "other".into(),
        })
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    // Worded as pi words it, so the conversation (and its cache) reads the same in both.
    assert_eq!(
        texts[0],
        "The conversation history before this point was compacted into the following summary:\n\n<summary>\nthe early part\n</summary>"
    );
    assert_eq!(texts[1], "kept");
    // Continuing it rewrites the file as version 3 with a linear chain.
    run(&agent, "more", "old1").await;
    let lines = session_lines(&dir.join("old1.jsonl"));
    assert_eq!(lines[0]["version"], 3);
    for pair in lines[1..].windows(2) {
        assert_eq!(pair[1]["parentId"], pair[0]["id"], "{lines:?}");
    }
    assert_eq!(lines[4]["firstKeptEntryId"], lines[3]["id"]);
    // Version 2: hookMessage is now the custom role (sent as user text).
    let v2 = [
        r#"{"type":"session","version":2,"id":"old2","timestamp":"t","cwd":"/x"}"#,
        r#"{"type":"message","id":"00000001","parentId":null,"timestamp":"t","message":{"role":"hookMessage","customType":"h","content":"from a hook","display":true,"timestamp":1}}"#,
    ];
    std::fs::write(dir.join("old2.jsonl"), v2.join("\n") + "\n").unwrap();
    let s = store.snapshot("old2").unwrap();
    let ctx = s.context();
    match ctx.messages[0].1.as_ref() {
        Message::User(u) => assert_eq!(picogent::message::blocks_text(&u.content), "from a hook"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn model_changes_response_ids_and_costs_are_written_as_pi_writes_them() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("one"), text("two"), text("three")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    run(&agent, "first", "models").await;
    run(&agent, "second", "models").await;
    let other = sb.agent(&llm, Wire::Anthropic, json!({"model": "claude-sonnet-4-6"}));
    run(&other, "third", "models").await;
    let lines = session_lines(&sb.home.join("sessions/models.jsonl"));
    let changes: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "model_change")
        .map(|l| l["modelId"].as_str().unwrap())
        .collect();
    // One when the session started, one when the model changed; none between.
    assert_eq!(changes, ["scripted-model", "claude-sonnet-4-6"]);
    let answers: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["message"]["role"] == "assistant")
        .map(|l| &l["message"])
        .collect();
    assert_eq!(answers.len(), 3);
    assert!(
        answers[0]["responseId"]
            .as_str()
            .unwrap()
            .starts_with("msg_"),
        "{}",
        answers[0]
    );
    // The scripted model has no price; claude-sonnet-4-6 costs $3 / $15 per million.
    assert_eq!(answers[0]["usage"]["cost"]["total"], 0.0);
    let u = &answers[2]["usage"];
    let expected = u["input"].as_f64().unwrap() * 3e-6
        + u["output"].as_f64().unwrap() * 15e-6
        + u["cacheRead"].as_f64().unwrap() * 0.3e-6
        + u["cacheWrite"].as_f64().unwrap() * 3.75e-6;
    let total = u["cost"]["total"].as_f64().unwrap();
    assert!(expected > 0.0 && (total - expected).abs() < 1e-12, "{u}");
}
