//! Agent mode in-process against the fake tracker and the scripted model.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::tracker::{deliver_raw, FakeTracker, TOKEN};
use crate::common::*;

fn assigned(event: &str, task: &str, title: &str) -> Value {
    json!({"id": event, "type": "task.assigned", "created_at": "2026-11-29T10:00:00Z",
           "data": {"task": {"id": task, "title": title, "description": "Please do it.", "status": "todo", "labels": ["bug"]}}})
}

fn chat(event: &str, task: &str, msg: &str, content: &str) -> Value {
    json!({"id": event, "type": "chat.message", "data": {"task_id": task,
           "message": {"id": msg, "content": content, "author": {"id": "u_3", "name": "Olga"}}}})
}

fn cancelled(event: &str, task: &str) -> Value {
    json!({"id": event, "type": "task.cancelled", "data": {"task_id": task, "reason": "reassigned"}})
}

#[tokio::test]
async fn a_task_runs_and_reports_in_progress_comment_review_in_order() {
    let sb = Sandbox::new();
    sb.write("bug.txt", "crash on empty input");
    let llm = ScriptedLlm::start(vec![
        tool("read", json!({"path": "bug.txt"})),
        text("Fixed the crash."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"capabilities": ["coding", "review"]}),
    );
    let cb = tracker.callback_url().await;
    let reg = tracker.registration().unwrap();
    assert_eq!(reg["slug"], "test");
    assert_eq!(reg["transport"], "http");
    assert_eq!(reg["capabilities"], json!(["coding", "review"]));
    assert_eq!(reg["max_concurrent_tasks"], 2);
    assert!(
        cb.starts_with("http://127.0.0.1:") && cb.ends_with("/events"),
        "{cb}"
    );

    let (status, body) = tracker
        .deliver(&cb, &assigned("evt_1", "t_12", "Fix empty input crash"))
        .await;
    assert_eq!((status, body), (202, json!({"accepted": true})));
    tracker.wait_status("t_12", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_12"),
        vec![
            "status:in_progress",
            "comment:Fixed the crash.",
            "status:review"
        ]
    );
    // The model got the title and description.
    let first = &llm.requests()[0].body["messages"][0]["content"][0]["text"];
    assert_eq!(first, "Task: Fix empty input crash\n\nPlease do it.");
    // A redelivery is a duplicate and does not run again.
    let (status, body) = tracker
        .deliver(&cb, &assigned("evt_1", "t_12", "Fix empty input crash"))
        .await;
    assert_eq!((status, body), (200, json!({"duplicate": true})));
    // Heartbeats say idle once the work is done.
    tracker
        .wait_for(5, "an idle heartbeat", |t| {
            t.ok_calls("/api/v1/agents/heartbeat").iter().any(|c| {
                c.body == json!({"slug": "test", "status": "idle", "active_tasks": [], "queued": 0})
            })
        })
        .await;
    d.stop().await.unwrap();
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn a_failed_run_comments_why_then_blocks() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Status(400, None)]).await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_f", "t_f", "Doomed"))
        .await;
    tracker.wait_status("t_f", "blocked", 20).await;
    let tl = tracker.timeline("t_f");
    assert_eq!(tl.len(), 3, "{tl:?}");
    assert_eq!(tl[0], "status:in_progress");
    assert!(
        tl[1].contains("could not finish this task") && tl[1].contains("HTTP 400"),
        "{}",
        tl[1]
    );
    assert_eq!(tl[2], "status:blocked");
    d.stop().await.unwrap();
}

#[tokio::test]
async fn a_chat_message_continues_the_tasks_session_and_replies() {
    let sb = Sandbox::new();
    let llm =
        ScriptedLlm::start(vec![text("Done with the task."), text("Added a test too.")]).await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_a", "t_c", "Write parser"))
        .await;
    tracker.wait_status("t_c", "review", 20).await;
    let (status, _) = tracker
        .deliver(
            &cb,
            &chat("evt_b", "t_c", "m_88", "Also add a test, please"),
        )
        .await;
    assert_eq!(status, 202);
    tracker
        .wait_for(20, "the reply", |t| t.comments("t_c").len() == 2)
        .await;
    let reply = &tracker.comments("t_c")[1];
    assert_eq!(
        reply,
        &json!({"content": "Added a test too.", "reply_to": "m_88"})
    );
    // Same session: the second request carries the task's conversation.
    let msgs = llm.requests()[1].body["messages"].clone();
    assert_eq!(
        msgs[0]["content"][0]["text"],
        "Task: Write parser\n\nPlease do it."
    );
    assert_eq!(msgs[1]["content"][0]["text"], "Done with the task.");
    assert_eq!(
        msgs[2]["content"][0]["text"],
        "Olga writes on this task:\n\nAlso add a test, please"
    );
    // A chat message does not change the status.
    assert_eq!(
        tracker
            .timeline("t_c")
            .iter()
            .filter(|e| e.starts_with("status:"))
            .count(),
        2
    );
    d.stop().await.unwrap();
}

#[tokio::test]
async fn cancelling_a_running_task_stops_it_and_says_so() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool(
        "bash",
        json!({"command": "touch .started && sleep 30"}),
    )])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_x", "t_x", "Long job"))
        .await;
    tracker.wait_status("t_x", "in_progress", 10).await;
    sb.wait_file(".started").await;
    let started = std::time::Instant::now();
    let (status, _) = tracker.deliver(&cb, &cancelled("evt_y", "t_x")).await;
    assert_eq!(status, 202);
    tracker
        .wait_for(10, "the cancellation comment", |t| {
            t.comments("t_x").len() == 1
        })
        .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let tl = tracker.timeline("t_x");
    assert_eq!(tl.len(), 2, "{tl:?}");
    assert!(
        tl[1].contains("cancelled (reassigned)") && tl[1].contains("were kept"),
        "{}",
        tl[1]
    );
    // A queued chat message for a cancelled task is dropped too; nothing else is posted.
    d.stop().await.unwrap();
    assert_eq!(tracker.timeline("t_x").len(), 2);
}

#[tokio::test]
async fn five_tasks_run_two_at_a_time_in_arrival_order() {
    // Measured at the model, not from the tracker's view: reports travel in per-task
    // lanes, so their arrival order says nothing about when each task ran. The stalls
    // are uneven so that the queued tasks' turns come up far apart: t2 when t0 ends,
    // t3 when t2 ends, t4 when t1 ends.
    let sb = Sandbox::new();
    let turns = [300, 2000, 300, 2000, 300]
        .map(|ms| Turn::Stall(Duration::from_millis(ms), "done".into()))
        .into();
    let llm = ScriptedLlm::start(turns).await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"max_concurrent_tasks": 2}));
    let cb = tracker.callback_url().await;
    for i in 0..5 {
        let (status, _) = tracker
            .deliver(
                &cb,
                &assigned(&format!("e{i}"), &format!("t{i}"), &format!("job{i}")),
            )
            .await;
        assert_eq!(status, 202);
        // The first two start at once; wait for each so their order is the delivery's.
        if i < 2 {
            llm.wait_requests(i + 1).await;
        }
    }
    tracker
        .wait_for(30, "five reviews", |t| {
            (0..5).all(|i| {
                t.timeline(&format!("t{i}"))
                    .contains(&"status:review".to_string())
            })
        })
        .await;
    let order: Vec<usize> = llm
        .requests()
        .iter()
        .map(|r| {
            let body = r.body.to_string();
            (0..5)
                .find(|i| body.contains(&format!("job{i}")))
                .expect("a request for one of the tasks")
        })
        .collect();
    assert_eq!(
        order,
        vec![0, 1, 2, 3, 4],
        "the order tasks reached the model"
    );
    assert_eq!(llm.max_in_flight(), 2, "tasks running at once");
    d.stop().await.unwrap();
}

#[tokio::test]
async fn bad_events_get_the_answer_the_protocol_table_gives() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    let good = assigned("evt_ok", "t_ok", "x").to_string().into_bytes();
    assert_eq!(deliver_raw(&cb, None, good.clone()).await.0, 401);
    assert_eq!(deliver_raw(&cb, Some("wrong"), good.clone()).await.0, 401);
    let (s, b) = deliver_raw(&cb, Some(TOKEN), b"{not json".to_vec()).await;
    assert_eq!(s, 400);
    assert!(
        b["error"]["message"].as_str().unwrap().contains("not JSON"),
        "{b}"
    );
    for (body, needle) in [
        (json!({"type": "task.assigned", "data": {}}), "`id`"),
        (
            json!({"id": "", "type": "task.assigned", "data": {}}),
            "`id`",
        ),
        (json!({"id": "e", "data": {}}), "`type`"),
        (
            json!({"id": "e", "type": "task.assigned", "data": "x"}),
            "`data`",
        ),
        (
            json!({"id": "e", "type": "task.assigned", "data": {"task": {"id": "t"}}}),
            "data.task",
        ),
    ] {
        let (s, b) = deliver_raw(&cb, Some(TOKEN), body.to_string().into_bytes()).await;
        assert_eq!(s, 400, "{body}");
        assert!(
            b["error"]["message"].as_str().unwrap().contains(needle),
            "{body}: {b}"
        );
    }
    let big = vec![b' '; (1 << 20) + 10];
    assert_eq!(deliver_raw(&cb, Some(TOKEN), big).await.0, 413);
    let (s, b) = tracker
        .deliver(
            &cb,
            &json!({"id": "e_u", "type": "agent.poked", "data": {}}),
        )
        .await;
    assert_eq!((s, b), (200, json!({"ignored": true})));
    let health = reqwest::get(cb.replace("/events", "/healthz"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    d.stop().await.unwrap();
    assert_eq!(llm.request_count(), 0);
}

#[tokio::test]
async fn registration_is_retried_while_the_tracker_is_down() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| f.register_down = 3);
    let d = sb.daemon(&llm, &tracker, json!({}));
    tracker.callback_url().await;
    let attempts = tracker
        .calls()
        .iter()
        .filter(|c| c.path == "/api/v1/agents/register")
        .count();
    assert_eq!(attempts, 4);
    d.stop().await.unwrap();
}

#[tokio::test]
async fn a_refused_token_stops_the_daemon_with_a_clear_error() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| f.register_status = Some(401));
    let d = sb.daemon(&llm, &tracker, json!({}));
    let err = tokio::time::timeout(Duration::from_secs(10), d.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        err.to_string().contains("refused the credentials")
            && err.to_string().contains("AGENT_TOKEN"),
        "{err}"
    );
    assert_eq!(tracker.calls().len(), 1, "a refused token is not retried");
}

#[tokio::test]
async fn a_heartbeat_404_registers_again() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| f.forget_agent = true);
    let d = sb.daemon(&llm, &tracker, json!({}));
    tracker
        .wait_for(10, "a second registration", |t| {
            t.ok_calls("/api/v1/agents/register").len() == 2
        })
        .await;
    let hb404 = tracker
        .calls()
        .iter()
        .position(|c| c.status == 404)
        .unwrap();
    let second_reg = tracker
        .calls()
        .iter()
        .rposition(|c| c.path == "/api/v1/agents/register")
        .unwrap();
    assert!(second_reg > hb404);
    d.stop().await.unwrap();
}

#[tokio::test]
async fn reports_are_retried_through_503s_and_arrive_exactly_once() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("All good.")]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| f.reports_down = 4);
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_r", "t_r", "Flaky tracker"))
        .await;
    tracker.wait_status("t_r", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_r"),
        vec!["status:in_progress", "comment:All good.", "status:review"]
    );
    let failed = tracker.calls().iter().filter(|c| c.status == 503).count();
    assert_eq!(failed, 4);
    d.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_transport_works_end_to_end() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Done over WebSocket.")]).await;
    let tracker = FakeTracker::start().await;
    let port = free_port();
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"transport": "ws", "listen_port": port}),
    );
    tracker.ws_send(assigned("evt_w", "t_w", "Over ws"));
    tracker.wait_status("t_w", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_w"),
        vec![
            "status:in_progress",
            "comment:Done over WebSocket.",
            "status:review"
        ]
    );
    assert_eq!(tracker.ws_acked(), vec!["evt_w"]);
    let frames = tracker.ws_frames();
    assert_eq!(frames[0], json!({"type": "auth", "token": TOKEN}));
    assert_eq!(frames[1]["type"], "register");
    assert_eq!(frames[1]["agent"]["transport"], "ws");
    assert!(frames[1]["agent"].get("callback_url").is_none());
    // Probes reach the health endpoints; events come only over the WebSocket.
    let base = format!("http://127.0.0.1:{port}");
    let health: Value = reqwest::get(format!("{base}/healthz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    let live = reqwest::get(format!("{base}/livez")).await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
    let (code, _) = deliver_raw(&format!("{base}/events"), Some(TOKEN), b"{}".to_vec()).await;
    assert_eq!(code, 404, "events are not taken over HTTP in ws mode");
    tracker
        .wait_for(5, "a heartbeat frame", |t| {
            t.ws_frames().iter().any(|f| f["type"] == "heartbeat")
        })
        .await;
    d.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_reconnects_with_growing_delays_and_an_unacked_event_runs_once() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Ran once.")]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| {
        f.ws_refuse = 3;
        f.ws_lose_ack_of = Some("evt_once".into());
    });
    tracker.ws_send(assigned("evt_once", "t_once", "Exactly once"));
    let d = sb.daemon(&llm, &tracker, json!({"transport": "ws"}));
    tracker
        .wait_for(20, "the ack after redelivery", |t| {
            t.ws_acked() == vec!["evt_once".to_string()]
        })
        .await;
    let at = tracker.ws_attempts();
    assert!(at.len() >= 5, "{} attempts", at.len());
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // Each refused attempt waits at least its delay: 100 ms, 200 ms, 400 ms (plus up to
    // 25% jitter, plus whatever a busy machine adds: only the lower bounds are sure;
    // the sequence itself, and its reset, is `ws.rs`'s unit test).
    let ms = Duration::from_millis;
    assert!(
        gaps[0] >= ms(100) && gaps[1] >= ms(200) && gaps[2] >= ms(400),
        "{gaps:?}"
    );
    tracker.wait_status("t_once", "review", 20).await;
    // A redelivery is acked only once journaled: had it been taken as new, it would be
    // queued or running now. A heartbeat sent after the review that says the agent is
    // idle with nothing queued comes after any such run made its model call.
    let beats = |t: &FakeTracker| -> Vec<Value> {
        let frames = t.ws_frames();
        frames
            .into_iter()
            .filter(|f| f["type"] == "heartbeat")
            .collect()
    };
    let seen = beats(&tracker).len();
    tracker
        .wait_for(20, "an idle heartbeat after the review", |t| {
            beats(t)
                .iter()
                .skip(seen)
                .any(|b| b["status"] == "idle" && b["queued"] == 0)
        })
        .await;
    assert_eq!(llm.request_count(), 1, "the redelivered event ran again");
    assert_eq!(tracker.timeline("t_once").len(), 3);
    d.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_close_4001_stops_the_daemon_naming_the_token() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| f.ws_reject_auth = true);
    let d = sb.daemon(&llm, &tracker, json!({"transport": "ws"}));
    let err = tokio::time::timeout(Duration::from_secs(10), d.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("refused the credentials"), "{err}");
    assert_eq!(tracker.ws_attempts().len(), 1);
}

#[tokio::test]
async fn a_chat_message_during_a_run_is_passed_to_it_as_an_instruction() {
    let sb = Sandbox::new();
    // The run's command holds it until the message has been passed on.
    let gate = sb.gate("passed");
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": gate.command()})),
        text("Task done, with the test Olga asked for."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"max_concurrent_tasks": 4}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_1", "t_w", "Slow task"))
        .await;
    llm.wait_requests(1).await;
    assert_eq!(
        tracker
            .deliver(&cb, &chat("evt_2", "t_w", "m_1", "Add a test too"))
            .await
            .0,
        202
    );
    tracker
        .wait_for(20, "the note that the message was passed on", |t| {
            t.comments("t_w").iter().any(|c| c["reply_to"] == "m_1")
        })
        .await;
    gate.open();
    tracker.wait_status("t_w", "review", 20).await;
    let comments = tracker.comments("t_w");
    assert_eq!(comments[0]["reply_to"], "m_1");
    assert!(
        comments[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Noted"),
        "{comments:?}"
    );
    assert_eq!(
        comments[1],
        json!({"content": "Task done, with the test Olga asked for."})
    );
    // One run, and its next model call carried the message.
    assert_eq!(llm.request_count(), 2);
    let last = last_text(&llm.requests()[1].body);
    assert!(
        last.contains("Olga writes on this task while you work on it")
            && last.contains("Add a test too"),
        "{last}"
    );
    d.stop().await.unwrap();
}

#[tokio::test]
async fn agent_mode_without_a_token_is_a_clear_start_up_error() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    sb.write_config(&llm, Wire::Anthropic, json!({"tracker_url": tracker.url()}));
    let config = picogent::config::Config::load(Some(&sb.home), &sb.env(), &sb.base()).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let err = picogent::tracker::daemon::run(agent_from(config), fast_timing(), stop)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("AGENT_TOKEN"), "{err}");
    assert!(tracker.calls().is_empty());
}

/// A chat message that arrives while the run's last model call is under way is never
/// read by that run: it is answered after it, never "noted" and dropped.
#[tokio::test]
async fn a_chat_message_the_run_never_reads_is_answered_after_it() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        Turn::Stall(Duration::from_millis(800), "Task done.".into()),
        text("About your message: done too."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_1", "t_late", "Task"))
        .await;
    llm.wait_requests(1).await;
    assert_eq!(
        tracker
            .deliver(&cb, &chat("evt_2", "t_late", "m_late", "And the docs?"))
            .await
            .0,
        202
    );
    tracker
        .wait_for(20, "the reply to the message", |t| {
            t.comments("t_late").len() == 2
        })
        .await;
    let comments = tracker.comments("t_late");
    assert_eq!(comments[0], json!({"content": "Task done."}));
    assert_eq!(
        comments[1],
        json!({"content": "About your message: done too.", "reply_to": "m_late"})
    );
    // The follow-up ran in the same session and carried the message.
    let last = last_text(&llm.requests()[1].body);
    assert!(last.contains("And the docs?"), "{last}");
    d.stop().await.unwrap();
}

/// A journal written before typed events (its events as Team Board's envelopes) is
/// read at start: its pending task is worked, a finished one is still a duplicate,
/// and the file is rewritten in the typed form.
#[tokio::test]
async fn a_journal_of_envelopes_from_before_typed_events_resumes_and_is_rewritten() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Done after the upgrade.")]).await;
    let tracker = FakeTracker::start().await;
    let state = sb.home.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let lines = [
        json!({"r": "accepted", "at": now, "event": assigned("evt_old", "t_old", "Left from before")}),
        json!({"r": "accepted", "at": now, "event": assigned("evt_done", "t_done", "Finished before")}),
        json!({"r": "done", "id": "evt_done", "at": now}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(state.join("journal.jsonl"), text).unwrap();

    let d = sb.daemon(&llm, &tracker, json!({}));
    tracker.wait_status("t_old", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_old"),
        vec![
            "status:in_progress",
            "comment:Done after the upgrade.",
            "status:review"
        ]
    );
    let first = &llm.requests()[0].body["messages"][0]["content"][0]["text"];
    assert_eq!(first, "Task: Left from before\n\nPlease do it.");
    let cb = tracker.callback_url().await;
    let (status, body) = tracker
        .deliver(&cb, &assigned("evt_done", "t_done", "Finished before"))
        .await;
    assert_eq!((status, body), (200, json!({"duplicate": true})));
    d.stop().await.unwrap();
    let journal = std::fs::read_to_string(state.join("journal.jsonl")).unwrap();
    assert!(
        !journal.contains(r#""r":"accepted""#),
        "the open's compaction rewrites envelopes typed: {journal}"
    );
    assert!(tracker.timeline("t_done").is_empty());
}

/// A callback port already taken stops the daemon before anything resumes: the
/// unfinished event from the last run is neither started nor reported, and stays in
/// the journal for the next start.
#[tokio::test]
async fn a_taken_port_stops_the_daemon_before_unfinished_work_resumes() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Should not run.")]).await;
    let tracker = FakeTracker::start().await;
    let state = sb.home.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let line =
        json!({"r": "accepted", "at": now, "event": assigned("evt_left", "t_left", "Left over")});
    std::fs::write(state.join("journal.jsonl"), format!("{line}\n")).unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();

    let d = sb.daemon(&llm, &tracker, json!({"listen_port": port}));
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), d.task)
        .await
        .expect("the daemon did not stop")
        .unwrap();
    let err = ended
        .expect_err("a taken port is fatal on callbacks")
        .to_string();
    assert!(err.contains(&port.to_string()), "{err}");
    assert!(llm.requests().is_empty(), "the left-over task ran");
    assert!(tracker.timeline("t_left").is_empty());
    let journal = std::fs::read_to_string(state.join("journal.jsonl")).unwrap();
    assert!(journal.contains("evt_left"), "{journal}");
    assert!(!journal.contains(r#""r":"started""#), "{journal}");
    drop(taken);
}
