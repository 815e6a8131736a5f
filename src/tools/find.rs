//! `find`: files whose path matches a glob, `.gitignore` respected.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::registry::Tool;
use super::truncate::head_bytes;
use super::walk;
use super::{arg, ToolContext, ToolError, ToolOutput};

/// Find files whose path matches a glob, e.g. **/*.rs. Respects .gitignore.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Args {
    /// Glob pattern
    pattern: String,
    /// Folder to search (default: working folder)
    path: Option<String>,
    /// Maximum results (default 1000)
    limit: Option<usize>,
}

pub(crate) struct FindTool;

impl Tool for FindTool {
    type Args = Args;
    const NAME: &'static str = "find";
    const LABEL: &'static str = "Find";
    const READ_ONLY: bool = true;

    fn detail(args: &Value) -> String {
        arg(args, "pattern").to_string()
    }

    async fn run(a: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let root = ctx.sandbox.check_root(&ctx.work_dir, a.path.as_deref())?;
        if !root.is_dir() {
            return Err(ToolError::Failed(format!(
                "{} is not a folder",
                a.path.as_deref().unwrap_or(".")
            )));
        }
        let glob = globset::GlobBuilder::new(&a.pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::Args {
                tool: "find",
                message: format!("bad glob {:?}: {e}", a.pattern),
            })?
            .compile_matcher();
        // A pattern without a slash matches file names at any depth, as people expect
        // from `find -name`.
        let by_name = !a.pattern.contains('/');
        let limit = a.limit.filter(|l| *l > 0).unwrap_or(1000);
        let sandbox = ctx.sandbox.clone();
        let cancel = ctx.cancel.clone();
        tokio::task::spawn_blocking(move || {
            let mut found: Vec<String> = Vec::new();
            let mut more = false;
            for file in walk::files(&root, &sandbox) {
                if cancel.is_cancelled() {
                    return Err(ToolError::Cancelled);
                }
                let rel = walk::display(&file, &root);
                let hit = if by_name {
                    file.file_name().is_some_and(|n| glob.is_match(n)) || glob.is_match(&rel)
                } else {
                    glob.is_match(&rel)
                };
                if hit {
                    if found.len() >= limit {
                        more = true;
                        break;
                    }
                    found.push(rel);
                }
            }
            if found.is_empty() {
                return Ok(ToolOutput::ok(format!("No files match {:?}", a.pattern)));
            }
            let (mut text, cut) = head_bytes(found.join("\n"));
            if more {
                text.push_str(&format!(
                    "\n[Stopped at {limit} results. Narrow the pattern or raise limit.]"
                ));
            } else if cut {
                text.push_str("\n[Output cut at 50 KB. Narrow the pattern.]");
            }
            Ok(ToolOutput::ok(text))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("find failed: {e}")))?
    }
}
