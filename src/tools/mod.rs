//! The seven tools the model can call (spec §4), their JSON schemas, dispatch, and the
//! rule for which may run in parallel. Every tool returns a bounded `ToolOutput`; a
//! failure the model should see (missing file, no match, sandbox refusal, timeout) is an
//! output with `is_error`, never a panic or an error that ends the run.
//!
//! One file per tool; `truncate` bounds outputs, `walk` is the directory walk of `grep`
//! and `find`, and `sandbox` holds the path policy and the kernel confinement every tool
//! and command goes through.

pub(crate) mod bash;
mod diff;
mod edit;
mod find;
mod grep;
mod ls;
mod read;
pub mod sandbox;
pub(crate) mod truncate;
mod walk;
mod write;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::provider::ToolSpec;
pub use sandbox::{confine, Sandbox};

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

/// Read-only tools may run side by side; the others run alone, in call order.
pub(crate) fn is_read_only(name: &str) -> bool {
    matches!(name, "read" | "grep" | "find" | "ls")
}

/// Runs one tool call. Never fails: errors become error outputs for the model.
pub async fn execute(name: &str, args: &Value, ctx: &ToolContext) -> ToolOutput {
    if ctx.cancel.is_cancelled() {
        return ToolOutput::error(ToolError::Cancelled.to_string());
    }
    let fut = async {
        match name {
            "read" => read::run(args, ctx).await,
            "write" => write::run(args, ctx).await,
            "edit" => edit::run(args, ctx).await,
            "bash" => bash::run(args, ctx).await,
            "grep" => grep::run(args, ctx).await,
            "find" => find::run(args, ctx).await,
            "ls" => ls::run(args, ctx).await,
            other => Err(ToolError::Unknown(other.to_string())),
        }
    };
    // bash enforces its own timeout (its `timeout` argument may exceed step_timeout) and
    // its own cancellation, so it can kill its process group; the others are bounded here.
    let result = if name == "bash" {
        fut.await
    } else {
        tokio::select! {
            r = tokio::time::timeout(ctx.step_timeout, fut) => r.unwrap_or(Err(ToolError::Timeout {
                tool: static_name(name),
                after: ctx.step_timeout,
            })),
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
        }
    };
    result.unwrap_or_else(|e| ToolOutput::error(e.to_string()))
}

fn static_name(name: &str) -> &'static str {
    ["read", "write", "edit", "bash", "grep", "find", "ls"]
        .into_iter()
        .find(|n| *n == name)
        .unwrap_or("tool")
}

/// "Read: src/main.rs", "Bash: cargo test": how a call is shown to people.
pub(crate) fn describe_call(name: &str, args: &Value) -> String {
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("");
    let (label, detail) = match name {
        "read" => ("Read", s("path").to_string()),
        "write" => ("Write", s("path").to_string()),
        "edit" => ("Edit", s("path").to_string()),
        "bash" => ("Bash", s("command").to_string()),
        "grep" => {
            let p = s("path");
            let where_ = if p.is_empty() {
                String::new()
            } else {
                format!(" in {p}")
            };
            ("Grep", format!("{}{where_}", s("pattern")))
        }
        "find" => ("Find", s("pattern").to_string()),
        "ls" => (
            "Ls",
            if s("path").is_empty() {
                ".".into()
            } else {
                s("path").to_string()
            },
        ),
        other => (other, crate::util::one_line(&args.to_string(), 80)),
    };
    format!("{label}: {}", crate::util::one_line(&detail, 120))
}

/// The tools as the model sees them, with pi's names and parameter shapes.
pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: Cow::Borrowed("read"),
            description: Cow::Borrowed("Read a text file. Output is capped at 2000 lines or 50 KB; use offset and limit to page through large files."),
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the working folder or absolute"},
                "offset": {"type": "integer", "description": "First line to read, 1-based"},
                "limit": {"type": "integer", "description": "Number of lines to read"}
            }, "required": ["path"]}),
        },
        ToolSpec {
            name: Cow::Borrowed("write"),
            description: Cow::Borrowed("Create or overwrite a file with the given content. Parent folders are created."),
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path"},
                "content": {"type": "string", "description": "The whole new content"}
            }, "required": ["path", "content"]}),
        },
        ToolSpec {
            name: Cow::Borrowed("edit"),
            description: Cow::Borrowed("Replace text in a file. Each oldText must occur exactly once in the file as it was before the call; edits must not overlap. Answers with a diff."),
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path"},
                "edits": {"type": "array", "items": {"type": "object", "properties": {
                    "oldText": {"type": "string", "description": "Exact text to replace"},
                    "newText": {"type": "string", "description": "Replacement text"}
                }, "required": ["oldText", "newText"]}}
            }, "required": ["path", "edits"]}),
        },
        ToolSpec {
            name: Cow::Borrowed("bash"),
            description: Cow::Borrowed("Run a bash command in the working folder. stdout and stderr are merged; output keeps the last 2000 lines or 50 KB, and the full output is saved to a file when cut."),
            parameters: json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The command line"},
                "timeout": {"type": "integer", "description": "Seconds before the command is killed (default and maximum: the configured limit, 120 s unless set otherwise)"}
            }, "required": ["command"]}),
        },
        ToolSpec {
            name: Cow::Borrowed("grep"),
            description: Cow::Borrowed("Search file contents with a regular expression. Respects .gitignore. Prints path:line: text."),
            parameters: json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Regular expression (or literal text with literal=true)"},
                "path": {"type": "string", "description": "File or folder to search (default: working folder)"},
                "glob": {"type": "string", "description": "Only files matching this glob, e.g. *.rs"},
                "ignoreCase": {"type": "boolean"},
                "literal": {"type": "boolean"},
                "context": {"type": "integer", "description": "Lines of context around each match"},
                "limit": {"type": "integer", "description": "Maximum matches (default 100)"}
            }, "required": ["pattern"]}),
        },
        ToolSpec {
            name: Cow::Borrowed("find"),
            description: Cow::Borrowed("Find files whose path matches a glob, e.g. **/*.rs. Respects .gitignore."),
            parameters: json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Glob pattern"},
                "path": {"type": "string", "description": "Folder to search (default: working folder)"},
                "limit": {"type": "integer", "description": "Maximum results (default 1000)"}
            }, "required": ["pattern"]}),
        },
        ToolSpec {
            name: Cow::Borrowed("ls"),
            description: Cow::Borrowed("List one folder, sorted; folders end in /. Dotfiles included."),
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Folder (default: working folder)"},
                "limit": {"type": "integer", "description": "Maximum entries (default 500)"}
            }}),
        },
    ]
}
