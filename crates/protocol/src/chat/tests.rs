//! The protocol's unit tests: every frame round-trips, errors name the field.

use super::*;
use serde_json::json;

fn round_trip(frame: ClientFrame) {
    let text = serde_json::to_string(&frame).unwrap();
    assert_eq!(parse(&text), Ok(frame), "{text}");
}

fn error(v: Value) -> FrameError {
    parse(&v.to_string()).unwrap_err()
}

fn to(id: &str) -> Target {
    Target {
        id: Some(id.into()),
        run_id: None,
    }
}

#[test]
fn every_client_frame_round_trips() {
    round_trip(ClientFrame::Prompt(Prompt {
        id: "m1".into(),
        content: "hi".into(),
        session_id: None,
        work_dir: None,
        system_prompt: None,
        keep_alive: false,
    }));
    round_trip(ClientFrame::Prompt(Prompt {
        id: "m2".into(),
        content: "hi".into(),
        session_id: Some("s-1".into()),
        work_dir: Some("/w".into()),
        system_prompt: Some("be brief".into()),
        keep_alive: true,
    }));
    round_trip(ClientFrame::Subscribe(Subscribe {
        to: Target {
            id: None,
            run_id: Some("run-1".into()),
        },
        after: 7,
    }));
    let actions = [
        Action::Cancel,
        Action::Pause,
        Action::Resume,
        Action::Stop,
        Action::Instruct(Instruct {
            content: "go on".into(),
            role: Some(Role::System),
        }),
        Action::Instruct(Instruct {
            content: "go on".into(),
            role: None,
        }),
        Action::Rollback(Rollback { step: 2 }),
        Action::Branch(Branch {
            step: 1,
            content: "try B".into(),
            name: Some("try-b".into()),
        }),
        Action::Branch(Branch {
            step: 1,
            content: "try B".into(),
            name: None,
        }),
    ];
    for action in actions {
        round_trip(ClientFrame::Control(Control {
            to: to("m1"),
            action,
        }));
    }
    let queries = [
        Query::Branches,
        Query::Compare(Compare {
            a: "main".into(),
            b: "try-b".into(),
        }),
        Query::Prefer(Prefer {
            chosen: "try-b".into(),
            rejected: "main".into(),
            note: Some("B is right".into()),
        }),
        Query::Preview(PreviewQuery { step: 2 }),
    ];
    for (n, query) in queries.into_iter().enumerate() {
        round_trip(ClientFrame::Session(SessionFrame {
            about: SessionRef {
                id: (n > 0).then(|| "q".into()),
                session_id: "s".into(),
            },
            query,
        }));
    }
}

#[test]
fn rollback_and_branch_by_session_id_are_about_a_session_between_runs() {
    let about = |id: Option<&str>| SessionRef {
        id: id.map(str::to_string),
        session_id: "s".into(),
    };
    let frames = [
        Rewind {
            about: about(None),
            action: RewindAction::Rollback(Rollback { step: 1 }),
        },
        Rewind {
            about: about(Some("b1")),
            action: RewindAction::Branch(NewBranch {
                step: 2,
                name: Some("try-b".into()),
                content: Some("use B".into()),
                keep_alive: true,
            }),
        },
        Rewind {
            about: about(None),
            action: RewindAction::Branch(NewBranch {
                step: 0,
                name: None,
                content: None,
                keep_alive: false,
            }),
        },
    ];
    for f in frames {
        round_trip(ClientFrame::Rewind(f));
    }
    assert_eq!(
        parse(r#"{"type": "rollback", "sessionId": "s", "step": 1}"#),
        Ok(ClientFrame::Rewind(Rewind {
            about: about(None),
            action: RewindAction::Rollback(Rollback { step: 1 }),
        }))
    );
    // A runId addresses the running request, whatever else the frame says.
    assert!(matches!(
        parse(r#"{"type": "rollback", "sessionId": "s", "runId": "run-1", "step": 1}"#),
        Ok(ClientFrame::Control(_))
    ));
    let e = error(json!({"type": "branch", "sessionId": "s", "step": 1, "content": "x"}));
    assert!(e.message.contains("`id`"), "{e}");
    let e =
        error(json!({"type": "branch", "id": "b", "sessionId": "s", "step": 1, "content": " "}));
    assert!(e.message.contains("empty"), "{e}");
    let e = error(json!({"type": "rollback", "sessionId": "s"}));
    assert!(e.message.contains("step"), "{e}");
}

#[test]
fn client_frames_have_the_documented_json() {
    let frame = ClientFrame::Control(Control {
        to: to("m1"),
        action: Action::Branch(Branch {
            step: 3,
            content: "x".into(),
            name: None,
        }),
    });
    assert_eq!(
        serde_json::to_value(&frame).unwrap(),
        json!({"type": "branch", "id": "m1", "step": 3, "content": "x"})
    );
    let frame = parse(r#"{"id": 5, "content": "hi", "keepAlive": true}"#).unwrap();
    assert_eq!(
        serde_json::to_value(&frame).unwrap(),
        json!({"id": "5", "content": "hi", "keepAlive": true})
    );
    // Blank optional texts are absent.
    let frame = parse(r#"{"id": "a", "content": "hi", "workDir": "", "systemPrompt": " "}"#);
    assert!(matches!(
        frame,
        Ok(ClientFrame::Prompt(Prompt {
            work_dir: None,
            system_prompt: None,
            ..
        }))
    ));
}

#[test]
fn every_server_frame_round_trips_with_todays_fields() {
    let frames = [
        ServerFrame::Text {
            content: "The".into(),
        },
        ServerFrame::ToolUse {
            content: "Read: a.txt".into(),
            tool: None,
            args: None,
            call_id: None,
        },
        ServerFrame::ToolResult {
            content: "read: no such file".into(),
        },
        ServerFrame::error("HTTP 400"),
        ServerFrame::done(),
        ServerFrame::Retry {
            content: "overloaded".into(),
            attempt: 2,
            of: 5,
            delay_ms: 1000,
        },
        ServerFrame::State {
            content: super::Shown::Paused,
        },
        ServerFrame::Instruction {
            content: "Use B".into(),
        },
        ServerFrame::Checkpoint {
            content: "Step 1: write f.txt".into(),
            step: 1,
        },
        ServerFrame::Rollback {
            content: "rolled back to step 1".into(),
            step: 1,
        },
        ServerFrame::Branches {
            content: vec![BranchSummary {
                name: "main".into(),
                steps: 2,
            }],
        },
        ServerFrame::Compare {
            content: crate::session::Comparison {
                branch_point: Some("e1".into()),
                shared_steps: 1,
                a: crate::session::Compared {
                    name: "main".into(),
                    steps: Vec::new(),
                    final_commit: None,
                },
                b: crate::session::Compared {
                    name: "try".into(),
                    steps: Vec::new(),
                    final_commit: None,
                },
                diff: Some("-A\n+B".into()),
            },
        },
        ServerFrame::Prefer {
            content: "recorded".into(),
        },
    ];
    let types = [
        "text",
        "tool_use",
        "tool_result",
        "error",
        "done",
        "retry",
        "state",
        "instruction",
        "checkpoint",
        "rollback",
        "branches",
        "compare",
        "prefer",
    ];
    for (frame, kind) in frames.into_iter().zip(types) {
        let mut out = Outgoing::new(Some("m1".into()), Some("s".into()), frame);
        let v: Value = serde_json::from_str(&out.encode()).unwrap();
        assert_eq!(v["type"], kind);
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let want: &[&str] = match kind {
            "checkpoint" | "rollback" => &["content", "id", "sessionId", "step", "type"],
            "retry" => &[
                "attempt",
                "content",
                "delayMs",
                "id",
                "of",
                "sessionId",
                "type",
            ],
            _ => &["content", "id", "sessionId", "type"],
        };
        assert_eq!(keys, want, "{v}");
        assert_eq!(serde_json::from_value::<Outgoing>(v).unwrap(), out);
        // In a request's log: with `seq` and `runId`.
        out.seq = Some(4);
        out.run_id = Some("run-1".into());
        let text = out.encode();
        assert!(text.contains(r#""seq":4"#) && text.contains(r#""runId":"run-1""#));
        assert_eq!(serde_json::from_str::<Outgoing>(&text).unwrap(), out);
    }
}

#[test]
fn a_frame_without_a_request_has_null_id_and_session() {
    let out = Outgoing::error(None, None, "bad".into());
    assert_eq!(
        serde_json::from_str::<Value>(&out.encode()).unwrap(),
        json!({"id": null, "type": "error", "content": "bad", "sessionId": null})
    );
}

#[test]
fn errors_name_the_frame_type_and_the_field() {
    let e = error(json!({"type": "pause"}));
    assert_eq!(
        e.message,
        "frame type \"pause\": missing field `id` (the request's, or a keepAlive run's `runId`)"
    );
    let e = error(json!({"type": "rollback", "id": "r"}));
    assert_eq!(
        (e.id.as_deref(), e.message.as_str()),
        (Some("r"), "frame type \"rollback\": missing field `step`")
    );
    let e = error(json!({"type": "branch", "runId": "run-1", "step": "one", "content": "x"}));
    assert_eq!(e.id.as_deref(), Some("run-1"));
    assert!(
        e.message
            .starts_with("frame type \"branch\": field `step`: invalid type: string \"one\""),
        "{}",
        e.message
    );
    let e = error(json!({"type": "instruct", "id": "i", "content": "x", "as": "root"}));
    assert!(
        e.message
            .starts_with("frame type \"instruct\": field `as`: unknown variant `root`"),
        "{}",
        e.message
    );
    let e = error(json!({"type": "compare", "sessionId": "s", "a": "main"}));
    assert_eq!(e.message, "frame type \"compare\": missing field `b`");
    let e = error(json!({"type": "explode", "id": "q"}));
    assert_eq!(
        (e.id.as_deref(), e.message.as_str()),
        (Some("q"), "unknown control frame type \"explode\"")
    );
    assert!(!e.ends_request);
    let e = error(json!({"type": 5}));
    assert_eq!(e.message, "`type` must be a string, got 5");
}

#[test]
fn a_bad_prompt_with_an_id_ends_its_request() {
    let e = error(json!({"content": "no id"}));
    assert_eq!(
        (e.id, e.message.as_str(), e.ends_request),
        (None, "prompt frame: missing field `id`", false)
    );
    let e = error(json!({"id": "x"}));
    assert_eq!(e.message, "prompt frame: missing field `content`");
    let kinds: Vec<&str> = e
        .replies()
        .iter()
        .map(|f| match f.frame {
            ServerFrame::Error { .. } => "error",
            ServerFrame::Done { .. } => "done",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["error", "done"]);
    assert!(e.replies().iter().all(|f| f.id.as_deref() == Some("x")));
    let e = error(json!({"id": "x", "content": "  "}));
    assert_eq!(e.message, "prompt frame: `content` is empty");
    let e = error(json!({"id": "x", "content": "hi", "sessionId": "../up"}));
    assert!(
        e.message.contains("invalid sessionId \"../up\""),
        "{}",
        e.message
    );
    let e = error(json!({"id": "x", "content": "hi", "workDir": 5}));
    assert!(
        e.message
            .starts_with("prompt frame: field `workDir`: invalid type"),
        "{}",
        e.message
    );
    let e = error(json!({"id": true, "content": "hi"}));
    assert_eq!(e.id, None);
    assert!(e.message.contains("field `id`"), "{}", e.message);
}

#[test]
fn frames_that_are_not_json_objects_or_too_large_are_refused() {
    assert!(parse("{not json")
        .unwrap_err()
        .message
        .contains("not valid JSON"));
    assert_eq!(
        parse("[1]").unwrap_err().message,
        "the frame must be a JSON object"
    );
    let big = json!({"id": "big", "content": "x".repeat(MAX_FRAME_BYTES)}).to_string();
    let e = parse(&big).unwrap_err();
    assert!(
        e.message.contains("limit is 1 MiB") && e.id.is_none(),
        "{}",
        e.message
    );
}

/// The `type` of every variant of `T`'s frames, read from the JSON schema schemars
/// derives from the Rust type (variants that are another type's frames excluded).
fn tags_of<T: schemars::JsonSchema>() -> std::collections::BTreeSet<String> {
    let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
    // Tagged variants are `oneOf`; with an untagged one among them, `anyOf`.
    let variants = ["oneOf", "anyOf"]
        .into_iter()
        .filter_map(|k| schema[k].as_array().cloned())
        .flatten()
        .collect::<Vec<_>>();
    variants
        .iter()
        .filter_map(|v| v["properties"]["type"]["const"].as_str())
        .map(str::to_string)
        .collect()
}

/// The schema of every frame the server sends, kept in docs/ for people and other
/// clients; a test holds it to the types (`PICOGENT_WRITE_SCHEMA=1` rewrites it).
fn frames_schema() -> String {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct ChatServerFrames {
        /// Every frame on the wire.
        frame: Outgoing,
        /// One item of a `history` answer's `items`.
        history_item: HistoryItem,
    }
    let schema = serde_json::to_value(schemars::schema_for!(ChatServerFrames)).unwrap();
    serde_json::to_string_pretty(&sorted(schema)).unwrap() + "\n"
}

/// Every object's keys in order, whether serde_json keeps insertion order or not (the
/// workspace turns `preserve_order` on, this crate alone does not).
fn sorted(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let keys: std::collections::BTreeMap<String, Value> =
                m.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(keys.into_iter().collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[test]
fn the_documented_schema_is_the_frames_types() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/chat-frames.schema.json"
    );
    let now = frames_schema();
    if std::env::var_os("PICOGENT_WRITE_SCHEMA").is_some() {
        std::fs::write(path, &now).unwrap();
    }
    let kept = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        kept == now,
        "docs/chat-frames.schema.json is not the frames' schema: PICOGENT_WRITE_SCHEMA=1 cargo test -p picogent-protocol documented_schema"
    );
}

#[test]
fn the_page_handles_every_frame_the_server_sends_and_no_other() {
    let mut known = tags_of::<ServerFrame>();
    assert!(
        known.len() >= 27 && known.contains("tool_progress"),
        "{known:?}"
    );
    known.extend(tags_of::<HistoryItem>());
    assert!(known.contains("interrupted"), "{known:?}");
    // The page's scripts (client/): the frames are read in thread.js's switches, and a
    // few (errors, rollbacks) by comparison.
    let page = [
        include_str!("../../../../client/thread.js"),
        include_str!("../../../../client/steps.js"),
        include_str!("../../../../client/verdicts.js"),
        include_str!("../../../../client/sessions.js"),
        include_str!("../../../../client/dialogs.js"),
        include_str!("../../../../client/connection.js"),
        include_str!("../../../../client/app.js"),
    ]
    .concat();
    let page = page.as_str();
    for tag in &known {
        let handled =
            page.contains(&format!("case \"{tag}\"")) || page.contains(&format!("=== \"{tag}\""));
        assert!(handled, "the page (client/) does not handle `{tag}` frames");
    }
    // And the page handles no frame the server never sends (a `case` of its frame switch).
    let cases = regex::Regex::new(r#"case "([a-z_]+)""#).unwrap();
    for c in cases.captures_iter(page) {
        assert!(
            known.contains(&c[1]),
            "the page (client/) handles `{}`, which no server frame is",
            &c[1]
        );
    }
}
