//! `picogent run` as a real child process against the scripted server.

use std::process::Output;

use serde_json::{json, Value};

use crate::common::*;

async fn picogent(sb: &Sandbox, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    cmd.args(args)
        .current_dir(sb.base())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sb.user_home)
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("picogent did not finish in 60 s")
        .unwrap()
}

fn provider_env(llm: &ScriptedLlm, wire: Wire) -> Vec<(&'static str, String)> {
    vec![
        ("PICOGENT_PROVIDER", wire.provider().to_string()),
        ("PICOGENT_BASE_URL", llm.base_url(wire)),
        ("PICOGENT_API_KEY", llm::API_KEY.to_string()),
        ("PICOGENT_MODEL", "scripted".to_string()),
    ]
}

use crate::common::llm;

#[tokio::test]
async fn run_works_through_every_provider() {
    for wire in Wire::ALL {
        let sb = Sandbox::new();
        sb.write("notes.txt", "alpha\n");
        let llm = ScriptedLlm::start(vec![
            tool("read", json!({"path": "notes.txt"})),
            tool("bash", json!({"command": "wc -l < notes.txt"})),
            text("The file has one line: alpha."),
        ])
        .await;
        let dir = sb.work.display().to_string();
        let out = picogent(
            &sb,
            &["run", "--dir", &dir, "--session", "cli1", "How many lines?"],
            &provider_env(&llm, wire),
        )
        .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{wire:?}: {stdout}\n{stderr}");
        // The answer alone on stdout; the steps on stderr.
        assert_eq!(stdout, "The file has one line: alpha.\n");
        assert!(stderr.contains("→ Read: notes.txt"), "{stderr}");
        assert!(stderr.contains("→ Bash: wc -l < notes.txt"), "{stderr}");
        assert!(stderr.contains("session: cli1"), "{stderr}");
        assert!(sb.user_home.join(".picogent/sessions/cli1.jsonl").is_file());
    }
}

#[tokio::test]
async fn run_exits_non_zero_with_the_error_on_failure() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Status(400, None)]).await;
    let dir = sb.work.display().to_string();
    let out = picogent(
        &sb,
        &["run", "--dir", &dir, "hi"],
        &provider_env(&llm, Wire::Anthropic),
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTP 400") && stderr.contains("scripted failure"),
        "{stderr}"
    );
}

#[tokio::test]
async fn bash_children_never_see_secret_variables() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool("bash", json!({"command": "env"})), text("done")]).await;
    let mut env = provider_env(&llm, Wire::Anthropic);
    env.push(("ANTHROPIC_API_KEY", "leak-anthropic".into()));
    env.push(("AGENT_TOKEN", "leak-token".into()));
    env.push(("VISIBLE_VAR", "visible".into()));
    let dir = sb.work.display().to_string();
    let out = picogent(&sb, &["run", "--json", "--dir", &dir, "show env"], &env).await;
    assert!(out.status.success());
    let result = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "tool_result")
        .unwrap();
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("VISIBLE_VAR=visible"), "{output}");
    for secret in ["leak-anthropic", "leak-token", llm::API_KEY] {
        assert!(!output.contains(secret), "{secret} leaked: {output}");
    }
}

#[tokio::test]
async fn a_bad_config_file_exits_2_naming_the_field() {
    let sb = Sandbox::new();
    std::fs::write(sb.home.join("agent.json"), r#"{"max_stepz": 3}"#).unwrap();
    let home = sb.home.display().to_string();
    let out = picogent(&sb, &["run", "--agent", &home, "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("max_stepz") && stderr.contains("agent.json"),
        "{stderr}"
    );
}

#[tokio::test]
async fn help_documents_every_mode() {
    let sb = Sandbox::new();
    let out = picogent(&sb, &["--help"], &[]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    for mode in [
        "picogent ./agents/coder/",
        "picogent ./my-agent.json",
        "picogent run",
        "PICOGENT_CONFIG",
    ] {
        assert!(text.contains(mode), "{mode} missing from --help:\n{text}");
    }
}

#[tokio::test]
async fn run_is_quiet_by_default_and_errors_print_once() {
    let sb = Sandbox::new();
    // Without RUST_LOG, as a person runs it.
    let run = |llm: &ScriptedLlm| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
        cmd.args(["run", "--dir", &sb.work.display().to_string(), "Say it"])
            .current_dir(sb.base())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &sb.user_home);
        for (k, v) in provider_env(llm, Wire::Anthropic) {
            cmd.env(k, v);
        }
        cmd.output()
    };
    // A retried 529, then a 400 that ends the run: each said once, not also as a log line.
    let llm = ScriptedLlm::start(vec![Turn::Status(529, Some(1)), Turn::Status(400, None)]).await;
    let out = run(&llm).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("HTTP 400").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("HTTP 529").count(), 1, "{stderr}");
    assert!(stderr.contains("[retry 1 in"), "{stderr}");

    let llm = ScriptedLlm::start(vec![text("Quiet.")]).await;
    let out = run(&llm).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Quiet.\n");
    assert!(
        !stderr.contains(" INFO "),
        "INFO lines without RUST_LOG: {stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "colour on a pipe: {stderr}");

    let out = picogent(
        &sb,
        &["run", "--agent", "/nonexistent/agent.json", "x"],
        &[],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.matches("no such file").count(), 1, "{stderr}");
}

#[tokio::test]
async fn sigterm_during_run_cancels_it_kills_its_commands_and_exits_143() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![tool(
        "bash",
        json!({"command": "sleep 31.25 & sleep 31.25; echo never"}),
    )])
    .await;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    cmd.args([
        "run",
        "--dir",
        &sb.work.display().to_string(),
        "--session",
        "term1",
        "Wait",
    ])
    .current_dir(sb.base())
    .env_clear()
    .env("PATH", std::env::var("PATH").unwrap_or_default())
    .env("HOME", &sb.user_home)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    for (k, v) in provider_env(&llm, Wire::Anthropic) {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id().unwrap() as i32;
    // The command is running once the model's call has been answered and a sleep shows.
    llm.wait_requests(1).await;
    for _ in 0..100 {
        let ps = std::process::Command::new("pgrep")
            .args(["-f", "sleep 31.25"])
            .output()
            .unwrap();
        if !ps.stdout.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let out = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("picogent did not stop on SIGTERM")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("session: term1"), "{stderr}");
    assert_no_process("sleep 31.25");
    // The session is consistent: the interrupted call has its result.
    let lines = session_lines(&sb.user_home.join(".picogent/sessions/term1.jsonl"));
    let results = lines
        .iter()
        .filter(|l| l["message"]["role"] == "toolResult")
        .count();
    assert_eq!(results, 1, "{lines:?}");
}

#[tokio::test]
async fn completions_are_printed_for_each_shell() {
    let sb = Sandbox::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = picogent(&sb, &["completions", shell], &[]).await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shell}");
        assert!(
            text.contains("picogent") && text.contains("sandbox-check"),
            "{shell}: {text}"
        );
        // The enumerated values are offered: export formats, providers.
        assert!(
            text.contains("annotations") && text.contains("ollama"),
            "{shell}: {text}"
        );
    }
    // A reader that stops early (`| head -1`) is no error, and nothing panics.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("panicked"),
        "{stderr}"
    );
}

const PI_UUID: &str = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

/// A pi session file where pi keeps it: `~/.pi/agent/sessions/<cwd>/<time>_<uuid>.jsonl`.
fn pi_session_file(sb: &Sandbox) -> std::path::PathBuf {
    let dir = sb.user_home.join(".pi/agent/sessions/--work--");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("2026-01-01T00-00-00-000Z_{PI_UUID}.jsonl"));
    let lines = [
        format!(r#"{{"type":"session","version":3,"id":"{PI_UUID}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/work"}}"#),
        r#"{"type":"message","id":"00000001","parentId":null,"timestamp":"t","message":{"role":"user","content":"remember the word ostrich","timestamp":1}}"#.to_string(),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[tokio::test]
async fn session_accepts_a_pi_id_prefix_a_path_and_a_new_name() {
    let sb = Sandbox::new();
    let pi_file = pi_session_file(&sb);
    let llm = ScriptedLlm::start(vec![text("ostrich"), text("again"), text("fresh")]).await;
    let env = provider_env(&llm, Wire::Anthropic);
    let dir = sb.work.display().to_string();
    // A prefix of the UUID in pi's header finds pi's file and continues it there.
    let out = picogent(
        &sb,
        &["run", "--dir", &dir, "--session", "0193a1b2", "which word?"],
        &env,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let first = serde_json::to_string(&llm.requests()[0].body["messages"]).unwrap();
    assert!(first.contains("remember the word ostrich"), "{first}");
    let lines = session_lines(&pi_file);
    assert!(lines.len() >= 4, "{lines:?}");
    // The file's path works too.
    let path = pi_file.display().to_string();
    let out = picogent(
        &sb,
        &["run", "--dir", &dir, "--session", &path, "and now?"],
        &env,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = serde_json::to_string(&llm.requests()[1].body["messages"]).unwrap();
    assert!(second.contains("which word?"), "{second}");
    // A name that matches nothing starts a new session and says so.
    let out = picogent(
        &sb,
        &["run", "--dir", &dir, "--session", "fresh-one", "hi"],
        &env,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("new session fresh-one"),
        "{stderr}"
    );
    assert!(sb
        .user_home
        .join(".picogent/sessions/fresh-one.jsonl")
        .is_file());
}

#[tokio::test]
async fn an_ambiguous_session_prefix_is_an_error_listing_the_matches() {
    let sb = Sandbox::new();
    let own = sb.user_home.join(".picogent/sessions");
    std::fs::create_dir_all(&own).unwrap();
    for id in ["abc1", "abc2"] {
        let header =
            format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"t","cwd":"/x"}}"#);
        std::fs::write(own.join(format!("{id}.jsonl")), header + "\n").unwrap();
    }
    let llm = ScriptedLlm::start(vec![text("never")]).await;
    let dir = sb.work.display().to_string();
    let env = provider_env(&llm, Wire::Anthropic);
    let out = picogent(&sb, &["run", "--dir", &dir, "--session", "abc", "hi"], &env).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("abc1.jsonl") && stderr.contains("abc2.jsonl"),
        "{stderr}"
    );
    assert_eq!(llm.request_count(), 0);
    let out = picogent(
        &sb,
        &["run", "--dir", &dir, "--session", "no/such", "hi"],
        &env,
    )
    .await;
    assert!(!out.status.success());
}

/// A reader that goes away (`picogent run ... 2>&1 | head -1`) loses the lines, not
/// the run: no panic (exit 101) when stdout and stderr are closed pipes.
#[tokio::test]
async fn run_survives_closed_stdout_and_stderr() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo hi"})),
        text("All done."),
    ])
    .await;
    sb.write_config(&llm, Wire::Anthropic, json!({}));
    let (out_r, out_w) = std::io::pipe().unwrap();
    let (err_r, err_w) = std::io::pipe().unwrap();
    drop((out_r, err_r));
    let status = sb
        .run_command(std::path::Path::new(env!("CARGO_BIN_EXE_picogent")), "hi")
        .stdout(out_w)
        .stderr(err_w)
        .status()
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(llm.requests().len(), 2);
}

/// A newcomer without a key is told how to run on a local model instead.
#[tokio::test]
async fn without_a_key_the_error_points_to_a_local_model() {
    let sb = Sandbox::new();
    let out = picogent(&sb, &["run", "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no API key for anthropic"), "{err}");
    // Ollama's instructions, or the local server this machine has.
    assert!(err.contains("PICOGENT_PROVIDER="), "{err}");
}

/// The flags pi, Claude Code and Codex users type: `--model`, `--provider`, `-c` (the
/// latest session started in this folder) and `--no-session`.
#[tokio::test]
async fn model_provider_continue_and_no_session_flags() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        text("First answer."),
        text("Second answer."),
        text("Third answer."),
    ])
    .await;
    let mut env = provider_env(&llm, Wire::Anthropic);
    env.retain(|(k, _)| *k != "PICOGENT_PROVIDER");
    let dir = sb.work.display().to_string();
    let first = picogent(
        &sb,
        &[
            "run",
            "--provider",
            "anthropic",
            "--model",
            "flag-model",
            "--dir",
            &dir,
            "one",
        ],
        &env,
    )
    .await;
    assert!(first.status.success(), "{first:?}");
    assert_eq!(llm.requests()[0].body["model"], "flag-model");
    let stderr = String::from_utf8_lossy(&first.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .expect("the session id is printed")
        .to_string();
    // -c continues it: the second request carries the first exchange.
    let again = picogent(&sb, &["run", "-c", "--dir", &dir, "two"], &env).await;
    assert!(again.status.success(), "{again:?}");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains(&format!("continuing session {id}")), "{err}");
    let sent = llm.requests()[1].body["messages"].to_string();
    assert!(
        sent.contains("First answer.") && sent.contains("two"),
        "{sent}"
    );
    // Elsewhere there is nothing to continue.
    let other = sb.base().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let none = picogent(
        &sb,
        &["run", "-c", "--dir", other.to_str().unwrap(), "three"],
        &env,
    )
    .await;
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("no session to continue"));
    // --no-session leaves no session behind.
    let sessions = sb.user_home.join(".picogent/sessions");
    let before = std::fs::read_dir(&sessions).unwrap().count();
    let gone = picogent(&sb, &["run", "--no-session", "--dir", &dir, "three"], &env).await;
    assert!(gone.status.success(), "{gone:?}");
    assert!(!String::from_utf8_lossy(&gone.stderr).contains("session:"));
    assert_eq!(std::fs::read_dir(&sessions).unwrap().count(), before);
}

/// As pi does: `--session PATH` to a file that does not exist makes the session there;
/// continuing a session without `--dir` works in the folder its header names; `export
/// --session` finds a session the way `run --session` does.
#[tokio::test]
async fn session_paths_header_folders_and_export_lookups_behave_like_pi() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "pwd"})),
        text("first"),
        tool("bash", json!({"command": "pwd"})),
        text("second"),
    ])
    .await;
    let env = provider_env(&llm, Wire::Anthropic);
    let file = sb.base().join("elsewhere/notes/s1.jsonl");
    let dir = sb.work.display().to_string();
    let out = picogent(
        &sb,
        &[
            "run",
            "--dir",
            &dir,
            "--session",
            file.to_str().unwrap(),
            "one",
        ],
        &env,
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert!(file.is_file(), "the session was made at the path given");
    // Continued from another folder, without --dir: it works where it started.
    let out = picogent(
        &sb,
        &["run", "--session", file.to_str().unwrap(), "two"],
        &env,
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let (pwd, _) = last_tool_result(&llm.requests()[3].body);
    assert!(pwd.contains(&dir), "pwd ran elsewhere: {pwd}");
    // export finds it by its path (and so by anything run finds it by).
    let out = picogent(
        &sb,
        &[
            "export",
            "--session",
            file.to_str().unwrap(),
            "--format",
            "trajectory",
        ],
        &env,
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("second"));
    // A session file in the working folder is made there, and that file alone is kept
    // from the agent (tests/suite/cli_habits.rs tries it).
    let out = picogent(
        &sb,
        &[
            "run",
            "--dir",
            &dir,
            "--session",
            &format!("{dir}/s2.jsonl"),
            "x",
        ],
        &env,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("new session s2") && !stderr.contains("made again"),
        "{out:?}"
    );
    let made = std::fs::read_to_string(format!("{dir}/s2.jsonl")).unwrap();
    let header: serde_json::Value = serde_json::from_str(made.lines().next().unwrap()).unwrap();
    assert_eq!(
        (header["type"].as_str(), header["id"].as_str()),
        (Some("session"), Some("s2"))
    );
}

/// A model call that fails for a setting a person chose says where that setting came
/// from: the variable, or the field and the file.
#[tokio::test]
async fn a_refused_key_or_an_unknown_model_names_where_it_was_set() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![Turn::Refuse(
        404,
        "model: claude-nosuch-9 is not a known model".into(),
    )])
    .await;
    let config = sb.base().join("agent.json");
    std::fs::write(
        &config,
        json!({"model": "claude-nosuch-9", "api_key": "wrong-key"}).to_string(),
    )
    .unwrap();
    let url = ("PICOGENT_BASE_URL", llm.base_url(Wire::Anthropic));
    let cfg = config.display().to_string();
    // The key from the file is refused (401, not retried).
    let out = picogent(
        &sb,
        &["run", "--agent", &cfg, "hi"],
        std::slice::from_ref(&url),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("the key was set by `api_key` in {cfg}")),
        "{err}"
    );
    // With a good key from the environment, the unknown model names its field (the
    // file's `model` wins over ANTHROPIC_MODEL, and so does the message).
    let key = ("ANTHROPIC_API_KEY", llm::API_KEY.to_string());
    let other = ("ANTHROPIC_MODEL", "claude-other".to_string());
    let out = picogent(&sb, &["run", "--agent", &cfg, "hi"], &[url, key, other]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "the model \"claude-nosuch-9\" was set by `model` in {cfg}"
        )),
        "{err}"
    );
}

/// `picogent run` says the sandbox level once its first command settled it (at info),
/// naming it; once, however many commands follow.
#[tokio::test]
async fn run_logs_the_sandbox_level_once_its_first_command_settles_it() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({"command": "echo one"})),
        tool("bash", json!({"command": "echo two"})),
        text("All done."),
    ])
    .await;
    sb.write_config(&llm, Wire::Anthropic, json!({}));
    let out = sb
        .run_command(std::path::Path::new(env!("CARGO_BIN_EXE_picogent")), "hi")
        .env("RUST_LOG", "info")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("sandbox level: "))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    let want = if namespaces_here() {
        "level=\"namespaces\""
    } else {
        "level=\"landlock\""
    };
    assert!(
        said[0].contains(want) || said[0].contains(&want.replace('"', "")),
        "{}",
        said[0]
    );
}
