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
        assert!(stdout.contains("→ Read: notes.txt"), "{stdout}");
        assert!(stdout.contains("→ Bash: wc -l < notes.txt"), "{stdout}");
        assert!(stdout.contains("The file has one line: alpha."), "{stdout}");
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
