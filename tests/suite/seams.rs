//! Sandbox v3: the seams where picogent itself runs something the agent could have
//! influenced (its own helper, MCP servers), the set-ID bits, the Landlock level, and
//! the level chosen once and said. Each test is an attack that got through before.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use picogent::sandbox::Sandbox as PathSandbox;
use picogent::sandbox::{namespaces_work, Level};
use picogent::tools::{execute, ToolContext, ToolOutput};
use serde_json::{json, Value};

use crate::common::{
    self, namespaces_here, skip, skipping_refused, text, tool, Sandbox, ScriptedLlm, Wire,
};

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_picogent"))
}

fn context(sb: &Sandbox, sandbox: PathSandbox) -> ToolContext {
    ToolContext {
        output_dir: sb.home.join("state/outputs/s1"),
        ..sb.tool_ctx(sandbox, Duration::from_secs(20))
    }
}

/// A tool context confined to the working folder, at the level the machine gives.
fn confined(sb: &Sandbox) -> ToolContext {
    context(
        sb,
        PathSandbox::new(std::slice::from_ref(&sb.work), &[], &[])
            .with_confinement(helper(), false),
    )
}

async fn bash(ctx: &ToolContext, command: &str) -> ToolOutput {
    execute("bash", &json!({ "command": command }), ctx).await
}

/// A folder outside every allowed path, for markers an escape would leave.
fn outside(sb: &Sandbox) -> PathBuf {
    let p = sb.base().join("outside");
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// True when commands can be confined here at all (Landlock file rules).
fn landlock_here() -> bool {
    let abi = picogent::sandbox::confine::kernel_abi();
    if abi < 3 {
        skip(&format!(
            "this kernel offers Landlock ABI {abi}; confinement needs 3"
        ));
        return false;
    }
    true
}

#[tokio::test]
async fn a_picogent_binary_inside_an_allowed_folder_is_never_the_next_commands_helper() {
    if !landlock_here() {
        return;
    }
    let sb = Sandbox::new();
    // A checkout built in place: picogent's binary lies inside the allowed folder.
    let bin = sb.work.join("target/picogent");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(helper(), &bin).unwrap();
    let marker = outside(&sb).join("escaped");
    let replace = format!(
        "rm -f target/picogent && printf '#!/bin/sh\\necho unconfined > {}\\n' > target/picogent && chmod +x target/picogent && echo replaced",
        marker.display()
    );
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": replace })),
        tool("bash", json!({ "command": "echo second > second.txt" })),
        text("done"),
    ])
    .await;
    sb.write_config(&llm, Wire::Anthropic, json!({ "allowed_paths": [sb.work] }));
    let out = sb.run_command(&bin, "go").output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("replaced"), "{stdout}");
    assert!(
        !marker.exists(),
        "the replaced binary ran as the helper, unconfined"
    );
    // The next command still ran, through the real helper.
    assert_eq!(sb.read("second.txt"), "second\n", "{stdout}");
}

#[tokio::test]
async fn no_set_id_file_is_made_by_a_command_or_filled_by_the_file_tools() {
    if !landlock_here() {
        return;
    }
    let sb = Sandbox::new();
    let ctx = confined(&sb);
    // mknod makes regular files too, and FIFOs; neither with a set-ID bit.
    let r = bash(
        &ctx,
        "python3 -c 'import os; os.mknod(\"suid\", 0o104755)' 2>&1 | tail -1; \
         python3 -c 'import os; os.mknod(\"sgid\", 0o102755)' 2>&1 | tail -1; \
         python3 -c 'import os; os.mknod(\"fifo\", 0o014755)' 2>&1 | tail -1; ls",
    )
    .await;
    assert!(
        r.text.matches("Operation not permitted").count() >= 3,
        "{}",
        r.text
    );
    for f in ["suid", "sgid", "fifo"] {
        assert!(!sb.work.join(f).exists(), "{f} was made: {}", r.text);
    }

    // A set-ID file someone left (picogent runs as root here, and root keeps the bit
    // on a write): the file tools refuse to fill it.
    let planted = sb.write("planted", "#!/bin/sh\necho original\n");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let w = execute(
        "write",
        &json!({"path": "planted", "content": "#!/bin/sh\nid\n"}),
        &ctx,
    )
    .await;
    assert!(w.is_error && w.text.contains("set-user-ID"), "{}", w.text);
    let e = execute(
        "edit",
        &json!({"path": "planted", "oldText": "original", "newText": "id"}),
        &ctx,
    )
    .await;
    assert!(e.is_error && e.text.contains("set-user-ID"), "{}", e.text);
    assert_eq!(sb.read("planted"), "#!/bin/sh\necho original\n");
    let mode = std::fs::metadata(&planted).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o4755);
    // A new file the tools make never carries one.
    let n = execute("write", &json!({"path": "new.sh", "content": "x"}), &ctx).await;
    assert!(!n.is_error, "{}", n.text);
    let mode = std::fs::metadata(sb.work.join("new.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o6000, 0);
}

/// The agent's MCP servers' settings, with `extra` for the server.
fn mcp_config(sb: &Sandbox, command: &str, args: &[&str], extra: Value) -> Value {
    let mut server = json!({"command": command, "args": args, "startup_timeout_sec": 20});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        server[k] = v;
    }
    json!({"allowed_paths": [sb.work], "mcp_servers": {"s": server}})
}

/// Runs one scripted answer, which waits for the servers' first start.
async fn run_once(sb: &Sandbox, cfg: Value) -> picogent::agent::Agent {
    let llm = ScriptedLlm::start(vec![text("done")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, cfg);
    let (_, outcome) = common::run(&agent, "hi", "m1").await;
    assert_eq!(common::final_text(&outcome), "done");
    agent
}

#[tokio::test]
async fn an_mcp_server_never_loads_what_the_agent_planted_in_its_working_folder() {
    if !landlock_here() {
        return;
    }
    let sb = Sandbox::new();
    let marker = outside(&sb).join("planted-ran");
    // What bash could have left in the working folder for `python3 -m`.
    sb.write(
        "planted_mcp_server.py",
        &format!(
            "open({:?}, 'w').write('ran')\n",
            marker.display().to_string()
        ),
    );
    let agent = run_once(
        &sb,
        mcp_config(&sb, "python3", &["-m", "planted_mcp_server"], json!({})),
    )
    .await;
    let summary = agent.mcp().summary();
    assert!(summary[0].1.is_err(), "{summary:?}");
    assert!(!marker.exists(), "the planted module ran as the MCP server");
}

#[tokio::test]
async fn mcp_servers_run_confined_unless_one_opts_out() {
    if !landlock_here() {
        return;
    }
    for confined in [true, false] {
        let sb = Sandbox::new();
        // The operator's own server, outside the allowed paths: it tries to write
        // outside them, and says in the working folder what happened.
        let escape = outside(&sb).join("server-wrote-here");
        let server = sb.base().join("srv/server.py");
        std::fs::create_dir_all(server.parent().unwrap()).unwrap();
        std::fs::write(
            &server,
            format!(
                "import os\ntry:\n    open({e:?}, 'w').write('x')\n    r = 'wrote'\nexcept OSError as err:\n    r = 'refused'\nopen({p:?}, 'w').write(r + ' ' + os.getcwd())\n",
                e = escape.display().to_string(),
                p = sb.work.join("proof").display().to_string()
            ),
        )
        .unwrap();
        let extra = if confined {
            json!({})
        } else {
            json!({"sandbox": false})
        };
        let agent = run_once(
            &sb,
            mcp_config(&sb, "python3", &[server.to_str().unwrap()], extra),
        )
        .await;
        let summary = agent.mcp().summary();
        drop(agent);
        let proof = std::fs::read_to_string(sb.work.join("proof"))
            .unwrap_or_else(|e| panic!("the server did not run ({e}): {summary:?}"));
        // It never starts in the agent's working folder.
        assert!(!proof.ends_with(sb.work.to_str().unwrap()), "{proof}");
        if confined {
            assert!(proof.starts_with("refused"), "{proof}");
            assert!(!escape.exists());
        } else {
            assert!(proof.starts_with("wrote"), "{proof}");
        }
    }
}

#[tokio::test]
async fn a_mount_under_tmpdir_or_a_start_in_tmp_does_not_lower_the_level() {
    if !namespaces_here() {
        return;
    }
    let sb = Sandbox::new();
    let tmpdir = sb.base().join("tmpdir");
    // As anyone could mount FUSE under /tmp.
    let foreign = tmpdir.join("someone-elses-mount");
    let Some(_mounted) = common::Tmpfs::mount(&foreign, "1m") else {
        skip("cannot mount a tmpfs here (needs root)");
        return;
    };
    // Started from a folder under /tmp, with TMPDIR holding a foreign mount.
    let start = sb.base().join("start");
    std::fs::create_dir_all(&start).unwrap();
    let out = tokio::process::Command::new(helper())
        .arg("sandbox-check")
        .current_dir(&start)
        .env("TMPDIR", &tmpdir)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Level in force: namespaces"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{stdout}");
}

#[tokio::test]
async fn healthz_says_the_level_in_force() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = common::tracker::FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({"allowed_paths": [sb.work]}));
    let cb = tracker.callback_url().await;
    let url = cb.replace("/events", "/healthz");
    let body: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    let want = if namespaces_work(&helper()).is_ok() {
        "namespaces"
    } else {
        "landlock"
    };
    assert_eq!(body["sandbox"], want, "{body}");
    d.stop().await.unwrap();
}

#[tokio::test]
async fn the_landlock_level_hides_picogent_files_and_keeps_the_checkout_read_only() {
    if !landlock_here() {
        return;
    }
    let sb = Sandbox::new();
    std::fs::write(
        sb.home.join("agent.json"),
        "{\"api_key\": \"SECRET-CONFIG\"}",
    )
    .unwrap();
    std::fs::write(sb.home.join(".env"), "KEY=SECRET-DOTENV\n").unwrap();
    std::fs::create_dir_all(sb.home.join("state")).unwrap();
    std::fs::write(sb.home.join("state/journal.jsonl"), "SECRET-STATE\n").unwrap();
    // A checkout (work) and a task's worktree next to it, as agent mode makes them.
    std::fs::create_dir_all(sb.work.join(".git/info")).unwrap();
    std::fs::write(sb.work.join(".git/config"), "[core]\n").unwrap();
    let tree = sb.base().join("worktree");
    std::fs::create_dir_all(&tree).unwrap();
    let protected = [
        sb.home.join("agent.json"),
        sb.home.join(".env"),
        sb.home.join("state"),
    ];
    let base = PathSandbox::new(std::slice::from_ref(&sb.work), &protected, &[])
        .with_confinement_level(helper(), false, Level::Landlock);
    let sandbox = base.for_worktree(&sb.work, &sb.work.join(".git"), &tree);
    let mut ctx = context(&sb, sandbox);
    ctx.work_dir = tree.clone();
    let r = bash(
        &ctx,
        &format!(
            "cat {h}/agent.json {h}/.env {h}/state/journal.jsonl 2>&1; \
             echo '[filter \"x\"]' >> {w}/.git/config 2>&1; \
             echo '* filter=x' > {w}/.git/info/attributes 2>&1; \
             echo work > done.txt && cat done.txt",
            h = sb.home.display(),
            w = sb.work.display()
        ),
    )
    .await;
    assert!(!r.text.contains("SECRET-"), "{}", r.text);
    assert_eq!(
        std::fs::read_to_string(sb.work.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!sb.work.join(".git/info/attributes").exists(), "{}", r.text);
    assert!(r.text.trim_end().ends_with("work"), "{}", r.text);
    assert_eq!(
        std::fs::read_to_string(tree.join("done.txt")).unwrap(),
        "work\n"
    );
}

#[tokio::test]
async fn the_private_tmp_is_a_small_tmpfs_and_processes_are_counted() {
    if !namespaces_here() {
        return;
    }
    let sb = Sandbox::new();
    let ctx = confined(&sb);
    let r = bash(
        &ctx,
        "stat -f -c '%T' /tmp; df -m /tmp | tail -1; ulimit -u",
    )
    .await;
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(lines.first().copied(), Some("tmpfs"), "{}", r.text);
    let size_mb: u64 = lines[1].split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(size_mb <= 1024, "{}", r.text);
    assert_eq!(lines.get(2).copied(), Some("1024"), "{}", r.text);
}

#[test]
fn skipping_is_refused_where_the_sandbox_is_required() {
    // The CI entry point asks for it; without it, a machine without namespaces would
    // run every sandbox test as a SKIPPED pass.
    let ci =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(ci.contains("PICOGENT_REQUIRE_SANDBOX=1"), "{ci}");
    let result = std::panic::catch_unwind(|| skip("a test that cannot run here"));
    assert_eq!(result.is_err(), skipping_refused());
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let required = std::env::var("PICOGENT_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
    if ci || required {
        assert!(result.is_err(), "skipping must fail here");
    }
}

#[tokio::test]
async fn a_command_line_naming_a_path_under_tmp_never_makes_it_visible() {
    if !namespaces_here() {
        return;
    }
    let sb = Sandbox::new();
    // Someone else's folder under the host's /tmp.
    let victim = PathBuf::from(format!(
        "/tmp/picogent-victim-{}-{}",
        std::process::id(),
        fastrand_suffix()
    ));
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("secret"), "SECRET-IN-TMP").unwrap();
    // A folder whose name is a command line and a link inside it back to /tmp: the
    // whole command string then resolves to the victim's folder.
    let trick = sb.work.join("x;. ./y #");
    std::fs::create_dir_all(&trick).unwrap();
    std::os::unix::fs::symlink("/tmp", trick.join("tmp")).unwrap();
    sb.write("y", &format!("cat {}/secret\n", victim.display()));
    let ctx = confined(&sb);
    let command = format!(
        "{}/tmp/{}",
        trick.display(),
        victim.file_name().unwrap().to_string_lossy()
    );
    let r = bash(&ctx, &command).await;
    let _ = std::fs::remove_dir_all(&victim);
    assert!(!r.text.contains("SECRET-IN-TMP"), "{}", r.text);
    assert!(r.text.contains("No such file"), "{}", r.text);
}

fn fastrand_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test]
async fn at_the_landlock_level_no_unix_socket_reaches_a_daemon() {
    if !landlock_here() {
        return;
    }
    let sb = Sandbox::new();
    let path = sb.base().join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    // A datagram socket (as journald's): a socket pair could `sendto` it.
    let dgram_path = sb.base().join("journal.sock");
    let dgram = std::os::unix::net::UnixDatagram::bind(&dgram_path).unwrap();
    dgram.set_nonblocking(true).unwrap();
    let ctx = context(
        &sb,
        PathSandbox::new(std::slice::from_ref(&sb.work), &[], &[]).with_confinement_level(
            helper(),
            false,
            Level::Landlock,
        ),
    );
    let r = bash(
        &ctx,
        &format!(
            "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"connected\")' 2>&1 | tail -1; \
             python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); print(\"pair\", b.recv(1))'; \
             python3 -c 'import socket; a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b\"forged\", \"{}\"); print(\"sent\")' 2>&1 | tail -1",
            path.display(),
            dgram_path.display()
        ),
    )
    .await;
    assert!(!r.text.contains("sent"), "{}", r.text);
    let mut buf = [0u8; 16];
    assert!(dgram.recv(&mut buf).is_err(), "a datagram got through");
    assert!(!r.text.contains("connected"), "{}", r.text);
    assert!(r.text.contains("Permission denied"), "{}", r.text);
    assert!(r.text.contains("pair b'x'"), "{}", r.text);
    assert!(listener.accept().is_err());
}

#[tokio::test]
async fn an_mcp_server_ignores_what_the_agent_planted_in_an_allowed_home() {
    if !landlock_here() {
        return;
    }
    let sb = Sandbox::new();
    let marker = outside(&sb).join("user-site-ran");
    // Python's user site under the operator's HOME, which lies in the allowed paths.
    let site = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import site; print(site.getusersitepackages())"])
        .env("HOME", &sb.user_home)
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8_lossy(&site.stdout).trim());
    assert!(site.starts_with(&sb.user_home), "{}", site.display());
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("usercustomize.py"),
        format!(
            "open({:?}, 'w').write('ran')\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    let server = sb.base().join("srv/server.py");
    std::fs::create_dir_all(server.parent().unwrap()).unwrap();
    std::fs::write(
        &server,
        format!(
            "open({:?}, 'w').write('started')\n",
            sb.work.join("proof").display().to_string()
        ),
    )
    .unwrap();
    let mut cfg = mcp_config(
        &sb,
        "/usr/bin/python3",
        &[server.to_str().unwrap()],
        json!({"sandbox": false}),
    );
    cfg["allowed_paths"] = json!([sb.work, sb.user_home]);
    let agent = run_once(&sb, cfg).await;
    drop(agent);
    assert_eq!(sb.read("proof"), "started");
    assert!(
        !marker.exists(),
        "the agent's usercustomize.py ran in the MCP server"
    );
}

/// Where user namespaces are unavailable, a one-off run's first command (which tries
/// them before any probe) still runs, once, at the Landlock level, and says so.
#[tokio::test]
async fn without_namespaces_the_first_command_runs_once_at_the_landlock_level() {
    if !common::can_nest_user_namespaces() {
        skip("cannot make a user namespace to take namespaces away in");
        return;
    }
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool(
            "bash",
            json!({ "command": "echo ran >> runs.txt; cat runs.txt" }),
        ),
        tool("bash", json!({ "command": "echo second >> runs.txt" })),
        text("done"),
    ])
    .await;
    sb.write_config(&llm, Wire::Anthropic, json!({ "allowed_paths": [sb.work] }));
    let out = common::run_without_user_namespaces(&sb, "on")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each command ran exactly once (the first after its namespaces were refused).
    assert_eq!(sb.read("runs.txt"), "ran\nsecond\n", "{stdout}");
    assert!(!stdout.contains("the command was not run"), "{stdout}");
}
