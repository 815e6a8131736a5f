//! The diffs `write` and `edit` answer with. They are for display only: the file is
//! written before one is computed, whatever then happens to it. A line diff is quadratic
//! in the worst case (40,000 lines with every other one changed took 9–24 s), so each is
//! bounded four ways, and whatever is left out is said in a note:
//!
//! - it runs on the blocking pool, never on a runtime thread, where it stalled every
//!   other task of the daemon (`/healthz` included) and `step_timeout_sec` could not
//!   stop it;
//! - only the changed region is diffed: the common head and tail are skipped by a
//!   byte comparison (keeping a few lines of context), so a one-line edit of a large
//!   file costs a `memcmp`, not a diff of the whole file; a region over
//!   `MAX_DIFF_BYTES` is not diffed at all;
//! - Myers' search gets a deadline, past which `similar` gives up on the smallest diff
//!   and shows the rest as whole removed and added blocks (still correct);
//! - the caller stops waiting before the step's timeout, so the tool still reports the
//!   file written; what it shows is capped in bytes.

use std::time::{Duration, Instant};

use similar::{ChangeTag, TextDiff};

/// Largest changed region (old plus new bytes) handed to the diff algorithm. Splitting
/// and hashing lines is linear but not free (about 0.1 s per MiB in a debug build), and a
/// diff of more than this could not be shown whole anyway.
const MAX_DIFF_BYTES: usize = 4 << 20;
/// The longest Myers' search may run, however long the step timeout.
const MAX_SEARCH: Duration = Duration::from_secs(2);
/// Largest diff kept in a result's `details`, which are stored in the session with it.
pub(crate) const MAX_DETAILS_BYTES: usize = 256 << 10;
/// Lines of context pi shows around a change.
const CONTEXT: usize = 4;
/// Unchanged lines kept on each side of the changed region: pi's context and one more,
/// so that pi's `...` still marks the lines left out.
const KEEP: usize = CONTEXT + 1;

/// How long a diff may take, fixed when the tool starts: the search gets a quarter of
/// the step (at most `MAX_SEARCH`) and the whole diff must be done by three quarters of
/// it, so the step's own timeout never turns a written file into a "timed out".
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    search: Duration,
    give_up_at: tokio::time::Instant,
}

impl Budget {
    pub(crate) fn new(step_timeout: Duration) -> Self {
        let now = tokio::time::Instant::now();
        // A configured step timeout may be huge; adding it must not overflow.
        let give_up_at = now
            .checked_add(step_timeout / 4 * 3)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400));
        Budget {
            search: (step_timeout / 4).min(MAX_SEARCH),
            give_up_at,
        }
    }
}

/// What to diff and how to show it.
pub(crate) struct Request {
    pub old: String,
    pub new: String,
    /// The path in the unified diff's `---`/`+++` lines.
    pub label: String,
    /// Most bytes of unified diff to return.
    pub unified_cap: usize,
    /// Whether to render pi's numbered diff too (for `edit`'s details).
    pub numbered: bool,
}

/// A rendered diff; `None` where it was not computed, with the reason in `notes`.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    pub unified: Option<String>,
    pub numbered: Option<String>,
    /// The first changed line, numbered in the new text (pi's `firstChangedLine`).
    pub first_changed: Option<usize>,
    /// What was left out or simplified, for the model and the front doors.
    pub notes: Vec<String>,
}

impl Shown {
    fn skipped(note: String) -> Self {
        Shown {
            notes: vec![note],
            ..Shown::default()
        }
    }

    /// The notes as one line for `details`, if there are any.
    pub(crate) fn note(&self) -> Option<String> {
        (!self.notes.is_empty()).then(|| self.notes.join("; "))
    }
}

/// Renders the diff on the blocking pool within `budget`; never fails (a diff that
/// cannot be shown becomes a note).
pub(crate) async fn show(req: Request, budget: Budget) -> Shown {
    let search = budget.search;
    let task = tokio::task::spawn_blocking(move || render(&req, search));
    match tokio::time::timeout_at(budget.give_up_at, task).await {
        Ok(Ok(shown)) => shown,
        Ok(Err(e)) => Shown::skipped(format!("diff not shown: {e}")),
        // The task stops by itself soon after: its search is past its deadline.
        Err(_) => Shown::skipped("diff not shown: it took too long".into()),
    }
}

fn render(req: &Request, search: Duration) -> Shown {
    let w = Window::new(&req.old, &req.new);
    let region = w.old.len() + w.new.len();
    if region > MAX_DIFF_BYTES {
        let mut shown = Shown::skipped(format!(
            "diff not shown: the changed region is {}, more than the {} diffed",
            size(region as u64),
            size(MAX_DIFF_BYTES as u64)
        ));
        shown.first_changed = w.first_changed;
        return shown;
    }
    let deadline = Instant::now() + search;
    let diff = TextDiff::configure()
        .deadline(deadline)
        .diff_lines(w.old, w.new);
    let mut notes = Vec::new();
    if Instant::now() >= deadline {
        notes.push(format!(
            "diff simplified: the smallest diff was not found within {} ms, so some changes are shown as whole blocks",
            search.as_millis()
        ));
    }
    let unified = unified(&diff, &req.label, w.skipped, req.unified_cap);
    if unified.cut {
        notes.push(format!("diff cut at {}", size(req.unified_cap as u64)));
    }
    let (numbered, first_changed) = if req.numbered {
        let width = line_count(&req.old)
            .max(line_count(&req.new))
            .to_string()
            .len();
        let (text, first) = numbered_diff(&diff, w.skipped, width);
        if text.cut {
            notes.push(format!(
                "numbered diff cut at {}",
                size(MAX_DETAILS_BYTES as u64)
            ));
        }
        (Some(text.text), first)
    } else {
        (None, w.first_changed)
    };
    Shown {
        unified: Some(unified.text),
        numbered,
        first_changed,
        notes,
    }
}

/// The part of two texts that differs, in whole lines, with up to `KEEP` unchanged
/// lines on each side; found by comparing bytes, in linear time.
struct Window<'a> {
    old: &'a str,
    new: &'a str,
    /// Lines before the window (the same number in both texts).
    skipped: usize,
    /// The line the first difference is on, if the texts differ.
    first_changed: Option<usize>,
}

impl<'a> Window<'a> {
    fn new(old: &'a str, new: &'a str) -> Self {
        let (ob, nb) = (old.as_bytes(), new.as_bytes());
        let head = common_prefix(ob, nb);
        let line_start = line_start_before(ob, head);
        let first_changed =
            (old != new).then(|| count_newlines(ob.get(..line_start).unwrap_or_default()) + 1);
        let mut start = line_start;
        for _ in 0..KEEP {
            if start == 0 {
                break;
            }
            start = line_start_before(ob, start - 1);
        }
        // The common tail, not reaching into the common head.
        let tail = common_suffix(
            ob.get(line_start..).unwrap_or_default(),
            nb.get(line_start..).unwrap_or_default(),
        );
        // Its first whole line: the one after its first newline, whose preceding byte is
        // then common too, so it starts a line in both texts.
        let tail_from = ob.len() - tail;
        let mut end = line_end_after(ob, tail_from);
        for _ in 0..KEEP {
            if end >= ob.len() {
                break;
            }
            end = line_end_after(ob, end);
        }
        let cut = ob.len() - end;
        match (old.get(start..end), new.get(start..new.len() - cut)) {
            (Some(o), Some(n)) => Window {
                old: o,
                new: n,
                skipped: count_newlines(ob.get(..start).unwrap_or_default()),
                first_changed,
            },
            // Every bound is just after a newline or at an end, so a char boundary;
            // should one not be, the whole texts are still a correct window.
            _ => Window {
                old,
                new,
                skipped: 0,
                first_changed,
            },
        }
    }
}

/// The start of the line holding byte `at` (or `at` itself if it starts one).
fn line_start_before(b: &[u8], at: usize) -> usize {
    b.get(..at)
        .and_then(|s| s.iter().rposition(|&c| c == b'\n'))
        .map_or(0, |i| i + 1)
}

/// Just past the first newline at or after `from` (the end if there is none).
fn line_end_after(b: &[u8], from: usize) -> usize {
    b.get(from..)
        .and_then(|s| s.iter().position(|&c| c == b'\n'))
        .map_or(b.len(), |i| from + i + 1)
}

/// Compared a block at a time (a `memcmp`), then byte by byte in the block that differs.
const BLOCK: usize = 4096;

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a.get(i..i + BLOCK) == b.get(i..i + BLOCK) {
        i += BLOCK;
    }
    let rest = a.get(i..n).unwrap_or_default().iter();
    i + rest
        .zip(b.get(i..n).unwrap_or_default())
        .take_while(|(x, y)| x == y)
        .count()
}

fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + BLOCK <= n && a.get(n - i - BLOCK..n - i) == b.get(n - i - BLOCK..n - i) {
        i += BLOCK;
    }
    let (a, b) = (
        a.get(..n - i).unwrap_or_default(),
        b.get(..n - i).unwrap_or_default(),
    );
    i + a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

fn count_newlines(b: &[u8]) -> usize {
    b.iter().filter(|&&c| c == b'\n').count()
}

/// Lines as pi counts them (`split('\n')`).
fn line_count(text: &str) -> usize {
    count_newlines(text.as_bytes()) + 1
}

/// "3.5 MiB", "12 KiB", "900 B".
pub(crate) fn size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    match bytes {
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= MIB => format!("{:.1} MiB", b as f64 / MIB as f64),
        b if b >= KIB => format!("{} KiB", b / KIB),
        b => format!("{b} B"),
    }
}

/// Text built up to a byte cap; what does not fit is dropped, cut on a char boundary.
struct Capped {
    text: String,
    cap: usize,
    cut: bool,
}

impl Capped {
    fn new(cap: usize) -> Self {
        Capped {
            text: String::new(),
            cap,
            cut: false,
        }
    }

    fn push(&mut self, piece: &str) {
        if self.cut {
            return;
        }
        let room = self.cap.saturating_sub(self.text.len());
        if piece.len() <= room {
            self.text.push_str(piece);
            return;
        }
        let mut end = room;
        while !piece.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(piece.get(..end).unwrap_or_default());
        self.cut = true;
    }
}

/// A unified diff with three lines of context, as `similar` writes it, but numbered from
/// `skipped` lines before the window.
fn unified<'a>(
    diff: &'a TextDiff<'a, 'a, 'a, str>,
    label: &str,
    skipped: usize,
    cap: usize,
) -> Capped {
    let mut out = Capped::new(cap);
    let groups = diff.grouped_ops(3);
    for (i, group) in groups.iter().filter(|g| !g.is_empty()).enumerate() {
        if out.cut {
            break;
        }
        if i == 0 {
            out.push(&format!("--- {label}\n+++ {label}\n"));
        }
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        out.push(&format!(
            "@@ -{} +{} @@\n",
            hunk_range(
                skipped + first.old_range().start,
                skipped + last.old_range().end
            ),
            hunk_range(
                skipped + first.new_range().start,
                skipped + last.new_range().end
            ),
        ));
        for change in group.iter().flat_map(|op| diff.iter_changes(op)) {
            out.push(sign(change.tag()));
            out.push(change.value());
            if change.missing_newline() {
                out.push("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

/// A hunk's line range as unified diffs write it (`similar`'s rules: `start` alone for
/// one line; an empty range starts at the line before it).
fn hunk_range(start: usize, end: usize) -> String {
    let len = end.saturating_sub(start);
    match len {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        _ => format!("{},{len}", start + 1),
    }
}

fn sign(tag: ChangeTag) -> &'static str {
    match tag {
        ChangeTag::Equal => " ",
        ChangeTag::Delete => "-",
        ChangeTag::Insert => "+",
    }
}

/// pi's rendering of an edit: `+<n> line` for added lines (numbered in the new file),
/// `-<n> line` for removed ones (numbered in the old), ` <n> line` for up to four lines of
/// context around each change and `   ...` where lines are skipped; numbers padded to
/// `width`. Returns it with the first changed line, numbered in the new file. Linear in
/// the window's lines.
fn numbered_diff<'a>(
    diff: &'a TextDiff<'a, 'a, 'a, str>,
    skipped: usize,
    width: usize,
) -> (Capped, Option<usize>) {
    let mut out = Capped::new(MAX_DETAILS_BYTES);
    let mut emit = |text: &str| {
        if !out.text.is_empty() {
            out.push("\n");
        }
        out.push(text);
    };
    let line = |sign: char, n: usize, text: &str| {
        format!(
            "{sign}{n:>width$} {}",
            text.strip_suffix('\n').unwrap_or(text)
        )
    };
    let skip_marker = format!(" {:width$} ...", "");
    let parts = diff_parts(diff);
    let mut first = None;
    let (mut old_n, mut new_n, mut last_was_change) = (skipped + 1, skipped + 1, false);
    for (i, (tag, lines)) in parts.iter().enumerate() {
        if *tag != ChangeTag::Equal {
            first.get_or_insert(new_n);
            for l in lines {
                if *tag == ChangeTag::Insert {
                    emit(&line('+', new_n, l));
                    new_n += 1;
                } else {
                    emit(&line('-', old_n, l));
                    old_n += 1;
                }
            }
            last_was_change = true;
            continue;
        }
        let next_is_change = parts.get(i + 1).is_some();
        if !last_was_change && !next_is_change {
            old_n += lines.len();
            new_n += lines.len();
            continue;
        }
        let skip_start = if last_was_change {
            0
        } else {
            lines.len().saturating_sub(CONTEXT)
        };
        let shown = lines.get(skip_start..).unwrap_or_default();
        let skip_end = if next_is_change {
            0
        } else {
            shown.len().saturating_sub(CONTEXT)
        };
        let shown = shown.get(..shown.len() - skip_end).unwrap_or_default();
        if skip_start > 0 {
            emit(&skip_marker);
            old_n += skip_start;
            new_n += skip_start;
        }
        for l in shown {
            emit(&line(' ', old_n, l));
            old_n += 1;
            new_n += 1;
        }
        if skip_end > 0 {
            emit(&skip_marker);
            old_n += skip_end;
            new_n += skip_end;
        }
        last_was_change = false;
    }
    (out, first)
}

/// The diff as pi's parts: runs of equal, removed and added lines, in order.
fn diff_parts<'a>(diff: &'a TextDiff<'a, 'a, 'a, str>) -> Vec<(ChangeTag, Vec<&'a str>)> {
    let mut parts: Vec<(ChangeTag, Vec<&str>)> = Vec::new();
    for change in diff.iter_all_changes() {
        match parts.last_mut() {
            Some((tag, lines)) if *tag == change.tag() => lines.push(change.value()),
            _ => parts.push((change.tag(), vec![change.value()])),
        }
    }
    parts
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
