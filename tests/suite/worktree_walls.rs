//! One task cannot write into another's worktree (issue 37, item 3): with
//! `allowed_paths` covering the agent home (and the user's home), every run sees the
//! worktrees folders read-only but for its own tree, at both levels, through bash and
//! through the file tools.

use serde_json::{json, Value};

use crate::common::tracker::FakeTracker;
use crate::common::*;

fn assigned(event: &str, task: &str) -> Value {
    json!({"id": event, "type": "task.assigned",
           "data": {"task": {"id": task, "title": format!("Task {task}"), "description": "Do it.", "status": "todo"}}})
}

/// The one worktree under the agent's worktrees folder.
fn only_tree(sb: &Sandbox) -> std::path::PathBuf {
    let trees: Vec<_> = std::fs::read_dir(sb.home.join("worktrees"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(trees.len(), 1, "{trees:?}");
    trees[0].clone()
}

async fn walls_hold_at(level: &str) {
    let sb = Sandbox::new();
    repository(&sb);
    // Another agent's worktree of the same user.
    let elsewhere = sb.user_home.join(".picogent/worktrees/other/t-9");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo one > one.txt"})),
        text("First done."),
    ])
    .await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(
        &llm,
        &tracker,
        json!({"allowed_paths": [sb.base()], "sandbox": level}),
    );
    let cb = tracker.callback_url().await;
    tracker.deliver(&cb, &assigned("e1", "t-1")).await;
    tracker.wait_status("t-1", "review", 30).await;
    // t-1's worktree stays for its follow-ups; t-2 tries to plant files in it.
    let first = only_tree(&sb);
    let cmd = format!(
        "for d in ../*/ {e}; do echo pwn > \"$d/pwned.txt\"; done; \
         mkdir {w}/t-3 2>&1; echo own > own.txt && echo own-ok",
        e = elsewhere.display(),
        w = sb.home.join("worktrees").display(),
    );
    llm.push(tool("bash", json!({"command": cmd})));
    let planted = first.join("written.txt");
    llm.push(tool(
        "write",
        json!({"path": planted.display().to_string(), "content": "pwn"}),
    ));
    llm.push(tool(
        "edit",
        json!({"path": first.join("shared.txt").display().to_string(), "oldText": "original", "newText": "pwn"}),
    ));
    llm.push(text("Second done."));
    tracker.deliver(&cb, &assigned("e2", "t-2")).await;
    tracker.wait_status("t-2", "review", 30).await;
    let requests = llm.requests();
    let bash = requests[3].body.to_string();
    assert!(bash.contains("own-ok"), "{level}: {bash}");
    for (what, path) in [
        ("bash", first.join("pwned.txt")),
        ("bash", elsewhere.join("pwned.txt")),
        ("bash", sb.home.join("worktrees/t-3")),
        ("write", planted.clone()),
    ] {
        assert!(!path.exists(), "{level}: {what} wrote {}", path.display());
    }
    let write = requests[4].body.to_string();
    assert!(write.contains("picogent's own"), "{level}: {write}");
    let edit = requests[5].body.to_string();
    assert!(edit.contains("picogent's own"), "{level}: {edit}");
    // What t-2 made in its own tree is on its branch, and t-1's branch has nothing of it.
    let own = git(&sb.work, &["show", "picogent/t-2:own.txt"]);
    assert_eq!(own, "own");
    let theirs = git(&sb.work, &["ls-tree", "--name-only", "picogent/t-1"]);
    assert!(!theirs.contains("pwned"), "{level}: {theirs}");
    assert_eq!(
        std::fs::read_to_string(first.join("shared.txt")).unwrap(),
        "original\n"
    );
    d.stop().await.unwrap();
}

#[tokio::test]
async fn a_task_cannot_write_into_another_tasks_worktree_under_namespaces() {
    walls_hold_at("on").await;
}

#[tokio::test]
async fn a_task_cannot_write_into_another_tasks_worktree_under_landlock() {
    walls_hold_at("landlock").await;
}

/// What is read-only inside a run's own tree stays so: the tree's writable copy goes
/// over the read-only worktrees folder, and must not bring back what lay read-only in
/// it (the namespace level mounts it; the file tools compare depths).
#[tokio::test]
async fn a_read_only_folder_inside_the_own_tree_stays_read_only() {
    use picogent::sandbox::{Level, Sandbox as PathSandbox};
    let sb = Sandbox::new();
    let trees = sb.home.join("worktrees");
    let tree = trees.join("t-1");
    let locked = tree.join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    let common = sb.work.join(".git");
    std::fs::create_dir_all(&common).unwrap();
    let helper = std::path::PathBuf::from(env!("CARGO_BIN_EXE_picogent"));
    let sandbox = PathSandbox::new(&[sb.base()], &[], &[])
        .with_read_only(&[trees.clone(), locked.clone()])
        .with_confinement_level(helper, false, Level::Full)
        .for_worktree(&sb.work, &common, &tree);
    let mut ctx = sb.tool_ctx(sandbox, std::time::Duration::from_secs(20));
    ctx.work_dir = tree.clone();
    let cmd = "echo a > own.txt && echo own-ok; (echo b > locked/f.txt) 2>/dev/null || echo locked-refused";
    let out = picogent::tools::execute("bash", &json!({"command": cmd}), &ctx).await;
    assert!(out.text.contains("own-ok"), "{}", out.text);
    assert!(out.text.contains("locked-refused"), "{}", out.text);
    assert!(!locked.join("f.txt").exists());
    let write = json!({"path": "locked/g.txt", "content": "x"});
    let out = picogent::tools::execute("write", &write, &ctx).await;
    assert!(out.is_error, "{}", out.text);
    assert!(!locked.join("g.txt").exists());
}
