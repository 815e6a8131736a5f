//! `allowed_paths`: every escape refused after resolving `..` and symlinks.

use std::os::unix::fs::symlink;
use std::time::Duration;

use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext};
use serde_json::json;

use crate::common::Sandbox;

/// A context whose only allowed path is the work folder; `outside` is a sibling.
fn confined(
    sb: &Sandbox,
    protected: &[std::path::PathBuf],
    readable: &[std::path::PathBuf],
) -> ToolContext {
    sb.tool_ctx(
        PathSandbox::new(std::slice::from_ref(&sb.work), protected, readable),
        Duration::from_secs(10),
    )
}

fn outside(sb: &Sandbox) -> std::path::PathBuf {
    let p = sb.base().join("outside");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("secret.txt"), "secret").unwrap();
    p
}

#[tokio::test]
async fn dot_dot_and_absolute_paths_outside_are_refused() {
    let sb = Sandbox::new();
    let out_dir = outside(&sb);
    let c = confined(&sb, &[], &[]);
    for path in [
        "../outside/secret.txt".to_string(),
        out_dir.join("secret.txt").display().to_string(),
    ] {
        let r = execute("read", &json!({"path": path}), &c).await;
        assert!(
            r.is_error && r.text.contains("outside the allowed paths"),
            "{path}: {r:?}"
        );
        let w = execute("write", &json!({"path": path, "content": "x"}), &c).await;
        assert!(w.is_error, "{path}: {w:?}");
    }
    assert_eq!(
        std::fs::read_to_string(out_dir.join("secret.txt")).unwrap(),
        "secret"
    );
    let e = execute(
        "edit",
        &json!({"path": "../outside/secret.txt", "oldText": "secret", "newText": "x"}),
        &c,
    )
    .await;
    assert!(e.is_error);
    for tool in ["grep", "find", "ls"] {
        let args = if tool == "ls" {
            json!({"path": "../outside"})
        } else {
            json!({"pattern": "*", "path": "../outside"})
        };
        let r = execute(tool, &args, &c).await;
        assert!(
            r.is_error && r.text.contains("outside the allowed paths"),
            "{tool}: {r:?}"
        );
    }
}

#[tokio::test]
async fn a_symlink_pointing_outside_is_refused() {
    let sb = Sandbox::new();
    let out_dir = outside(&sb);
    symlink(out_dir.join("secret.txt"), sb.work.join("link.txt")).unwrap();
    symlink(&out_dir, sb.work.join("linkdir")).unwrap();
    let c = confined(&sb, &[], &[]);
    let r = execute("read", &json!({"path": "link.txt"}), &c).await;
    assert!(r.is_error && r.text.contains("outside"), "{r:?}");
    let w = execute(
        "write",
        &json!({"path": "link.txt", "content": "pwned"}),
        &c,
    )
    .await;
    assert!(w.is_error, "{w:?}");
    // A new file under a symlinked folder.
    let w = execute(
        "write",
        &json!({"path": "linkdir/new.txt", "content": "x"}),
        &c,
    )
    .await;
    assert!(w.is_error && w.text.contains("outside"), "{w:?}");
    assert!(!out_dir.join("new.txt").exists());
    // A dangling symlink whose target would be created outside.
    symlink(
        out_dir.join("created-through-link"),
        sb.work.join("dangling"),
    )
    .unwrap();
    let w = execute("write", &json!({"path": "dangling", "content": "x"}), &c).await;
    assert!(w.is_error, "{w:?}");
    assert!(!out_dir.join("created-through-link").exists());
    assert_eq!(
        std::fs::read_to_string(out_dir.join("secret.txt")).unwrap(),
        "secret"
    );
}

#[tokio::test]
async fn paths_inside_work_including_new_nested_files() {
    let sb = Sandbox::new();
    sb.write("sub/in.txt", "inside");
    let c = confined(&sb, &[], &[]);
    let r = execute("read", &json!({"path": "sub/../sub/in.txt"}), &c).await;
    assert_eq!(r.text, "inside\n");
    let w = execute(
        "write",
        &json!({"path": "new/deeper/f.txt", "content": "ok"}),
        &c,
    )
    .await;
    assert!(!w.is_error, "{w:?}");
    assert_eq!(sb.read("new/deeper/f.txt"), "ok");
    let b = execute("bash", &json!({"command": "cat sub/in.txt"}), &c).await;
    assert_eq!(b.text, "inside");
}

#[tokio::test]
async fn bash_outside_the_allowed_paths_is_refused() {
    let sb = Sandbox::new();
    let out_dir = outside(&sb);
    let mut c = confined(&sb, &[], &[]);
    c.work_dir = out_dir;
    let b = execute("bash", &json!({"command": "echo hi"}), &c).await;
    assert!(
        b.is_error && b.text.contains("outside the allowed paths"),
        "{b:?}"
    );
}

#[tokio::test]
async fn protected_files_are_refused_and_skipped_even_inside() {
    let sb = Sandbox::new();
    let env_file = sb.write(".env", "ANTHROPIC_API_KEY=sk-secret\n");
    let state = sb.work.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("journal"), "sk-secret").unwrap();
    let c = confined(&sb, &[env_file, state], &[]);
    let r = execute("read", &json!({"path": ".env"}), &c).await;
    assert!(
        r.is_error && r.text.contains("not available to tools"),
        "{r:?}"
    );
    let r = execute(
        "write",
        &json!({"path": "state/journal", "content": "x"}),
        &c,
    )
    .await;
    assert!(r.is_error);
    let g = execute("grep", &json!({"pattern": "sk-secret"}), &c).await;
    assert!(g.text.starts_with("No matches"), "{g:?}");
    let l = execute("ls", &json!({}), &c).await;
    assert!(
        !l.text.contains(".env") && !l.text.contains("state"),
        "{l:?}"
    );
}

#[tokio::test]
async fn skill_folders_stay_readable_outside_allowed_paths() {
    let sb = Sandbox::new();
    let skill = sb.add_skill("review", "Code review", "# Review body");
    let skills_dir = sb.home.join("skills");
    let c = confined(&sb, &[], &[skills_dir]);
    let r = execute("read", &json!({"path": skill.display().to_string()}), &c).await;
    assert!(!r.is_error && r.text.contains("# Review body"), "{r:?}");
    let w = execute(
        "write",
        &json!({"path": skill.display().to_string(), "content": "x"}),
        &c,
    )
    .await;
    assert!(w.is_error, "skills are read-only: {w:?}");
}
