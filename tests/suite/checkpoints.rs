//! Checkpoints under load: many sessions in one folder share its object store and
//! its scans, and still each get their own history and their own rollback.

use std::path::Path;

use picogent::agent::checkpoint::Checkpoints;
use picogent::sandbox::Sandbox as PathSandbox;

use crate::common::Sandbox;

/// git's answer about `rev` in a session's repository (objects read through its
/// `alternates`).
fn git_at(repo: &Checkpoints, args: &[&str]) -> String {
    let out = std::process::Command::new(crate::common::git_program())
        .arg(format!("--git-dir={}", repo.git_dir().display()))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `f` for every session at once, each on its own thread; their results in order.
fn all_at_once<T: Send>(
    repos: &[Checkpoints],
    f: impl Fn(usize, &Checkpoints) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = repos
            .iter()
            .enumerate()
            .map(|(i, r)| scope.spawn(move || f(i, r)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn files_of(repo: &Checkpoints, commit: &str) -> Vec<String> {
    git_at(repo, &["ls-tree", "-r", "--name-only", commit])
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn many_sessions_snapshot_one_folder_at_once() {
    let sb = Sandbox::new();
    let state = sb.home.join("state");
    let none = PathSandbox::default();
    sb.write("shared.txt", "before\n");
    let repos: Vec<Checkpoints> = (0..24)
        .map(|i| Checkpoints::open(&state, &format!("s{i}"), &sb.work, &none).unwrap())
        .collect();

    // Every session's first checkpoint, all at once.
    let starts = all_at_once(&repos, |_, r| r.snapshot("start").unwrap());
    for (r, start) in repos.iter().zip(&starts) {
        assert_eq!(files_of(r, start), ["shared.txt"]);
        assert_eq!(git_at(r, &["rev-parse", "HEAD"]), *start);
    }

    // Session 0 writes a file; then every session snapshots at once, and session 0's
    // checkpoint has its file (a scan that began before it asked would not).
    sb.write("mine.txt", "made by session 0\n");
    let firsts = all_at_once(&repos, |_, r| r.snapshot("step 1").unwrap());
    assert_eq!(files_of(&repos[0], &firsts[0]), ["mine.txt", "shared.txt"]);
    assert_eq!(
        git_at(&repos[0], &["rev-parse", &format!("{}^", firsts[0])]),
        starts[0]
    );

    // Then the others each write their own file and snapshot, all at once: each
    // checkpoint holds its own session's file, on its own branch.
    let seconds = all_at_once(&repos[1..], |i, r| {
        let name = format!("s{}.txt", i + 1);
        std::fs::write(sb.work.join(&name), format!("by {}\n", i + 1)).unwrap();
        (name, r.snapshot("step 2").unwrap())
    });
    for ((r, (name, commit)), first) in repos[1..].iter().zip(&seconds).zip(&firsts[1..]) {
        assert!(files_of(r, commit).contains(name), "{name} not in {commit}");
        assert_eq!(git_at(r, &["rev-parse", "HEAD"]), *commit);
        assert_eq!(git_at(r, &["rev-parse", &format!("{commit}^")]), *first);
    }

    // Rolling session 0 back to its start removes only what it made.
    repos[0].restore(&starts[0]).unwrap();
    assert!(!sb.work.join("mine.txt").exists());
    assert_eq!(sb.read("shared.txt"), "before\n");
    for (name, _) in &seconds {
        assert!(
            Path::new(&sb.work.join(name)).exists(),
            "{name} was removed"
        );
    }
    assert_eq!(git_at(&repos[0], &["rev-parse", "HEAD"]), starts[0]);
    // Its abandoned tip (the folder as it was) stays readable.
    let abandoned = git_at(
        &repos[0],
        &[
            "for-each-ref",
            "--format=%(objectname)",
            "refs/picogent/abandoned",
        ],
    );
    let kept = files_of(&repos[0], &abandoned);
    assert!(kept.contains(&"mine.txt".to_string()), "{kept:?}");
    // The others' checkpoints are untouched, and they go on from where they were.
    sb.write("s1.txt", "changed again\n");
    let third = repos[1].snapshot("step 3").unwrap();
    assert_eq!(
        git_at(&repos[1], &["rev-parse", &format!("{third}^")]),
        seconds[0].1
    );
}

/// The agent cannot bring picogent's own files into a checkpoint with a `.gitignore`
/// that un-ignores them (git ranks the folder's `.gitignore` above the repository's
/// exclusions): a rollback then neither deletes nor restores them, and a preview never
/// shows them.
#[test]
fn a_gitignore_cannot_bring_picogents_own_files_into_a_rollback() {
    let sb = Sandbox::new();
    let state = sb.home.join("state");
    sb.write("work.txt", "one\n");
    let start = {
        let env = sb.work.join(".env");
        std::fs::write(&env, "AGENT_TOKEN=SECRET-1\n").unwrap();
        let guard = PathSandbox::new(&[], &[env], &[]);
        let repo = Checkpoints::open(&state, "own", &sb.work, &guard).unwrap();
        let start = repo.snapshot("start").unwrap();
        // The agent un-ignores .env, and changes its work.
        sb.write(".gitignore", "!/.env\n!.env\n");
        sb.write("work.txt", "two\n");
        let after = repo.snapshot("after").unwrap();
        assert!(!files_of(&repo, &after).contains(&".env".to_string()));
        // A person changes the secret since; the preview and the rollback leave it be.
        std::fs::write(sb.work.join(".env"), "AGENT_TOKEN=SECRET-2\n").unwrap();
        let preview = repo.preview(&start).unwrap();
        assert!(
            preview.files.iter().all(|f| f.path != ".env") && !preview.diff.contains("SECRET"),
            "{preview:?}"
        );
        repo.restore(&start).unwrap();
        start
    };
    assert!(!start.is_empty());
    assert_eq!(sb.read("work.txt"), "one\n");
    assert_eq!(sb.read(".env"), "AGENT_TOKEN=SECRET-2\n");
}

/// A huge file the agent wrote shows as a diff cut at 100 KB (git is stopped there,
/// so the whole diff is never held in memory).
#[test]
fn a_preview_of_a_huge_change_is_cut() {
    let sb = Sandbox::new();
    let state = sb.home.join("state");
    let none = PathSandbox::default();
    let repo = Checkpoints::open(&state, "big", &sb.work, &none).unwrap();
    sb.write("small.txt", "x\n");
    let start = repo.snapshot("start").unwrap();
    let line = "0123456789abcdef".repeat(8) + "\n";
    sb.write("big.txt", &line.repeat(40_000));
    let after = repo.snapshot("after").unwrap();
    let preview = repo.preview(&start).unwrap();
    assert_eq!(preview.files.len(), 1, "{:?}", preview.files);
    assert_eq!(preview.files[0].added, Some(40_000));
    assert!(preview.diff.len() <= 100 * 1024, "{}", preview.diff.len());
    assert!(preview.diff.contains("big.txt"));
    let diff = repo.diff(&start, &after).unwrap();
    assert!(
        diff.len() <= 100 * 1024 && diff.len() > 90 * 1024,
        "{}",
        diff.len()
    );
}

/// A session continued in another folder and back still rolls back (its checkpoints
/// in between live in the other folder's store).
#[test]
fn a_session_that_moved_to_another_folder_and_back_still_rolls_back() {
    let sb = Sandbox::new();
    let state = sb.home.join("state");
    let none = PathSandbox::default();
    let (a, b) = (sb.work.join("a"), sb.work.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("f.txt"), "a1\n").unwrap();
    let start = Checkpoints::open(&state, "mover", &a, &none)
        .unwrap()
        .snapshot("in a")
        .unwrap();
    std::fs::write(b.join("g.txt"), "b1\n").unwrap();
    Checkpoints::open(&state, "mover", &b, &none)
        .unwrap()
        .snapshot("in b")
        .unwrap();
    // Back in the first folder: its work changed, and the person rolls back.
    let in_a = Checkpoints::open(&state, "mover", &a, &none).unwrap();
    std::fs::write(a.join("f.txt"), "a2\n").unwrap();
    std::fs::write(a.join("new.txt"), "made\n").unwrap();
    in_a.restore(&start).unwrap();
    assert_eq!(std::fs::read_to_string(a.join("f.txt")).unwrap(), "a1\n");
    assert!(!a.join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(b.join("g.txt")).unwrap(), "b1\n");
}

/// The chat server killed with -9 while its git holds `index.lock` in the folder's
/// checkpoint store: the next server's runs and rollbacks in that folder work (the lock
/// a killed git left is removed), and checkpoints are written with git's syncs on.
#[tokio::test]
async fn a_kill_during_a_checkpoint_leaves_no_lock_that_stops_later_runs() {
    use crate::common::chat::{next, send, until_done};
    use crate::common::slow_git::SlowGit;
    use crate::common::{free_port, text, tool, ScriptedLlm, Wire};
    use serde_json::json;
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo A > f.txt"})),
        text("Wrote A."),
        text("Still here."),
    ])
    .await;
    // Unconfined, so the stand-in git can mark where it stopped.
    let cfg = json!({"checkpoints": true, "sandbox": "off", "allowed_paths": [sb.work]});
    sb.write_config(&llm, Wire::Anthropic, cfg);
    let plain = std::env::var("PATH").unwrap_or_default();
    let port = free_port();
    let mut first = crate::common::chat::server_process(&sb, port, &plain);
    let mut ws = crate::common::chat::connect_port(port).await;
    send(
        &mut ws,
        json!({"id": "m1", "content": "Write A", "sessionId": "ck"}),
    )
    .await;
    until_done(&mut ws, "m1").await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();

    // The next checkpoint's `git add` holds the store's index when the server dies.
    let slow = SlowGit::new(&sb);
    slow.stop_at(
        "add",
        "echo \"$*\" > \"$dir/add-args\"; exec 9>\"$gitdir/index.lock\"",
    );
    let port = free_port();
    let mut second = crate::common::chat::server_process(&sb, port, &slow.path());
    let mut ws = crate::common::chat::connect_port(port).await;
    send(
        &mut ws,
        json!({"id": "m2", "content": "Go on", "sessionId": "ck"}),
    )
    .await;
    slow.reached().await;
    second.start_kill().unwrap();
    second.wait().await.unwrap();
    let args = std::fs::read_to_string(sb.base().join("slow-git/add-args")).unwrap();
    assert!(args.contains("core.fsync"), "{args}");
    let store = sb.home.join("state/checkpoints/folders");
    let locks: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("index.lock").exists())
        .collect();
    assert_eq!(locks.len(), 1, "the killed git left no lock to recover");

    let port = free_port();
    let _third = crate::common::chat::server_process(&sb, port, &plain);
    let mut ws = crate::common::chat::connect_port(port).await;
    send(
        &mut ws,
        json!({"id": "m3", "content": "Again", "sessionId": "ck"}),
    )
    .await;
    let frames = until_done(&mut ws, "m3").await;
    assert!(frames.iter().all(|f| f["type"] != "error"), "{frames:?}");
    assert_eq!(sb.read("f.txt"), "A\n");
    // Back to the first run's start, before f.txt was written.
    send(
        &mut ws,
        json!({"type": "rollback", "id": "rb", "sessionId": "ck", "step": 0}),
    )
    .await;
    let f = next(&mut ws).await;
    assert_eq!(f["type"], "rollback", "{f}");
    assert!(!sb.work.join("f.txt").exists());
}
