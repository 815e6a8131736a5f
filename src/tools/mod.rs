//! The seven tools the model can call (spec §4), their JSON schemas, dispatch, and the
//! rule for which may run in parallel. Every tool returns a bounded `ToolOutput`; a
//! failure the model should see (missing file, no match, sandbox refusal, timeout) is an
//! output with `is_error`, never a panic or an error that ends the run.
//!
//! One file per tool; `truncate` bounds outputs, `walk` is the directory walk of `grep`
//! and `find`, `smallest` keeps the head of a sorted stream in bounded memory. The path
//! policy and kernel confinement every tool goes through is `crate::sandbox`'s.

pub(crate) mod bash;
mod diff;
mod edit;
mod find;
mod grep;
mod ls;
mod read;
pub(crate) mod registry;
mod smallest;
pub(crate) mod truncate;
mod walk;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::provider::ToolSpec;
use crate::sandbox::Sandbox;
use registry::{Builtin, Entry, Limit};

/// Caps shared by every tool: what the model receives per call.
const MAX_LINES: usize = 2000;
const MAX_BYTES: usize = 50 * 1024;
const MAX_LINE_CHARS: usize = 500;

/// The largest file `edit` reads (it reads files whole) and the largest content `write`
/// takes: 16 MiB. Hand-written source files are far smaller, and a model sees at most
/// 50 KB of a file per `read`; anything bigger is data, a log or generated, and better
/// changed by a command. An edit holds about four copies of its file (read, normalised,
/// edited, diffed), so this keeps one under ~64 MiB. Claude Code's edit stops only at
/// 1 GiB, JavaScript's string limit, which bounds nothing for a daemon running several
/// tasks (a 2.5 GB file read whole ended picogent); other agents' edit tools refuse files
/// over 2 to 50 MiB.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Everything a tool call may touch.
#[derive(Clone)]
pub struct ToolContext {
    pub work_dir: PathBuf,
    pub sandbox: Arc<Sandbox>,
    pub step_timeout: Duration,
    /// The most a bash call's own `timeout` may be.
    pub command_timeout_max: Duration,
    pub cancel: CancellationToken,
    /// The run's private folder (mode 0700, in picogent's state): full bash outputs
    /// that were too long to return, and each command's temporary folder.
    pub output_dir: PathBuf,
    /// The most of one command's output saved in `output_dir`, in bytes; saving also
    /// stops before the disk's last free space (see `bash::capture`).
    pub max_saved_output: u64,
    /// Where a running command's output goes as it comes, for people watching (set
    /// per call by the agent loop; `None`: nobody watches).
    pub on_output: Option<bash::live::OnOutput>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    /// Structured facts for front doors (exit code, diff, full-output path); not sent
    /// to the model.
    pub details: Option<Value>,
}

impl ToolOutput {
    pub(crate) fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: false,
            details: None,
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: true,
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolError {
    #[error("invalid arguments for {tool}: {message}")]
    Args { tool: &'static str, message: String },
    #[error("{0}")]
    Denied(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Failed(String),
    #[error("unknown tool {0:?}; the tools are read, write, edit, bash, grep, find, ls")]
    Unknown(String),
    #[error(
        "{what} is {} ({size} bytes), over the {} limit of {tool}; {hint}",
        diff::size(*.size),
        diff::size(MAX_FILE_BYTES)
    )]
    TooLarge {
        tool: &'static str,
        what: String,
        size: u64,
        hint: &'static str,
    },
    #[error("{tool} timed out after {} s", .after.as_secs())]
    Timeout { tool: &'static str, after: Duration },
    #[error("aborted: the run was cancelled")]
    Cancelled,
}

impl From<crate::sandbox::SandboxError> for ToolError {
    fn from(e: crate::sandbox::SandboxError) -> Self {
        use crate::sandbox::SandboxError as S;
        match e {
            S::Denied(m) => ToolError::Denied(m),
            S::Failed(m) => ToolError::Failed(m),
            S::Io { path, source } => ToolError::Io { path, source },
        }
    }
}

impl ToolError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        ToolError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub(crate) fn parse_args<T: DeserializeOwned>(
    tool: &'static str,
    args: &Value,
) -> Result<T, ToolError> {
    if let Some(raw) = args.get("_raw").and_then(Value::as_str) {
        return Err(ToolError::Args {
            tool,
            message: format!(
                "the arguments were not valid JSON: {}",
                crate::util::one_line(raw, 200)
            ),
        });
    }
    serde_json::from_value(args.clone()).map_err(|e| ToolError::Args {
        tool,
        message: e.to_string(),
    })
}

/// Every built-in tool, in the order the model is shown them.
static BUILTIN: [&dyn Entry; 7] = [
    &Builtin::<read::ReadTool>::new(),
    &Builtin::<write::WriteTool>::new(),
    &Builtin::<edit::EditTool>::new(),
    &Builtin::<bash::BashTool>::new(),
    &Builtin::<grep::GrepTool>::new(),
    &Builtin::<find::FindTool>::new(),
    &Builtin::<ls::LsTool>::new(),
];

/// The built-in tool called `name`.
pub(crate) fn builtin(name: &str) -> Option<&'static dyn Entry> {
    BUILTIN.iter().copied().find(|t| t.name() == name)
}

/// Read-only tools may run side by side; the others run alone, in call order.
pub(crate) fn is_read_only(name: &str) -> bool {
    builtin(name).is_some_and(|t| t.read_only())
}

/// Whether people may watch the tool's output while it runs.
pub(crate) fn streams_output(name: &str) -> bool {
    builtin(name).is_some_and(|t| t.streams())
}

/// Runs one tool call. Never fails: errors become error outputs for the model.
pub async fn execute(name: &str, args: &Value, ctx: &ToolContext) -> ToolOutput {
    if ctx.cancel.is_cancelled() {
        return ToolOutput::error(ToolError::Cancelled.to_string());
    }
    let Some(tool) = builtin(name) else {
        return ToolOutput::error(ToolError::Unknown(name.to_string()).to_string());
    };
    let result = match tool.limit() {
        Limit::Own => tool.call(args, ctx).await,
        Limit::Step => {
            let (call, _stop) = call_context(ctx);
            tokio::select! {
                r = tokio::time::timeout(ctx.step_timeout, tool.call(args, &call)) => {
                    r.unwrap_or(Err(ToolError::Timeout { tool: tool.name(), after: ctx.step_timeout }))
                }
                _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            }
        }
    };
    result.unwrap_or_else(|e| ToolOutput::error(e.to_string()))
}

/// The context one call runs with: its own cancellation, a child of the run's, which
/// the returned guard cancels when the call ends or is dropped (its step timed out, the
/// run was cancelled, the turn was dropped), so work the call left in a blocking thread
/// sees it and stops instead of running on unseen.
fn call_context(ctx: &ToolContext) -> (ToolContext, tokio_util::sync::DropGuard) {
    let cancel = ctx.cancel.child_token();
    let guard = cancel.clone().drop_guard();
    (
        ToolContext {
            cancel,
            ..ctx.clone()
        },
        guard,
    )
}

/// "Read: src/main.rs", "Bash: cargo test": how a call is shown to people.
pub(crate) fn describe_call(name: &str, args: &Value) -> String {
    let (label, detail) = match builtin(name) {
        Some(t) => (t.label(), t.detail(args)),
        None => (name, crate::util::one_line(&args.to_string(), 80)),
    };
    format!("{label}: {}", crate::util::one_line(&detail, 120))
}

/// A string argument of a call as sent (empty when missing), for `Tool::detail`.
fn arg<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The tools as the model sees them, with pi's names and parameter shapes.
pub(crate) fn specs() -> Vec<ToolSpec> {
    BUILTIN.iter().map(|t| t.spec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's own token stops with the run, and when the call is over or dropped,
    /// never the other way round.
    #[test]
    fn a_calls_token_is_cancelled_when_its_call_ends() {
        let ctx = ToolContext {
            work_dir: PathBuf::from("/"),
            sandbox: Arc::new(Sandbox::default()),
            step_timeout: Duration::from_secs(1),
            command_timeout_max: Duration::from_secs(1),
            cancel: CancellationToken::new(),
            output_dir: PathBuf::from("/"),
            max_saved_output: 0,
            on_output: None,
        };
        let (call, stop) = call_context(&ctx);
        assert!(!call.cancel.is_cancelled());
        drop(stop);
        assert!(call.cancel.is_cancelled() && !ctx.cancel.is_cancelled());
        let (call, _stop) = call_context(&ctx);
        ctx.cancel.cancel();
        assert!(call.cancel.is_cancelled());
    }
}
