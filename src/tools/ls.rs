//! `ls`: one folder, not recursive, sorted, folders marked with `/`, dotfiles shown.
//! Only the names shown are held (the `limit` smallest, within the output's byte cap),
//! not the folder: one of millions of entries costs what its answer does.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::registry::Tool;
use super::smallest::Smallest;
use super::truncate::head_bytes;
use super::{arg, ToolContext, ToolError, ToolOutput, MAX_BYTES};

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
        let (sandbox, cancel) = (ctx.sandbox.clone(), ctx.cancel.clone());
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
            // Only what can be shown is kept: `limit` names, within the byte cap
            // (each costs its newline), however many the folder holds.
            let mut names = Smallest::new(limit, MAX_BYTES + 1);
            for e in rd.filter_map(Result::ok) {
                if cancel.is_cancelled() {
                    return Err(ToolError::Cancelled);
                }
                if sandbox.is_protected(&dir.join(e.file_name())) {
                    continue;
                }
                let name = listed_name(&e);
                let weight = name.len() + 1;
                names.push(name, weight);
            }
            Ok(listing(&shown, names, limit))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("ls failed: {e}")))?
    }
}

/// An entry as listed: escaped, a folder (or a link to one) marked with `/`.
fn listed_name(e: &std::fs::DirEntry) -> String {
    let mut n = super::walk::escape_name(&e.file_name().to_string_lossy());
    // The entry's own type costs nothing; only a link is looked through.
    let is_dir = match e.file_type() {
        Ok(t) if t.is_symlink() => e.path().is_dir(),
        Ok(t) => t.is_dir(),
        Err(_) => e.path().is_dir(),
    };
    if is_dir {
        n.push('/');
    }
    n
}

/// The answer: the names kept, and a note when the folder holds more.
fn listing(shown: &str, names: Smallest<String>, limit: usize) -> ToolOutput {
    let total = names.seen();
    if total == 0 {
        return ToolOutput::ok(format!("{shown} is empty"));
    }
    let names = names.into_sorted();
    let n = names.len();
    let (mut text, _) = head_bytes(names.join("\n"));
    if n < total && n == limit {
        text.push_str(&format!(
            "\n[Showing {n} of {total} entries. Raise limit to see more.]"
        ));
    } else if n < total {
        text.push_str(&format!(
            "\n[Showing {n} of {total} entries: output cut at 50 KB. Use find with a pattern to see others.]"
        ));
    }
    ToolOutput::ok(text)
}
