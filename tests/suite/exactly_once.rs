//! Exactly-once at the instants between two records (issue 36): a task whose result
//! was queued is never worked again; a push is tried again, and believed only after
//! the remote was asked; what git started dies with picogent.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::tracker::FakeTracker;
use crate::common::*;

fn assigned(event: &str, task: &str, title: &str) -> Value {
    json!({"id": event, "type": "task.assigned",
           "data": {"task": {"id": task, "title": title, "description": "Do it.", "status": "todo"}}})
}

/// Agent mode on the sandbox's repository, one task at a time, each conversation
/// writing a file and answering.
async fn agent(sb: &Sandbox, extra: Value) -> (ScriptedLlm, FakeTracker) {
    repository(sb);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(vec![
        tool("bash", json!({"command": "echo work > work.txt"})),
        text("Done."),
    ]);
    let tracker = FakeTracker::start().await;
    let mut cfg = json!({"tracker_url": tracker.url(), "listen_port": 0,
                         "allowed_paths": [sb.work], "max_concurrent_tasks": 1});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        cfg[k] = v;
    }
    sb.write_config(&llm, Wire::Anthropic, cfg);
    (llm, tracker)
}

/// Restarts the daemon (finding git on `path`, when given) once it registered again.
async fn restart(sb: &Sandbox, tracker: &FakeTracker, path: Option<&str>) -> tokio::process::Child {
    restarted(tracker, || match path {
        Some(p) => spawn_daemon_with_path(sb, p),
        None => spawn_daemon(sb),
    })
    .await
}

fn comment_text(tracker: &FakeTracker, task: &str) -> Vec<String> {
    tracker
        .comments(task)
        .iter()
        .map(|c| c["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits until the daemon killed itself at its `PICOGENT_FAULT` point.
async fn died_at_fault_point(daemon: &mut tokio::process::Child) {
    let died = tokio::time::timeout(Duration::from_secs(60), daemon.wait())
        .await
        .expect("the fault point was never reached")
        .unwrap();
    assert_eq!(died.signal(), Some(9));
}

/// The task's comments, once its branch is on `origin` at the same tip and a comment
/// says it was pushed.
fn assert_pushed(
    sb: &Sandbox,
    tracker: &FakeTracker,
    origin: &std::path::Path,
    task: &str,
) -> String {
    let branch = format!("picogent/{task}");
    let tip = git(&sb.work, &["rev-parse", &branch]);
    assert_eq!(git(origin, &["rev-parse", &branch]), tip);
    let c = comment_text(tracker, task).join("\n");
    assert!(c.contains("Pushed to `origin`."), "{c}");
    c
}

/// Killed between the two records of a task's end: its result is queued (on disk,
/// going out), the journal has not heard of it. The restarted daemon delivers that
/// result once and does not work the task again: one comment, one commit, one run.
#[tokio::test]
async fn a_task_whose_result_was_queued_is_never_worked_again() {
    let sb = Sandbox::new();
    let (llm, tracker) = agent(&sb, json!({})).await;
    // Nothing reaches the tracker before the kill: every report is the outbox's.
    tracker.faults(|f| f.reports_down = usize::MAX);
    let mut daemon = spawn_daemon_with(&sb, &[("PICOGENT_FAULT", "result_queued")]);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "q1", "Once")).await;
    died_at_fault_point(&mut daemon).await;
    tracker.faults(|f| f.reports_down = 0);
    let mut daemon = restart(&sb, &tracker, None).await;
    tracker.wait_status("q1", "review", 30).await;
    // One task at a time: a later task ends only after anything resumed before it.
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e2", "q2", "Next")).await;
    tracker.wait_status("q2", "review", 30).await;
    assert_eq!(
        comment_text(&tracker, "q1").len(),
        1,
        "{:?}",
        comment_text(&tracker, "q1")
    );
    assert_eq!(llm.request_count(), 4, "the first task was worked again");
    let commits = git(&sb.work, &["rev-list", "--count", "main..picogent/q1"]);
    assert_eq!(commits, "1");
    daemon.kill().await.unwrap();
}

/// A push that fails while the remote is still busy (`cannot lock ref`, as when a
/// killed picogent's push is finishing there) is tried again in the same delivery.
#[tokio::test]
async fn a_push_that_fails_for_a_moment_is_tried_again() {
    let sb = Sandbox::new();
    let (_llm, tracker) = agent(&sb, json!({"push": true})).await;
    let origin = with_origin(&sb);
    let slow = SlowGit::new(&sb);
    slow.instead_of(
        "push",
        "echo x >> \"$dir/count\"\n  if [ $(wc -l < \"$dir/count\") -le 2 ]; then echo \"error: cannot lock ref 'refs/heads/picogent/r1': reference already exists\" >&2; exit 1; fi",
    );
    let mut daemon = spawn_daemon_with_path(&sb, &slow.path());
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "r1", "Retry")).await;
    tracker.wait_status("r1", "review", 60).await;
    assert_pushed(&sb, &tracker, &origin, "r1");
    assert_eq!(slow.count(), 3);
    daemon.kill().await.unwrap();
}

/// git says the push failed, but it landed: the remote is asked before a failure is
/// reported, and the comment says what is true.
#[tokio::test]
async fn a_push_that_landed_is_reported_pushed_whatever_git_said() {
    let sb = Sandbox::new();
    let (_llm, tracker) = agent(&sb, json!({"push": true})).await;
    let origin = with_origin(&sb);
    let slow = SlowGit::new(&sb);
    slow.instead_of(
        "push",
        "echo x >> \"$dir/count\"\n  \"$real\" \"$@\"; echo 'fatal: the remote end hung up unexpectedly' >&2; exit 128",
    );
    let mut daemon = spawn_daemon_with_path(&sb, &slow.path());
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "l1", "Landed")).await;
    tracker.wait_status("l1", "review", 60).await;
    let c = assert_pushed(&sb, &tracker, &origin, "l1");
    assert!(!c.contains("failed"), "{c}");
    assert_eq!(slow.count(), 1, "a push the remote holds is not repeated");
    daemon.kill().await.unwrap();
}

/// The lock a `git-receive-pack` killed with an earlier picogent left in a folder
/// remote refuses every push of that branch: it is cleared, and the push goes through.
#[tokio::test]
async fn a_lock_a_killed_push_left_in_a_folder_remote_is_cleared() {
    let sb = Sandbox::new();
    let (_llm, tracker) = agent(&sb, json!({"push": true})).await;
    let origin = with_origin(&sb);
    let lock = origin.join("refs/heads/picogent/k1.lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, "").unwrap();
    let mut daemon = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "k1", "Locked")).await;
    tracker.wait_status("k1", "review", 60).await;
    assert_pushed(&sb, &tracker, &origin, "k1");
    assert!(!lock.exists());
    daemon.kill().await.unwrap();
}

/// Killed after the push landed and was recorded, before the result was queued: the
/// resumed run owes no push, and its comment names the commit and says the remote has
/// it.
#[tokio::test]
async fn a_kill_right_after_the_push_still_says_it_was_pushed() {
    let sb = Sandbox::new();
    let (_llm, tracker) = agent(&sb, json!({"push": true})).await;
    let origin = with_origin(&sb);
    let mut daemon = spawn_daemon_with(&sb, &[("PICOGENT_FAULT", "push_recorded")]);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "a1", "After")).await;
    died_at_fault_point(&mut daemon).await;
    let mut daemon = restart(&sb, &tracker, None).await;
    tracker.wait_status("a1", "review", 60).await;
    let c = assert_pushed(&sb, &tracker, &origin, "a1");
    let tip = git(&sb.work, &["rev-parse", "--short=12", "picogent/a1"]);
    assert!(c.contains(&tip), "{c}");
    daemon.kill().await.unwrap();
}

/// Whether a process is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
    }
}

/// Killed while git pushes: git's own children (here one the stand-in started, as
/// `git push` starts `pack-objects` and a folder remote's `receive-pack`) die too.
#[tokio::test]
async fn what_git_started_dies_with_picogent() {
    let sb = Sandbox::new();
    let (_llm, tracker) = agent(&sb, json!({"push": true})).await;
    with_origin(&sb);
    let slow = SlowGit::new(&sb);
    slow.stop_at("push", "sleep 300 & echo $! > \"$dir/child.pid\"");
    let mut daemon = spawn_daemon_with_path(&sb, &slow.path());
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "g1", "Group")).await;
    slow.reached().await;
    let pid: i32 = std::fs::read_to_string(sb.base().join("slow-git/child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!gone(pid));
    daemon.kill().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "git's child {pid} outlived picogent"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The record of a task's worktree in the state folder.
fn task_record(sb: &Sandbox, slug: &str) -> std::path::PathBuf {
    let mut stack = vec![sb.base()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            let in_records = p.parent().and_then(|d| d.file_name()) == Some("worktrees".as_ref());
            if p.file_name() == Some(format!("{slug}.json").as_ref()) && in_records {
                return p;
            }
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    panic!("no record of task {slug}");
}

/// A daemon down for longer than the worktree retention, with a task's work not yet
/// committed: the sweep at start keeps that worktree, and the resumed run commits it.
#[tokio::test]
async fn age_alone_never_removes_work_not_yet_committed() {
    let sb = Sandbox::new();
    repository(&sb);
    let gate = ModelGate::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo first > first.txt"})),
        Turn::Held(gate, "never".into()),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let cfg = json!({"tracker_url": tracker.url(), "listen_port": 0, "allowed_paths": [sb.work]});
    sb.write_config(&llm, Wire::Anthropic, cfg);
    let mut daemon = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "w1", "Long")).await;
    llm.wait_requests(2).await;
    daemon.kill().await.unwrap();
    // Eight days later (the retention is seven).
    let record = task_record(&sb, "w1");
    let mut r: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    r["last_event"] = json!(now - 8 * 86_400);
    std::fs::write(&record, r.to_string()).unwrap();
    llm.push(text("Done."));
    let mut daemon = restart(&sb, &tracker, None).await;
    tracker.wait_status("w1", "review", 30).await;
    assert_eq!(git(&sb.work, &["show", "picogent/w1:first.txt"]), "first");
    daemon.kill().await.unwrap();
}

/// A git lock dated after now was made before the clock was set back (here: two
/// hours), not by this daemon: nobody holds it, so it is cleared and the work delivered.
#[tokio::test]
async fn a_stale_lock_is_cleared_whatever_the_clock_says() {
    let sb = Sandbox::new();
    let (_llm, tracker) = agent(&sb, json!({})).await;
    let mut daemon = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "s1", "First")).await;
    tracker.wait_status("s1", "review", 30).await;
    let lock = sb.work.join(".git/worktrees/s1/index.lock");
    let file = std::fs::File::create(&lock).unwrap();
    file.set_modified(std::time::SystemTime::now() + Duration::from_secs(7200))
        .unwrap();
    drop(file);
    let msg = json!({"id": "e2", "type": "chat.message", "data": {"task_id": "s1",
        "message": {"id": "m1", "content": "Once more."}}});
    tracker.deliver(&cb, &msg).await;
    tracker
        .wait_for(30, "the reply", |t| t.comments("s1").len() == 2)
        .await;
    let reply = comment_text(&tracker, "s1").remove(1);
    assert!(!reply.contains("could not be committed"), "{reply}");
    assert!(reply.contains("branch `picogent/s1`"), "{reply}");
    assert!(!lock.exists());
    daemon.kill().await.unwrap();
}

/// Prints the daemon's log when the test fails.
struct LogOnFailure(std::path::PathBuf);

impl Drop for LogOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.0).unwrap_or_default();
            eprintln!("daemon log:\n{log}");
        }
    }
}

/// The instant a random trial kills at: `PICOGENT_TRIAL_KILL_AT_MS`, else uniformly
/// random within `PICOGENT_TRIAL_SPAN_MS` (default 400 ms, about a task's length here;
/// `PICOGENT_TRIAL_CALIBRATE` measures it).
fn trial_instant() -> Duration {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let span = env("PICOGENT_TRIAL_SPAN_MS").unwrap_or(400).max(1);
    let at = env("PICOGENT_TRIAL_KILL_AT_MS").unwrap_or_else(|| fastrand::u64(0..span));
    Duration::from_millis(at)
}

/// One random-instant crash trial (`bench/crash_trials.sh --random` runs it many
/// times): killed at any instant of a task (real git, a push to a folder remote) and
/// restarted, picogent loses and doubles nothing. The remote holds the branch's tip,
/// the branch one commit, the task one result comment naming that commit (as a
/// tracker that honours the idempotency key keeps them), ending in `review`.
#[tokio::test]
async fn a_kill_at_a_random_instant_loses_and_doubles_nothing() {
    let sb = Sandbox::new();
    let (llm, tracker) = agent(&sb, json!({"push": true})).await;
    // The work twice (the same each time): a run resumed after a kill in the first
    // command is answered with the second, as a model told of the restart would redo it.
    let work = || tool("bash", json!({"command": "echo work > work.txt"}));
    llm.per_conversation(vec![work(), work(), text("Done.")]);
    let origin = with_origin(&sb);
    let mut daemon = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    let at = trial_instant();
    let sent = Instant::now();
    tracker.deliver(&cb, &assigned("e1", "x1", "Trial")).await;
    if std::env::var_os("PICOGENT_TRIAL_CALIBRATE").is_some() {
        // How long the whole task takes here: the span trials kill within.
        tracker.wait_status("x1", "review", 60).await;
        eprintln!("trial: the task takes {} ms", sent.elapsed().as_millis());
    }
    // On purpose a sleep: the trial is the instant it ends at.
    tokio::time::sleep(at).await;
    daemon.kill().await.unwrap();
    let reached = tracker.timeline("x1");
    eprintln!(
        "trial: killed {} ms after the event; the tracker had {reached:?}",
        at.as_millis()
    );
    // A failed trial shows what the daemon did.
    let _log = LogOnFailure(sb.base().join("daemon.log"));
    let mut daemon = restart(&sb, &tracker, None).await;
    tracker.wait_status("x1", "review", 60).await;
    // One task at a time: once a later one is done, so is anything resumed before it;
    // a graceful stop then sends what is queued.
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e2", "x2", "Barrier")).await;
    tracker.wait_status("x2", "review", 60).await;
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(daemon.id().unwrap() as i32, libc::SIGTERM);
    }
    let exit = tokio::time::timeout(Duration::from_secs(30), daemon.wait()).await;
    assert!(matches!(exit, Ok(Ok(e)) if e.success()), "{exit:?}");
    let tip = git(&sb.work, &["rev-parse", "picogent/x1"]);
    assert_eq!(
        git(&origin, &["rev-parse", "picogent/x1"]),
        tip,
        "the push was lost"
    );
    let commits = git(&sb.work, &["rev-list", "--count", "main..picogent/x1"]);
    assert_eq!(commits, "1", "the work was committed twice");
    let comments: Vec<String> = tracker
        .comments_once_per_key("x1")
        .iter()
        .map(|c| c["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(comments[0].contains(&tip[..12]), "{comments:#?}");
    assert!(comments[0].contains("Pushed to `origin`."), "{comments:#?}");
    let timeline = tracker.timeline("x1");
    assert_eq!(
        timeline.last().map(String::as_str),
        Some("status:review"),
        "{timeline:?}"
    );
}
