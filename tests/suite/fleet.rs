//! Fleet mode (issue 39): worker processes with one configuration and one PostgreSQL
//! store (a real server, scripts/pg.sh; a database per test) against one fake Team
//! Board. Events go to whichever worker the test picks, as a load balancer would.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tracker::FakeTracker;
use crate::common::*;

pub(super) fn assigned(event: &str, task: &str) -> Value {
    json!({"id": event, "type": "task.assigned",
           "data": {"task": {"id": task, "title": format!("Task {task}"), "description": "Do it.", "status": "todo"}}})
}

pub(super) struct Worker {
    pub(super) sb: Sandbox,
    pub(super) port: u16,
    pub(super) child: tokio::process::Child,
}

impl Worker {
    fn events_url(&self) -> String {
        format!("http://127.0.0.1:{}/events", self.port)
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.sb.base().join("daemon.log")).unwrap_or_default()
    }
}

pub(super) struct Fleet {
    pub(super) store: String,
    pub(super) llm: ScriptedLlm,
    pub(super) tracker: FakeTracker,
    pub(super) workers: Vec<Worker>,
    extra: Value,
}

impl Fleet {
    /// A store, a scripted model whose every conversation runs `turns`, a tracker.
    pub(super) async fn new(turns: Vec<Turn>, extra: Value) -> Fleet {
        let store = picogent_testkit::pg::database().await.url;
        Fleet::on(store, turns, extra).await
    }

    /// The same on a store of the test's choosing.
    pub(super) async fn on(store: String, turns: Vec<Turn>, extra: Value) -> Fleet {
        let llm = ScriptedLlm::start(vec![]).await;
        llm.per_conversation(turns);
        let tracker = FakeTracker::start().await;
        Fleet {
            store,
            llm,
            tracker,
            workers: Vec::new(),
            extra,
        }
    }

    /// Starts a worker (with more variables: a fault point) and waits until it
    /// registered.
    pub(super) async fn start(&mut self, env: &[(&str, &str)]) -> usize {
        let store = self.store.clone();
        self.start_on(&store, env).await
    }

    /// Starts a worker that reaches the store at `store` (through a proxy, say).
    pub(super) async fn start_on(&mut self, store: &str, env: &[(&str, &str)]) -> usize {
        let sb = Sandbox::new();
        let port = free_port();
        let mut cfg = json!({"tracker_url": self.tracker.url(), "listen_port": port,
                             "allowed_paths": [sb.work], "max_concurrent_tasks": 2,
                             "store": store, "lease_sec": 3});
        for (k, v) in self.extra.as_object().cloned().unwrap_or_default() {
            cfg[k] = v;
        }
        sb.write_config(&self.llm, Wire::Anthropic, cfg);
        let regs = self.tracker.ok_calls("/api/v1/agents/register").len();
        let child = spawn_daemon_with(&sb, env);
        self.tracker
            .wait_for(30, "the worker's registration", |t| {
                t.ok_calls("/api/v1/agents/register").len() > regs
            })
            .await;
        self.workers.push(Worker { sb, port, child });
        self.workers.len() - 1
    }

    pub(super) async fn deliver(&self, worker: usize, event: &Value) -> (u16, Value) {
        self.tracker
            .deliver(&self.workers[worker].events_url(), event)
            .await
    }

    /// Waits until the task is in review; the workers' logs when it never is.
    pub(super) async fn wait_review(&self, task: &str, secs: u64) {
        let path = format!("/api/v1/tasks/{task}");
        for _ in 0..secs * 50 {
            let done = self
                .tracker
                .ok_calls(&path)
                .iter()
                .any(|c| c.body["status"] == "review");
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let logs: Vec<String> = self
            .workers
            .iter()
            .map(|w| {
                let log = w.log();
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| !l.contains("cannot read the held"))
                    .collect();
                lines[lines.len().saturating_sub(40)..].join("\n")
            })
            .collect();
        panic!(
            "{task} never reached review: {:?}\n{}",
            self.tracker.timeline(task),
            logs.join("\n-----\n")
        );
    }

    fn comments(&self, task: &str) -> usize {
        self.tracker.comments(task).len()
    }

    pub(super) async fn stop(mut self) {
        for w in &mut self.workers {
            let _ = w.child.kill().await;
        }
    }
}

/// Each task's reports, as Team Board got them: in progress, one comment, review.
pub(super) fn assert_once(tracker: &FakeTracker, task: &str) {
    let timeline = tracker.timeline(task);
    let reviews = timeline.iter().filter(|l| *l == "status:review").count();
    let comments = timeline
        .iter()
        .filter(|l| l.starts_with("comment:"))
        .count();
    assert_eq!((reviews, comments), (1, 1), "{task}: {timeline:?}");
    assert_eq!(
        timeline.last().map(String::as_str),
        Some("status:review"),
        "{timeline:?}"
    );
}

pub(super) fn work_and_answer() -> Vec<Turn> {
    vec![
        tool("bash", json!({"command": "echo work >> work.txt"})),
        text("Done."),
    ]
}

#[tokio::test]
async fn thirty_tasks_on_three_workers_are_each_worked_once() {
    let mut fleet = Fleet::new(work_and_answer(), json!({})).await;
    for _ in 0..3 {
        fleet.start(&[]).await;
    }
    for n in 0..30 {
        let (status, body) = fleet
            .deliver(n % 3, &assigned(&format!("e{n}"), &format!("t{n}")))
            .await;
        assert_eq!(status, 202, "{body}");
    }
    for n in 0..30 {
        fleet.wait_review(&format!("t{n}"), 60).await;
    }
    for n in 0..30 {
        assert_once(&fleet.tracker, &format!("t{n}"));
    }
    assert_eq!(fleet.llm.request_count(), 60, "a task was worked twice");
    // The work was shared: every worker ran tasks in its own folder.
    let busy = fleet
        .workers
        .iter()
        .filter(|w| w.sb.work.join("work.txt").exists())
        .count();
    assert!(busy >= 2, "one worker did everything");
    fleet.stop().await;
}

#[tokio::test]
async fn one_event_delivered_to_two_workers_at_once_is_one_task() {
    let mut fleet = Fleet::new(work_and_answer(), json!({})).await;
    for _ in 0..2 {
        fleet.start(&[]).await;
    }
    let event = assigned("same", "s1");
    let ((a, _), (b, _)) = tokio::join!(fleet.deliver(0, &event), fleet.deliver(1, &event));
    let mut statuses = [a, b];
    statuses.sort();
    assert_eq!(statuses, [200, 202], "one accepted, one duplicate");
    fleet.wait_review("s1", 30).await;
    // A repeat later, to either worker, is still a duplicate.
    assert_eq!(fleet.deliver(1, &event).await.0, 200);
    assert_once(&fleet.tracker, "s1");
    assert_eq!(fleet.llm.request_count(), 2);
    fleet.stop().await;
}

/// A worker killed in the middle of a run: another takes the task once the lease
/// runs out, and the task is reported once.
#[tokio::test]
async fn a_worker_killed_mid_run_leaves_its_task_to_another() {
    let gate = tempfile::tempdir().unwrap();
    let open = gate.path().join("open");
    let wait = format!(
        "touch started; for i in $(seq 3000); do [ -e {} ] && break; sleep 0.02; done; echo work >> work.txt",
        open.display()
    );
    let turns = vec![tool("bash", json!({"command": wait})), text("Done.")];
    let mut fleet = Fleet::new(turns, json!({"sandbox": "off"})).await;
    for _ in 0..3 {
        fleet.start(&[]).await;
    }
    assert_eq!(fleet.deliver(0, &assigned("k1", "k1")).await.0, 202);
    let started = tokio::time::Instant::now();
    let holder = loop {
        if let Some(n) = (0..3).find(|n| fleet.workers[*n].sb.work.join("started").exists()) {
            break n;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no worker ran the task"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    fleet.workers[holder].child.start_kill().unwrap();
    let died = fleet.workers[holder].child.wait().await.unwrap();
    assert_eq!(died.signal(), Some(9));
    std::fs::write(&open, "").unwrap();
    let killed = tokio::time::Instant::now();
    fleet.wait_review("k1", 30).await;
    // The lease (3 s) and a few seconds: not a restart's worth.
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "{:?}",
        killed.elapsed()
    );
    assert_once(&fleet.tracker, "k1");
    let finisher = (0..3)
        .filter(|n| *n != holder)
        .find(|n| fleet.workers[*n].sb.work.join("work.txt").exists());
    assert!(finisher.is_some(), "no other worker finished the task");
    fleet.stop().await;
}

/// Killed once the result was committed to the store: another worker delivers it,
/// and nobody works the task again.
#[tokio::test]
async fn a_result_committed_before_a_kill_is_delivered_by_another_worker() {
    let mut fleet = Fleet::new(work_and_answer(), json!({})).await;
    // Nothing reaches the tracker before the kill: every report is the store's.
    fleet.tracker.faults(|f| f.reports_down = usize::MAX);
    let first = fleet.start(&[("PICOGENT_FAULT", "result_queued")]).await;
    assert_eq!(fleet.deliver(first, &assigned("r1", "r1")).await.0, 202);
    let died = tokio::time::timeout(Duration::from_secs(60), fleet.workers[first].child.wait())
        .await
        .expect("the fault point was never reached")
        .unwrap();
    assert_eq!(died.signal(), Some(9));
    fleet.tracker.faults(|f| f.reports_down = 0);
    fleet.start(&[]).await;
    fleet.wait_review("r1", 30).await;
    assert_eq!(fleet.comments("r1"), 1);
    assert_eq!(fleet.llm.request_count(), 2, "the task was worked again");
    fleet.stop().await;
}

#[tokio::test]
async fn healthz_and_metrics_describe_the_fleet() {
    let mut fleet = Fleet::new(work_and_answer(), json!({"fleet_max_tasks": 5})).await;
    let w = fleet.start(&[]).await;
    assert_eq!(fleet.deliver(w, &assigned("h1", "h1")).await.0, 202);
    fleet.wait_review("h1", 30).await;
    let base = format!("http://127.0.0.1:{}", fleet.workers[w].port);
    let client = reqwest::Client::new();
    let mut health = Value::Null;
    for _ in 0..100 {
        health = client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if health["fleet"]["queued_tasks"].is_number() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["fleet"]["store"]["reachable"], true, "{health}");
    assert_eq!(health["fleet"]["queued_tasks"], 0, "{health}");
    assert!(health["fleet"]["worker"]
        .as_str()
        .is_some_and(|w| !w.is_empty()));
    let metrics = client
        .get(format!("{base}/metrics"))
        .bearer_auth(crate::common::tracker::TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for family in [
        "picogent_fleet_queued_tasks",
        "picogent_store_up 1",
        "picogent_fleet_lease_expiries",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
    // The password is in no log line.
    let password = fleet
        .store
        .split(':')
        .nth(2)
        .and_then(|s| s.split('@').next())
        .unwrap();
    assert!(!fleet.workers[w].log().contains(password));
    assert!(fleet.workers[w].log().contains("a fleet's worker"));
    fleet.stop().await;
}

/// Work a single daemon left unfinished in its local files is not left behind where no
/// worker of a fleet would see it: with `store` set, the start is refused and says why.
#[tokio::test]
async fn a_store_is_refused_while_local_files_hold_unfinished_work() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(work_and_answer());
    let tracker = FakeTracker::start().await;
    // The reports stay in the local outbox.
    tracker.faults(|f| f.reports_down = usize::MAX);
    let d = sb.daemon(&llm, &tracker, json!({"allowed_paths": [sb.work]}));
    let cb = tracker.callback_url().await;
    assert_eq!(tracker.deliver(&cb, &assigned("u1", "u1")).await.0, 202);
    let outbox = sb.home.join("state/outbox.jsonl");
    for _ in 0..1500 {
        if std::fs::read_to_string(&outbox)
            .unwrap_or_default()
            .contains("review")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.stop().await.unwrap();
    let store = picogent_testkit::pg::database().await.url;
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"allowed_paths": [sb.work], "store": store}),
    );
    let ended = tokio::time::timeout(Duration::from_secs(30), d.task)
        .await
        .expect("the start was not refused")
        .unwrap();
    let e = ended
        .expect_err("a store over unfinished local work")
        .to_string();
    assert!(
        e.contains("unsent report(s)") && e.contains("without `store`"),
        "{e}"
    );
}
