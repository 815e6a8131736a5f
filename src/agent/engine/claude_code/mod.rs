//! `engine: "claude-code"` (or its alias `provider: "claude-code"`): the run is done by Claude Code's own agent, the `claude`
//! CLI in headless streaming mode, and mapped onto picogent's events and sessions so
//! every front door works unchanged.
//!
//! picogent writes the prompt as one stream-json user message, reads the CLI's
//! stream-json output (system/init, assistant messages with text and tool_use blocks,
//! user messages with tool_result blocks, the final result), emits the matching
//! `AgentEvent`s, and records the conversation in its own pi-format session, with the
//! Claude Code session id in a `claude_code_session` entry so the next message resumes
//! it (`--resume`). Claude Code runs its own tools: picogent's path checks do not apply
//! inside it, but with `allowed_paths` set the whole child is confined by Landlock.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::super::event::{AgentEvent, FailureKind, RunError};
use super::super::skills;
use super::Run;
use crate::message::{AssistantMessage, Content, Message, StopReason, ToolResultMessage, Usage};
use crate::session::records::ClaudeCodeSession;
use crate::session::{Record, Session};
use stream::{parse_line, Line};

mod stream;

/// "Read: src/main.rs" for Claude Code's tool names and inputs.
fn describe(name: &str, input: &Value) -> String {
    let s = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or("");
    let detail = match name {
        "Read" | "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => s("file_path").to_string(),
        "Bash" => s("command").to_string(),
        "Grep" | "Glob" => s("pattern").to_string(),
        "LS" => s("path").to_string(),
        "WebFetch" => s("url").to_string(),
        "WebSearch" => s("query").to_string(),
        _ => crate::util::one_line(&input.to_string(), 80),
    };
    format!("{name}: {}", crate::util::one_line(&detail, 120))
}

/// The Claude Code session to resume, if this session ran it before.
fn previous_claude_session(session: &Session) -> Option<String> {
    session.records().rev().find_map(|(_, r)| match r {
        Record::ClaudeCodeSession(s) => Some(s.id),
        _ => None,
    })
}

fn find_claude(configured: Option<&PathBuf>, writable: &[PathBuf]) -> Result<PathBuf, String> {
    if let Some(p) = configured {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(format!(
                "the Claude Code CLI (`claude`) was not found at claude_code_path {}; install it with `npm install -g @anthropic-ai/claude-code`",
                p.display()
            ))
        };
    }
    // It gets the API key: never one the agent could have put on PATH.
    let path = crate::sandbox::programs::trusted_path(writable);
    crate::sandbox::programs::resolve("claude", &path).map_err(|e| {
        format!("the Claude Code CLI (`claude`) was not found ({e}); install it with `npm install -g @anthropic-ai/claude-code`, or set claude_code_path")
    })
}

/// The CLI's arguments: headless stream-json, the model, picogent's role and skills,
/// the allowed folders, and the Claude Code session to resume.
fn cli_args(run: &Run<'_>) -> Vec<String> {
    let cfg = run.config;
    let role = run.role().unwrap_or_default();
    let skills = skills::prompt_block(run.skills);
    let append = [role.as_str(), skills.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut args: Vec<String> = [
        "-p",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--verbose",
        "--model",
        &cfg.llm.model,
        "--permission-mode",
        "bypassPermissions",
    ]
    .map(String::from)
    .to_vec();
    if !append.is_empty() {
        args.extend(["--append-system-prompt".into(), append]);
    }
    for p in run.sandbox.allowed_paths() {
        args.extend(["--add-dir".into(), p.display().to_string()]);
    }
    if cfg.policy.network == crate::config::NetworkPolicy::Deny {
        args.extend(["--disallowedTools", "WebFetch", "WebSearch"].map(String::from));
    }
    if let Some(prev) = previous_claude_session(&run.session) {
        args.extend(["--resume".into(), prev]);
    }
    args
}

/// The CLI as a supervised child: confined like bash (plus Claude Code's own state in
/// `$HOME`, and never without network, since it must reach the model API), given only
/// the credentials it needs.
fn command(run: &Run<'_>, claude: &Path, args: &[String], tmp: &Path) -> tokio::process::Command {
    let cfg = run.config;
    let mut cmd = match run.sandbox.confinement() {
        Some(c) => {
            let mut state = Vec::new();
            if let Some(home) = cfg.home_dir.clone() {
                let dir = home.join(".claude");
                let _ = std::fs::create_dir_all(&dir);
                let file = home.join(".claude.json");
                if !file.exists() {
                    let _ = std::fs::write(&file, "{}");
                }
                state = vec![dir, file];
            }
            let mut c = c.with_writable(state);
            if c.deny_network {
                tracing::warn!("network: deny cannot apply to claude-code, which must reach its API; only its web tools are disabled");
                c.deny_network = false;
            }
            c.command(claude, args, tmp)
        }
        None => {
            let mut cmd = tokio::process::Command::new(claude);
            cmd.args(args).env("TMPDIR", tmp);
            cmd
        }
    };
    if let Some(home) = &cfg.home_dir {
        cmd.env("HOME", home);
    }
    if run.sandbox.confinement().is_some() {
        // Claude Code refuses to skip permission prompts as root unless told it runs
        // in a sandbox; confined, it does.
        cmd.env("IS_SANDBOX", "1");
    }
    // What the CLI starts (`#!/usr/bin/env node`, node itself) comes from the same
    // PATH it was found on.
    let trusted = crate::sandbox::programs::trusted_path(run.sandbox.allowed_paths());
    cmd.current_dir(&run.work_dir)
        .env("PATH", trusted)
        .env("ANTHROPIC_BASE_URL", &cfg.llm.base_url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::sandbox::supervise(&mut cmd);
    // The one secret Claude Code needs: its credentials for the API.
    if let Some(key) = &cfg.llm.api_key {
        cmd.env("ANTHROPIC_API_KEY", key);
    }
    if let Ok(token) = std::env::var("ANTHROPIC_AUTH_TOKEN") {
        cmd.env("ANTHROPIC_AUTH_TOKEN", token);
    }
    cmd
}

/// The last few KB of the CLI's stderr, for error messages.
fn stderr_tail(stderr: Option<tokio::process::ChildStderr>) -> tokio::task::JoinHandle<String> {
    tokio::spawn(async move {
        let mut tail = String::new();
        if let Some(e) = stderr {
            let mut lines = BufReader::new(e).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                tail.push_str(&l);
                tail.push('\n');
                if tail.len() > 8000 {
                    // On a character boundary: the CLI's output is not ours to trust.
                    tail = crate::util::tail_bytes(&tail, 4000).to_string();
                }
            }
        }
        tail
    })
}

fn engine_error(message: String) -> RunError {
    RunError::Stop(FailureKind::Engine, message)
}

/// Runs the request through the `claude` CLI and maps its stream onto the run.
pub(super) async fn drive(run: &mut Run<'_>) -> Result<String, RunError> {
    let cfg = run.config;
    let writable = run.sandbox.allowed_paths().to_vec();
    let claude = find_claude(cfg.llm.claude_code_path.as_ref(), &writable).map_err(engine_error)?;
    let tmp = run
        .output_dir
        .join(format!("claude-tmp-{}", crate::util::random_hex(10)));
    std::fs::create_dir_all(&tmp).map_err(|e| engine_error(format!("{}: {e}", tmp.display())))?;
    let args = cli_args(run);
    run.sandbox.settle().await;
    let mut child = command(run, &claude, &args, &tmp)
        .spawn()
        .map_err(|e| engine_error(format!("cannot start {}: {e}", claude.display())))?;
    let pgid = child.id().map(|p| p as i32);
    if let Some(mut stdin) = child.stdin.take() {
        let msg = json!({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": run.req.prompt}]}});
        let _ = stdin.write_all(format!("{msg}\n").as_bytes()).await;
        // Closing stdin tells the CLI there is nothing more to ask after this answer.
        drop(stdin);
    }
    let err_tail = stderr_tail(child.stderr.take());
    let result = match child.stdout.take() {
        Some(stdout) => follow(run, stdout).await,
        None => Err(engine_error("no output from claude".into())),
    };
    // On cancel and timeout, and anything it left running: Claude Code runs its Bash
    // commands in process groups of their own.
    if let Some(g) = pgid {
        crate::sandbox::kill_tree(g);
    }
    let status = child.wait().await;
    crate::util::remove_tree_blocking(tmp, "the claude CLI's temporary folder").await;
    let tail = err_tail.await.unwrap_or_default();
    match result? {
        Some((true, text)) => Ok(text),
        Some((false, text)) => Err(engine_error(explain(&text, &tail))),
        None => {
            let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            Err(engine_error(explain(
                &format!("claude exited with {status} without a result"),
                &tail,
            )))
        }
    }
}

/// Reads the CLI's stream-json output to its end: the final result (ok, text) if it
/// sent one.
async fn follow(
    run: &mut Run<'_>,
    stdout: tokio::process::ChildStdout,
) -> Result<Option<(bool, String)>, RunError> {
    let timeout = run.config.limits.step_timeout;
    let mut lines = BufReader::new(stdout).lines();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut final_result = None;
    loop {
        let next = tokio::select! {
            l = tokio::time::timeout(timeout, lines.next_line()) => l,
            _ = run.cancel.cancelled() => return Err(RunError::Cancelled),
        };
        let line = match next {
            Err(_) => {
                return Err(engine_error(format!(
                    "Claude Code sent nothing for {} s (step_timeout_sec)",
                    timeout.as_secs()
                )))
            }
            Ok(Ok(Some(l))) => l,
            Ok(_) => return Ok(final_result),
        };
        match parse_line(&line) {
            Line::Init { session_id } => {
                let record = Record::ClaudeCodeSession(ClaudeCodeSession { id: session_id });
                run.session.append_record(&record)?;
            }
            Line::Assistant { content, usage } => on_assistant(run, &mut names, content, usage)?,
            Line::ToolResults(results) => {
                on_tool_results(run, &names, results)?;
                // A step ended: durable, as the native loop's steps are.
                run.session.sync().await?;
            }
            Line::Result {
                ok,
                text,
                usage: u,
                cost,
            } => {
                if let Some(c) = cost {
                    tracing::info!(session = %run.req.session_id, cost_usd = c, input_tokens = u.input, output_tokens = u.output, "claude-code run");
                }
                final_result = Some((ok, text));
            }
            Line::Other => {}
        }
    }
}

/// An assistant turn: streamed as events, recorded in the session. A failed session
/// write ends the run, as in the native loop.
fn on_assistant(
    run: &mut Run<'_>,
    names: &mut HashMap<String, String>,
    content: Vec<Content>,
    usage: Usage,
) -> Result<(), RunError> {
    run.steps += 1;
    run.usage.add(&usage);
    for c in &content {
        match c {
            Content::Text { text } => run.out.emit(AgentEvent::TextDelta { text: text.clone() }),
            Content::Thinking { thinking, .. } => run.out.emit(AgentEvent::ThinkingDelta {
                text: thinking.clone(),
            }),
            Content::ToolCall {
                id,
                name,
                arguments,
            } => {
                names.insert(id.clone(), name.clone());
                run.out.emit(AgentEvent::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                    summary: describe(name, arguments),
                });
            }
            Content::Image { .. } => {}
        }
    }
    let has_calls = content
        .iter()
        .any(|c| matches!(c, Content::ToolCall { .. }));
    run.session
        .append_message(Message::Assistant(AssistantMessage {
            content,
            api: "claude-code".into(),
            provider: "claude-code".into(),
            model: run.config.llm.model.clone(),
            usage,
            stop_reason: if has_calls {
                StopReason::ToolUse
            } else {
                StopReason::Stop
            },
            error_message: None,
            response_id: None,
            timestamp: crate::util::now_millis(),
        }))?;
    Ok(())
}

fn on_tool_results(
    run: &mut Run<'_>,
    names: &HashMap<String, String>,
    results: Vec<ToolResultMessage>,
) -> Result<(), RunError> {
    for mut r in results {
        r.tool_name = names.get(&r.tool_call_id).cloned().unwrap_or_default();
        crate::metrics::tool_call(&r.tool_name, true, r.is_error);
        run.out.emit(AgentEvent::ToolResult {
            id: r.tool_call_id.clone(),
            name: r.tool_name.clone(),
            is_error: r.is_error,
            output: crate::message::blocks_text(&r.content),
            details: None,
        });
        run.session.append_message(Message::ToolResult(r))?;
    }
    Ok(())
}

/// Adds what to do for the failures people hit first.
fn explain(message: &str, stderr: &str) -> String {
    let all = format!("{message}\n{stderr}").to_lowercase();
    let hint = if all.contains("api key")
        || all.contains("login")
        || all.contains("authentication")
        || all.contains("401")
    {
        "\nClaude Code is not logged in or has no valid key: set ANTHROPIC_API_KEY (or PICOGENT_API_KEY), or run `claude login`."
    } else {
        ""
    };
    let tail = crate::util::tail_bytes(stderr.trim(), 1500);
    if tail.is_empty() {
        format!("{message}{hint}")
    } else {
        format!("{message}{hint}\nclaude said: {tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_failures_are_worded_for_people() {
        assert_eq!(
            describe("Read", &json!({"file_path": "/w/a.rs"})),
            "Read: /w/a.rs"
        );
        assert!(explain("Invalid API key", "").contains("claude login"));
    }
}
