//! MCP servers as tools, against real servers from the registries: a scripted model
//! calls their tools and the results reach its next request.

use std::path::Path;
use std::time::{Duration, Instant};

use picogent::agent::Agent;
use picogent::config::{Config, Env};
use serde_json::{json, Value};

use crate::common::*;

/// An agent whose environment (for `${VAR}` in the configuration) has `extra` too.
fn agent_with_env(sb: &Sandbox, llm: &ScriptedLlm, cfg: Value, extra: &[(&str, &str)]) -> Agent {
    sb.write_config(llm, Wire::Anthropic, cfg);
    let mut pairs: Vec<(String, String)> = vec![
        ("HOME".into(), sb.user_home.display().to_string()),
        ("PICOGENT_API_KEY".into(), llm::API_KEY.into()),
    ];
    pairs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    agent_from(Config::load(Some(&sb.home), &Env::from_pairs(pairs), &sb.base()).unwrap())
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The host's pids of the server `everything_stdio(dir)` started (found by the name it
/// runs under: a server confined in its own PID namespace knows only its namespace's
/// pid, which says nothing about the host's processes).
fn server_pids(dir: &Path) -> Vec<i32> {
    pids_named(&format!("mcp-everything-{}", dir.display()))
}

/// A stdio server-everything started through a shell under a name of its own (see
/// `server_pids`) that refuses to start while `dir/down` exists.
fn everything_stdio(dir: &Path) -> Value {
    let script = format!(
        "if [ -e '{d}/down' ]; then exit 1; fi; exec -a 'mcp-everything-{d}' node '{}' stdio",
        mcp::everything().display(),
        d = dir.display()
    );
    json!({"command": "bash", "args": ["-c", script]})
}

use crate::common::llm;
use crate::common::mcp;

#[tokio::test]
async fn a_stdio_servers_tool_is_offered_called_and_its_result_sent_back() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("mcp__everything__echo", json!({"message": "hello mcp"})),
        tool("mcp__everything__get-sum", json!({"a": "x", "b": 1})),
        text("done"),
    ])
    .await;
    let cfg = json!({"mcp_servers": {"everything": everything_stdio(&sb.base())}});
    let agent = sb.agent(&llm, Wire::Anthropic, cfg);
    let (events, outcome) = run(&agent, "echo", "m1").await;
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    let names = tool_names(&reqs[0].body);
    assert_eq!(
        names[..7],
        ["read", "write", "edit", "bash", "grep", "find", "ls"]
    );
    assert!(
        names.contains(&"mcp__everything__echo".to_string()),
        "{names:?}"
    );
    let echo = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__everything__echo")
        .unwrap()
        .clone();
    assert_eq!(
        echo["input_schema"]["properties"]["message"]["type"],
        "string"
    );
    assert!(!echo["description"].as_str().unwrap().is_empty());
    assert_eq!(
        last_tool_result(&reqs[1].body),
        ("Echo: hello mcp".to_string(), false)
    );
    // A call the server rejects is an error result the model sees.
    let (text, is_error) = last_tool_result(&reqs[2].body);
    assert!(is_error, "{text}");
    // The same tool list at every step.
    assert_eq!(reqs[0].body["tools"], reqs[2].body["tools"]);
    let shown: Vec<String> = tool_results(&events).into_iter().map(|r| r.0).collect();
    assert_eq!(shown, ["mcp__everything__echo", "mcp__everything__get-sum"]);
    // Dropping the agent kills the server.
    assert_eq!(server_pids(&sb.base()).len(), 1);
    drop(agent);
    let t = Instant::now();
    while !server_pids(&sb.base()).is_empty() && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        server_pids(&sb.base()),
        Vec::<i32>::new(),
        "the MCP server outlived its agent"
    );
}

#[tokio::test]
async fn a_streamable_http_server_gets_its_headers_from_the_environment() {
    let sb = Sandbox::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new("node")
        .arg(mcp::everything())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the HTTP server did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let llm = ScriptedLlm::start(vec![
        tool("mcp__web__get-sum", json!({"a": 2, "b": 3})),
        text("done"),
    ])
    .await;
    let cfg = json!({"mcp_servers": {"web": {
        "type": "http",
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "headers": {"X-Token": "${MCP_TEST_TOKEN}"},
        "enabled_tools": ["get-sum", "echo"]
    }}});
    let agent = agent_with_env(&sb, &llm, cfg, &[("MCP_TEST_TOKEN", "t0k")]);
    let (_, outcome) = run(&agent, "sum", "h1").await;
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    let mcp_tools: Vec<String> = tool_names(&reqs[0].body)
        .into_iter()
        .filter(|n| n.starts_with("mcp__"))
        .collect();
    assert_eq!(mcp_tools, ["mcp__web__echo", "mcp__web__get-sum"]);
    assert_eq!(
        last_tool_result(&reqs[1].body),
        ("The sum of 2 and 3 is 5.".to_string(), false)
    );
    assert_eq!(agent.mcp().summary(), [("web".to_string(), Ok(2))]);
    drop(agent);
    server.kill().await.unwrap();
}

#[tokio::test]
async fn a_python_server_from_pypi_answers() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("mcp__time__get_current_time", json!({"timezone": "UTC"})),
        text("done"),
    ])
    .await;
    let cfg = json!({"mcp_servers": {"time": {
        "command": mcp::time_server(),
        "args": ["--local-timezone", "UTC"],
        "startup_timeout_sec": 60
    }}});
    let agent = sb.agent(&llm, Wire::Anthropic, cfg);
    let (_, outcome) = run(&agent, "time", "p1").await;
    assert_eq!(final_text(&outcome), "done");
    let (text, is_error) = last_tool_result(&llm.requests()[1].body);
    assert!(!is_error, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["timezone"], "UTC");
}

#[tokio::test]
async fn a_call_that_never_answers_times_out_and_the_run_goes_on() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool(
            "mcp__slow__trigger-long-running-operation",
            json!({"duration": 60, "steps": 2}),
        ),
        text("done"),
    ])
    .await;
    let mut server = everything_stdio(&sb.base());
    server["timeout_sec"] = json!(1);
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"mcp_servers": {"slow": server}}),
    );
    let t = Instant::now();
    let (_, outcome) = run(&agent, "slow", "t1").await;
    assert_eq!(final_text(&outcome), "done");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(
        last_tool_result(&llm.requests()[1].body),
        (
            "mcp__slow__trigger-long-running-operation timed out after 1 s (MCP server slow, timeout_sec)"
                .to_string(),
            true
        )
    );
}

#[tokio::test]
async fn a_missing_command_leaves_its_tools_out_and_picogent_runs() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool("mcp__ghost__anything", json!({})), text("done")]).await;
    let cfg = json!({"mcp_servers": {"ghost": {"command": "/nonexistent/mcp-server"}}});
    let agent = sb.agent(&llm, Wire::Anthropic, cfg);
    let (_, outcome) = run(&agent, "x", "g1").await;
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    assert_eq!(tool_names(&reqs[0].body).len(), 7);
    let (text, is_error) = last_tool_result(&reqs[1].body);
    assert!(is_error);
    assert_eq!(
        text,
        "unknown tool \"mcp__ghost__anything\": no configured MCP server offers it"
    );
    let summary = agent.mcp().summary();
    assert_eq!(summary.len(), 1);
    let why = summary[0].1.clone().unwrap_err();
    assert!(
        why.starts_with("cannot start \"/nonexistent/mcp-server\": no such command"),
        "{why}"
    );
}

#[tokio::test]
async fn a_server_that_dies_mid_run_fails_calls_until_it_is_restarted() {
    let sb = Sandbox::new();
    let base = sb.base();
    let echo = |m: &str| ("mcp__e__echo".to_string(), json!({"message": m}));
    let llm = ScriptedLlm::start(vec![
        tool("mcp__e__echo", json!({"message": "one"})),
        Turn::StallTools(Duration::from_millis(1500), vec![echo("two")]),
        Turn::StallTools(Duration::from_secs(4), vec![echo("three")]),
        text("done"),
    ])
    .await;
    let cfg = json!({"mcp_servers": {"e": everything_stdio(&base)}});
    let agent = sb.agent(&llm, Wire::Anthropic, cfg);
    let handle = agent.start(picogent::agent::RunRequest::new("echo", "d1"));
    llm.wait_requests(2).await;
    // The server dies and cannot come back while `down` exists.
    std::fs::write(base.join("down"), "").unwrap();
    let pids = server_pids(&base);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let pid = pids[0];
    // SAFETY: a plain system call on the server's pid.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    llm.wait_requests(3).await;
    std::fs::remove_file(base.join("down")).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), handle.finish())
        .await
        .unwrap();
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    assert_eq!(last_tool_result(&reqs[1].body), ("Echo: one".into(), false));
    let (text, is_error) = last_tool_result(&reqs[2].body);
    assert!(is_error, "{text}");
    assert!(text.starts_with("MCP server e is not running"), "{text}");
    assert_eq!(
        last_tool_result(&reqs[3].body),
        ("Echo: three".into(), false)
    );
    let new = server_pids(&base);
    assert!(new.len() == 1 && new[0] != pid, "not restarted: {new:?}");
}

/// What an MCP server starts in a session of its own (out of its process group) dies
/// with picogent, killed with -9 or exiting normally, confined or with `"sandbox":
/// false`: each server has a PID namespace of its own.
#[tokio::test]
async fn what_a_server_starts_in_its_own_session_dies_with_picogent() {
    if !namespaces_here() {
        return;
    }
    for unconfined in [false, true] {
        for kill in [true, false] {
            let sb = Sandbox::new();
            let marker = format!("mcp-orphan-{}", sb.base().display());
            // It never answers `initialize`: picogent gives up on it after a second.
            let script = format!(
                "setsid bash -c 'exec -a {marker} sleep 300' </dev/null >/dev/null 2>&1 & exec sleep 300"
            );
            let mut server =
                json!({"command": "bash", "args": ["-c", script], "startup_timeout_sec": 1});
            if unconfined {
                server["sandbox"] = json!(false);
            }
            let first = if kill {
                Turn::Stall(Duration::from_secs(120), "late".into())
            } else {
                text("done")
            };
            let llm = ScriptedLlm::start(vec![first]).await;
            sb.write_config(
                &llm,
                Wire::Anthropic,
                json!({"allowed_paths": [sb.work], "mcp_servers": {"s": server}}),
            );
            let mut child = sb
                .run_command(Path::new(env!("CARGO_BIN_EXE_picogent")), "hi")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let case = format!("unconfined: {unconfined}, kill -9: {kill}");
            wait_until(20, &case, || !pids_named(&marker).is_empty()).await;
            if kill {
                llm.wait_requests(1).await;
                // SAFETY: a plain system call on picogent's pid.
                unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGKILL) };
            }
            let status = child.wait().await.unwrap();
            assert_eq!(status.success(), !kill, "{case}");
            wait_until(10, &case, || pids_named(&marker).is_empty()).await;
        }
    }
}

/// The host's pids of processes whose command line starts with `name`.
fn pids_named(name: &str) -> Vec<i32> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", &format!("^{name}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

async fn wait_until(secs: u64, what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A raw stdio MCP server with one tool, `big`, whose answer is 17 MiB (its request id
/// written first, or last as JavaScript servers write it), or small with `small`.
const BIG_SERVER: &str = r#"
import json, sys
def send(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, i = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "big", "version": "1"}}})
    elif method == "tools/list":
        schema = {"type": "object", "properties": {"last": {"type": "boolean"}, "small": {"type": "boolean"}}}
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": [{"name": "big", "description": "a big answer", "inputSchema": schema}]}})
    elif method == "tools/call":
        args = msg["params"].get("arguments") or {}
        text = "small ok" if args.get("small") else "x" * (17 << 20)
        result = {"content": [{"type": "text", "text": text}]}
        if args.get("last"):
            send({"result": result, "jsonrpc": "2.0", "id": i})
        else:
            send({"jsonrpc": "2.0", "id": i, "result": result})
    elif i is not None:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "no such method"}})
"#;

/// An answer over 16 MiB ends its call at once with an error saying so (not at the
/// call's timeout), whichever end of the message its id is at; the server keeps working.
#[tokio::test]
async fn an_answer_over_16_mib_ends_its_call_at_once_with_a_reason() {
    let sb = Sandbox::new();
    let script = sb.base().join("big_server.py");
    std::fs::write(&script, BIG_SERVER).unwrap();
    let llm = ScriptedLlm::start(vec![
        tool("mcp__big__big", json!({"last": false})),
        tool("mcp__big__big", json!({"last": true})),
        tool("mcp__big__big", json!({"small": true})),
        text("done"),
    ])
    .await;
    let server = json!({"command": "python3", "args": [script], "timeout_sec": 300});
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"mcp_servers": {"big": server}}),
    );
    let (_, outcome) = tokio::time::timeout(Duration::from_secs(90), run(&agent, "big", "b1"))
        .await
        .expect("a call waited for its timeout");
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    for r in &reqs[1..3] {
        let (text, is_error) = last_tool_result(&r.body);
        assert!(is_error, "{text:.200}");
        assert!(text.contains("over the 16 MB"), "{text:.300}");
    }
    assert_eq!(last_tool_result(&reqs[3].body), ("small ok".into(), false));
}

/// Whether a file called `name` is somewhere under `dir`.
fn found_under(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let p = e.path();
            p.file_name().is_some_and(|n| n == name)
                || (p.is_dir() && !p.is_symlink() && found_under(&p, name))
        })
}

#[tokio::test]
async fn an_npx_servers_package_cache_is_kept_between_its_starts() {
    let sb = Sandbox::new();
    // The server notes whether npm's cache still holds what its last start left there.
    // (Its script is named as an argument: a checkout under /tmp stays visible then.)
    let script = "c=\"$npm_config_cache\"; [ -n \"$c\" ] || exit 1; if [ -e \"$c/left-by-last-start\" ]; then touch \"$c/warm\"; fi; touch \"$c/left-by-last-start\"; exec node \"$1\" stdio";
    let cfg = json!({
        "allowed_paths": [sb.work],
        "mcp_servers": {"cached": {"command": "bash", "args": ["-c", script, "mcp", mcp::everything()]}}
    });
    for _ in 0..2 {
        let llm = ScriptedLlm::start(vec![
            tool("mcp__cached__echo", json!({"message": "hi"})),
            text("done"),
        ])
        .await;
        let agent = sb.agent(&llm, Wire::Anthropic, cfg.clone());
        let (_, outcome) = run(&agent, "echo", "m1").await;
        assert_eq!(final_text(&outcome), "done");
        assert_eq!(last_tool_result(&llm.requests()[1].body).0, "Echo: hi");
        drop(agent);
    }
    // The server's own npm cache, in the operator's home (which the agent's commands
    // cannot write), not the operator's ~/.npm.
    let npm = sb.user_home.join(".cache/picogent/mcp/cached/npm");
    assert!(
        found_under(&npm, "left-by-last-start"),
        "no cache kept in {}",
        npm.display()
    );
    assert!(
        found_under(&npm, "warm"),
        "the second start found an empty cache"
    );
    assert!(!sb.user_home.join(".npm").exists());
}
