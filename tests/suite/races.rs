//! Sandbox v2: attacks on picogent's own file tools and git, which run inside the
//! daemon: a folder swapped for a symlink while a tool works, hard links made before
//! picogent started, and git settings planted where picogent's git would run them.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use picogent::agent::checkpoint::Checkpoints;
use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext};
use serde_json::json;

use crate::common::{self, text, tool, Sandbox, ScriptedLlm, Wire};

fn ctx(sb: &Sandbox, protected: &[PathBuf]) -> ToolContext {
    sb.tool_ctx(
        PathSandbox::new(std::slice::from_ref(&sb.work), protected, &[]),
        Duration::from_secs(10),
    )
}

/// Swaps `a` and `b` atomically, over and over, until told to stop.
fn racer(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let (ca, cb) = (
            std::ffi::CString::new(a.as_os_str().as_encoded_bytes()).unwrap(),
            std::ffi::CString::new(b.as_os_str().as_encoded_bytes()).unwrap(),
        );
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: valid paths; RENAME_EXCHANGE swaps two existing names.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    ca.as_ptr(),
                    libc::AT_FDCWD,
                    cb.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
            swaps += 1;
        }
        swaps
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_swapped_for_a_symlink_never_lets_the_file_tools_out() {
    let sb = Sandbox::new();
    let outside = sb.base().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "OUTSIDE-SECRET\n").unwrap();
    std::fs::write(outside.join("e.txt"), "outside original\n").unwrap();
    std::fs::write(outside.join("outside-only.txt"), "").unwrap();
    let real = sb.work.join("d");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("secret.txt"), "inside\n").unwrap();
    std::fs::write(real.join("e.txt"), "inside original\n").unwrap();
    // `d` and `swap` trade places: `d` is the folder one moment, a link outside the next.
    symlink(&outside, sb.work.join("swap")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = racer(real.clone(), sb.work.join("swap"), stop.clone());
    let c = ctx(&sb, &[]);
    let (mut reads_inside, mut leaks) = (0, 0);
    for i in 0..1000 {
        execute(
            "write",
            &json!({"path": format!("d/w{i}.txt"), "content": "x"}),
            &c,
        )
        .await;
        let r = execute("read", &json!({"path": "d/secret.txt"}), &c).await;
        if r.text.contains("OUTSIDE-SECRET") {
            leaks += 1;
        } else if r.text.contains("inside") {
            reads_inside += 1;
        }
        for (tool, args) in [
            ("grep", json!({"pattern": "SECRET", "path": "d"})),
            ("ls", json!({"path": "d"})),
        ] {
            let r = execute(tool, &args, &c).await;
            if r.text.contains("OUTSIDE-SECRET") || r.text.contains("outside-only") {
                leaks += 1;
            }
        }
        // Toggles the inside file; an edit that escaped would change the outside one.
        let (old, new) = if i % 2 == 0 {
            ("original", "ORIGINAL")
        } else {
            ("ORIGINAL", "original")
        };
        execute(
            "edit",
            &json!({"path": "d/e.txt", "edits": [{"oldText": old, "newText": new}]}),
            &c,
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 1000, "the racer barely ran ({swaps} swaps)");
    assert_eq!(leaks, 0, "reads returned the outside secret");
    assert!(
        reads_inside > 0,
        "no read ever succeeded: the test proves nothing"
    );
    let created: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('w'))
        .collect();
    assert!(created.is_empty(), "files created outside: {created:?}");
    assert_eq!(
        std::fs::read_to_string(outside.join("e.txt")).unwrap(),
        "outside original\n"
    );
}

#[tokio::test]
async fn hard_links_made_before_picogent_started_lead_nowhere() {
    let sb = Sandbox::new();
    let outside = sb.base().join("outside.txt");
    std::fs::write(&outside, "outside\n").unwrap();
    std::fs::hard_link(&outside, sb.work.join("link.txt")).unwrap();
    let config = sb.home.join("agent.json");
    std::fs::write(&config, "{\"token\": \"SECRET\"}").unwrap();
    std::fs::hard_link(&config, sb.work.join("config-link.json")).unwrap();
    let state = sb.home.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("journal.jsonl"), "JOURNAL\n").unwrap();
    std::fs::hard_link(state.join("journal.jsonl"), sb.work.join("journal-link")).unwrap();
    let c = ctx(&sb, &[config.clone(), state.clone()]);

    for (tool, args) in [
        (
            "write",
            json!({"path": "link.txt", "content": "overwritten"}),
        ),
        (
            "edit",
            json!({"path": "link.txt", "oldText": "outside", "newText": "edited"}),
        ),
        (
            "write",
            json!({"path": "config-link.json", "content": "{}"}),
        ),
        ("write", json!({"path": "journal-link", "content": "x"})),
    ] {
        let r = execute(tool, &args, &c).await;
        assert!(r.is_error && r.text.contains("hard links"), "{tool}: {r:?}");
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "{\"token\": \"SECRET\"}"
    );
    for path in ["config-link.json", "journal-link"] {
        let r = execute("read", &json!({ "path": path }), &c).await;
        assert!(
            r.is_error && !r.text.contains("SECRET") && !r.text.contains("JOURNAL"),
            "{path}: {r:?}"
        );
    }
    // An ordinary file with one link is written as before.
    let r = execute("write", &json!({"path": "plain.txt", "content": "ok"}), &c).await;
    assert!(!r.is_error, "{r:?}");
}

#[tokio::test]
async fn fifos_and_devices_are_refused_without_blocking() {
    let sb = Sandbox::new();
    let fifo = sb.work.join("pipe");
    crate::common::mkfifo(&fifo);
    let c = ctx(&sb, &[]);
    for (tool, args) in [
        ("read", json!({"path": "pipe"})),
        ("write", json!({"path": "pipe", "content": "x"})),
        (
            "edit",
            json!({"path": "pipe", "oldText": "a", "newText": "b"}),
        ),
    ] {
        let r = tokio::time::timeout(Duration::from_secs(5), execute(tool, &args, &c))
            .await
            .expect("the tool blocked on a FIFO");
        assert!(r.is_error && r.text.contains("FIFO"), "{tool}: {r:?}");
    }
}

/// Settings that make git run a program, planted where picogent's git would read
/// them; each would create `marker` if it ran.
fn plant(git_dir: &Path, work: &Path, marker: &Path) {
    let cmd = format!("touch {}", marker.display());
    let config = format!(
        "[core]\n\tfsmonitor = \"{cmd}\"\n\thooksPath = hooks\n\tpager = {cmd}\n[filter \"evil\"]\n\tclean = {cmd}\n\tsmudge = {cmd}\n\trequired = true\n[diff \"evil\"]\n\ttextconv = {cmd}\n\tcommand = {cmd}\n"
    );
    std::fs::write(git_dir.join("config"), &config).unwrap();
    std::fs::create_dir_all(git_dir.join("hooks")).unwrap();
    for hook in [
        "pre-commit",
        "post-commit",
        "post-checkout",
        "reference-transaction",
    ] {
        let p = git_dir.join("hooks").join(hook);
        std::fs::write(&p, format!("#!/bin/sh\n{cmd}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(work.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    // The work folder's own repository, planted the same way.
    let own = work.join(".git");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("config"), &config).unwrap();
}

#[tokio::test]
async fn git_settings_planted_in_either_repository_never_run() {
    let sb = Sandbox::new();
    let marker = sb.base().join("PWNED");
    let state = sb.home.join("state");
    let repo = Checkpoints::open(&state, "s1", &sb.work, &PathSandbox::default()).unwrap();
    sb.write("a.txt", "one\n");
    let first = repo.snapshot("first").unwrap();
    plant(repo.git_dir(), &sb.work, &marker);
    sb.write("a.txt", "two\n");
    let second = repo.snapshot("second").unwrap();
    assert_ne!(first, second);
    let diff = repo.diff(&first, &second).unwrap();
    assert!(diff.contains("+two"), "{diff}");
    repo.restore(&first).unwrap();
    assert_eq!(sb.read("a.txt"), "one\n");
    assert!(!marker.exists(), "a planted git setting ran");
    assert!(!std::fs::read_to_string(repo.git_dir().join("config"))
        .unwrap()
        .contains("evil"));
}

#[tokio::test]
async fn a_model_cannot_plant_git_settings_for_picogent_through_bash() {
    let sb = Sandbox::new();
    let marker = sb.home.join("PWNED");
    // The agent folder is both the working folder and the allowed path, with
    // checkpoints on: the issue's scenario.
    let git_dir = sb.home.join("state/checkpoints/plant.git");
    let cmd = format!("touch {}", marker.display());
    let attack = format!(
        "git config --file {g}/config core.fsmonitor '{cmd}'; git config --file {g}/config filter.evil.clean '{cmd}'; \
         printf '* filter=evil\\n' > .gitattributes; git init -q . 2>/dev/null; git config core.fsmonitor '{cmd}'; \
         git config filter.evil.clean '{cmd}'; echo planted",
        g = git_dir.display()
    );
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": attack })),
        tool("write", json!({"path": "after.txt", "content": "x"})),
        text("done"),
    ])
    .await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"allowed_paths": [sb.home], "work_dir": sb.home, "checkpoints": true}),
    );
    let (events, outcome) = common::run(&agent, "plant", "plant").await;
    assert_eq!(common::final_text(&outcome), "done", "{events:?}");
    assert!(!marker.exists(), "picogent's git ran a planted command");
}

#[tokio::test]
async fn checkpoints_never_hold_picogent_own_files() {
    let sb = Sandbox::new();
    // The agent folder is the working folder: its agent.json, .env, state/ and
    // sessions/ lie inside the snapshotted tree.
    std::fs::write(sb.home.join(".env"), "GITHUB_TOKEN=ghp-SNAPSHOT-SECRET\n").unwrap();
    let llm = ScriptedLlm::start(vec![
        tool("write", json!({"path": "made.txt", "content": "x"})),
        text("done"),
    ])
    .await;
    let mut config = sb.config(
        &llm,
        Wire::Anthropic,
        json!({"allowed_paths": [sb.home], "work_dir": sb.home, "checkpoints": true}),
    );
    config.env_file = Some(sb.home.join(".env"));
    let agent = common::agent_from(config);
    let (_, outcome) = common::run(&agent, "make", "snap").await;
    assert_eq!(common::final_text(&outcome), "done");
    let repo = sb.home.join("state/checkpoints/snap.git");
    let files = std::process::Command::new(crate::common::git_program())
        .arg(format!("--git-dir={}", repo.display()))
        .args(["ls-tree", "-r", "--name-only", "HEAD"])
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&files.stdout);
    assert!(files.contains("made.txt"), "{files}");
    for own in ["agent.json", ".env", "state/", "sessions/"] {
        assert!(
            !files
                .lines()
                .any(|f| f == own.trim_end_matches('/') || f.starts_with(own)),
            "{own} in:\n{files}"
        );
    }
}

/// A rollback restores what its own session changed, and leaves alone what another
/// session (or a person) made in the same folder since.
#[tokio::test]
async fn a_rollback_leaves_other_sessions_files_alone() {
    let sb = Sandbox::new();
    let state = sb.home.join("state");
    let none = PathSandbox::default();
    let mine = Checkpoints::open(&state, "mine", &sb.work, &none).unwrap();
    sb.write("shared.txt", "before\n");
    let start = mine.snapshot("start").unwrap();
    sb.write("mine.txt", "made by this session\n");
    sb.write("shared.txt", "changed by this session\n");
    mine.snapshot("step 1").unwrap();
    // Meanwhile another session works in the same folder.
    sb.write("theirs.txt", "made by another session\n");
    sb.write(":(exclude)odd name*", "a name that looks like a pattern\n");
    mine.restore(&start).unwrap();
    assert!(!sb.work.join("mine.txt").exists());
    assert_eq!(sb.read("shared.txt"), "before\n");
    assert_eq!(sb.read("theirs.txt"), "made by another session\n");
    assert!(sb.work.join(":(exclude)odd name*").exists());
}
