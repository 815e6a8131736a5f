//! One deployment, many repositories (`github.repos`, issue 39): the daemon's binary
//! against a fake GitHub per repository behind one API URL, each repository with a
//! bare repository of its own as its remote. No clone is given: picogent makes its
//! own.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::github::{BOT, SECRET, TOKEN};
use crate::common::github::{deliver, example, retarget, FakeGithub};
use crate::common::github_many::ManyGithub;
use crate::common::*;

/// A bare repository with `main` (one commit) and the branches in `more`.
fn remote(at: &Path, name: &str, more: &[&str]) -> PathBuf {
    let work = at.join(format!("{name}-seed"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("widget.txt"), "original\n").unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "first"]);
    let bare = at.join(format!("{name}.git"));
    git(at, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    for b in more {
        git(&work, &["checkout", "-q", "-b", b]);
        std::fs::write(work.join(format!("{b}.txt")), "on the branch\n").unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", b]);
        git(&work, &["push", "-q", bare.to_str().unwrap(), b]);
    }
    bare
}

/// Adds a commit with `file` to `branch` of the bare repository `bare`.
fn push_commit(at: &Path, bare: &Path, branch: &str, file: &str) {
    let work = at.join(format!("later-{file}"));
    git(
        at,
        &[
            "clone",
            "-q",
            "-b",
            branch,
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    std::fs::write(work.join(file), "later\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", file]);
    git(&work, &["push", "-q", "origin", branch]);
}

fn payload(fake: &FakeGithub, repo: &str, action: &str, n: u64) -> Value {
    let mut p = example("issues", action);
    retarget(&mut p, repo, n);
    p["issue"] = fake.issue(n);
    p["action"] = action.into();
    if action == "assigned" {
        p["assignee"] = json!({"login": BOT, "id": 7, "type": "User"});
    }
    if action == "labeled" {
        p["label"] = json!({"name": "bot", "id": 1, "node_id": "L_1", "url": "", "color": "fff", "default": false, "description": null});
    }
    p
}

fn files_on(bare: &Path, branch: &str) -> String {
    git(bare, &["ls-tree", "--name-only", branch])
}

/// Two repositories, one named and one found by a pattern in GitHub's list (with its
/// own base branch and trigger), a third that no entry names. The same issue number in
/// both is two tasks; each pull request goes to its own repository, from a branch of
/// its own remote; a delivery from the third is ignored; a later task branches from
/// the base branch as it is then (fetched, not as it was cloned).
#[tokio::test]
async fn one_deployment_serves_many_repositories() {
    let sb = Sandbox::new();
    let (widgets, gadgets) = ("acme/widgets", "acme/gadgets");
    let gh = ManyGithub::start(&[widgets, gadgets, "other/thing"], BOT, TOKEN).await;
    for r in [widgets, gadgets, "other/thing"] {
        gh.repo(r).set_association("alice", "COLLABORATOR");
    }
    let (rw, rg) = (
        remote(&sb.base(), "widgets", &[]),
        remote(&sb.base(), "gadgets", &["develop"]),
    );
    let llm = ScriptedLlm::start(vec![]).await;
    // git works in the run's worktree (it reads the clone's git folder).
    llm.per_conversation(vec![
        tool(
            "bash",
            json!({"command": "git log --oneline -1 >/dev/null && echo fixed > widget.txt"}),
        ),
        text("Fixed the widget."),
    ]);
    let port = free_port();
    let cfg = json!({"tracker": "github", "listen_port": port, "shutdown_grace_sec": 5,
    "allowed_paths": [sb.work],
    "github": {"api_url": gh.url(), "webhook_secret": SECRET,
        "repos": [
            {"repo": widgets, "remote_url": rw},
            {"repo": "acme/gad*", "remote_url": rg, "base_branch": "develop",
             "trigger": {"label": "bot"}}
        ]}});
    sb.write_config(&llm, Wire::Anthropic, cfg);
    let _d = spawn_daemon_with(&sb, &[("GITHUB_TOKEN", TOKEN)]);
    get_when_up(port, "/livez").await;
    let hook = format!("http://127.0.0.1:{port}/github/webhook");
    let log = || std::fs::read_to_string(sb.base().join("daemon.log")).unwrap_or_default();

    let (fw, fg) = (gh.repo(widgets), gh.repo(gadgets));
    let nw = fw.add_issue("Fix the widget", "", "alice");
    fw.assign(nw, BOT);
    let ng = fg.add_issue("Fix the gadget", "", "alice");
    fg.add_label(ng, "bot");
    assert_eq!(nw, ng, "the same number in both repositories");
    let (pw, pg) = (
        payload(fw, widgets, "assigned", nw),
        payload(fg, gadgets, "labeled", ng),
    );
    let (a, b) = tokio::join!(
        deliver(&hook, "issues", "w-1", Some(SECRET), &pw),
        deliver(&hook, "issues", "g-1", Some(SECRET), &pg),
    );
    // A repository's desk sweeps its issues when it is made: the sweep or the delivery
    // makes the task, whichever comes first (the other is answered 200).
    assert!(a.0 < 300 && b.0 < 300, "{a:?} {b:?}\n{}", log());
    let other = gh.repo("other/thing");
    let no = other.add_issue("Not ours", "", "alice");
    other.assign(no, BOT);
    let c = deliver(
        &hook,
        "issues",
        "o-1",
        Some(SECRET),
        &payload(other, "other/thing", "assigned", no),
    )
    .await;
    assert_eq!(c.0, 200, "{c:?}");
    assert_eq!(c.1["ignored"], "another repository");

    for (fake, name) in [(fw, widgets), (fg, gadgets)] {
        fake.wait_for(60, &format!("{name}'s pull request"), |g| {
            !g.pulls().is_empty()
        })
        .await;
    }
    let branch = format!("picogent/issue-{nw}");
    assert_eq!(fw.pulls().len(), 1);
    assert_eq!(fw.pulls()[0]["base"]["ref"], "main");
    assert_eq!(fg.pulls().len(), 1);
    assert_eq!(fg.pulls()[0]["base"]["ref"], "develop", "{:#?}", fg.pulls());
    assert_eq!(
        git(&rw, &["show", &format!("{branch}:widget.txt")]),
        "fixed"
    );
    assert!(
        files_on(&rg, &branch).contains("develop.txt"),
        "from develop"
    );
    assert_eq!(
        git(&rg, &["show", &format!("{branch}:widget.txt")]),
        "fixed"
    );
    assert_eq!(llm.request_count(), 4, "one run each:\n{}", log());

    // Work pushed to the base branch since the clone: a new task starts from it.
    push_commit(&sb.base(), &rg, "develop", "later.txt");
    let n2 = fg.add_issue("Another", "", "alice");
    fg.add_label(n2, "bot");
    let d = deliver(
        &hook,
        "issues",
        "g-2",
        Some(SECRET),
        &payload(fg, gadgets, "labeled", n2),
    )
    .await;
    assert_eq!(d.0, 202, "{d:?}");
    fg.wait_for(60, "the second pull request", |g| g.pulls().len() == 2)
        .await;
    let later = files_on(&rg, &format!("picogent/issue-{n2}"));
    assert!(later.contains("later.txt"), "{later}\n{}", log());
    // One clone per repository, beside the worktrees.
    let clones = sb.home.join("repos").join("acme");
    let mut made: Vec<String> = std::fs::read_dir(&clones)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    assert_eq!(made, ["gadgets", "widgets"]);
    assert!(gh.violations().is_empty(), "{:#?}", gh.violations());
}

/// Clones together over `clone_cache_mb`: the one used longest ago that holds no
/// task's worktree is removed when another is made, and made again when a task of
/// its repository comes.
#[tokio::test]
async fn clones_over_the_limit_are_removed_and_made_again() {
    let sb = Sandbox::new();
    let (widgets, gadgets) = ("acme/widgets", "acme/gadgets");
    let gh = ManyGithub::start(&[widgets, gadgets], BOT, TOKEN).await;
    for r in [widgets, gadgets] {
        gh.repo(r).set_association("alice", "COLLABORATOR");
    }
    let rw = remote(&sb.base(), "widgets", &[]);
    // Two megabytes that do not compress: the widgets' clone is over the limit alone.
    push_blob(&sb.base(), &rw, 2 << 20);
    let rg = remote(&sb.base(), "gadgets", &[]);
    let llm = ScriptedLlm::start(vec![]).await;
    llm.per_conversation(vec![
        tool("bash", json!({"command": "echo fixed > widget.txt"})),
        text("Fixed."),
    ]);
    let port = free_port();
    let cfg = json!({"tracker": "github", "listen_port": port, "shutdown_grace_sec": 5,
        "allowed_paths": [sb.work],
        "github": {"api_url": gh.url(), "webhook_secret": SECRET, "clone_cache_mb": 1,
            "repos": [{"repo": widgets, "remote_url": rw}, {"repo": gadgets, "remote_url": rg}]}});
    sb.write_config(&llm, Wire::Anthropic, cfg);
    let _d = spawn_daemon_with(&sb, &[("GITHUB_TOKEN", TOKEN)]);
    get_when_up(port, "/livez").await;
    let hook = format!("http://127.0.0.1:{port}/github/webhook");
    let clone = sb.home.join("repos/acme/widgets");
    let (fw, fg) = (gh.repo(widgets), gh.repo(gadgets));

    let n = fw.add_issue("Fix", "", "alice");
    fw.assign(n, BOT);
    let p = payload(fw, widgets, "assigned", n);
    // The sweep of a desk being made may take it first (then 200).
    assert!(deliver(&hook, "issues", "c-1", Some(SECRET), &p).await.0 < 300);
    fw.wait_for(60, "the pull request", |g| g.pulls().len() == 1)
        .await;
    assert!(clone.is_dir());
    // Closed once done: its worktree goes, so the clone holds none.
    fw.close_issue(n);
    let p = payload(fw, widgets, "closed", n);
    assert!(deliver(&hook, "issues", "c-2", Some(SECRET), &p).await.0 < 300);
    let trees = sb.home.join("worktrees/acme/widgets");
    wait_until(30, "the closed task's worktree removed", || {
        std::fs::read_dir(&trees).is_ok_and(|mut d| d.next().is_none())
    })
    .await;

    let g = fg.add_issue("Fix", "", "alice");
    fg.assign(g, BOT);
    let p = payload(fg, gadgets, "assigned", g);
    // The sweep of a desk being made may take it first (then 200).
    assert!(deliver(&hook, "issues", "c-3", Some(SECRET), &p).await.0 < 300);
    fg.wait_for(60, "the gadgets' pull request", |g| g.pulls().len() == 1)
        .await;
    wait_until(30, "the widgets' clone removed", || !clone.exists()).await;
    assert!(sb.home.join("repos/acme/gadgets").is_dir());

    let n2 = fw.add_issue("Again", "", "alice");
    fw.assign(n2, BOT);
    let p = payload(fw, widgets, "assigned", n2);
    assert_eq!(
        deliver(&hook, "issues", "c-4", Some(SECRET), &p).await.0,
        202
    );
    fw.wait_for(60, "the second pull request", |g| g.pulls().len() == 2)
        .await;
    assert!(clone.is_dir(), "cloned again");
    assert!(gh.violations().is_empty(), "{:#?}", gh.violations());
}

/// Adds `bytes` random bytes as `blob.bin` on `main` of the bare repository `bare`.
fn push_blob(at: &Path, bare: &Path, bytes: usize) {
    let work = at.join("blob-seed");
    git(
        at,
        &[
            "clone",
            "-q",
            "-b",
            "main",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    let data: Vec<u8> = (0..bytes)
        .scan(0x9e37_79b9_7f4a_7c15u64, |s, _| {
            *s ^= *s << 13;
            *s ^= *s >> 7;
            *s ^= *s << 17;
            Some(*s as u8)
        })
        .collect();
    std::fs::write(work.join("blob.bin"), data).unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "blob"]);
    git(&work, &["push", "-q", "origin", "main"]);
}

async fn wait_until(secs: u64, what: &str, cond: impl Fn() -> bool) {
    for _ in 0..secs * 50 {
        if cond() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}
