//! `ls`: one folder, not recursive, sorted, folders marked with `/`, dotfiles shown.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::registry::Tool;
use super::truncate::head_bytes;
use super::{arg, ToolContext, ToolError, ToolOutput};

/// List one folder, sorted; folders end in /. Dotfiles included.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Args {
    /// Folder (default: working folder)
    path: Option<String>,
    /// Maximum entries (default 500)
    limit: Option<usize>,
}

pub(crate) struct LsTool;

impl Tool for LsTool {
    type Args = Args;
    const NAME: &'static str = "ls";
    const LABEL: &'static str = "Ls";
    const READ_ONLY: bool = true;

    fn detail(args: &Value) -> String {
        match arg(args, "path") {
            "" => ".".into(),
            p => p.to_string(),
        }
    }

    async fn run(a: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let shown = a.path.clone().unwrap_or_else(|| ".".into());
        let dir = ctx.sandbox.check_root(&ctx.work_dir, a.path.as_deref())?;
        let limit = a.limit.filter(|l| *l > 0).unwrap_or(500);
        let sandbox = ctx.sandbox.clone();
        tokio::task::spawn_blocking(move || {
            if !dir.exists() {
                return Err(ToolError::Failed(format!("{shown}: no such folder")));
            }
            if !dir.is_dir() {
                return Err(ToolError::Failed(format!(
                    "{shown} is a file, not a folder; use read"
                )));
            }
            // Listed through the opened folder, checked by where it really is.
            let opened = sandbox.open_folder(&dir, &shown)?;
            let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&opened));
            let rd = std::fs::read_dir(&fd_path).map_err(|e| ToolError::io(&dir, e))?;
            let mut names: Vec<String> = rd
                .filter_map(Result::ok)
                .filter(|e| !sandbox.is_protected(&dir.join(e.file_name())))
                .map(|e| {
                    let mut n = super::walk::escape_name(&e.file_name().to_string_lossy());
                    // file_type does not follow links; a link to a folder is listed as one.
                    if e.path().is_dir() {
                        n.push('/');
                    }
                    n
                })
                .collect();
            if names.is_empty() {
                return Ok(ToolOutput::ok(format!("{shown} is empty")));
            }
            names.sort();
            let total = names.len();
            let more = total > limit;
            names.truncate(limit);
            let (mut text, _) = head_bytes(names.join("\n"));
            if more {
                text.push_str(&format!(
                    "\n[Showing {limit} of {total} entries. Raise limit to see more.]"
                ));
            }
            Ok(ToolOutput::ok(text))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("ls failed: {e}")))?
    }
}
