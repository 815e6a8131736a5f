//! `grep`: regular-expression search in-process (no ripgrep needed), `.gitignore`
//! respected, binary files skipped, `path:line: text` output. Files are read line by
//! line and the search stops at `limit` or at the output's cut: only the context
//! window is ever held, whatever the file.

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::registry::Tool;
use super::truncate::{cut_line, head_bytes};
use super::walk;
use super::MAX_BYTES;
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
            cancel: ctx.cancel.clone(),
        };
        tokio::task::spawn_blocking(move || {
            let mut hit_limit = false;
            let mut walk = walk::files(&root, &search.sandbox, &search.cancel);
            for file in walk.by_ref() {
                search.file(&file);
                if search.done() {
                    hit_limit = search.matches >= search.limit;
                    break;
                }
            }
            if search.cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            let mut out = search.summary(&a.pattern, hit_limit);
            if let Some(note) = walk.note() {
                if !out.text.ends_with('\n') {
                    out.text.push('\n');
                }
                out.text.push_str(&note);
            }
            Ok(out)
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
    /// The call's cancellation, checked between files and within one.
    cancel: CancellationToken,
}

/// One file's pass: the lines kept for context before a hit (already cut for
/// display), how many lines after the last hit are still to show, and the last
/// line shown (for the `--` between groups).
struct Pass {
    before: VecDeque<(usize, String)>,
    after: usize,
    last: Option<usize>,
}

impl Search {
    /// Whether the search is over: `limit` matches, or more output than is shown.
    fn done(&self) -> bool {
        self.matches >= self.limit || self.out.len() > MAX_BYTES
    }

    /// Searches one file found by the walk, if the glob takes it and it is text. The
    /// file is read line by line: only the context window is held, never the file
    /// (a 32 MiB file of empty lines once cost 800 MB a call).
    fn file(&mut self, file: &Path) {
        let shown = walk::display(file, &self.base);
        if let Some(g) = &self.glob {
            let name_match = file.file_name().is_some_and(|n| g.is_match(n));
            if !name_match && !g.is_match(&shown) {
                return;
            }
        }
        let Some(mut reader) = self.open_text(file) else {
            return;
        };
        let mut pass = Pass {
            before: VecDeque::new(),
            after: 0,
            last: None,
        };
        let mut line = Vec::new();
        for n in 0.. {
            // Past what is shown, or past `limit` once the last hit's context is out.
            if self.out.len() > MAX_BYTES || (self.done() && pass.after == 0) {
                break;
            }
            if n % 4096 == 0 && self.cancel.is_cancelled() {
                break;
            }
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.strip_suffix('\n').unwrap_or(&text);
            let text = text.strip_suffix('\r').unwrap_or(text);
            let hit = self.matches < self.limit && self.re.is_match(text);
            if hit {
                self.matches += 1;
                for (i, t) in std::mem::take(&mut pass.before) {
                    self.write_line(&shown, &mut pass, i, '-', &t);
                }
                self.write_line(&shown, &mut pass, n, ':', &cut_line(text));
                pass.after = self.context;
            } else if pass.after > 0 {
                pass.after -= 1;
                self.write_line(&shown, &mut pass, n, '-', &cut_line(text));
            } else if self.context > 0 {
                if pass.before.len() == self.context {
                    pass.before.pop_front();
                }
                pass.before.push_back((n, cut_line(text)));
            }
        }
    }

    /// The file, buffered and bounded; `None` when it cannot be read or is binary.
    fn open_text(&self, file: &Path) -> Option<impl BufRead> {
        // Opened without following a final link and checked by where it really
        // is, so a folder swapped for a link during the walk reads nothing outside.
        let f = self.sandbox.open_found(file)?;
        // Searched within a bound: a huge file is never read past it.
        let mut reader = std::io::BufReader::with_capacity(64 << 10, f.take(MAX_FILE_BYTES));
        if reader.fill_buf().ok()?.iter().take(8192).any(|b| *b == 0) {
            return None;
        }
        Some(reader)
    }

    /// One line: a hit (`path:line: text`) or context (`path-line- text`), `--` before
    /// it when it does not follow the last line shown.
    fn write_line(&mut self, shown: &str, pass: &mut Pass, i: usize, sep: char, text: &str) {
        if self.context > 0 && pass.last.is_some_and(|p| i > p + 1) {
            self.out.push_str("--\n");
        }
        self.out
            .push_str(&format!("{shown}{sep}{}{sep} {text}\n", i + 1));
        pass.last = Some(i);
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
