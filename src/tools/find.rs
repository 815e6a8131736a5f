//! `find`: files whose path matches a glob, `.gitignore` respected. Only what is shown
//! is held: the walk stops at `limit` or at the output's cut, whichever comes first.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::registry::Tool;
use super::walk;
use super::{arg, ToolContext, ToolError, ToolOutput, MAX_BYTES};

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
            let mut walk = walk::files(&root, &sandbox, &cancel);
            let mut found = Found::default();
            for file in walk.by_ref() {
                let rel = walk::display(&file, &root);
                let hit = if by_name {
                    file.file_name().is_some_and(|n| glob.is_match(n)) || glob.is_match(&rel)
                } else {
                    glob.is_match(&rel)
                };
                if hit && !found.add(rel, limit) {
                    break;
                }
            }
            if cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            let mut text = found.answer(&a.pattern, limit);
            if let Some(note) = walk.note() {
                text.push('\n');
                text.push_str(&note);
            }
            Ok(ToolOutput::ok(text))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("find failed: {e}")))?
    }
}

/// The paths found so far, never more than is shown: the walk stops at `limit` or
/// where the output is cut, whatever `limit` says.
#[derive(Default)]
struct Found {
    text: String,
    count: usize,
    stop: Option<Stop>,
}

enum Stop {
    Limit,
    Cut,
}

impl Found {
    /// Adds one path; false when the search is over and it was not added.
    fn add(&mut self, rel: String, limit: usize) -> bool {
        let sep = usize::from(self.count > 0);
        if self.count >= limit {
            self.stop = Some(Stop::Limit);
        } else if self.text.len() + sep + rel.len() > MAX_BYTES {
            self.stop = Some(Stop::Cut);
        } else {
            if sep == 1 {
                self.text.push('\n');
            }
            self.text.push_str(&rel);
            self.count += 1;
        }
        self.stop.is_none()
    }

    fn answer(self, pattern: &str, limit: usize) -> String {
        let Found {
            mut text,
            count,
            stop,
        } = self;
        match stop {
            _ if count == 0 => return format!("No files match {pattern:?}"),
            Some(Stop::Limit) => text.push_str(&format!(
                "\n[Stopped at {limit} results. Narrow the pattern or raise limit.]"
            )),
            Some(Stop::Cut) => text.push_str(&format!(
                "\n[Output cut at 50 KB after {count} results; more files match. Narrow the pattern.]"
            )),
            None => {}
        }
        text
    }
}
