//! Reports under tracker faults: answers that are not the tracker's, refusals, a
//! tracker that is slow for one task, a full state disk.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::tracker::FakeTracker;
use crate::common::*;

fn assigned(event: &str, task: &str, title: &str) -> Value {
    json!({"id": event, "type": "task.assigned", "created_at": "2026-11-29T10:00:00Z",
           "data": {"task": {"id": task, "title": title, "description": "Please do it.", "status": "todo", "labels": ["bug"]}}})
}

/// A 2xx whose body is not the tracker's JSON (a proxy's HTML page) is not a
/// delivery: the reports are sent again, and each arrives once.
#[tokio::test]
async fn a_2xx_that_is_not_the_trackers_answer_is_not_a_delivery() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("All good.")]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| {
        f.reports_down = 2;
        f.report_status = Some(200);
        f.report_body = Some("<html><body>Bad gateway, but 200</body></html>".into());
    });
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_h", "t_h", "Proxy"))
        .await;
    tracker.wait_status("t_h", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_h"),
        vec!["status:in_progress", "comment:All good.", "status:review"]
    );
    d.stop().await.unwrap();
}

/// A tracker that answers 404 for a while (it lost the task during a deploy) gets the
/// reports once it knows the task again; one it refuses for good (400) is kept in the
/// dead-letter file, counted in /healthz, and the next report proceeds.
#[tokio::test]
async fn refused_reports_are_retried_for_a_while_then_kept_never_dropped() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("First."), text("Second.")]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| {
        f.reports_down = 3;
        f.report_status = Some(404);
    });
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_n", "t_n", "Lost"))
        .await;
    tracker.wait_status("t_n", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_n"),
        vec!["status:in_progress", "comment:First.", "status:review"]
    );
    // Refused for good: the first report of the next task.
    tracker.faults(|f| {
        f.reports_down = 1;
        f.report_status = Some(400);
    });
    tracker.deliver(&cb, &assigned("evt_b", "t_b", "Bad")).await;
    tracker.wait_status("t_b", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_b"),
        vec!["comment:Second.", "status:review"]
    );
    let dead = std::fs::read_to_string(sb.home.join("state/dead-letter.jsonl")).unwrap();
    let line: Value = serde_json::from_str(dead.lines().next().unwrap()).unwrap();
    assert_eq!(line["task_id"], "t_b");
    assert_eq!(line["report"]["status"], "in_progress", "{line}");
    assert!(line["error"].as_str().unwrap().contains("400"), "{line}");
    let health: Value = reqwest::get(cb.replace("/events", "/healthz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["dead_letters"]["reports"], 1, "{health}");
    // Other warnings (a weaker sandbox, a nearly full disk) may come first.
    assert!(
        health["warnings"].as_array().is_some_and(|ws| ws
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("refused for good")))),
        "{health}"
    );
    d.stop().await.unwrap();
}

/// While the tracker refuses reports (404: it lost the task during a deploy), the
/// health check says so, and says ok again once they go through.
#[tokio::test]
async fn refused_reports_make_the_health_check_degraded_while_they_last() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Done.")]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| {
        f.reports_down = usize::MAX;
        f.report_status = Some(404);
    });
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    let health = cb.replace("/events", "/healthz");
    tracker
        .deliver(&cb, &assigned("evt_r", "t_r", "Refused"))
        .await;
    let mut seen = Value::Null;
    for _ in 0..500 {
        seen = reqwest::get(&health).await.unwrap().json().await.unwrap();
        if seen["status"] == "degraded" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen["reasons"][0]["kind"], "reports_refused", "{seen}");
    assert!(seen["reason"].as_str().unwrap().contains("404"), "{seen}");
    tracker.faults(|f| f.reports_down = 0);
    tracker.wait_status("t_r", "review", 20).await;
    let after: Value = reqwest::get(&health).await.unwrap().json().await.unwrap();
    assert_eq!(after["status"], "ok", "{after}");
    d.stop().await.unwrap();
}

/// A tracker that takes seconds to answer one task's reports gets each of them once,
/// never two at a time, while another task's reports go out meanwhile.
#[tokio::test]
async fn a_slow_report_holds_back_only_its_own_task_and_is_never_repeated() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Done."), text("Done.")]).await;
    let tracker = FakeTracker::start().await;
    tracker.faults(|f| f.slow_task = Some(("t_slow".into(), Duration::from_secs(3))));
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("evt_s", "t_slow", "Slow"))
        .await;
    tracker
        .deliver(&cb, &assigned("evt_f", "t_fast", "Fast"))
        .await;
    tracker.wait_status("t_fast", "review", 20).await;
    // The fast task finished while the slow one's first report was still being answered.
    assert!(
        tracker.timeline("t_slow").is_empty(),
        "{:?}",
        tracker.timeline("t_slow")
    );
    tracker.wait_status("t_slow", "review", 30).await;
    let expected = vec!["status:in_progress", "comment:Done.", "status:review"];
    assert_eq!(tracker.timeline("t_slow"), expected);
    assert_eq!(tracker.timeline("t_fast"), expected);
    assert_eq!(tracker.most_in_flight("t_slow"), 1);
    d.stop().await.unwrap();
}

/// With the state folder full, a finished task's result cannot be queued: the event
/// stays pending, `/healthz` says the daemon is degraded, and once there is room again
/// the result is queued and delivered — nothing is dropped.
#[tokio::test]
async fn a_full_disk_delays_reports_but_loses_none() {
    let sb = Sandbox::new();
    let state = sb.home.join("state");
    let Some(_tmpfs) = Tmpfs::mount(&state, "512k") else {
        crate::common::skip("cannot mount a small tmpfs here (needs root)");
        return;
    };
    // An answer larger than a page, so queueing it needs room the full disk lacks.
    let answer = format!("Done despite the disk. {}", "All good. ".repeat(1000));
    let llm = ScriptedLlm::start(vec![Turn::Stall(
        Duration::from_millis(600),
        answer.clone(),
    )])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    assert_eq!(
        tracker
            .deliver(&cb, &assigned("evt_full", "t_full", "Task"))
            .await
            .0,
        202
    );
    tracker.wait_status("t_full", "in_progress", 20).await;
    // Fill the state folder to the last byte while the model is still answering.
    let filler = fill_disk(&state);
    let health = cb.replace("/events", "/healthz");
    let client = reqwest::Client::new();
    let degraded = degraded_with(&health, "reports_not_queued").await;
    assert!(
        degraded["reason"]
            .as_str()
            .unwrap_or("")
            .contains("reports"),
        "{degraded}"
    );
    assert!(tracker.comments("t_full").is_empty(), "a comment went out");
    // Room again: the result goes out, after all.
    std::fs::remove_file(&filler).unwrap();
    tracker.wait_status("t_full", "review", 20).await;
    assert_eq!(
        tracker.comments("t_full"),
        vec![json!({ "content": answer })]
    );
    let r = client.get(&health).send().await.unwrap();
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "ok");
    d.stop().await.unwrap();
    // A write the full disk cut short was cut off again: no torn line swallowed the
    // record written after it (a restart would have skipped both).
    for file in ["outbox.jsonl", "journal.jsonl"] {
        let text = std::fs::read_to_string(state.join(file)).unwrap();
        for line in text.lines() {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_ok(),
                "{file} has a torn line: {line:.120}"
            );
        }
    }
}

/// A task that comes up while the state disk is full waits for room instead of failing
/// at its first write and being blocked for good; `/healthz` says why meanwhile, and it
/// runs, once, when there is room again.
#[tokio::test]
async fn a_task_that_comes_up_on_a_full_disk_waits_for_room_then_runs() {
    let sb = Sandbox::new();
    let state = sb.home.join("state");
    let Some(_tmpfs) = Tmpfs::mount(&state, "512k") else {
        crate::common::skip("cannot mount a small tmpfs here (needs root)");
        return;
    };
    let llm = ScriptedLlm::start(vec![
        Turn::Stall(Duration::from_millis(800), "First done.".into()),
        text("Second done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"max_concurrent_tasks": 1}));
    let cb = tracker.callback_url().await;
    for (event, task) in [("evt_1", "t_1"), ("evt_2", "t_2")] {
        assert_eq!(
            tracker.deliver(&cb, &assigned(event, task, "Task")).await.0,
            202
        );
    }
    tracker.wait_status("t_1", "in_progress", 20).await;
    // Full while the first task's model is still answering: the second comes up next.
    let filler = fill_disk(&state);
    let health = cb.replace("/events", "/healthz");
    let degraded = degraded_with(&health, "disk_full").await;
    assert!(
        degraded["reason"]
            .as_str()
            .unwrap()
            .contains("wait for disk space"),
        "{degraded}"
    );
    assert!(
        tracker.timeline("t_2").is_empty(),
        "{:?}",
        tracker.timeline("t_2")
    );
    std::fs::remove_file(&filler).unwrap();
    tracker.wait_status("t_2", "review", 20).await;
    tracker.wait_status("t_1", "review", 20).await;
    assert_eq!(
        tracker.timeline("t_2"),
        vec![
            "status:in_progress",
            "comment:Second done.",
            "status:review"
        ]
    );
    assert_eq!(llm.requests().len(), 2, "a run was repeated");
    d.stop().await.unwrap();
}
