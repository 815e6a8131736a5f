//! `read`: a text file, paged by `offset` and `limit`, capped at 2000 lines / 50 KB,
//! and never scanned past `MAX_SCAN` bytes, whatever `offset` asks.

use std::io::{BufRead, BufReader, Read};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::registry::Tool;
use super::truncate::cut_line;
use super::{arg, ToolContext, ToolError, ToolOutput, MAX_BYTES, MAX_LINES};

/// Read a text file. Output is capped at 2000 lines or 50 KB; use offset and limit to page through large files.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Args {
    /// File path, relative to the working folder or absolute
    path: String,
    /// First line to read, 1-based
    offset: Option<i64>,
    /// Number of lines to read
    limit: Option<i64>,
}

pub(crate) struct ReadTool;

impl Tool for ReadTool {
    type Args = Args;
    const NAME: &'static str = "read";
    const LABEL: &'static str = "Read";
    const READ_ONLY: bool = true;

    fn detail(args: &Value) -> String {
        arg(args, "path").to_string()
    }

    async fn run(a: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let offset = a.offset.unwrap_or(1).max(1) as usize;
        let limit = a.limit.filter(|l| *l > 0).map(|l| l as usize);
        let (sandbox, work_dir) = (ctx.sandbox.clone(), ctx.work_dir.clone());
        let cancel = ctx.cancel.clone();
        tokio::task::spawn_blocking(move || {
            // Checked and opened in one step, so the path cannot be swapped in between
            // (and anything but a regular file refused, opened without blocking).
            let (file, path) = sandbox.open_read(&work_dir, &a.path)?;
            let page = Page::new(offset, limit);
            read_lines(file, &path, &a.path, page, &cancel)
        })
        .await
        .map_err(|e| ToolError::Failed(format!("read failed: {e}")))?
    }
}

fn read_lines(
    file: std::fs::File,
    path: &std::path::Path,
    shown: &str,
    mut page: Page,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let mut reader = BufReader::with_capacity(64 << 10, file);
    let sniff = sniff_text(&mut reader, path, shown)?;
    // Never scanned past `MAX_SCAN`: a huge offset into a sparse terabyte, or a file
    // written to forever, ends here.
    let mut reader = sniff.chain(reader).take(MAX_SCAN);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // A line is kept only up to what can be shown: a file of one endless line
        // never makes picogent allocate its size.
        let read = read_line_capped(&mut reader, &mut buf, LINE_KEEP, cancel);
        if cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let (n, dropped) = read.map_err(|e| ToolError::io(path, e))?;
        if n == 0 {
            break;
        }
        page.add(&buf, dropped);
    }
    // At the bound with more to come: the count stops there, and the answer says so.
    page.scan_cut = reader.limit() == 0
        && !reader
            .get_mut()
            .fill_buf()
            .map_err(|e| ToolError::io(path, e))?
            .is_empty();
    page.finish(path, shown)
}

/// The file's first 8 KB, refused when they show a binary file.
fn sniff_text(
    reader: &mut BufReader<std::fs::File>,
    path: &std::path::Path,
    shown: &str,
) -> Result<Vec<u8>, ToolError> {
    let meta = reader
        .get_ref()
        .metadata()
        .map_err(|e| ToolError::io(path, e))?;
    let mut sniff = Vec::new();
    reader
        .take(8192)
        .read_to_end(&mut sniff)
        .map_err(|e| ToolError::io(path, e))?;
    if sniff.contains(&0) {
        return Err(ToolError::Failed(format!(
            "{shown} is a binary file ({} bytes); read shows text only",
            meta.len()
        )));
    }
    Ok(sniff)
}

/// The lines shown, from `offset` on, within `limit` and the caps.
struct Page {
    offset: usize,
    limit: Option<usize>,
    out: String,
    /// Lines read so far, shown or not.
    total: usize,
    /// Lines shown.
    count: usize,
    /// The number of the last line shown.
    last_shown: usize,
    stopped: Option<Stop>,
    /// Reading stopped at `MAX_SCAN`, before the end of the file.
    scan_cut: bool,
}

impl Page {
    fn new(offset: usize, limit: Option<usize>) -> Self {
        Page {
            offset,
            limit,
            out: String::new(),
            total: 0,
            count: 0,
            last_shown: 0,
            stopped: None,
            scan_cut: false,
        }
    }

    /// One line of the file (`dropped` bytes of it were not kept); lines past a stop
    /// are only counted.
    fn add(&mut self, buf: &[u8], dropped: usize) {
        self.total += 1;
        if self.total < self.offset || self.stopped.is_some() {
            return;
        }
        if self.limit.is_some_and(|l| self.count >= l) {
            self.stopped = Some(Stop::Limit);
            return;
        }
        let raw = String::from_utf8_lossy(buf);
        let mut line = cut_line(raw.trim_end_matches(['\n', '\r']));
        if dropped > 0 {
            line.push_str(&format!(" [… and {dropped} more bytes]"));
        }
        if self.count >= MAX_LINES || self.out.len() + line.len() + 1 > MAX_BYTES {
            self.stopped = Some(Stop::Cap);
            return;
        }
        self.out.push_str(&line);
        self.out.push('\n');
        self.count += 1;
        self.last_shown = self.total;
    }

    /// The result once the file was read (to its end or to `MAX_SCAN`): the lines
    /// and how to go on.
    fn finish(self, path: &std::path::Path, shown: &str) -> Result<ToolOutput, ToolError> {
        let Page {
            offset,
            mut out,
            total,
            last_shown,
            stopped,
            scan_cut,
            ..
        } = self;
        if total == 0 {
            return Ok(ToolOutput::ok(format!("[{shown} is empty]")));
        }
        if offset > total && scan_cut {
            return Err(ToolError::Failed(format!(
                "offset {offset} lies past what read scans of {shown}: read looks at the first {} only ({total} lines there). Use bash for what lies beyond (e.g. `tail -c +N`)",
                SCANNED
            )));
        }
        if offset > total {
            return Err(ToolError::Failed(format!(
                "offset {offset} is past the end of {shown} ({total} lines)"
            )));
        }
        let next = last_shown + 1;
        match (stopped, scan_cut) {
            (Some(Stop::Cap), false) => out.push_str(&format!(
                "\n[Showing lines {offset}-{last_shown} of {total}. Use offset={next} to continue.]"
            )),
            (Some(Stop::Limit), false) => out.push_str(&format!(
                "\n[{} more lines in the file. Use offset={next} to continue.]",
                total - last_shown
            )),
            (Some(_), true) => out.push_str(&format!(
                "\n[Showing lines {offset}-{last_shown} of at least {total} (read counts the first {SCANNED} only). Use offset={next} to continue.]"
            )),
            (None, true) => out.push_str(&format!(
                "\n[Showing lines {offset}-{last_shown}: read stops {SCANNED} into {shown}. Use bash for what lies beyond (e.g. `tail -c +N`).]"
            )),
            (None, false) => {}
        }
        // The range shown, for front doors that display what the model looked at
        // (`total_lines` only counts the scanned part when `total_known` is false).
        let mut details = serde_json::json!({
            "path": path,
            "first_line": offset,
            "last_line": last_shown,
            "total_lines": total,
        });
        if scan_cut {
            details["total_known"] = false.into();
        }
        Ok(ToolOutput::ok(out).with_details(details))
    }
}

/// How far into a file `read` looks, whatever `offset` asks: past it, lines are
/// neither shown nor counted. Text files a model pages through are far smaller; a
/// bound keeps a call on a sparse terabyte, or a log written to forever, from
/// scanning without end.
const MAX_SCAN: u64 = 1 << 30;
/// `MAX_SCAN` as people read it.
const SCANNED: &str = "1 GiB";

/// Bytes of one line kept for display: enough for `MAX_LINE_CHARS` characters of any
/// UTF-8 text.
const LINE_KEEP: usize = super::MAX_LINE_CHARS * 4 + 8;

/// Reads one line (through its `\n`), keeping at most `keep` bytes of it in `buf`.
/// Returns the bytes consumed (0 at the end of the file) and how many were dropped.
/// Stops early, with what it has, when `cancel` is cancelled.
fn read_line_capped(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    keep: usize,
    cancel: &CancellationToken,
) -> std::io::Result<(usize, usize)> {
    let (mut consumed, mut dropped) = (0usize, 0usize);
    loop {
        if cancel.is_cancelled() {
            return Ok((consumed, dropped));
        }
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((consumed, dropped));
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = keep.saturating_sub(buf.len()).min(take);
        buf.extend_from_slice(chunk.get(..room).unwrap_or_default());
        // The newline itself is not counted as dropped text.
        dropped += (take - room).saturating_sub(usize::from(done && room < take));
        consumed += take;
        reader.consume(take);
        if done {
            return Ok((consumed, dropped));
        }
    }
}

/// Why reading stopped before the end of the file.
enum Stop {
    /// The caller's `limit`.
    Limit,
    /// The 2000-line / 50 KB cap.
    Cap,
}
