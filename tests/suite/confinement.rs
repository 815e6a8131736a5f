//! Kernel confinement of bash (Landlock): real commands against the real kernel.

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use picogent::sandbox::confine::kernel_abi;
use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext, ToolOutput};
use serde_json::json;

use crate::common::Sandbox;

/// `None` (with the reason printed) when this kernel has no Landlock network rules.
fn landlock_or_skip(needed: i64) -> Option<()> {
    let abi = kernel_abi();
    if abi < needed {
        crate::common::skip(&format!(
            "this kernel offers Landlock ABI {abi}; these tests need {needed}"
        ));
        return None;
    }
    Some(())
}

fn confined(sb: &Sandbox, allowed: Vec<PathBuf>, deny_network: bool) -> ToolContext {
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_picogent"));
    sb.tool_ctx(
        PathSandbox::new(&allowed, &[], &[]).with_confinement(helper, deny_network),
        Duration::from_secs(10),
    )
}

async fn bash(ctx: &ToolContext, command: &str) -> ToolOutput {
    execute("bash", &json!({"command": command}), ctx).await
}

/// A folder outside the allowed paths and outside /tmp (which confined commands see
/// as their own private folder), so the denial comes from the file rules themselves.
fn outside(sb: &Sandbox) -> PathBuf {
    let name = sb.base().file_name().unwrap().to_owned();
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(name)
        .join("outside");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("keep.txt"), "keep").unwrap();
    p
}

/// The kernel's refusal of a write: Landlock says "Permission denied", the read-only
/// mounts of the namespace layer "Read-only file system", and a folder under the host's
/// /tmp (as when the checkout itself lies there) does not exist in the private /tmp.
fn refused(text: &str) -> bool {
    text.contains("Permission denied")
        || text.contains("Read-only file system")
        || text.contains("No such file or directory")
}

#[tokio::test]
async fn writes_outside_the_allowed_paths_fail_inside_the_command() {
    let Some(()) = landlock_or_skip(3) else {
        return;
    };
    let sb = Sandbox::new();
    let out = outside(&sb);
    let ctx = confined(&sb, vec![sb.work.clone()], false);

    let r = bash(&ctx, &format!("echo pwned > {}/new.txt", out.display())).await;
    assert!(r.is_error && refused(&r.text), "{r:?}");
    assert!(!out.join("new.txt").exists());

    let r = bash(&ctx, &format!("rm {}/keep.txt", out.display())).await;
    assert!(r.is_error, "{r:?}");
    assert!(out.join("keep.txt").exists());

    sb.write("inside.txt", "mine");
    let r = bash(&ctx, &format!("mv inside.txt {}/", out.display())).await;
    assert!(r.is_error, "{r:?}");
    assert!(sb.work.join("inside.txt").exists() && !out.join("inside.txt").exists());

    // The same command is not stopped by the path checks alone: it is the kernel.
    let r = bash(
        &ctx,
        "echo ok > written.txt && cat written.txt && mkdir -p d/e && mv written.txt d/e/",
    )
    .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(sb.work.join("d/e/written.txt")).unwrap(),
        "ok\n"
    );

    let r = bash(
        &ctx,
        "cat /etc/hostname >/dev/null && ls / >/dev/null && echo read-ok",
    )
    .await;
    assert_eq!(r.text, "read-ok", "{r:?}");
}

#[tokio::test]
async fn a_symlink_inside_cannot_be_written_through_and_tmpdir_is_private_and_writable() {
    let Some(()) = landlock_or_skip(3) else {
        return;
    };
    let sb = Sandbox::new();
    let out = outside(&sb);
    symlink(out.join("keep.txt"), sb.work.join("link")).unwrap();
    let ctx = confined(&sb, vec![sb.work.clone()], false);
    let r = bash(&ctx, "echo overwrite > link").await;
    assert!(r.is_error, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(out.join("keep.txt")).unwrap(),
        "keep"
    );

    let r = bash(
        &ctx,
        "f=$(mktemp) && echo scratch > \"$f\" && cat \"$f\" && echo \"$TMPDIR\"",
    )
    .await;
    assert!(!r.is_error, "{r:?}");
    let mut lines = r.text.lines();
    assert_eq!(lines.next(), Some("scratch"));
    let tmpdir = PathBuf::from(lines.next().unwrap());
    let private = ctx.sandbox.confinement().is_some_and(|c| c.namespaces());
    if private {
        // Its own /tmp, backed by a folder of picogent's that is removed afterwards.
        assert_eq!(tmpdir, PathBuf::from("/tmp"));
        let r = bash(&ctx, "echo x > /tmp/picogent-escape-test && ls /tmp").await;
        assert_eq!(r.text, "picogent-escape-test", "{r:?}");
        assert!(!PathBuf::from("/tmp/picogent-escape-test").exists());
    } else {
        assert!(tmpdir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("picogent-tmp-"));
        let r = bash(&ctx, "echo x > /tmp/picogent-escape-test").await;
        assert!(r.is_error, "the shared /tmp is not writable: {r:?}");
    }
    assert!(
        !ctx.output_dir.read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("picogent-tmp-")),
        "the private temporary folder is removed after the command"
    );
}

#[tokio::test]
async fn network_deny_blocks_tcp_and_allow_permits_it() {
    let Some(()) = landlock_or_skip(4) else {
        return;
    };
    let sb = Sandbox::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let denied = confined(&sb, vec![sb.work.clone()], true);
    let r = bash(&denied, &connect).await;
    assert!(r.is_error && !r.text.contains("connected"), "{r:?}");
    let r = bash(&denied, "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen()' && echo listening").await;
    assert!(r.is_error && !r.text.contains("listening"), "{r:?}");
    let allowed = confined(&sb, vec![sb.work.clone()], false);
    let r = bash(&allowed, &connect).await;
    assert_eq!(r.text, "connected", "{r:?}");
    // Network rules alone, without allowed paths, confine only the network.
    let net_only = confined(&sb, vec![], true);
    let r = bash(&net_only, &connect).await;
    assert!(r.is_error, "{r:?}");
    let r = bash(
        &net_only,
        &format!(
            "echo fine > {}/net-only.txt && echo wrote",
            outside(&sb).display()
        ),
    )
    .await;
    assert_eq!(r.text, "wrote", "{r:?}");
}

#[tokio::test]
async fn a_confined_background_grandchild_still_dies_on_timeout() {
    let Some(()) = landlock_or_skip(3) else {
        return;
    };
    let sb = Sandbox::new();
    let ctx = confined(&sb, vec![sb.work.clone()], false);
    let started = Instant::now();
    let r = execute(
        "bash",
        &json!({"command": "(sleep 1001; touch late) & sleep 1001", "timeout": 1}),
        &ctx,
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(r.is_error && r.text.contains("timed out"), "{r:?}");
    crate::common::assert_no_process("sleep 1001");
}

#[tokio::test]
async fn a_missing_allowed_path_is_skipped_not_fatal() {
    let Some(()) = landlock_or_skip(3) else {
        return;
    };
    let sb = Sandbox::new();
    let ctx = confined(
        &sb,
        vec![sb.base().join("does-not-exist"), sb.work.clone()],
        false,
    );
    let r = bash(&ctx, "echo still works > ok.txt && cat ok.txt").await;
    assert_eq!(r.text, "still works", "{r:?}");
}

#[tokio::test]
async fn sandbox_off_runs_commands_unconfined_through_the_agent() {
    let sb = Sandbox::new();
    let out = outside(&sb);
    let cmd = format!("echo unconfined > {}/off.txt", out.display());
    let llm = crate::common::ScriptedLlm::start(vec![
        crate::common::tool("bash", json!({"command": cmd})),
        crate::common::text("ok"),
    ])
    .await;
    let agent = sb.agent(
        &llm,
        crate::common::Wire::Anthropic,
        json!({"allowed_paths": [sb.work], "sandbox": "off"}),
    );
    let (_, outcome) = crate::common::run(&agent, "write outside", "off").await;
    assert_eq!(crate::common::final_text(&outcome), "ok");
    assert!(
        out.join("off.txt").exists(),
        "with sandbox off only the path checks apply"
    );
    assert!(agent.sandbox().confinement().is_none());
}

#[tokio::test]
async fn the_agent_confines_bash_when_allowed_paths_are_set() {
    let Some(()) = landlock_or_skip(3) else {
        return;
    };
    let sb = Sandbox::new();
    let out = outside(&sb);
    let cmd = format!("cd / && echo escaped > {}/agent.txt", out.display());
    let llm = crate::common::ScriptedLlm::start(vec![
        crate::common::tool("bash", json!({"command": cmd})),
        crate::common::text("tried"),
    ])
    .await;
    let agent = sb.agent(
        &llm,
        crate::common::Wire::Anthropic,
        json!({"allowed_paths": [sb.work]}),
    );
    let (events, _) = crate::common::run(&agent, "escape", "on").await;
    let results = crate::common::tool_results(&events);
    assert!(results[0].1 && refused(&results[0].2), "{results:?}");
    assert!(!out.join("agent.txt").exists());
}
