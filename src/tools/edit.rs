//! `edit`: exact-text replacements. Each `oldText` must occur exactly once in the file
//! as it was before the call and edits must not overlap, so a batch of edits means the
//! same thing whatever order it is applied in. Line endings (LF or CRLF) and a UTF-8
//! BOM are kept; the answer is a short unified diff. The `details` carry the diff as pi
//! writes it (numbered lines, four lines of context, `...` for skipped ones) with
//! `firstChangedLine`, so pi renders picogent's edits as its own.

use std::io::{Read, Seek, SeekFrom, Write};

use serde::Deserialize;
use serde_json::{json, Value};

use super::truncate::head_bytes;
use super::{parse_args, ToolContext, ToolError, ToolOutput};

#[derive(Deserialize)]
struct Edit {
    #[serde(rename = "oldText")]
    old_text: String,
    #[serde(rename = "newText")]
    new_text: String,
}

#[derive(Deserialize)]
struct Args {
    path: String,
    #[serde(default)]
    edits: Vec<Edit>,
    #[serde(rename = "oldText")]
    old_text: Option<String>,
    #[serde(rename = "newText")]
    new_text: Option<String>,
}

const BOM: &str = "\u{feff}";

pub(crate) async fn run(args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let mut a: Args = parse_args("edit", args)?;
    if let (Some(old_text), Some(new_text)) = (a.old_text.take(), a.new_text.take()) {
        a.edits.push(Edit { old_text, new_text });
    }
    if a.edits.is_empty() {
        return Err(ToolError::Args {
            tool: "edit",
            message: "give `edits: [{oldText, newText}]` (or `oldText` and `newText`)".into(),
        });
    }
    let (sandbox, work_dir, shown) = (ctx.sandbox.clone(), ctx.work_dir.clone(), a.path.clone());
    // Checked and opened in one step beneath the allowed root; the same descriptor is
    // written back, so a path swapped in between is never followed.
    let (mut file, path, raw) = tokio::task::spawn_blocking(move || {
        let (mut file, path, _) = sandbox.open_write(&work_dir, &shown, false)?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)
            .map_err(|e| ToolError::io(&path, e))?;
        Ok::<_, ToolError>((file, path, raw))
    })
    .await
    .map_err(|e| ToolError::Failed(format!("edit failed: {e}")))??;
    let original = String::from_utf8(raw).map_err(|_| {
        ToolError::Failed(format!(
            "{} is not UTF-8 text; edit only changes text files",
            a.path
        ))
    })?;
    let (bom, body) = match original.strip_prefix(BOM) {
        Some(rest) => (BOM, rest),
        None => ("", original.as_str()),
    };
    let crlf = body.contains("\r\n");
    let text = if crlf {
        body.replace("\r\n", "\n")
    } else {
        body.to_string()
    };
    let updated = apply(&text, &a.edits, &a.path)?;
    let lines = similar::TextDiff::from_lines(&text, &updated);
    let (numbered, first_changed) = numbered_diff(&text, &updated, &lines);
    let diff = lines
        .unified_diff()
        .context_radius(3)
        .header(&a.path, &a.path)
        .to_string();
    let mut out = if crlf {
        updated.replace('\n', "\r\n")
    } else {
        updated
    };
    out.insert_str(0, bom);
    let p = path.clone();
    tokio::task::spawn_blocking(move || {
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(out.as_bytes())
    })
    .await
    .map_err(|e| ToolError::Failed(format!("edit failed: {e}")))?
    .map_err(|e| ToolError::io(&p, e))?;
    let (shown, cut) = head_bytes(diff.clone());
    let note = if cut { "\n[diff cut at 50 KB]" } else { "" };
    let n = a.edits.len();
    Ok(ToolOutput::ok(format!(
        "Edited {} ({n} edit{})\n{shown}{note}",
        a.path,
        if n == 1 { "" } else { "s" }
    ))
    .with_details(json!({"path": path, "diff": numbered, "firstChangedLine": first_changed})))
}

/// Lines of context pi shows around a change.
const CONTEXT: usize = 4;

/// pi's rendering of an edit: `+<n> line` for added lines (numbered in the new file),
/// `-<n> line` for removed ones (numbered in the old), ` <n> line` for up to four lines of
/// context around each change and `   ...` where lines are skipped; numbers padded to
/// the widest. Returns it with the first changed line, numbered in the new file.
fn numbered_diff<'a>(
    old: &str,
    new: &str,
    diff: &'a similar::TextDiff<'a, 'a, 'a, str>,
) -> (String, Option<usize>) {
    let width = old
        .split('\n')
        .count()
        .max(new.split('\n').count())
        .to_string()
        .len();
    let line = |sign: char, n: usize, text: &str| {
        format!(
            "{sign}{n:>width$} {}",
            text.strip_suffix('\n').unwrap_or(text)
        )
    };
    let skipped = format!(" {:width$} ...", "");
    // The diff as pi's parts: runs of equal, removed and added lines, in order.
    let mut parts: Vec<(similar::ChangeTag, Vec<&'a str>)> = Vec::new();
    for change in diff.iter_all_changes() {
        match parts.last_mut() {
            Some((tag, lines)) if *tag == change.tag() => lines.push(change.value()),
            _ => parts.push((change.tag(), vec![change.value()])),
        }
    }
    let (mut out, mut first) = (Vec::new(), None);
    let (mut old_n, mut new_n, mut last_was_change) = (1usize, 1usize, false);
    for (i, (tag, lines)) in parts.iter().enumerate() {
        if *tag != similar::ChangeTag::Equal {
            first.get_or_insert(new_n);
            for l in lines {
                if *tag == similar::ChangeTag::Insert {
                    out.push(line('+', new_n, l));
                    new_n += 1;
                } else {
                    out.push(line('-', old_n, l));
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
            out.push(skipped.clone());
            old_n += skip_start;
            new_n += skip_start;
        }
        for l in shown {
            out.push(line(' ', old_n, l));
            old_n += 1;
            new_n += 1;
        }
        if skip_end > 0 {
            out.push(skipped.clone());
            old_n += skip_end;
            new_n += skip_end;
        }
        last_was_change = false;
    }
    (out.join("\n"), first)
}

/// Applies the edits to LF-normalised text, or says which edit failed and why.
fn apply(text: &str, edits: &[Edit], shown: &str) -> Result<String, ToolError> {
    let mut spans: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, edit number)
    for (i, e) in edits.iter().enumerate() {
        let n = i + 1;
        let old = e.old_text.replace("\r\n", "\n");
        if old.is_empty() {
            return Err(ToolError::Failed(format!("edit {n}: oldText is empty")));
        }
        let mut found = text.match_indices(&old);
        let Some((start, _)) = found.next() else {
            let hint = if text.contains(old.trim()) {
                " (it does occur with different leading or trailing whitespace)"
            } else {
                ""
            };
            return Err(ToolError::Failed(format!(
                "edit {n}: oldText was not found in {shown}{hint}; read the file and copy the text exactly"
            )));
        };
        let more = found.count();
        if more > 0 {
            return Err(ToolError::Failed(format!(
                "edit {n}: oldText occurs {} times in {shown}; include more surrounding lines so it occurs once",
                more + 1
            )));
        }
        spans.push((start, start + old.len(), n));
    }
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| spans[i].0);
    for w in order.windows(2) {
        let (a, b) = (spans[w[0]], spans[w[1]]);
        if b.0 < a.1 {
            return Err(ToolError::Failed(format!(
                "edits {} and {} overlap in {shown}; merge them into one edit",
                a.2.min(b.2),
                a.2.max(b.2)
            )));
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for &i in &order {
        let (start, end, _) = spans[i];
        out.push_str(&text[pos..start]);
        out.push_str(&edits[i].new_text.replace("\r\n", "\n"));
        pos = end;
    }
    out.push_str(&text[pos..]);
    if out == text {
        return Err(ToolError::Failed(format!(
            "the edits leave {shown} unchanged (newText equals oldText)"
        )));
    }
    Ok(out)
}
