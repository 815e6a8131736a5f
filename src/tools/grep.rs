//! `grep`: regular-expression search in-process (no ripgrep needed), `.gitignore`
//! respected, binary files skipped, `path:line: text` output.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

use super::truncate::{cut_line, head_bytes};
use super::walk;
use super::{parse_args, ToolContext, ToolError, ToolOutput};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Args {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(default)]
    ignore_case: bool,
    #[serde(default)]
    literal: bool,
    context: Option<usize>,
    limit: Option<usize>,
}

/// How much of one file grep searches.
const MAX_FILE_BYTES: u64 = 32 << 20;

pub async fn run(args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let a: Args = parse_args("grep", args)?;
    let root = ctx.sandbox.check_root(&ctx.work_dir, a.path.as_deref())?;
    let source = if a.literal {
        regex::escape(&a.pattern)
    } else {
        a.pattern.clone()
    };
    let re = regex::RegexBuilder::new(&source)
        .case_insensitive(a.ignore_case)
        .size_limit(10 * 1024 * 1024)
        .build()
        .map_err(|e| ToolError::Args {
            tool: "grep",
            message: format!("bad regular expression: {e}"),
        })?;
    let glob = match &a.glob {
        Some(g) => Some(
            globset::GlobBuilder::new(g)
                .literal_separator(false)
                .build()
                .map_err(|e| ToolError::Args {
                    tool: "grep",
                    message: format!("bad glob {g:?}: {e}"),
                })?
                .compile_matcher(),
        ),
        None => None,
    };
    let limit = a.limit.filter(|l| *l > 0).unwrap_or(100);
    let context = a.context.unwrap_or(0).min(20);
    let sandbox = ctx.sandbox.clone();
    let base = if root.is_dir() {
        root.clone()
    } else {
        root.parent().map(|p| p.to_path_buf()).unwrap_or_default()
    };
    let cancel = ctx.cancel.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = String::new();
        let mut matches = 0usize;
        let mut hit_limit = false;
        for file in walk::files(&root, &sandbox) {
            if cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            let shown = walk::display(&file, &base);
            if let Some(g) = &glob {
                let name_match = file.file_name().is_some_and(|n| g.is_match(n));
                if !name_match && !g.is_match(&shown) {
                    continue;
                }
            }
            // Opened without following a final link and checked by where it really
            // is, so a folder swapped for a link during the walk reads nothing outside.
            let Some(mut f) = sandbox.open_found(&file) else {
                continue;
            };
            // Searched within a bound: a huge file never makes picogent allocate its size.
            let mut bytes = Vec::new();
            if std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut f, MAX_FILE_BYTES),
                &mut bytes,
            )
            .is_err()
            {
                continue;
            }
            if bytes.iter().take(8192).any(|b| *b == 0) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let hits: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| re.is_match(l))
                .map(|(i, _)| i)
                .collect();
            if hits.is_empty() {
                continue;
            }
            let room = limit - matches;
            let taken = &hits[..hits.len().min(room)];
            matches += taken.len();
            let mut show: BTreeSet<usize> = BTreeSet::new();
            for &h in taken {
                let lo = h.saturating_sub(context);
                let hi = (h + context).min(lines.len() - 1);
                show.extend(lo..=hi);
            }
            let hit_set: BTreeSet<usize> = taken.iter().copied().collect();
            let mut prev: Option<usize> = None;
            for i in show {
                if context > 0 && prev.is_some_and(|p| i > p + 1) {
                    out.push_str("--\n");
                }
                let sep = if hit_set.contains(&i) { ':' } else { '-' };
                out.push_str(&format!(
                    "{shown}{sep}{}{sep} {}\n",
                    i + 1,
                    cut_line(lines[i])
                ));
                prev = Some(i);
            }
            if matches >= limit {
                hit_limit = true;
                break;
            }
        }
        if matches == 0 {
            return Ok(ToolOutput::ok(format!("No matches for {:?}", a.pattern)));
        }
        let (mut text, cut) = head_bytes(out);
        if hit_limit {
            text.push_str(&format!(
                "\n[Stopped at {limit} matches. Narrow the search or raise limit.]"
            ));
        } else if cut {
            text.push_str("\n[Output cut at 50 KB. Narrow the search.]");
        }
        Ok(ToolOutput::ok(text))
    })
    .await
    .map_err(|e| ToolError::Failed(format!("grep failed: {e}")))?
}
