//! Agent mode's per-task worktrees: each task on its own branch in its own worktree,
//! delivered as a commit with a diffstat and diff; the user's checkout untouched.

use std::process::Command;

use serde_json::{json, Value};

use crate::common::slow_git::SlowGit;
use crate::common::tracker::FakeTracker;
use crate::common::*;

fn assigned(event: &str, task: &str, title: &str) -> Value {
    json!({"id": event, "type": "task.assigned",
           "data": {"task": {"id": task, "title": title, "description": "Do it.", "status": "todo"}}})
}

/// Each conversation writes its worktree's name into shared.txt, tries to write into
/// the user's checkout, and answers.
fn writer_script(sb: &Sandbox) -> Vec<Turn> {
    let escape = sb.work.join("escape.txt");
    let cmd = format!(
        "basename \"$PWD\" > shared.txt && echo new > new.txt; echo pwn > {} 2>/dev/null; true",
        escape.display()
    );
    vec![
        tool("bash", json!({"command": cmd})),
        text("Wrote it."),
        tool("bash", json!({"command": "echo more >> shared.txt"})),
        text("Added more."),
    ]
}

fn comment_of(tracker: &FakeTracker, task: &str, n: usize) -> String {
    tracker.comments(task)[n]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn two_tasks_at_once_each_deliver_their_own_branch_and_leave_the_checkout_alone() {
    let sb = Sandbox::new();
    repository(&sb);
    // Uncommitted local work of the user's: never included, never touched.
    sb.write("shared.txt", "original\nlocal edit\n");
    let head = git(&sb.work, &["rev-parse", "HEAD"]);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(writer_script(&sb));
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"allowed_paths": [sb.work], "max_concurrent_tasks": 2}),
    );
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("e1", "t-1", "Name the file"))
        .await;
    tracker
        .deliver(&cb, &assigned("e2", "t-2", "Name it too"))
        .await;
    tracker.wait_status("t-1", "review", 30).await;
    tracker.wait_status("t-2", "review", 30).await;

    for (task, title) in [("t-1", "Name the file"), ("t-2", "Name it too")] {
        let branch = format!("picogent/{task}");
        assert_eq!(
            git(&sb.work, &["show", &format!("{branch}:shared.txt")]),
            task
        );
        assert_eq!(
            git(&sb.work, &["show", &format!("{branch}:new.txt")]),
            "new"
        );
        let log = git(&sb.work, &["log", "-1", "--format=%an <%ae>|%s", &branch]);
        assert_eq!(log, format!("Test <test@picogent.local>|{title}"));
        let c = comment_of(&tracker, task, 0);
        let commit = git(&sb.work, &["rev-parse", "--short=12", &branch]);
        assert!(c.starts_with("Wrote it."), "{c}");
        assert!(
            c.contains(&format!("**Branch** `{branch}` · **commit** `{commit}`")),
            "{c}"
        );
        assert!(
            c.contains("shared.txt |") && c.contains("2 files changed"),
            "{c}"
        );
        assert!(c.contains("```diff\ndiff --git a/new.txt b/new.txt"), "{c}");
        assert!(c.contains(&format!("+{task}")), "{c}");
        assert!(c.contains("uncommitted local changes"), "{c}");
    }
    // The user's checkout: same HEAD, branch, files and index; nothing written into it.
    assert_eq!(git(&sb.work, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&sb.work, &["branch", "--show-current"]), "main");
    assert_eq!(sb.read("shared.txt"), "original\nlocal edit\n");
    assert!(!sb.work.join("new.txt").exists());
    assert!(
        !sb.work.join("escape.txt").exists(),
        "a run wrote into the checkout"
    );
    assert_eq!(git(&sb.work, &["status", "--porcelain"]), "M shared.txt");

    // A follow-up message adds a commit, reported the same way.
    let msg = json!({"id": "e3", "type": "chat.message", "data": {"task_id": "t-1",
        "message": {"id": "m1", "content": "Add more please", "author": {"name": "Olga"}}}});
    tracker.deliver(&cb, &msg).await;
    tracker
        .wait_for(30, "the reply", |t| t.comments("t-1").len() >= 2)
        .await;
    let reply = &tracker.comments("t-1")[1];
    assert_eq!(reply["reply_to"], "m1");
    let content = reply["content"].as_str().unwrap_or_default();
    assert!(content.contains("**Branch** `picogent/t-1`"), "{content}");
    assert!(content.contains("+more"), "{content}");
    assert_eq!(
        git(&sb.work, &["log", "--format=%s", "main..picogent/t-1"]),
        "Follow-up: Add more please\nName the file"
    );
    d.stop().await.unwrap();
}

#[tokio::test]
async fn the_branch_is_pushed_and_a_failed_push_keeps_the_commit() {
    let sb = Sandbox::new();
    repository(&sb);
    let origin = with_origin(&sb);
    git(
        &sb.work,
        &["remote", "add", "gone", "/nonexistent/picogent-remote.git"],
    );
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(writer_script(&sb));
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"push": true}));
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "p1", "Push it")).await;
    tracker.wait_status("p1", "review", 30).await;
    let tip = git(&sb.work, &["rev-parse", "picogent/p1"]);
    assert_eq!(git(&origin, &["rev-parse", "picogent/p1"]), tip);
    assert!(comment_of(&tracker, "p1", 0).contains("Pushed to `origin`."));

    // The remote goes away: the commit stays, the comment says so.
    git(
        &sb.work,
        &[
            "remote",
            "set-url",
            "origin",
            "/nonexistent/picogent-remote.git",
        ],
    );
    tracker
        .deliver(&cb, &assigned("e2", "p2", "Push it again"))
        .await;
    tracker.wait_status("p2", "review", 30).await;
    let c = comment_of(&tracker, "p2", 0);
    assert!(
        c.contains("The push to `origin` failed") && c.contains("commit is kept"),
        "{c}"
    );
    assert_eq!(git(&sb.work, &["show", "picogent/p2:shared.txt"]), "p2");

    // Back again: the next run of the task pushes what was owed.
    git(
        &sb.work,
        &["remote", "set-url", "origin", origin.to_str().unwrap()],
    );
    let msg = json!({"id": "e3", "type": "chat.message", "data": {"task_id": "p2",
        "message": {"id": "m1", "content": "Anything else?"}}});
    tracker.deliver(&cb, &msg).await;
    tracker
        .wait_for(30, "the reply", |t| t.comments("p2").len() >= 2)
        .await;
    let tip = git(&sb.work, &["rev-parse", "picogent/p2"]);
    assert_eq!(git(&origin, &["rev-parse", "picogent/p2"]), tip);
    d.stop().await.unwrap();
}

#[tokio::test]
async fn cancellation_commits_how_far_it_got_and_removes_the_worktree_keeping_the_branch() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo half > half.txt"})),
        Turn::Stall(std::time::Duration::from_secs(30), "late".into()),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("e1", "c1", "Long job"))
        .await;
    llm.wait_requests(2).await;
    let cancel = json!({"id": "e2", "type": "task.cancelled", "data": {"task_id": "c1", "reason": "not needed"}});
    tracker.deliver(&cb, &cancel).await;
    tracker
        .wait_for(30, "the cancellation comment", |t| {
            !t.comments("c1").is_empty()
        })
        .await;
    let c = comment_of(&tracker, "c1", 0);
    assert!(
        c.contains("cancelled") && c.contains("how far it got"),
        "{c}"
    );
    assert!(c.contains("worktree was removed"), "{c}");
    assert_eq!(
        git(&sb.work, &["log", "-1", "--format=%s", "picogent/c1"]),
        "[cancelled] Long job"
    );
    assert_eq!(git(&sb.work, &["show", "picogent/c1:half.txt"]), "half");
    let worktrees = git(&sb.work, &["worktree", "list", "--porcelain"]);
    assert!(!worktrees.contains("worktrees/c1"), "{worktrees}");
    assert!(!sb.home.join("worktrees/c1").exists());
    d.stop().await.unwrap();
}

#[tokio::test]
async fn a_run_interrupted_by_shutdown_resumes_in_the_same_worktree() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo first > first.txt"})),
        Turn::Stall(std::time::Duration::from_secs(30), "late".into()),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"shutdown_grace_sec": 1}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("e1", "r1", "Resume me"))
        .await;
    llm.wait_requests(2).await;
    d.stop().await.unwrap();
    // Interrupted: nothing committed yet, the worktree keeps the work.
    assert!(sb.home.join("worktrees/r1/first.txt").exists());
    assert_eq!(
        git(&sb.work, &["rev-parse", "picogent/r1"]),
        git(&sb.work, &["rev-parse", "main"])
    );

    llm.push(tool(
        "bash",
        json!({"command": "cat first.txt > second.txt"}),
    ));
    llm.push(text("Resumed and done."));
    let d = sb.daemon(&llm, &tracker, json!({}));
    tracker.wait_status("r1", "review", 30).await;
    assert_eq!(git(&sb.work, &["show", "picogent/r1:second.txt"]), "first");
    assert_eq!(git(&sb.work, &["show", "picogent/r1:first.txt"]), "first");
    d.stop().await.unwrap();
}

#[tokio::test]
async fn settings_planted_in_the_repository_or_worktree_never_run() {
    let sb = Sandbox::new();
    repository(&sb);
    let marker = sb.base().join("planted-ran");
    let touch = format!("touch {}", marker.display());
    let hooks = sb.base().join("evil-hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "post-checkout",
        "pre-commit",
        "commit-msg",
        "post-commit",
        "pre-push",
        "reference-transaction",
    ] {
        let p = hooks.join(hook);
        std::fs::write(&p, format!("#!/bin/sh\n{touch}\n")).unwrap();
        Command::new("chmod").arg("755").arg(&p).status().unwrap();
        let local = sb.work.join(".git/hooks").join(hook);
        std::fs::write(&local, format!("#!/bin/sh\n{touch}\n")).unwrap();
        Command::new("chmod")
            .arg("755")
            .arg(&local)
            .status()
            .unwrap();
    }
    for (k, v) in [
        ("core.hooksPath", hooks.display().to_string()),
        ("core.fsmonitor", touch.clone()),
        ("filter.evil.clean", format!("{touch}; cat")),
        ("filter.evil.smudge", format!("{touch}; cat")),
        ("filter.evil.required", "true".into()),
        ("diff.evil.textconv", format!("{touch}; cat")),
        ("diff.external", touch.clone()),
        ("core.sshCommand", touch.clone()),
    ] {
        git(&sb.work, &["config", k, &v]);
    }
    std::fs::write(
        sb.work.join(".git/info/attributes"),
        "* filter=evil diff=evil\n",
    )
    .unwrap();
    // The run plants a .gitattributes and points its worktree's .git somewhere else.
    let llm = ScriptedLlm::start(vec![
        tool(
            "bash",
            json!({"command": "printf '* filter=evil diff=evil\\n' > .gitattributes && echo changed > shared.txt && mkdir -p /tmp/fake && printf 'gitdir: /tmp/fake\\n' > .git"}),
        ),
        text("Done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"allowed_paths": [sb.work]}));
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("e1", "h1", "Plant things"))
        .await;
    tracker.wait_status("h1", "review", 30).await;
    assert!(!marker.exists(), "a planted hook, filter or driver ran");
    assert_eq!(
        git(&sb.work, &["show", "picogent/h1:shared.txt"]),
        "changed"
    );
    let c = comment_of(&tracker, "h1", 0);
    assert!(c.contains("**Branch** `picogent/h1`"), "{c}");
    d.stop().await.unwrap();
}

#[tokio::test]
async fn worktree_forced_outside_a_repository_is_a_start_up_error_naming_the_setting() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"workspace": "worktree"}));
    let err = tokio::time::timeout(std::time::Duration::from_secs(10), d.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("workspace") && err.contains("git repository"),
        "{err}"
    );
}

#[tokio::test]
async fn shared_mode_is_the_default_outside_a_repository_and_can_be_forced_inside_one() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo here > here.txt"})),
        text("Done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    sb.write("dirty.txt", "the user's own work in progress");
    let d = sb.daemon(&llm, &tracker, json!({"workspace": "shared"}));
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "s1", "Here")).await;
    tracker.wait_status("s1", "review", 30).await;
    assert_eq!(sb.read("here.txt"), "here\n");
    assert_eq!(git(&sb.work, &["branch", "--list", "picogent/*"]), "");
    // The comment names what this run changed, not what was already modified.
    let c = comment_of(&tracker, "s1", 0);
    assert!(
        c.contains("Files this run changed") && c.contains("- `here.txt`"),
        "{c}"
    );
    assert!(!c.contains("dirty.txt") && !c.contains("Branch"), "{c}");
    d.stop().await.unwrap();
}

#[tokio::test]
async fn a_repository_nested_in_the_worktree_never_runs_its_filters_in_picogents_git() {
    let sb = Sandbox::new();
    repository(&sb);
    let marker = sb.base().join("nested-ran");
    let plant = format!(
        "git init -q sub && echo one > sub/f.txt && git -C sub add f.txt && \
         git -C sub -c user.name=a -c user.email=a@b commit -qm x && \
         git -C sub config filter.z.clean 'touch {m}; cat' && \
         git -C sub config filter.z.required true && \
         echo '* filter=z' > sub/.git/info/attributes",
        m = marker.display()
    );
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": plant})),
        text("Planted."),
        tool(
            "bash",
            json!({"command": "echo two > sub/f.txt && touch sub/f.txt"}),
        ),
        text("Touched."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"allowed_paths": [sb.work]}));
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "n1", "Nest")).await;
    tracker.wait_status("n1", "review", 30).await;
    let msg = json!({"id": "e2", "type": "chat.message", "data": {"task_id": "n1",
        "message": {"id": "m1", "content": "again"}}});
    tracker.deliver(&cb, &msg).await;
    tracker
        .wait_for(30, "the reply", |t| t.comments("n1").len() >= 2)
        .await;
    assert!(
        !marker.exists(),
        "a nested repository's filter ran in picogent's git"
    );
    d.stop().await.unwrap();
}

#[tokio::test]
async fn no_push_to_a_repository_inside_the_allowed_paths() {
    let sb = Sandbox::new();
    repository(&sb);
    let inside = sb.work.join("mirror.git");
    git(
        &sb.work,
        &["init", "-q", "--bare", inside.to_str().unwrap()],
    );
    git(
        &sb.work,
        &["remote", "add", "origin", inside.to_str().unwrap()],
    );
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(writer_script(&sb));
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"push": true, "allowed_paths": [sb.work]}),
    );
    let cb = tracker.callback_url().await;
    tracker
        .deliver(&cb, &assigned("e1", "q1", "Push inside"))
        .await;
    tracker.wait_status("q1", "review", 30).await;
    let c = comment_of(&tracker, "q1", 0);
    assert!(c.contains("inside the agent's allowed paths"), "{c}");
    assert!(Command::new(crate::common::git_program())
        .args([
            "--git-dir",
            inside.to_str().unwrap(),
            "rev-parse",
            "--verify",
            "-q",
            "picogent/q1"
        ])
        .output()
        .unwrap()
        .stdout
        .is_empty());
    d.stop().await.unwrap();
}

#[tokio::test]
async fn shared_mode_reads_the_status_without_running_planted_filters() {
    let sb = Sandbox::new();
    repository(&sb);
    let marker = sb.base().join("shared-ran");
    let touch = format!("touch {}; cat", marker.display());
    git(&sb.work, &["config", "filter.evil.clean", &touch]);
    git(&sb.work, &["config", "filter.evil.required", "true"]);
    std::fs::write(sb.work.join(".git/info/attributes"), "* filter=evil\n").unwrap();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo changed > shared.txt"})),
        text("Done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"workspace": "shared"}));
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "f1", "Change")).await;
    tracker.wait_status("f1", "review", 30).await;
    assert!(
        !marker.exists(),
        "a planted filter ran in picogent's git status"
    );
    assert!(comment_of(&tracker, "f1", 0).contains("- `shared.txt`"));
    d.stop().await.unwrap();
}

/// Sandbox v3: a filter the agent names `a=b` in the shared folder's repository never
/// runs in picogent's own `git status` (a `-c` override splits at the first `=`).
#[tokio::test]
async fn a_filter_named_with_an_equals_sign_never_runs_in_shared_mode() {
    let sb = Sandbox::new();
    repository(&sb);
    let marker = sb.base().join("filter-ran");
    // As a prompt-injected model would, in its own checkout: a filter on every file,
    // and a file touched so that git must look at its content again.
    let plant = format!(
        "git config 'filter.a=b.clean' \"sh -c 'touch {m}; cat'\" && \
         git config 'filter.a=b.required' true && \
         echo '* filter=a=b' > .git/info/attributes && sleep 1 && touch shared.txt && echo planted",
        m = marker.display()
    );
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": plant })),
        text("Done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"workspace": "shared", "allowed_paths": [sb.work]}),
    );
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "f1", "Plant")).await;
    tracker.wait_status("f1", "review", 30).await;
    let (result, _) = last_tool_result(&llm.requests()[1].body);
    assert!(result.contains("planted"), "{result}");
    assert!(!marker.exists(), "the agent's filter ran in picogent's git");
    d.stop().await.unwrap();
}

/// Sandbox v3: with the operator's HOME inside the allowed paths, a `pushInsteadOf`
/// the agent plants in `~/.gitconfig` does not send the push (and its hooks) to a
/// repository the agent made.
#[tokio::test]
async fn a_push_rewrite_planted_in_an_allowed_home_is_not_followed() {
    let sb = Sandbox::new();
    repository(&sb);
    let origin = with_origin(&sb);
    let marker = sb.base().join("hook-ran");
    let plant = format!(
        "(cd \"$HOME\" && git init -q --bare evil.git && \
         printf '#!/bin/sh\\ntouch {m}\\n' > evil.git/hooks/pre-receive && \
         chmod +x evil.git/hooks/pre-receive && \
         git config --global url.\"$HOME/evil.git\".pushInsteadOf '{o}') && \
         echo changed > shared.txt && echo planted",
        m = marker.display(),
        o = origin.display()
    );
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": plant })),
        text("Done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    // The real binary, so that git sees the HOME picogent was started with.
    sb.write_config(
        &llm,
        Wire::Anthropic,
        json!({"tracker_url": tracker.url(), "listen_port": 0, "push": true,
               "allowed_paths": [sb.work, sb.user_home]}),
    );
    let mut daemon = spawn_daemon(&sb);
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "h1", "Push")).await;
    tracker.wait_status("h1", "review", 60).await;
    let (result, _) = last_tool_result(&llm.requests()[1].body);
    assert!(result.contains("planted"), "{result}");
    assert!(sb.user_home.join(".gitconfig").exists());
    assert!(!marker.exists(), "the push went to the agent's repository");
    assert_eq!(
        git(&origin, &["rev-parse", "picogent/h1"]),
        git(&sb.work, &["rev-parse", "picogent/h1"])
    );
    assert!(comment_of(&tracker, "h1", 0).contains("Pushed to `origin`."));
    daemon.kill().await.unwrap();
}

/// A repository configuration that makes git wait for good (an `include.path` naming
/// a FIFO, which the agent can write in shared mode) does not hang the task.
#[tokio::test]
async fn a_git_configuration_that_never_ends_does_not_hang_the_task() {
    let sb = Sandbox::new();
    repository(&sb);
    let plant = "mkfifo .git/never && git config include.path never && echo planted";
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": plant })),
        text("Done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"workspace": "shared", "allowed_paths": [sb.work], "git_timeout_sec": 2}),
    );
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "n1", "Plant")).await;
    tracker.wait_status("n1", "review", 60).await;
    assert!(comment_of(&tracker, "n1", 0).contains("Done."));
    d.stop().await.unwrap();
}

/// Kills the daemon (SIGKILL, by pid: what it started is orphaned, not killed) at a
/// step of a task's delivery, restarts it, and returns the task's comments.
async fn killed_at(
    sb: &Sandbox,
    sub: &str,
    before: &str,
    extra: Value,
) -> (FakeTracker, Vec<String>) {
    let slow = SlowGit::new(sb);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(vec![
        tool("bash", json!({"command": "echo work > work.txt"})),
        text("Done."),
    ]);
    let tracker = FakeTracker::start().await;
    let mut cfg =
        json!({"tracker_url": tracker.url(), "listen_port": 0, "allowed_paths": [sb.work]});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        cfg[k] = v;
    }
    sb.write_config(&llm, Wire::Anthropic, cfg);
    slow.stop_at(sub, before);
    let mut daemon = spawn_daemon_with_path(sb, &slow.path());
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "c1", "Crash")).await;
    slow.reached().await;
    daemon.kill().await.unwrap();
    let mut daemon = restarted(&tracker, || spawn_daemon_with_path(sb, &slow.path())).await;
    tracker.wait_status("c1", "review", 60).await;
    daemon.kill().await.unwrap();
    let comments = (0..tracker.comments("c1").len())
        .map(|n| comment_of(&tracker, "c1", n))
        .collect();
    (tracker, comments)
}

/// Killed while committing, with git's `index.lock` held: the restarted daemon
/// commits the work (the killed git died with picogent, and its lock is cleared).
#[tokio::test]
async fn a_kill_during_the_commit_loses_no_work() {
    let sb = Sandbox::new();
    repository(&sb);
    let (_, comments) = killed_at(&sb, "commit", "exec 9>\"$gitdir/index.lock\"", json!({})).await;
    let c = comments.join("\n");
    assert!(c.contains("**Branch** `picogent/c1`"), "{c}");
    assert_eq!(git(&sb.work, &["show", "picogent/c1:work.txt"]), "work");
    let tip = git(&sb.work, &["rev-parse", "--short=12", "picogent/c1"]);
    assert!(
        c.contains(&tip),
        "the comment does not name the commit {tip}: {c}"
    );
}

/// Killed between the commit and the end of the push: the restarted daemon pushes the
/// commit, and its comment names it.
#[tokio::test]
async fn a_kill_during_the_push_still_pushes_and_reports_the_commit() {
    let sb = Sandbox::new();
    repository(&sb);
    let origin = with_origin(&sb);
    let (_, comments) = killed_at(&sb, "push", ":", json!({"push": true})).await;
    let tip = git(&sb.work, &["rev-parse", "picogent/c1"]);
    assert_eq!(git(&origin, &["rev-parse", "picogent/c1"]), tip);
    let c = comments.join("\n");
    assert!(
        c.contains(&tip[..12]),
        "no comment names the commit {tip}: {c}"
    );
    assert!(c.contains("Pushed to `origin`."), "{c}");
}

/// Killed while `git worktree add` was checking out: the restarted daemon does not
/// work in the half-made worktree, it makes it again.
#[tokio::test]
async fn a_kill_during_worktree_add_never_leaves_a_half_made_worktree_in_use() {
    let sb = Sandbox::new();
    repository(&sb);
    let tree = sb.home.join("worktrees/c1");
    // The real add, then what a checkout cut short leaves: a file missing and git's
    // own record saying it is still being made.
    let torn = format!(
        "\"$real\" \"$@\"; rm -f '{t}/shared.txt'; echo initializing > \"{w}/.git/worktrees/c1/locked\"",
        t = tree.display(),
        w = sb.work.display()
    );
    let (_, comments) = killed_at(&sb, "worktree", &torn, json!({})).await;
    let c = comments.join("\n");
    assert!(c.contains("**Branch** `picogent/c1`"), "{c}");
    // The commit adds the work and deletes nothing of the checkout's.
    let stat = git(&sb.work, &["diff", "--name-status", "main", "picogent/c1"]);
    assert_eq!(stat, "A\twork.txt", "{c}");
}

/// Killed after `git commit` finished but before picogent could note it: the commit is
/// named by the next comment (the branch's tip is past what any comment named).
#[tokio::test]
async fn a_kill_right_after_the_commit_still_names_it() {
    let sb = Sandbox::new();
    repository(&sb);
    let (_, comments) = killed_at(&sb, "commit", "\"$real\" \"$@\"", json!({})).await;
    let c = comments.join("\n");
    let tip = git(&sb.work, &["rev-parse", "--short=12", "picogent/c1"]);
    assert_eq!(git(&sb.work, &["show", "picogent/c1:work.txt"]), "work");
    assert!(c.contains(&tip), "no comment names the commit {tip}: {c}");
}

/// Without any crash, a follow-up that changes nothing says so, and does not name the
/// commit the first comment already named.
#[tokio::test]
async fn a_follow_up_without_changes_names_no_commit_again() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo new > new.txt"})),
        text("Wrote it."),
        text("Nothing more to do."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"allowed_paths": [sb.work]}));
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "f1", "Write")).await;
    tracker.wait_status("f1", "review", 30).await;
    let tip = git(&sb.work, &["rev-parse", "--short=12", "picogent/f1"]);
    assert!(comment_of(&tracker, "f1", 0).contains(&tip));
    let msg = json!({"id": "e2", "type": "chat.message", "data": {"task_id": "f1",
        "message": {"id": "m1", "content": "Anything else?"}}});
    tracker.deliver(&cb, &msg).await;
    tracker
        .wait_for(30, "the reply", |t| t.comments("f1").len() == 2)
        .await;
    let reply = comment_of(&tracker, "f1", 1);
    assert!(reply.contains("No files changed in this run"), "{reply}");
    assert!(!reply.contains(&tip), "{reply}");
    d.stop().await.unwrap();
}
