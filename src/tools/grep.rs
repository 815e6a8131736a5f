//! `grep`: regular-expression search in-process (no ripgrep needed), `.gitignore`
//! respected, binary files skipped, `path:line: text` output.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::registry::Tool;
use super::truncate::{cut_line, head_bytes};
use super::walk;
use super::{arg, Sandbox, ToolContext, ToolError, ToolOutput};

/// Search file contents with a regular expression. Respects .gitignore. Prints path:line: text.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Args {
    /// Regular expression (or literal text with literal=true)
    pattern: String,
    /// File or folder to search (default: working folder)
    path: Option<String>,
    /// Only files matching this glob, e.g. *.rs
    glob: Option<String>,
    #[serde(default)]
    ignore_case: bool,
    #[serde(default)]
    literal: bool,
    /// Lines of context around each match
    context: Option<usize>,
    /// Maximum matches (default 100)
    limit: Option<usize>,
}

pub(crate) struct GrepTool;

impl Tool for GrepTool {
    type Args = Args;
    const NAME: &'static str = "grep";
    const LABEL: &'static str = "Grep";
    const READ_ONLY: bool = true;

    fn detail(args: &Value) -> String {
        match arg(args, "path") {
            "" => arg(args, "pattern").to_string(),
            p => format!("{} in {p}", arg(args, "pattern")),
        }
    }

    async fn run(a: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let root = ctx.sandbox.check_root(&ctx.work_dir, a.path.as_deref())?;
        let base = if root.is_dir() {
            root.clone()
        } else {
            root.parent().map(|p| p.to_path_buf()).unwrap_or_default()
        };
        let mut search = Search {
            re: build_regex(&a)?,
            glob: a.glob.as_deref().map(build_glob).transpose()?,
            limit: a.limit.filter(|l| *l > 0).unwrap_or(100),
            context: a.context.unwrap_or(0).min(20),
            sandbox: ctx.sandbox.clone(),
            base,
            out: String::new(),
            matches: 0,
        };
        let cancel = ctx.cancel.clone();
        tokio::task::spawn_blocking(move || {
            let mut hit_limit = false;
            for file in walk::files(&root, &search.sandbox) {
                if cancel.is_cancelled() {
                    return Err(ToolError::Cancelled);
                }
                search.file(&file);
                if search.matches >= search.limit {
                    hit_limit = true;
                    break;
                }
            }
            Ok(search.summary(&a.pattern, hit_limit))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("grep failed: {e}")))?
    }
}

/// How much of one file grep searches.
const MAX_FILE_BYTES: u64 = 32 << 20;

fn build_regex(a: &Args) -> Result<regex::Regex, ToolError> {
    let source = if a.literal {
        regex::escape(&a.pattern)
    } else {
        a.pattern.clone()
    };
    regex::RegexBuilder::new(&source)
        .case_insensitive(a.ignore_case)
        .size_limit(10 * 1024 * 1024)
        .build()
        .map_err(|e| ToolError::Args {
            tool: "grep",
            message: format!("bad regular expression: {e}"),
        })
}

fn build_glob(g: &str) -> Result<globset::GlobMatcher, ToolError> {
    Ok(globset::GlobBuilder::new(g)
        .literal_separator(false)
        .build()
        .map_err(|e| ToolError::Args {
            tool: "grep",
            message: format!("bad glob {g:?}: {e}"),
        })?
        .compile_matcher())
}

/// One search: what it looks for, and the matches written so far.
struct Search {
    re: regex::Regex,
    glob: Option<globset::GlobMatcher>,
    limit: usize,
    context: usize,
    sandbox: Arc<Sandbox>,
    /// The folder paths are shown relative to.
    base: PathBuf,
    out: String,
    matches: usize,
}

impl Search {
    /// Searches one file found by the walk, if the glob takes it and it is text.
    fn file(&mut self, file: &Path) {
        let shown = walk::display(file, &self.base);
        if let Some(g) = &self.glob {
            let name_match = file.file_name().is_some_and(|n| g.is_match(n));
            if !name_match && !g.is_match(&shown) {
                return;
            }
        }
        let Some(bytes) = self.read_text(file) else {
            return;
        };
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let hits: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| self.re.is_match(l))
            .map(|(i, _)| i)
            .collect();
        if hits.is_empty() {
            return;
        }
        let room = self.limit - self.matches;
        let taken = &hits[..hits.len().min(room)];
        self.matches += taken.len();
        self.write_hits(&shown, &lines, taken);
    }

    /// A file's bytes, within a bound; `None` when it cannot be read or is binary.
    fn read_text(&self, file: &Path) -> Option<Vec<u8>> {
        // Opened without following a final link and checked by where it really
        // is, so a folder swapped for a link during the walk reads nothing outside.
        let mut f = self.sandbox.open_found(file)?;
        // Searched within a bound: a huge file never makes picogent allocate its size.
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, MAX_FILE_BYTES), &mut bytes)
            .ok()?;
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return None;
        }
        Some(bytes)
    }

    /// The hit lines (`path:line: text`) with their context lines (`path-line- text`),
    /// `--` between groups that are not adjacent.
    fn write_hits(&mut self, shown: &str, lines: &[&str], taken: &[usize]) {
        let context = self.context;
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
                self.out.push_str("--\n");
            }
            let sep = if hit_set.contains(&i) { ':' } else { '-' };
            self.out.push_str(&format!(
                "{shown}{sep}{}{sep} {}\n",
                i + 1,
                cut_line(lines[i])
            ));
            prev = Some(i);
        }
    }

    fn summary(self, pattern: &str, hit_limit: bool) -> ToolOutput {
        if self.matches == 0 {
            return ToolOutput::ok(format!("No matches for {pattern:?}"));
        }
        let (mut text, cut) = head_bytes(self.out);
        if hit_limit {
            text.push_str(&format!(
                "\n[Stopped at {} matches. Narrow the search or raise limit.]",
                self.limit
            ));
        } else if cut {
            text.push_str("\n[Output cut at 50 KB. Narrow the search.]");
        }
        ToolOutput::ok(text)
    }
}
