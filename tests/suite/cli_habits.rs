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

/// `picogent` under a terminal (script(1) gives it one), `typed` sent as keys; what the
/// terminal showed.
async fn picogent_at_a_terminal(
    sb: &Sandbox,
    args: &str,
    env: &[(&str, String)],
    typed: &str,
) -> (bool, String) {
    let line = format!("{} {args}", env!("CARGO_BIN_EXE_picogent"));
    let mut cmd = tokio::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .current_dir(&sb.work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &sb.user_home)
        .env("RUST_LOG", "error")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("script(1) from util-linux");
    let mut input = child.stdin.take().unwrap();
    input.write_all(typed.as_bytes()).await.unwrap();
    // Kept open until the run ends: an end of input would end the terminal.
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("picogent did not finish in 60 s")
        .unwrap();
    drop(input);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test]
async fn approval_asks_at_a_terminal_and_a_run_without_one_is_refused() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        llm::tool("bash", json!({"command": "echo one > one.txt"})),
        llm::tool("bash", json!({"command": "echo two > two.txt"})),
        llm::tool("bash", json!({"command": "echo three > three.txt"})),
        llm::tool("read", json!({"path": "two.txt"})),
        text("Done."),
    ])
    .await;
    let mut env = anthropic_env(&llm);
    env.push(("PICOGENT_APPROVAL", "execute=ask".into()));
    // Standard input not a terminal: no one could answer, so nothing starts.
    let out = picogent(&sb, &["run", "work"], &env, Some("")).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not a terminal") && stderr.contains("PICOGENT_APPROVAL"),
        "{stderr}"
    );
    assert!(llm.requests().is_empty());
    // At a terminal: a no for the first command (with a word it does not know first),
    // always for the second; the third runs without asking, the read never asks.
    let (ok, shown) = picogent_at_a_terminal(&sb, "run work", &env, "maybe\nn\na\n").await;
    assert!(ok, "{shown}");
    assert_eq!(
        shown.matches("picogent wants to run the command").count(),
        3,
        "{shown}"
    );
    assert!(
        !sb.work.join("one.txt").exists(),
        "a rejected command never runs"
    );
    assert!(sb.work.join("two.txt").exists() && sb.work.join("three.txt").exists());
    let rejected = llm.requests()[1].body["messages"].to_string();
    assert!(rejected.contains("rejected this bash call"), "{rejected}");
}

#[tokio::test]
async fn resume_takes_the_latest_without_a_terminal_and_fork_continues_a_copy() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("First."), text("Second."), text("Third.")]).await;
    let env = anthropic_env(&llm);
    let out = picogent(&sb, &["run", "remember the word heron"], &env, None).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap()
        .trim()
        .to_string();
    // -r without a terminal: the latest session started here.
    let out = picogent(&sb, &["run", "-r", "which word?"], &env, None).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains(&format!("resuming session {id}")),
        "{stderr}"
    );
    assert!(llm.requests()[1].body["messages"]
        .to_string()
        .contains("heron"));
    // --fork: a new session holding the conversation; the original is left as it was.
    let original = sb
        .user_home
        .join(".picogent/sessions")
        .join(format!("{id}.jsonl"));
    let before = std::fs::read_to_string(&original).unwrap();
    let out = picogent(&sb, &["run", "--fork", &id, "and in French?"], &env, None).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let forked = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap()
        .trim()
        .to_string();
    assert_ne!(forked, id);
    assert_eq!(std::fs::read_to_string(&original).unwrap(), before);
    let copy = std::fs::read_to_string(
        sb.user_home
            .join(".picogent/sessions")
            .join(format!("{forked}.jsonl")),
    )
    .unwrap();
    let header: serde_json::Value = serde_json::from_str(copy.lines().next().unwrap()).unwrap();
    assert_eq!(header["id"], forked.as_str());
    assert!(header["parentSession"]
        .as_str()
        .unwrap()
        .ends_with(&format!("{id}.jsonl")));
    let sent = llm.requests()[2].body["messages"].to_string();
    assert!(
        sent.contains("heron") && sent.contains("which word?") && sent.contains("French"),
        "{sent}"
    );
    // Nothing to resume in a folder where nothing started.
    let empty = sb.work.join("elsewhere");
    std::fs::create_dir_all(&empty).unwrap();
    let out = picogent(
        &sb,
        &["run", "-r", "--dir", empty.to_str().unwrap(), "hi"],
        &env,
        None,
    )
    .await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session to resume"));
}

#[tokio::test]
async fn a_session_file_in_the_working_folder_is_kept_from_the_agent_alone() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        llm::tool(
            "bash",
            json!({"command": "echo work > made.txt; cat talk.jsonl; echo forged >> talk.jsonl; rm -f talk.jsonl; ls"}),
        ),
        llm::tool("write", json!({"path": "talk.jsonl", "content": "forged\n"})),
        text("Done."),
    ])
    .await;
    let out = picogent(
        &sb,
        &["run", "--session", "./talk.jsonl", "work here"],
        &anthropic_env(&llm),
        None,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The folder stays the agent's; the session file is neither read, changed nor removed.
    assert_eq!(
        std::fs::read_to_string(sb.work.join("made.txt")).unwrap(),
        "work\n"
    );
    let file = std::fs::read_to_string(sb.work.join("talk.jsonl")).unwrap();
    assert!(
        file.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
        "a line the agent wrote: {file}"
    );
    assert!(
        file.lines()
            .next()
            .is_some_and(|l| l.contains("\"type\":\"session\"")),
        "{file}"
    );
    let results = llm.requests()[1].body["messages"].to_string();
    assert!(
        !results.contains("\\\"type\\\":\\\"session\\\""),
        "the agent read the session file: {results}"
    );
    let write = llm.requests()[2].body["messages"].to_string();
    assert!(write.contains("not available to tools"), "{write}");
    // A second run continues it.
    let llm2 = ScriptedLlm::start(vec![text("Again.")]).await;
    let out = picogent(
        &sb,
        &["run", "--session", "./talk.jsonl", "and again"],
        &anthropic_env(&llm2),
        None,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(llm2.requests()[0].body["messages"]
        .to_string()
        .contains("work here"));
}
