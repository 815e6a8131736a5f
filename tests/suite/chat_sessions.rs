//! The sessions list of a server with a year of sessions: every one reachable a page
//! at a time, searched on the server over titles, first prompts and names, titles as
//! typed, a changed file read again.

use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

use crate::common::chat::{connect, next_of, send, start, Ws};
use crate::common::*;

/// A session file as pi writes it, whose first prompt is `prompt`, last changed `age` ago.
fn session_file(sb: &Sandbox, id: &str, prompt: &str, age: Duration) {
    let dir = sb.home.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{id}.jsonl"));
    let lines = [
        json!({"type": "session", "version": 3, "id": id, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work"}),
        json!({"type": "message", "id": "00000001", "parentId": null, "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}], "timestamp": 1}}),
    ];
    let text: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    std::fs::write(&path, text).unwrap();
    let f = std::fs::File::options().append(true).open(&path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

async fn ask(ws: &mut Ws, frame: Value) -> Value {
    send(ws, frame).await;
    next_of(ws, "sessions").await
}

fn ids(page: &Value) -> Vec<String> {
    page["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_year_of_sessions_is_paged_and_searched_on_the_server_with_titles_as_typed() {
    let sb = Sandbox::new();
    // 250 sessions, one a day and a half apart: more than a year.
    for i in 0..250u64 {
        session_file(
            &sb,
            &format!("s{i:03}"),
            &format!("routine question {i}"),
            Duration::from_secs(i * 36 * 3600 + 60),
        );
    }
    let long = format!("{} the needle is here", "padding ".repeat(60));
    session_file(
        &sb,
        "typed-1",
        "test_parse_config fails for `C#` files in ~/.config",
        Duration::from_secs(400 * 86400),
    );
    session_file(&sb, "typed-2", &long, Duration::from_secs(401 * 86400));
    // Not sessions, and never read: a pipe (opening it would wait for a writer) and a
    // link to an endless device, as a command could leave in the folder.
    let dir = sb.home.join("sessions");
    let fifo = std::process::Command::new("mkfifo")
        .arg(dir.join("pipe.jsonl"))
        .status()
        .unwrap();
    assert!(fifo.success());
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.jsonl")).unwrap();
    let llm = ScriptedLlm::start(vec![]).await;
    let c = start(sb.config(&llm, Wire::Anthropic, json!({}))).await;
    let mut ws = connect(&c).await;

    // Every session, newest first, a page at a time.
    let mut all = Vec::new();
    let mut before = Value::Null;
    for n in 0.. {
        let mut frame = json!({"type": "sessions", "id": format!("p{n}"), "limit": 100});
        if !before.is_null() {
            frame["before"] = before.clone();
        }
        let page = ask(&mut ws, frame).await;
        assert_eq!(page["id"], format!("p{n}"));
        all.extend(ids(&page));
        let last = page["content"].as_array().unwrap().last().cloned().unwrap();
        before = json!({"modified": last["modified"], "id": last["id"]});
        if page["more"] != true {
            break;
        }
        assert_eq!(ids(&page).len(), 100, "a full page before the last");
    }
    assert_eq!(all.len(), 252, "every session once");
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 252);
    assert_eq!(&all[..3], ["s000", "s001", "s002"]);
    assert_eq!(&all[250..], ["typed-1", "typed-2"]);

    // The server searches every session (not only the newest page), any case, in the
    // first prompt beyond the title's length too; titles are as typed.
    let found = ask(
        &mut ws,
        json!({"type": "sessions", "id": "q1", "query": "PARSE_CONFIG"}),
    )
    .await;
    assert_eq!(ids(&found), ["typed-1"]);
    assert_eq!(
        found["content"][0]["title"],
        "test_parse_config fails for `C#` files in ~/.config"
    );
    assert_eq!(found["more"], false);
    let found = ask(
        &mut ws,
        json!({"type": "sessions", "id": "q2", "query": "the needle"}),
    )
    .await;
    assert_eq!(ids(&found), ["typed-2"]);
    let found = ask(
        &mut ws,
        json!({"type": "sessions", "id": "q3", "query": "routine question 24", "limit": 5}),
    )
    .await;
    assert_eq!(ids(&found), ["s024", "s240", "s241", "s242", "s243"]);
    assert_eq!(found["more"], true);
    let found = ask(
        &mut ws,
        json!({"type": "sessions", "id": "q4", "query": "no such words"}),
    )
    .await;
    assert_eq!(ids(&found), Vec::<String>::new());

    // A name given later is found: the changed file is read again.
    let path = sb.home.join("sessions/s100.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(
        &json!({"type": "session_info", "id": "00000002", "parentId": "00000001",
        "timestamp": "2026-01-02T00:00:00.000Z", "name": "Quarterly report"})
        .to_string(),
    );
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    let found = ask(
        &mut ws,
        json!({"type": "sessions", "id": "q5", "query": "quarterly"}),
    )
    .await;
    assert_eq!(ids(&found), ["s100"]);
    assert_eq!(found["content"][0]["name"], "Quarterly report");

    // Bad pages are refused, naming the field.
    for (frame, field) in [
        (json!({"type": "sessions", "id": "b1", "limit": 0}), "limit"),
        (
            json!({"type": "sessions", "id": "b2", "limit": 501}),
            "limit",
        ),
        (
            json!({"type": "sessions", "id": "b3", "query": "x".repeat(201)}),
            "query",
        ),
        (
            json!({"type": "sessions", "id": "b4", "before": {"modified": "yesterday", "id": "s1"}}),
            "before",
        ),
    ] {
        send(&mut ws, frame).await;
        let e = next_of(&mut ws, "error").await;
        assert!(e["content"].as_str().unwrap().contains(field), "{e}");
    }
}
