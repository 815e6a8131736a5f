//! Fleet mode under faults (issue 39): a worker cut off from the store, the store
//! stopped, and the one worker holding Team Board's WebSocket for the fleet.

use std::time::Duration;

use serde_json::{json, Value};

use super::fleet::{assert_once, assigned, work_and_answer, Fleet, Worker};
use crate::common::*;

/// A command that marks its start, waits at a gate (a file outside every worker's
/// folder) and works: the sign of which worker runs a task, held until the test says.
fn gated(gate: &std::path::Path, name: &str) -> String {
    format!(
        "touch started-{name}; for i in $(seq 3000); do [ -e {} ] && break; sleep 0.02; done; echo work >> work.txt",
        gate.display()
    )
}

async fn wait_started(fleet: &Fleet, worker: usize, name: &str) {
    let marker = fleet.workers[worker]
        .sb
        .work
        .join(format!("started-{name}"));
    for _ in 0..1500 {
        if marker.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("worker {worker} never started {name}");
}

async fn health(worker: &Worker) -> Value {
    get_when_up(worker.port, "/healthz").await.1
}

/// A worker cut off from the store (a partition: its packets go nowhere) stops
/// claiming; its task moves on once its lease runs out; when the partition heals, the
/// result it finished meanwhile is refused (another worker has the task) and it works
/// again by itself.
#[tokio::test]
async fn a_worker_cut_off_from_the_store_never_reports_a_task_another_took() {
    let gate = tempfile::tempdir().unwrap();
    let open = gate.path().join("open");
    let turns = vec![
        tool("bash", json!({"command": gated(&open, "p")})),
        text("Done."),
    ];
    let db = picogent_testkit::pg::database().await.url;
    let (host_port, rest) = db
        .split_once('@')
        .map(|(_, r)| r.split_once('/').unwrap())
        .unwrap();
    let proxy = picogent_testkit::proxy::Proxy::start(host_port).await;
    let through = db.replace(host_port, &format!("127.0.0.1:{}", proxy.port));
    assert!(through.ends_with(rest));
    let mut fleet = Fleet::on(db, turns, json!({"sandbox": "off"})).await;
    let cut_off = fleet.start_on(&through, &[]).await;
    assert_eq!(fleet.deliver(cut_off, &assigned("p1", "p1")).await.0, 202);
    wait_started(&fleet, cut_off, "p").await;
    let other = fleet.start(&[]).await;
    proxy.cut();
    // Its run finishes while it cannot reach the store.
    std::fs::write(&open, "").unwrap();
    fleet.wait_review("p1", 30).await;
    assert!(
        fleet.workers[other].sb.work.join("work.txt").exists(),
        "the task did not move on"
    );
    // New work goes to the worker that can reach the store.
    assert_eq!(fleet.deliver(other, &assigned("p2", "p2")).await.0, 202);
    fleet.wait_review("p2", 30).await;
    let h = health(&fleet.workers[cut_off]).await;
    assert_eq!(h["status"], "degraded", "{h}");
    assert!(
        h["reasons"].to_string().contains("store_unreachable"),
        "{h}"
    );
    proxy.heal();
    // It recovers by itself: its late result is refused, and it takes new work.
    let log_has = |w: &Worker, s: &str| w.log().contains(s);
    for _ in 0..500 {
        if log_has(&fleet.workers[cut_off], "is another worker's now") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(log_has(&fleet.workers[cut_off], "is another worker's now"));
    assert_once(&fleet.tracker, "p1");
    for _ in 0..500 {
        if health(&fleet.workers[cut_off]).await["status"] == "ok" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(health(&fleet.workers[cut_off]).await["status"], "ok");
    fleet.workers[other].child.kill().await.unwrap();
    assert_eq!(fleet.deliver(cut_off, &assigned("p3", "p3")).await.0, 202);
    fleet.wait_review("p3", 30).await;
    assert_once(&fleet.tracker, "p3");
    fleet.stop().await;
}

/// The database stopped for 30 s in the middle of runs and started again: the runs
/// finish, their reports wait and then go, nothing is lost or sent twice, and every
/// worker carries on by itself.
#[tokio::test]
async fn the_store_stopped_for_thirty_seconds_loses_and_repeats_nothing() {
    let cluster = picogent_testkit::pg::Cluster::start();
    let store = cluster.database().await.url;
    let gate = tempfile::tempdir().unwrap();
    let open = gate.path().join("open");
    let turns = vec![
        tool("bash", json!({"command": gated(&open, "d")})),
        text("Done."),
    ];
    // Leases outlast the outage: the runs keep their tasks.
    let mut fleet = Fleet::on(store, turns, json!({"sandbox": "off", "lease_sec": 60})).await;
    for _ in 0..2 {
        fleet.start(&[]).await;
    }
    for n in 0..4 {
        assert_eq!(
            fleet
                .deliver(n % 2, &assigned(&format!("d{n}"), &format!("d{n}")))
                .await
                .0,
            202
        );
    }
    for w in 0..2 {
        wait_started(&fleet, w, "d").await;
    }
    cluster.stop();
    std::fs::write(&open, "").unwrap();
    // Events are refused while nothing can record them; the tracker sends them again.
    let (status, _) = fleet.deliver(0, &assigned("d9", "d9")).await;
    assert_eq!(status, 500);
    let mut h = Value::Null;
    for _ in 0..500 {
        h = health(&fleet.workers[0]).await;
        if h["reasons"].to_string().contains("store_unreachable") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        h["reasons"].to_string().contains("store_unreachable"),
        "{h}"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        fleet
            .workers
            .iter_mut()
            .all(|w| w.child.try_wait().unwrap().is_none()),
        "a worker died"
    );
    cluster.resume();
    assert_eq!(fleet.deliver(1, &assigned("d9", "d9")).await.0, 202);
    for n in [0, 1, 2, 3, 9] {
        fleet.wait_review(&format!("d{n}"), 60).await;
    }
    for n in [0, 1, 2, 3, 9] {
        assert_once(&fleet.tracker, &format!("d{n}"));
    }
    assert_eq!(fleet.llm.request_count(), 10, "a task was worked twice");
    fleet.stop().await;
}

/// A worker over Team Board's WebSocket (not waited for: only one will register).
fn start_ws(fleet: &mut Fleet) {
    let sb = Sandbox::new();
    let port = free_port();
    let cfg = json!({"tracker_url": fleet.tracker.url(), "listen_port": port,
                     "allowed_paths": [sb.work], "max_concurrent_tasks": 2,
                     "store": fleet.store, "lease_sec": 3, "transport": "ws",
                     "fleet_max_tasks": 4, "heartbeat_interval_sec": 1});
    sb.write_config(&fleet.llm, Wire::Anthropic, cfg);
    let child = spawn_daemon(&sb);
    fleet.workers.push(Worker { sb, port, child });
}

/// Over Team Board's WebSocket the tracker keeps one connection per agent: exactly one
/// worker holds it (no worker knocks another off), every worker works the events it
/// brings, and when its holder dies another worker connects within the lease.
#[tokio::test]
async fn one_worker_holds_the_websocket_for_the_fleet_and_another_takes_over() {
    let mut fleet = Fleet::new(work_and_answer(), json!({})).await;
    for _ in 0..3 {
        start_ws(&mut fleet);
    }
    fleet
        .tracker
        .wait_for(30, "a connection", |t| {
            !t.ws_acked().is_empty() || !t.ws_frames().is_empty()
        })
        .await;
    for n in 0..6 {
        fleet
            .tracker
            .ws_send(assigned(&format!("w{n}"), &format!("w{n}")));
    }
    for n in 0..6 {
        fleet.wait_review(&format!("w{n}"), 60).await;
    }
    for n in 0..6 {
        assert_once(&fleet.tracker, &format!("w{n}"));
    }
    assert_eq!(
        fleet.tracker.ws_attempts().len(),
        1,
        "workers took the connection from each other"
    );
    let registration = fleet
        .tracker
        .ws_frames()
        .into_iter()
        .find(|f| f["type"] == "register")
        .unwrap();
    assert_eq!(
        registration["agent"]["max_concurrent_tasks"], 4,
        "{registration}"
    );
    let holder = (0..3)
        .find(|n| {
            fleet.workers[*n]
                .log()
                .contains("this worker holds the tracker's connection")
        })
        .unwrap();
    for (n, w) in fleet.workers.iter().enumerate() {
        assert!(
            !w.log().contains("one picogent per agent identity"),
            "worker {n}"
        );
    }
    fleet.workers[holder].child.start_kill().unwrap();
    fleet.workers[holder].child.wait().await.unwrap();
    let killed = tokio::time::Instant::now();
    for _ in 0..1500 {
        if fleet.tracker.ws_attempts().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        fleet.tracker.ws_attempts().len(),
        2,
        "no other worker connected"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "{:?}",
        killed.elapsed()
    );
    fleet.tracker.ws_send(assigned("after", "after"));
    fleet.wait_review("after", 60).await;
    assert_once(&fleet.tracker, "after");
    fleet.stop().await;
}
