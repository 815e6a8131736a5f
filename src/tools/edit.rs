//! `edit`: exact-text replacements. Each `oldText` must occur exactly once in the file
//! as it was before the call and edits must not overlap, so a batch of edits means the
//! same thing whatever order it is applied in. Line endings (LF or CRLF) and a UTF-8
//! BOM are kept; the answer is a short unified diff. The `details` carry the diff as pi
//! writes it (numbered lines, four lines of context, `...` for skipped ones) with
//! `firstChangedLine`, so pi renders picogent's edits as its own. A file over
//! `MAX_FILE_BYTES` is refused before it is read; the diff is bounded by `diff`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::registry::Tool;
use super::{arg, diff, Sandbox, ToolContext, ToolError, ToolOutput, MAX_BYTES, MAX_FILE_BYTES};

/// One replacement.
#[derive(Deserialize, JsonSchema)]
struct Replacement {
    /// Exact text to replace
    #[serde(rename = "oldText")]
    old_text: String,
    /// Replacement text
    #[serde(rename = "newText")]
    new_text: String,
}

/// Replace text in a file. Each oldText must occur exactly once in the file as it was before the call; edits must not overlap. Answers with a diff.
#[derive(Deserialize, JsonSchema)]
#[schemars(extend("required" = ["path", "edits"]))]
pub(crate) struct Args {
    /// File path
    path: String,
    #[serde(default)]
    edits: Vec<Replacement>,
    /// Older models send one edit flat; accepted, not advertised.
    #[serde(rename = "oldText")]
    #[schemars(skip)]
    old_text: Option<String>,
    #[serde(rename = "newText")]
    #[schemars(skip)]
    new_text: Option<String>,
}

pub(crate) struct EditTool;

impl Tool for EditTool {
    type Args = Args;
    const NAME: &'static str = "edit";
    const LABEL: &'static str = "Edit";

    fn detail(args: &Value) -> String {
        arg(args, "path").to_string()
    }

    async fn run(mut a: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let budget = diff::Budget::new(ctx.step_timeout);
        if let (Some(old_text), Some(new_text)) = (a.old_text.take(), a.new_text.take()) {
            a.edits.push(Replacement { old_text, new_text });
        }
        if a.edits.is_empty() {
            return Err(ToolError::Args {
                tool: "edit",
                message: "give `edits: [{oldText, newText}]` (or `oldText` and `newText`)".into(),
            });
        }
        let n = a.edits.len();
        let (sandbox, work_dir, shown) =
            (ctx.sandbox.clone(), ctx.work_dir.clone(), a.path.clone());
        let edits = std::mem::take(&mut a.edits);
        // Everything that touches the file or is linear in its size, off the runtime's threads.
        let (path, before, after) =
            tokio::task::spawn_blocking(move || change(&sandbox, &work_dir, &shown, &edits))
                .await
                .map_err(|e| ToolError::Failed(format!("edit failed: {e}")))??;
        let shown = diff::show(
            diff::Request {
                old: before,
                new: after,
                label: a.path.clone(),
                unified_cap: MAX_BYTES,
                numbered: true,
            },
            budget,
        )
        .await;
        let mut text = format!(
            "Edited {} ({n} edit{})",
            a.path,
            if n == 1 { "" } else { "s" }
        );
        if let Some(unified) = &shown.unified {
            text.push('\n');
            text.push_str(unified);
        }
        for note in &shown.notes {
            text.push_str(&format!("\n[{note}]"));
        }
        let mut details = json!({
            "path": path,
            "diff": shown.numbered,
            "firstChangedLine": shown.first_changed,
        });
        if let Some(note) = shown.note() {
            details["diffNote"] = json!(note);
        }
        Ok(ToolOutput::ok(text).with_details(details))
    }
}

const BOM: &str = "\u{feff}";

/// Reads, edits and writes back the file (blocking): its path and its LF-normalised text
/// before and after. Opened in one step beneath the allowed root and written back
/// through the same descriptor, so a path swapped in between is never followed.
fn change(
    sandbox: &Sandbox,
    work_dir: &Path,
    shown: &str,
    edits: &[Replacement],
) -> Result<(PathBuf, String, String), ToolError> {
    let (mut file, path, _) = sandbox.open_write(work_dir, shown, false)?;
    let io = |e| ToolError::io(&path, e);
    // The size of what was opened, before reading it: a 2.5 GB file read whole ended
    // the daemon (allocation failure). `take` bounds a file still growing.
    let too_large = |size| {
        ToolError::TooLarge {
        tool: "edit",
        what: shown.to_string(),
        size,
        hint: "edit reads files whole; change a file this large with bash instead (e.g. `sed -i 's/old/new/' FILE`, or a script)",
    }
    };
    let len = file.metadata().map_err(io)?.len();
    if len > MAX_FILE_BYTES {
        return Err(too_large(len));
    }
    let mut raw = Vec::with_capacity(usize::try_from(len).unwrap_or_default());
    (&mut file)
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(io)?;
    if raw.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(raw.len() as u64));
    }
    let original = String::from_utf8(raw).map_err(|_| {
        ToolError::Failed(format!(
            "{shown} is not UTF-8 text; edit only changes text files"
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
    let updated = apply(&text, edits, shown)?;
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.write_all(bom.as_bytes()).map_err(io)?;
    if crlf {
        file.write_all(updated.replace('\n', "\r\n").as_bytes())
    } else {
        file.write_all(updated.as_bytes())
    }
    .map_err(io)?;
    Ok((path, text, updated))
}

/// Applies the edits to LF-normalised text, or says which edit failed and why.
fn apply(text: &str, edits: &[Replacement], shown: &str) -> Result<String, ToolError> {
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
