//! `edit`: exact-text replacements. Each `oldText` must occur exactly once in the file
//! as it was before the call and edits must not overlap, so a batch of edits means the
//! same thing whatever order it is applied in. Line endings (LF or CRLF) and a UTF-8
//! BOM are kept; the answer is a short unified diff.

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
    // The first line that differs, numbered in the new file, as pi's details have it.
    let first_changed = lines
        .ops()
        .iter()
        .find(|op| op.tag() != similar::DiffTag::Equal)
        .map(|op| op.new_range().start + 1);
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
    .with_details(json!({"path": path, "diff": diff, "firstChangedLine": first_changed})))
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
