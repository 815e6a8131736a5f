//! GitHub mode in a fleet (issue 39): worker processes, each with its own clone of one
//! repository, sharing one PostgreSQL store (a real server, scripts/pg.sh) against one
//! fake GitHub (every request checked against GitHub's OpenAPI description) and one
//! bare repository as the remote. Webhook deliveries go to whichever worker the test
//! picks, as a load balancer would.

use std::os::unix::process::ExitStatusExt;

use serde_json::{json, Value};

use super::github::{World, BOT, SECRET, TOKEN};
use crate::common::github::deliver;
use crate::common::*;

struct Worker {
    sb: Sandbox,
    port: u16,
    child: tokio::process::Child,
}

struct GhFleet {
    w: World,
    store: String,
    workers: Vec<Worker>,
    /// Workers poll every second (else only the webhook and the sweep at start).
    poll: bool,
}

impl GhFleet {
    async fn new(turns: Vec<Turn>) -> GhFleet {
        let store = picogent_testkit::pg::database().await.url;
        GhFleet {
            w: World::new(turns).await,
            store,
            workers: Vec::new(),
            poll: true,
        }
    }

    /// Starts a worker on a clone of its own (with more variables: a fault point) and
    /// waits until it listens.
    async fn start(&mut self, env: &[(&str, &str)]) -> usize {
        let sb = Sandbox::new();
        git(
            &sb.base(),
            &[
                "clone",
                "-q",
                "-b",
                "main",
                self.w.remote.to_str().unwrap(),
                "work",
            ],
        );
        let port = free_port();
        let poll = if self.poll { json!(1) } else { Value::Null };
        let mut cfg = self.w.config(json!({"poll_interval_sec": poll}));
        cfg["listen_port"] = json!(port);
        cfg["allowed_paths"] = json!([sb.work]);
        cfg["store"] = json!(self.store);
        cfg["lease_sec"] = json!(3);
        sb.write_config(&self.w.llm, Wire::Anthropic, cfg);
        let mut vars = vec![("GITHUB_TOKEN", TOKEN)];
        vars.extend_from_slice(env);
        // Up once it listens and its start-up sweep has listed the issues.
        let sweeps = |g: &crate::common::github::FakeGithub| {
            g.requests()
                .iter()
                .filter(|r| r.path.ends_with("/issues") && r.query.contains("state=open"))
                .count()
        };
        let before = sweeps(&self.w.gh);
        let child = spawn_daemon_with(&sb, &vars);
        self.workers.push(Worker { sb, port, child });
        let url = format!("http://127.0.0.1:{port}/livez");
        for _ in 0..1500 {
            let up = reqwest::get(&url).await.is_ok_and(|r| r.status() == 200);
            if up && sweeps(&self.w.gh) > before {
                return self.workers.len() - 1;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the worker never listened:\n{}", self.logs());
    }

    async fn deliver(&self, worker: usize, delivery: &str, payload: &Value) -> u16 {
        let url = format!(
            "http://127.0.0.1:{}/github/webhook",
            self.workers[worker].port
        );
        deliver(&url, "issues", delivery, Some(SECRET), payload)
            .await
            .0
    }

    /// Waits for a worker that kills itself at a fault point.
    async fn wait_killed(&mut self, worker: usize) {
        let child = &mut self.workers[worker].child;
        let status = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "worker {worker} never reached its fault point:\n{}",
                    self.log(worker)
                )
            })
            .unwrap();
        assert_eq!(status.signal(), Some(9), "{}", self.log(worker));
    }

    fn log(&self, worker: usize) -> String {
        std::fs::read_to_string(self.workers[worker].sb.base().join("daemon.log"))
            .unwrap_or_default()
    }

    fn logs(&self) -> String {
        (0..self.workers.len())
            .map(|i| format!("--- worker {i}\n{}", self.log(i)))
            .collect()
    }

    /// Waits until picogent's progress comment on `n` says it finished.
    async fn wait_finished(&self, n: u64) {
        let finished = |g: &crate::common::github::FakeGithub| {
            g.comments(n).iter().any(|c| {
                c["body"]
                    .as_str()
                    .is_some_and(|b| b.contains("picogent finished: pull request"))
            })
        };
        for _ in 0..60 * 50 {
            if finished(&self.w.gh) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let said: Vec<String> = self
            .w
            .gh
            .comments(n)
            .iter()
            .map(|c| c["body"].to_string())
            .collect();
        panic!(
            "issue {n} never finished; its comments: {said:#?}\n{}",
            self.logs()
        );
    }

    /// Waits until every worker's poll asked GitHub about the issues `rounds` more
    /// times: what a late duplicate would have started, it has by then.
    async fn wait_polls(&self, rounds: usize) {
        let polls = |g: &crate::common::github::FakeGithub| {
            g.requests()
                .iter()
                .filter(|r| r.path.ends_with("/issues") && r.query.contains("since="))
                .count()
        };
        let before = polls(&self.w.gh);
        self.w
            .gh
            .wait_for(30, "more polls", |g| polls(g) >= before + rounds)
            .await;
    }

    fn commits_on(&self, branch: &str) -> usize {
        git(
            &self.w.remote,
            &["rev-list", "--count", &format!("main..{branch}")],
        )
        .trim()
        .parse()
        .unwrap()
    }
}

fn fix() -> Vec<Turn> {
    vec![
        tool("bash", json!({"command": "echo fixed > widget.txt"})),
        text("Fixed the widget: it now says fixed."),
    ]
}

/// One assignment, heard by every worker at once (one delivery sent to two workers, a
/// second delivery of it to one of them, and the fleet's poll): one task, one run, one
/// pull request, one progress comment.
#[tokio::test]
async fn one_assignment_heard_by_every_worker_is_one_task() {
    let mut f = GhFleet::new(fix()).await;
    f.start(&[]).await;
    f.start(&[]).await;
    let n = f.w.gh.add_issue("Fix the widget", "It is broken.", "alice");
    f.w.gh.assign(n, BOT);
    let p = f.w.issue_payload("assigned", n);
    let (a, b, c) = tokio::join!(
        f.deliver(0, "same-1", &p),
        f.deliver(1, "same-1", &p),
        f.deliver(1, "other-2", &p)
    );
    for status in [a, b, c] {
        assert!((200..300).contains(&status), "{status}\n{}", f.logs());
    }
    f.wait_finished(n).await;
    f.wait_polls(2).await;
    assert_eq!(f.w.gh.pulls().len(), 1, "{:#?}", f.w.gh.pulls());
    assert_eq!(f.w.bot_comments(n).len(), 1, "{:#?}", f.w.bot_comments(n));
    assert_eq!(f.w.llm.request_count(), 2, "one run:\n{}", f.logs());
    assert_eq!(f.commits_on(&format!("picogent/issue-{n}")), 1);
    // One worker polls for the fleet.
    let pollers = (0..2)
        .filter(|i| f.log(*i).contains("this worker polls GitHub for the fleet"))
        .count();
    assert_eq!(pollers, 1, "{}", f.logs());
    f.w.assert_valid();
}

/// Workers killed (SIGKILL) at each step of a task's delivery, one after another: right
/// after its branch was pushed, right after its result was queued, and while GitHub was
/// opening the pull request. Each next worker takes the task over once the dead one's
/// lease runs out, starting from the pushed branch: one commit, one push, one pull
/// request, one progress comment.
#[tokio::test]
async fn workers_killed_at_each_delivery_step_leave_one_of_everything() {
    // A run that finds the widget fixed (the pushed work) adds a note instead.
    let mut f = GhFleet::new(vec![
        tool(
            "bash",
            json!({"command": "if grep -q fixed widget.txt; then echo again > notes.txt; else echo fixed > widget.txt; fi"}),
        ),
        text("Fixed the widget."),
    ])
    .await;
    let first = f.start(&[("PICOGENT_FAULT", "push_recorded")]).await;
    let n = f.w.gh.add_issue("Fix the widget", "It is broken.", "alice");
    f.w.gh.assign(n, BOT);
    let p = f.w.issue_payload("assigned", n);
    // The worker's own poll may have seen the assignment first.
    let status = f.deliver(first, "k-1", &p).await;
    assert!((200..300).contains(&status), "{status}\n{}", f.logs());
    f.wait_killed(first).await;
    let branch = format!("picogent/issue-{n}");
    assert_eq!(f.w.remote_file(&branch, "widget.txt"), "fixed");
    assert!(f.w.gh.pulls().is_empty());

    let second = f.start(&[("PICOGENT_FAULT", "result_queued")]).await;
    f.wait_killed(second).await;
    assert!(
        f.log(second)
            .contains("the task's branch continues from its pushed tip"),
        "{}",
        f.logs()
    );

    f.w.gh.stall_next("POST", "/pulls");
    let third = f.start(&[]).await;
    f.w.gh
        .wait_for(60, "GitHub opening the pull request", |g| g.stalled() == 1)
        .await;
    f.workers[third].child.kill().await.unwrap();

    f.start(&[]).await;
    f.wait_finished(n).await;
    assert_eq!(f.w.gh.pulls().len(), 1, "{:#?}", f.w.gh.pulls());
    assert_eq!(f.w.bot_comments(n).len(), 1, "{:#?}", f.w.bot_comments(n));
    // The first run's commit, and the second's on top of it: none made twice, and
    // the second pushed onto the first (from a fresh clone it would be refused).
    assert_eq!(f.commits_on(&branch), 2, "{}", f.logs());
    assert_eq!(f.w.remote_file(&branch, "widget.txt"), "fixed");
    assert_eq!(f.w.remote_file(&branch, "notes.txt"), "again");
    f.w.assert_valid();
}

/// One worker's answer says the token's rate limit is spent: no worker sends GitHub a
/// request before the limit resets (the other has not asked GitHub since, and learns
/// it from the store), and every task goes on after it.
#[tokio::test]
async fn a_spent_rate_limit_holds_every_worker_until_it_resets() {
    let mut f = GhFleet::new(fix()).await;
    f.poll = false;
    f.start(&[]).await;
    f.start(&[]).await;
    let a = f.w.gh.add_issue("First", "", "alice");
    let b = f.w.gh.add_issue("Second", "", "alice");
    f.w.gh.assign(a, BOT);
    f.w.gh.fail_next(
        "POST",
        "/reactions",
        crate::common::github::Fault::RateLimited { reset_in_secs: 6 },
    );
    let status = f.deliver(0, "r-1", &f.w.issue_payload("assigned", a)).await;
    assert!((200..300).contains(&status), "{status}");
    let spent = |g: &crate::common::github::FakeGithub| {
        g.requests().iter().find(|r| r.status == 403).map(|r| r.at)
    };
    f.w.gh
        .wait_for(30, "the rate limit's refusal", |g| spent(g).is_some())
        .await;
    let at = spent(&f.w.gh).unwrap();
    for _ in 0..500 {
        if f.log(0)
            .contains("the token's rate limit is spent until its reset")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    f.w.gh.assign(b, BOT);
    let status = f.deliver(1, "r-2", &f.w.issue_payload("assigned", b)).await;
    assert!((200..300).contains(&status), "{status}");
    f.wait_finished(a).await;
    f.wait_finished(b).await;
    let early: Vec<String> =
        f.w.gh
            .requests()
            .iter()
            .filter(|r| r.at > at && r.at < at + std::time::Duration::from_secs(4))
            .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
            .collect();
    assert!(
        early.is_empty(),
        "sent while the limit was spent: {early:#?}\n{}",
        f.logs()
    );
    assert_eq!(f.w.gh.pulls().len(), 2);
    f.w.assert_valid();
}
