//! Habits people bring from pi, Claude Code and the OpenAI SDK: `picogent -p` prints
//! only the final answer, standard input piped into a run joins its prompt, and the
//! OpenAI variables alone choose OpenAI and name the account.

use std::process::Stdio;

use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::common::*;

/// `picogent` with `args` in the sandbox, `env` only, and `stdin` piped in (none: no
/// standard input at all).
async fn picogent(
    sb: &Sandbox,
    args: &[&str],
    env: &[(&str, String)],
    stdin: Option<&str>,
) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    cmd.args(args)
        .current_dir(&sb.work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sb.user_home)
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = stdin {
        let mut input = child.stdin.take().unwrap();
        input.write_all(text.as_bytes()).await.unwrap();
        drop(input);
    }
    tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("picogent did not finish in 60 s")
        .unwrap()
}

fn anthropic_env(llm: &ScriptedLlm) -> Vec<(&'static str, String)> {
    vec![
        ("PICOGENT_PROVIDER", "anthropic".into()),
        ("PICOGENT_BASE_URL", llm.base_url(Wire::Anthropic)),
        ("PICOGENT_API_KEY", llm::API_KEY.into()),
    ]
}

#[tokio::test]
async fn print_mode_prints_the_final_answer_alone() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        Turn::Tools(
            "Let me look first.".into(),
            vec![("bash".into(), json!({"command": "echo looked"}))],
        ),
        text("The folder holds notes.\n"),
    ])
    .await;
    let out = picogent(&sb, &["-p", "What is here?"], &anthropic_env(&llm), None).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Only the answer: no narration before the tool call, no step, no session line.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The folder holds notes.\n"
    );
    assert!(!stderr.contains("session:"), "{stderr}");
    assert!(!stderr.contains("Bash"), "{stderr}");
    assert_eq!(llm.requests().len(), 2);
    // `run --print` is the same; `--json` with it is refused.
    let llm = ScriptedLlm::start(vec![text("Two.")]).await;
    let out = picogent(
        &sb,
        &["run", "--print", "Count"],
        &anthropic_env(&llm),
        None,
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Two.\n");
    let out = picogent(
        &sb,
        &["run", "--print", "--json", "x"],
        &anthropic_env(&llm),
        None,
    )
    .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--json"));
}

#[tokio::test]
async fn input_piped_into_a_run_comes_before_its_task() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("Looks fine."), text("Plain.")]).await;
    let diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n";
    let out = picogent(
        &sb,
        &["-p", "review this"],
        &anthropic_env(&llm),
        Some(diff),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = &llm.requests()[0].body;
    let sent = body["messages"][0]["content"].to_string();
    assert!(
        sent.contains("-old\\n+new\\n\\nreview this"),
        "the input, then the task: {sent}"
    );
    // No standard input (not a pipe): the task alone.
    let out = picogent(&sb, &["run", "plain task"], &anthropic_env(&llm), None).await;
    assert!(out.status.success());
    let sent = llm.requests()[1].body["messages"][0]["content"].to_string();
    assert!(
        sent.contains("plain task") && !sent.contains("review"),
        "{sent}"
    );
}

#[tokio::test]
async fn the_openai_variables_alone_choose_openai_and_name_its_account() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("From OpenAI.")]).await;
    let env = vec![
        ("OPENAI_API_KEY", llm::API_KEY.to_string()),
        ("OPENAI_BASE_URL", llm.base_url(Wire::OpenAi)),
        ("OPENAI_ORG_ID", "org-acme".to_string()),
        ("OPENAI_PROJECT_ID", "proj_42".to_string()),
        ("PICOGENT_MODEL", "scripted".to_string()),
    ];
    let out = picogent(&sb, &["-p", "hello"], &env, None).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "From OpenAI.\n");
    let req = &llm.requests()[0];
    assert!(req.path.ends_with("/chat/completions"), "{}", req.path);
    let header = |h: &str| {
        req.headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(header("openai-organization").as_deref(), Some("org-acme"));
    assert_eq!(header("openai-project").as_deref(), Some("proj_42"));
    assert_eq!(
        header("authorization"),
        Some(format!("Bearer {}", llm::API_KEY))
    );
    // With Anthropic's key there too, nothing changes: Anthropic stays the default.
    let llm = ScriptedLlm::start(vec![text("From Anthropic.")]).await;
    let mut env = env;
    env.push(("ANTHROPIC_API_KEY", llm::API_KEY.to_string()));
    env.push(("ANTHROPIC_BASE_URL", llm.base_url(Wire::Anthropic)));
    let out = picogent(&sb, &["-p", "hello"], &env, None).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        llm.requests()[0].path.ends_with("/v1/messages"),
        "{}",
        llm.requests()[0].path
    );
    assert!(llm.requests()[0]
        .headers
        .get("openai-organization")
        .is_none());
}
