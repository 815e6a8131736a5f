//! The level under pressure (issue 37, item 2): a count of namespaces that is full for
//! a moment refuses the commands of that moment and lowers no level, and commands make
//! no user namespaces of their own (with which they could fill that count), at either
//! level, unless the configuration allows it.

use std::path::PathBuf;
use std::time::Duration;

use picogent::sandbox::{Level, Sandbox as PathSandbox};
use picogent::tools::{execute, ToolContext};
use serde_json::json;

use crate::common::{llm, text, tool, ModelGate, Sandbox, ScriptedLlm, Turn, Wire};

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_picogent"))
}

/// `picogent <args>` as root of a user namespace of its own whose count of user
/// namespaces is 1, and held by another process (a `sleep`) whose pid is written to
/// `holder`: picogent's commands cannot have namespaces until the test kills it.
fn run_in_a_full_count(
    sb: &Sandbox,
    llm: &ScriptedLlm,
    holder: &std::path::Path,
    args: &[&str],
) -> tokio::process::Command {
    let fifo = sb.base().join("holder.fifo");
    crate::common::mkfifo(&fifo);
    let script = r#"
        echo 1 > /proc/sys/user/max_user_namespaces || exit 90
        unshare --user sh -c 'echo $$ > "$1"; exec sleep 600' holder "$FIFO" &
        read held < "$FIFO"
        echo "$held" > "$HOLDER"
        "$PICOGENT" "$@"
        code=$?
        kill "$held" 2>/dev/null
        exit $code
    "#;
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "sh", "-c", script, "sh"])
        .args(args)
        .current_dir(sb.base())
        .env("FIFO", &fifo)
        .env("HOLDER", holder)
        .env("PICOGENT", env!("CARGO_BIN_EXE_picogent"))
        .env("DIR", &sb.work)
        .env("HOME", &sb.user_home)
        .env("PICOGENT_PROVIDER", Wire::Anthropic.provider())
        .env("PICOGENT_BASE_URL", llm.base_url(Wire::Anthropic))
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("PICOGENT_MODEL", "scripted")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// The text of the tool result a request carries last.
fn last_tool_result(body: &serde_json::Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    let content = &messages.last().unwrap()["content"];
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].to_string())
        .collect()
}

/// Waits until `pid` is gone (reaped by its parent, the shell).
async fn gone(pid: i32) {
    for _ in 0..500 {
        // SAFETY: signal 0 only asks whether the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the holder {pid} never went away");
}

#[tokio::test]
async fn a_full_count_of_namespaces_refuses_the_command_and_lowers_no_level() {
    let sb = Sandbox::new();
    let gate = ModelGate::new();
    let llm = ScriptedLlm::start(vec![
        tool(
            "bash",
            json!({"command": "echo first > first.txt; echo pid=$$"}),
        ),
        Turn::HeldTools(
            gate.clone(),
            vec![(
                "bash".into(),
                json!({"command": "echo pid=$$ > second.txt; cat second.txt"}),
            )],
        ),
        text("Done."),
    ])
    .await;
    let holder = sb.base().join("holder.pid");
    let dir = sb.work.display().to_string();
    let args = ["run", "--dir", &dir, "Run two commands"];
    let child = run_in_a_full_count(&sb, &llm, &holder, &args)
        .spawn()
        .unwrap();
    llm.wait_requests(2).await;
    // The first command was refused while the count was full: not run, and not run
    // at the Landlock level either.
    let first = last_tool_result(&llm.requests()[1].body);
    assert!(
        first.contains("full for now") && first.contains("the command was not run"),
        "{first}"
    );
    assert!(!sb.work.join("first.txt").exists(), "{first}");
    let pid: i32 = std::fs::read_to_string(&holder)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: a plain signal to the holder this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    gone(pid).await;
    gate.open();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("picogent did not finish")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    // The next command had its namespaces: its shell is one of the first processes of
    // a PID namespace of its own (at the Landlock level it would be a host pid).
    let second = std::fs::read_to_string(sb.work.join("second.txt")).unwrap();
    let pid: u32 = second.trim().trim_start_matches("pid=").parse().unwrap();
    assert!(pid < 10, "{second}");
    assert!(stderr.contains("cannot be made right now"), "{stderr}");
    assert!(!stderr.contains("sandbox level: landlock"), "{stderr}");
}

/// Reads the holder's pid once it is written, and kills it.
async fn release(holder: &std::path::Path) {
    for _ in 0..500 {
        let pid = std::fs::read_to_string(holder).unwrap_or_default();
        if let Ok(pid) = pid.trim().parse::<i32>() {
            // SAFETY: a plain signal to the holder this test started.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
            return gone(pid).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the holder never said its pid");
}

/// Kills a process group when dropped.
struct KillGroup(i32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        // SAFETY: a plain signal to the group this test started.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

/// `/healthz` once it answers and `done` holds for its answer.
async fn health_until(port: u16, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(40);
    while std::time::Instant::now() < until {
        let asked = client.get(format!("http://127.0.0.1:{port}/healthz"));
        if let Ok(r) = asked.send().await {
            last = r.json().await.unwrap_or_default();
            if done(&last) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("/healthz never said it: {last}");
}

/// While the count is full, health says the level stays and why commands are refused;
/// once it has room, the level settles and the refusal is no longer said.
#[tokio::test]
async fn health_says_commands_are_refused_while_the_count_is_full() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let holder = sb.base().join("holder.pid");
    let port = crate::common::free_port();
    sb.write_config(&llm, Wire::Anthropic, json!({}));
    let home = sb.home.display().to_string();
    let mut cmd = run_in_a_full_count(&sb, &llm, &holder, &[&home]);
    let child = cmd
        .env("PICOGENT_PORT", port.to_string())
        .process_group(0)
        .spawn()
        .unwrap();
    // The daemon is the shell's child: stopped with its whole group, however this ends.
    let _group = KillGroup(child.id().unwrap() as i32);
    let full = health_until(port, |h| h.get("sandbox_refusing").is_some()).await;
    assert_eq!(full["sandbox"], "namespaces", "{full}");
    assert!(
        full["sandbox_refusing"]
            .to_string()
            .contains("full for now"),
        "{full}"
    );
    release(&holder).await;
    let free = health_until(port, |h| h.get("sandbox_refusing").is_none()).await;
    assert_eq!(free["sandbox"], "namespaces", "{free}");
}

fn confined(sb: &Sandbox, level: Level, nested: bool) -> ToolContext {
    let sandbox = PathSandbox::new(std::slice::from_ref(&sb.work), &[], &[])
        .with_confinement_level(helper(), false, level)
        .allowing_nested_user_namespaces(nested);
    sb.tool_ctx(sandbox, Duration::from_secs(20))
}

/// Tries every way to a user namespace of its own: `unshare`, a `clone` with the flag
/// (Python's `os.unshare` is `unshare(2)`; `unshare --fork` clones), and raising the
/// namespace's own limit first; and checks that ordinary process creation still works.
const TRY_NESTED: &str = "unshare --user true 2>/dev/null; echo unshare=$?; \
    unshare --user --fork true 2>/dev/null; echo fork=$?; \
    (echo 9 > /proc/sys/user/max_user_namespaces) 2>/dev/null; echo raise=$?; \
    python3 -c 'import subprocess,threading; t=threading.Thread(target=print); t.start(); t.join(); print(\"spawn=%d\" % subprocess.run([\"true\"]).returncode)'; \
    python3 -c 'import os,ctypes; c=ctypes.CDLL(None,use_errno=True); r=c.setns(os.open(\"/proc/self/ns/user\",os.O_RDONLY),0x10000000); print(\"setns=%d\" % ctypes.get_errno())'";

#[tokio::test]
async fn commands_make_no_user_namespace_of_their_own_at_either_level() {
    let sb = Sandbox::new();
    for level in [Level::Full, Level::Landlock] {
        let ctx = confined(&sb, level, false);
        let out = execute("bash", &json!({"command": TRY_NESTED}), &ctx).await;
        assert!(
            out.text.contains("unshare=1") && out.text.contains("fork=1"),
            "{level:?}: {}",
            out.text
        );
        assert!(!out.text.contains("raise=0"), "{level:?}: {}", out.text);
        assert!(out.text.contains("spawn=0"), "{level:?}: {}", out.text);
        // Refused before the kernel looks (it would say EINVAL: the namespace is the
        // command's own): no namespace of anyone else's either.
        assert!(
            out.text.contains(&format!("setns={}", libc::EPERM)),
            "{level:?}: {}",
            out.text
        );
    }
    // The configuration may allow them (rootless containers, a browser's own sandbox).
    let ctx = confined(&sb, Level::Full, true);
    let out = execute("bash", &json!({"command": TRY_NESTED}), &ctx).await;
    assert!(
        out.text.contains("unshare=0") && out.text.contains("fork=0"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains(&format!("setns={}", libc::EINVAL)),
        "{}",
        out.text
    );
}
