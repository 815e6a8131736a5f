//! The gits people have (2.30 and newer): picogent names the one it found, refuses an
//! older one at start, reports git's own words when git fails, and works a checkout
//! another user owns (a bind mount) without touching anyone's git configuration.
//! CI runs these, and the worktree, GitHub, checkpoint and seam tests, once with the
//! machine's system git and once with the newest (`PICOGENT_GIT`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::common::tracker::FakeTracker;
use crate::common::*;

fn config(sb: &Sandbox, llm: &ScriptedLlm, tracker: &FakeTracker, extra: serde_json::Value) {
    let mut cfg = json!({"tracker_url": tracker.url(), "listen_port": 0});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        cfg[k] = v;
    }
    sb.write_config(llm, Wire::Anthropic, cfg);
}

fn log_of(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.base().join("daemon.log")).unwrap_or_default()
}

/// Waits (at most 20 s) for the daemon's log to say `what`.
async fn wait_log(sb: &Sandbox, what: &str) -> String {
    for _ in 0..1000 {
        let log = log_of(sb);
        if log.contains(what) {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the log never said {what:?}:\n{}", log_of(sb));
}

/// The daemon's exit within 20 s, and its log.
async fn exit_of(mut child: tokio::process::Child, sb: &Sandbox) -> (i32, String) {
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the daemon did not stop")
        .unwrap();
    (status.code().unwrap_or(-1), log_of(sb))
}

/// A program that says it is git `version` and runs the real git for anything else.
fn git_claiming(dir: &Path, version: &str) -> PathBuf {
    let fake = dir.join("old-git");
    let script = format!(
        "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'git version {version}'; exit 0; }}\nexec {} \"$@\"\n",
        git_program()
    );
    std::fs::write(&fake, script).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    fake
}

#[tokio::test]
async fn start_up_names_the_git_it_found_and_its_version() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker, json!({}));
    let answer = std::process::Command::new(git_program())
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&answer.stdout)
        .trim()
        .trim_start_matches("git version ")
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let mut child = spawn_daemon(&sb);
    let log = wait_log(&sb, "each task works in its own git worktree").await;
    child.kill().await.unwrap();
    let named = log
        .lines()
        .find(|l| l.contains("git=") && l.contains("version="))
        .unwrap_or_else(|| panic!("no line names git:\n{log}"));
    assert!(named.contains(&format!("version={version}")), "{named}");
    assert!(named.contains("git=/"), "the path is named: {named}");
}

#[tokio::test]
async fn a_git_older_than_2_30_is_a_start_up_error_naming_the_version_needed() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker, json!({}));
    let old = git_claiming(&sb.base(), "2.25.1");
    let child = spawn_daemon_with(&sb, &[("PICOGENT_GIT", old.to_str().unwrap())]);
    let (code, log) = exit_of(child, &sb).await;
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("git 2.25.1") && log.contains("needs git 2.30.0 or newer"),
        "{log}"
    );
    // Chat mode, whose checkpoints use git, too.
    std::fs::write(
        sb.home.join("agent.json"),
        serde_json::to_string(&json!({"provider": "anthropic", "base_url": llm.base_url(Wire::Anthropic), "model": "m", "work_dir": sb.work})).unwrap(),
    )
    .unwrap();
    let child = spawn_daemon_with(
        &sb,
        &[
            ("PICOGENT_GIT", old.to_str().unwrap()),
            ("PICOGENT_PORT", &free_port().to_string()),
        ],
    );
    let (code, log) = exit_of(child, &sb).await;
    assert_ne!(code, 0, "{log}");
    assert!(log.contains("checkpoints (rollback) need git"), "{log}");
}

/// A git where the agent's commands could put their own: with the allowed paths
/// unrestricted, only a git in a system folder is run, in either workspace.
#[tokio::test]
async fn a_git_a_command_could_replace_is_a_start_up_error() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let planted = git_claiming(&sb.base(), "2.39.5");
    let log_file = sb.base().join("daemon.log");
    for workspace in ["worktree", "shared"] {
        let _ = std::fs::remove_file(&log_file);
        config(&sb, &llm, &tracker, json!({"workspace": workspace}));
        let child = spawn_daemon_with(&sb, &[("PICOGENT_GIT", planted.to_str().unwrap())]);
        let (code, log) = exit_of(child, &sb).await;
        assert_ne!(code, 0, "{workspace}: {log}");
        assert!(
            log.contains("where a command could replace it")
                && log.contains("commands may write anywhere"),
            "{workspace}: {log}"
        );
    }
    // Inside the allowed paths, likewise.
    let _ = std::fs::remove_file(&log_file);
    config(&sb, &llm, &tracker, json!({"allowed_paths": [sb.base()]}));
    let child = spawn_daemon_with(&sb, &[("PICOGENT_GIT", planted.to_str().unwrap())]);
    let (code, log) = exit_of(child, &sb).await;
    assert_ne!(code, 0, "{log}");
    assert!(log.contains("inside the allowed paths"), "{log}");
}

/// A repository git cannot read used to be "not inside a git checkout" and a silent
/// switch to the shared folder: now it is git's own message, at start.
#[tokio::test]
async fn a_git_failure_at_start_is_reported_in_gits_own_words() {
    let sb = Sandbox::new();
    repository(&sb);
    git(&sb.work, &["config", "core.repositoryformatversion", "99"]);
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker, json!({}));
    let (code, log) = exit_of(spawn_daemon(&sb), &sb).await;
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("Expected git repo version <= 1, found 99"),
        "{log}"
    );
    assert!(!log.contains("tasks share the working folder"), "{log}");
}

/// A git that fails while a task's worktree is made: the comment carries git's words,
/// not "base_branch is not a branch" (what an unknown option once became).
#[tokio::test]
async fn a_git_failure_in_a_task_is_reported_in_gits_own_words() {
    let sb = Sandbox::new();
    repository(&sb);
    let llm = ScriptedLlm::start(vec![text("Done.")]).await;
    let tracker = FakeTracker::start().await;
    // Commands write only the working folder, so the stand-ins beside it are trusted.
    config(&sb, &llm, &tracker, json!({"allowed_paths": [sb.work]}));
    let failing = sb.base().join("failing-git");
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = 'HEAD^{{commit}}' ] && [ -n \"$FAIL_NOW\" ] && {{ echo 'fatal: simulated failure 7731' >&2; exit 128; }}; done\nexec {} \"$@\"\n",
        git_program()
    );
    std::fs::write(&failing, script).unwrap();
    std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The start-up check passes (the script fails only once the marker exists).
    let marker = sb.base().join("fail-now");
    let wrapper = sb.base().join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n[ -e {m} ] && export FAIL_NOW=1\nexec {f} \"$@\"\n",
            m = marker.display(),
            f = failing.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = spawn_daemon_with(&sb, &[("PICOGENT_GIT", wrapper.to_str().unwrap())]);
    wait_log(&sb, "each task works in its own git worktree").await;
    std::fs::write(&marker, "").unwrap();
    let cb = tracker.callback_url().await;
    let event =
        json!({"id": "e1", "type": "task.assigned", "data": {"task": {"id": "g1", "title": "Go"}}});
    assert_eq!(tracker.deliver(&cb, &event).await.0, 202);
    tracker
        .wait_for(30, "a comment", |t| !t.comments("g1").is_empty())
        .await;
    let c = tracker.comments("g1")[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(c.contains("simulated failure 7731"), "{c}");
    assert!(!c.contains("is not a branch or commit"), "{c}");
    drop(child);
}

fn chown_all(p: &Path, uid: u32) {
    let ok = std::process::Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(p)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown {}", p.display());
}

/// The working folder as a repository owned by uid 4321; `None` (skipped, which fails
/// in CI) where the test is not root.
fn checkout_owned_by_4321(why: &str) -> Option<Sandbox> {
    // SAFETY: a plain system call.
    if unsafe { libc::geteuid() } != 0 {
        skip(why);
        return None;
    }
    let sb = Sandbox::new();
    repository(&sb);
    chown_all(&sb.work, 4321);
    Some(sb)
}

/// A checkout another user owns (a bind mount into a container): tasks get worktrees,
/// the ownership check waived for that folder alone; neither the operator's git
/// configuration nor the repository's says anything of it afterwards.
#[tokio::test]
async fn a_checkout_another_user_owns_works_in_worktrees_trusted_for_that_folder_alone() {
    let Some(sb) = checkout_owned_by_4321("making a checkout another user owns needs root") else {
        return;
    };
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo changed > shared.txt"})),
        text("Changed it."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker, json!({"allowed_paths": [sb.work]}));
    let mut child = spawn_daemon(&sb);
    let log = wait_log(&sb, "each task works in its own git worktree").await;
    assert!(log.contains("belongs to uid 4321"), "{log}");
    let cb = tracker.callback_url().await;
    let event = json!({"id": "e1", "type": "task.assigned", "data": {"task": {"id": "o1", "title": "Change"}}});
    assert_eq!(tracker.deliver(&cb, &event).await.0, 202);
    tracker.wait_status("o1", "review", 30).await;
    child.kill().await.unwrap();
    let git_dir = format!("--git-dir={}", sb.work.join(".git").display());
    assert_eq!(
        git(&sb.base(), &[&git_dir, "show", "picogent/o1:shared.txt"]),
        "changed"
    );
    let repo_config = std::fs::read_to_string(sb.work.join(".git/config")).unwrap();
    assert!(!repo_config.contains("safe"), "{repo_config}");
    assert!(!sb.user_home.join(".gitconfig").exists());
    assert!(!sb.user_home.join(".config/git").exists());
}

/// The same checkout, with picogent running as a user who cannot write it: a start-up
/// error naming the owner, never a silent switch to the shared folder.
#[tokio::test]
async fn a_checkout_picogent_cannot_write_is_refused_at_start_naming_its_owner() {
    let Some(sb) = checkout_owned_by_4321("running picogent as another user needs root") else {
        return;
    };
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    config(&sb, &llm, &tracker, json!({}));
    for d in [&sb.home, &sb.user_home] {
        chown_all(d, 4322);
    }
    std::fs::set_permissions(sb.base(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = std::fs::File::create(sb.base().join("daemon.log")).unwrap();
    let child = tokio::process::Command::new("setpriv")
        .args(["--reuid", "4322", "--regid", "4322", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_picogent"))
        .arg(&sb.home)
        .current_dir(&sb.home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(
            std::env::var("PICOGENT_GIT")
                .ok()
                .map(|g| ("PICOGENT_GIT", g)),
        )
        .env("HOME", &sb.user_home)
        .env("AGENT_TOKEN", crate::common::tracker::TOKEN)
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (code, log) = exit_of(child, &sb).await;
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("belongs to uid 4321")
            && log.contains("runs as uid 4322")
            && log.contains("--user 4321:4321"),
        "{log}"
    );
}
