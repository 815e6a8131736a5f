//! Sandbox v2: a prompt-injected model attacking picogent through bash, on the real
//! kernel. Each test is one attack from the issue; the namespace layer's tests skip
//! (saying so) where the kernel has no unprivileged user namespaces.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use picogent::sandbox::namespaces_work;
use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext, ToolOutput};
use serde_json::{json, Value};

use crate::common::{self, llm, skip, text, tool, Sandbox, ScriptedLlm, Wire};

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_picogent"))
}

/// `None` (with the reason printed) when commands cannot get their own namespaces.
fn namespaces_or_skip() -> Option<()> {
    match namespaces_work(&helper()) {
        Ok(()) => Some(()),
        Err(e) => {
            skip(&format!("no namespace sandbox on this machine: {e}"));
            None
        }
    }
}

/// A tool context confined like the agent's: allowed `work`, picogent's files protected.
fn confined(sb: &Sandbox, protected: &[PathBuf], deny_network: bool) -> ToolContext {
    ToolContext {
        output_dir: sb.home.join("state/outputs/s1"),
        ..sb.tool_ctx(
            PathSandbox::new(std::slice::from_ref(&sb.work), protected, &[])
                .with_confinement(helper(), deny_network),
            Duration::from_secs(20),
        )
    }
}

async fn bash(ctx: &ToolContext, command: &str) -> ToolOutput {
    execute("bash", &json!({ "command": command }), ctx).await
}

/// The `picogent run --json` events of one scripted run of the real binary.
async fn run_binary(sb: &Sandbox, extra_env: &[(&str, &str)]) -> (bool, Vec<Value>, String) {
    let out = sb
        .run_command(&helper(), "attack")
        .env("ANTHROPIC_API_KEY", "sk-ant-SECRET-anthropic-0001")
        .env("AGENT_TOKEN", "SECRET-agent-token-0002")
        .envs(extra_env.iter().copied())
        .output()
        .await
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (
        out.status.success(),
        events,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn results(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["output"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn secrets_are_not_readable_through_proc_with_or_without_namespaces() {
    // Every /proc environ and cmdline bash can reach, its parent's first.
    let snoop = "tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' ' ' < /proc/$PPID/cmdline; \
                 for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; tr '\\0' ' ' < $p/cmdline; done 2>/dev/null; \
                 echo snooped";
    for level in ["on", "landlock"] {
        let sb = Sandbox::new();
        let llm = ScriptedLlm::start(vec![
            tool("bash", json!({ "command": snoop })),
            text("done"),
        ])
        .await;
        sb.write_config(&llm, Wire::Anthropic, json!({ "allowed_paths": [sb.work] }));
        let (ok, events, stderr) = run_binary(&sb, &[("PICOGENT_SANDBOX", level)]).await;
        assert!(ok, "{level}: {stderr}");
        let out = results(&events).join("\n");
        assert!(out.contains("snooped"), "{level}: {out}");
        for secret in ["SECRET-anthropic", "SECRET-agent-token", llm::API_KEY] {
            assert!(!out.contains(secret), "{level}: {secret} leaked:\n{out}");
        }
        // Nor did the model receive it in any request.
        let sent =
            serde_json::to_string(&llm.requests().iter().map(|r| &r.body).collect::<Vec<_>>())
                .unwrap();
        assert!(!sent.contains("SECRET-"), "{level}");
    }
}

#[tokio::test]
async fn picogent_and_other_processes_cannot_be_signalled_or_seen() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let ctx = confined(&sb, &[], false);
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let vpid = victim.id();
    let me = std::process::id();
    let r = bash(
        &ctx,
        &format!("kill -STOP $PPID; kill -STOP {me}; kill -STOP {vpid}; ls /proc | grep -c '^[0-9]'; echo end"),
    )
    .await;
    assert!(r.text.contains("end"), "the command itself ran on: {r:?}");
    // Only the sandbox's own few processes are visible.
    let visible: usize = r.text.lines().find_map(|l| l.trim().parse().ok()).unwrap();
    assert!(visible <= 6, "{r:?}");
    let stat = std::fs::read_to_string(format!("/proc/{vpid}/stat")).unwrap();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert_ne!(state, "T", "the other process was stopped");
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[tokio::test]
async fn background_jobs_in_their_own_groups_die_with_the_command() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let ctx = confined(&sb, &[], false);
    let r = bash(
        &ctx,
        "set -m; (sleep 1002 &); setsid sleep 1003 & nohup sleep 1004 >/dev/null 2>&1 & disown; echo started",
    )
    .await;
    assert_eq!(r.text, "started", "{r:?}");
    crate::common::assert_no_process("sleep 100[234]");
}

#[tokio::test]
async fn network_deny_closes_unix_udp_and_abstract_sockets() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let unix_path = sb.work.join("daemon.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let port = udp.local_addr().unwrap().port();
    let py = |code: &str| format!("python3 -c \"{code}\" && echo REACHED");
    let unix = py(&format!(
        "import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}')",
        unix_path.display()
    ));
    let udp_cmd = py(&format!(
        "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', {port}))"
    ));
    let abstract_ = py(
        "import socket; s=socket.socket(socket.AF_UNIX); s.connect(b'\\\\0picogent-test-abstract')",
    );

    let denied = confined(&sb, &[], true);
    for (what, cmd) in [("unix", &unix), ("abstract", &abstract_)] {
        let r = bash(&denied, cmd).await;
        assert!(r.is_error && !r.text.contains("REACHED"), "{what}: {r:?}");
    }
    // A datagram may be sent, but only into the sandbox's own network: it never
    // arrives here (loopback delivery is synchronous, so it would be queued by now).
    bash(&denied, &udp_cmd).await;
    let mut buf = [0u8; 8];
    assert!(udp.recv(&mut buf).is_err(), "a datagram arrived under deny");
    // With the network allowed the same UNIX socket is reachable.
    let allowed = confined(&sb, &[], false);
    let r = bash(&allowed, &unix).await;
    assert_eq!(r.text, "REACHED", "{r:?}");
}

#[tokio::test]
async fn picogent_files_inside_an_allowed_path_are_protected_from_commands() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let config = sb.write("agent.json", "{\"token\": \"SECRET-config\"}");
    let env = sb.write(".env", "AGENT_TOKEN=SECRET-env");
    let state = sb.work.join("state");
    std::fs::create_dir_all(state.join("checkpoints")).unwrap();
    std::fs::write(state.join("journal.jsonl"), "{}\n").unwrap();
    let ctx = confined(&sb, &[config.clone(), env.clone(), state.clone()], false);
    let r = bash(&ctx, "cat agent.json .env; ls -A state; echo listed").await;
    assert!(!r.text.contains("SECRET"), "{r:?}");
    assert!(
        r.text.contains("listed") && !r.text.contains("journal"),
        "state is hidden: {r:?}"
    );
    for attack in [
        "echo '{}' > agent.json",
        "rm -f .env",
        "echo x >> state/journal.jsonl",
        "mkdir state/checkpoints/planted",
        "mv state state2",
    ] {
        let r = bash(&ctx, attack).await;
        assert!(r.is_error, "{attack}: {r:?}");
    }
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "{\"token\": \"SECRET-config\"}"
    );
    assert!(env.exists());
    assert_eq!(
        std::fs::read_to_string(state.join("journal.jsonl")).unwrap(),
        "{}\n"
    );
    assert!(!state.join("checkpoints/planted").exists());
    // Everything else in the allowed path stays writable.
    let r = bash(&ctx, "echo fine > other.txt && cat other.txt").await;
    assert_eq!(r.text, "fine", "{r:?}");
}

#[tokio::test]
async fn full_outputs_are_private_files_in_picogent_state() {
    let sb = Sandbox::new();
    let ctx = confined(&sb, &[sb.home.join("state")], false);
    let r = bash(&ctx, "seq 1 30000").await;
    let path = r.details.as_ref().unwrap()["full_output_path"]
        .as_str()
        .unwrap()
        .to_string();
    let path = Path::new(&path);
    assert!(
        path.starts_with(sb.home.join("state/outputs/s1")),
        "{path:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    assert!(std::fs::read_to_string(path).unwrap().ends_with("30000\n"));
    if namespaces_work(&helper()).is_ok() {
        let r = bash(
            &ctx,
            &format!(
                "echo planted > {}",
                path.parent().unwrap().join("x.log").display()
            ),
        )
        .await;
        assert!(
            r.is_error,
            "the output folder is not writable to commands: {r:?}"
        );
    }
}

/// Without user namespaces (here: a user namespace whose limit for more is 0),
/// picogent refuses a configuration whose own files would be writable, unless relaxed.
#[tokio::test]
async fn without_namespaces_unsafe_configurations_are_refused_unless_relaxed() {
    if !common::can_nest_user_namespaces() {
        skip("cannot make a user namespace to take namespaces away in");
        return;
    }
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": "echo ran" })),
        text("done"),
    ])
    .await;
    // The agent folder is allowed: its state/ and agent.json lie inside.
    sb.write_config(
        &llm,
        Wire::Anthropic,
        json!({ "allowed_paths": [sb.home], "work_dir": sb.home }),
    );
    let run = |level: &str| common::run_without_user_namespaces(&sb, level).output();
    let out = run("on").await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("user namespaces")
            && stderr.contains("sandbox: \"landlock\"")
            && stderr.contains("agent.json"),
        "{stderr}"
    );
    let out = run("landlock").await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"ran"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn sandbox_check_reports_the_layers_and_stops_every_attack() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let out = std::process::Command::new(helper())
        .arg("sandbox-check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "namespaces",
        "Landlock file rules",
        "seccomp",
        "PASS write outside",
        "PASS read picogent's configuration",
        "Every attack was stopped",
    ] {
        assert!(stdout.contains(line), "{line} missing:\n{stdout}");
    }
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[tokio::test]
async fn the_agent_runs_commands_in_namespaces_by_default() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool(
            "bash",
            json!({ "command": "echo $$; readlink /proc/1/exe; id -u" }),
        ),
        text("ok"),
    ])
    .await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({ "allowed_paths": [sb.work] }));
    assert!(agent
        .sandbox()
        .confinement()
        .is_some_and(|c| c.namespaces()));
    let (events, _) = common::run(&agent, "who am i", "ns").await;
    let r = &common::tool_results(&events)[0];
    assert!(!r.1, "{r:?}");
    let pid: u32 = r.2.lines().next().unwrap().parse().unwrap();
    assert!(pid < 10, "bash sees its own PID namespace: {r:?}");
}

#[tokio::test]
async fn protected_files_cannot_be_swapped_by_moving_their_folders() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let config = sb.write("conf/agent.json", "{\"real\": true}");
    let sessions = sb.work.join(".picogent/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join("s1.jsonl"), "REAL\n").unwrap();
    let ctx = ToolContext {
        sandbox: Arc::new(
            PathSandbox::new(
                std::slice::from_ref(&sb.work),
                std::slice::from_ref(&config),
                &[],
            )
            .with_read_only(std::slice::from_ref(&sessions))
            .with_confinement(helper(), false),
        ),
        ..confined(&sb, &[], false)
    };
    let r = bash(
        &ctx,
        "mv conf conf.old; mkdir -p conf && echo '{\"sandbox\":\"off\"}' > conf/agent.json; \
         mv .picogent .picogent.old; mkdir -p .picogent/sessions && echo INJECTED > .picogent/sessions/s1.jsonl; \
         echo tried",
    )
    .await;
    assert!(r.text.contains("tried"), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "{\"real\": true}"
    );
    assert_eq!(
        std::fs::read_to_string(sessions.join("s1.jsonl")).unwrap(),
        "REAL\n"
    );
}

#[tokio::test]
async fn the_kernel_and_the_host_devices_stay_out_of_reach() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    // Both with and without allowed paths: without them the file system is writable,
    // but never the kernel's settings or the host's device nodes.
    for allowed in [vec![sb.work.clone()], vec![]] {
        let ctx = ToolContext {
            sandbox: Arc::new(
                PathSandbox::new(&allowed, &[], &[]).with_confinement(helper(), false),
            ),
            ..confined(&sb, &[], false)
        };
        for attack in [
            // Writes back the current value: harmless if it ever succeeded.
            "cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern",
            "echo 0 > /proc/sysrq-trigger",
            "chmod 0666 /dev/null",
            "touch -m /dev/urandom",
            "mknod /dev/picogent-disk b 8 0",
        ] {
            let r = bash(&ctx, attack).await;
            assert!(r.is_error, "{allowed:?}: {attack}: {r:?}");
        }
        let r = bash(
            &ctx,
            "echo ok > /dev/null && head -c 4 /dev/urandom | wc -c",
        )
        .await;
        assert_eq!(r.text, "4", "devices still work: {r:?}");
    }
}

#[tokio::test]
async fn commands_hold_no_capabilities_and_no_inherited_descriptors() {
    // A descriptor picogent's own parent might have left open (no close-on-exec).
    let mut fds = [0; 2];
    // SAFETY: a valid two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let sb = Sandbox::new();
    for level in [
        picogent::sandbox::Level::Full,
        picogent::sandbox::Level::Landlock,
    ] {
        let ctx =
            ToolContext {
                sandbox: Arc::new(
                    PathSandbox::new(std::slice::from_ref(&sb.work), &[], &[])
                        .with_confinement_level(helper(), false, level),
                ),
                ..confined(&sb, &[], false)
            };
        let r = bash(
            &ctx,
            "grep CapEff /proc/self/status; ls /proc/self/fd | tr '\\n' ' '",
        )
        .await;
        assert!(
            r.text.contains("CapEff:\t0000000000000000"),
            "{level:?}: {r:?}"
        );
        let open: Vec<&str> = r.text.lines().last().unwrap().split_whitespace().collect();
        assert!(
            open.len() <= 4,
            "{level:?}: descriptors leaked into the command: {open:?}"
        );
    }
    // SAFETY: closing our own pipe.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[tokio::test]
async fn no_set_id_programs_and_no_daemon_sockets() {
    let Some(()) = namespaces_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    let ctx = confined(&sb, &[], false);
    for attack in [
        "cp /bin/sh suid && chmod 4755 suid",
        "cp /bin/sh sgid && chmod g+s sgid",
        "python3 -c \"import os; os.open('made', os.O_CREAT | os.O_WRONLY, 0o4755)\"",
    ] {
        let r = bash(&ctx, attack).await;
        assert!(r.is_error, "{attack}: {r:?}");
    }
    use std::os::unix::fs::PermissionsExt;
    for f in ["suid", "sgid", "made"] {
        if let Ok(m) = std::fs::metadata(sb.work.join(f)) {
            assert_eq!(m.permissions().mode() & 0o6000, 0, "{f}");
        }
    }
    // A daemon's socket under /run (where system services listen) is out of reach even
    // with the network allowed.
    let path = PathBuf::from(format!("/run/picogent-test-{}.sock", std::process::id()));
    let Ok(listener) = std::os::unix::net::UnixListener::bind(&path) else {
        skip("(socket part) cannot create a socket in /run");
        return;
    };
    let r = bash(
        &ctx,
        &format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}')\" && echo REACHED",
            path.display()
        ),
    )
    .await;
    drop(listener);
    let _ = std::fs::remove_file(&path);
    assert!(r.is_error && !r.text.contains("REACHED"), "{r:?}");
}

#[tokio::test]
async fn everything_in_dot_env_stays_with_picogent() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": "env; echo listed" })),
        text("done"),
    ])
    .await;
    sb.write_config(&llm, Wire::Anthropic, json!({ "allowed_paths": [sb.work] }));
    std::fs::write(
        sb.base().join(".env"),
        "GITHUB_TOKEN=ghp-DOTENV-SECRET-777\nSOME_SETTING=dotenv-value-888\n",
    )
    .unwrap();
    let (ok, events, stderr) = run_binary(&sb, &[]).await;
    assert!(ok, "{stderr}");
    let out = results(&events).join("\n");
    assert!(out.contains("listed"), "{out}");
    assert!(
        !out.contains("DOTENV-SECRET") && !out.contains("dotenv-value"),
        "{out}"
    );
}
