//! `write`: create or replace a file, creating parent folders. Content over
//! `MAX_FILE_BYTES` is refused; the diff against the old text is bounded by `diff`.

use std::io::{Read, Seek, SeekFrom, Write};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::diff::{self, MAX_DETAILS_BYTES};
use super::registry::Tool;
use super::{arg, ToolContext, ToolError, ToolOutput, MAX_FILE_BYTES};

/// The largest old text read for the diff; a larger file is replaced without one.
const MAX_OLD_BYTES: u64 = 1 << 20;

/// Create or overwrite a file with the given content. Parent folders are created.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Args {
    /// File path
    path: String,
    /// The whole new content
    content: String,
}

pub(crate) struct WriteTool;

impl Tool for WriteTool {
    type Args = Args;
    const NAME: &'static str = "write";
    const LABEL: &'static str = "Write";

    fn detail(args: &Value) -> String {
        arg(args, "path").to_string()
    }

    async fn run(a: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let budget = diff::Budget::new(ctx.step_timeout);
        let Args {
            path: shown,
            content,
        } = a;
        let bytes = content.len();
        if bytes as u64 > MAX_FILE_BYTES {
            return Err(ToolError::TooLarge {
                tool: "write",
                what: format!("the content for {shown}"),
                size: bytes as u64,
                hint: "write it in parts (the first with write, the rest appended with bash `cat >> FILE`) or generate it with a command",
            });
        }
        let (sandbox, work_dir, raw) = (ctx.sandbox.clone(), ctx.work_dir.clone(), shown.clone());
        let (path, existed, old, content) = tokio::task::spawn_blocking(move || {
            // Checked and opened in one step beneath the allowed root: no race with a
            // command that swaps a folder for a link.
            let (mut file, path, existed) = sandbox.open_write(&work_dir, &raw, true)?;
            let io = |e| ToolError::io(&path, e);
            // The old text, for the diff front doors show (files too large or not text: none).
            let len = file.metadata().map_err(io)?.len();
            let old = if !existed {
                Some(String::new())
            } else if len <= MAX_OLD_BYTES {
                let mut buf = String::new();
                (&mut file)
                    .take(MAX_OLD_BYTES)
                    .read_to_string(&mut buf)
                    .ok()
                    .map(|_| buf)
            } else {
                None
            };
            file.set_len(0).map_err(io)?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            file.write_all(content.as_bytes()).map_err(io)?;
            Ok::<_, ToolError>((path, existed, old, content))
        })
        .await
        .map_err(|e| ToolError::Failed(format!("write failed: {e}")))??;
        let (diff, note) = match old {
            Some(old) => {
                let shown = diff::show(
                    diff::Request {
                        old,
                        new: content,
                        label: shown.clone(),
                        unified_cap: MAX_DETAILS_BYTES,
                        numbered: false,
                    },
                    budget,
                )
                .await;
                let note = shown.note();
                (shown.unified, note)
            }
            None => (
                None,
                Some(format!(
                    "diff not shown: the file replaced was over {} or not UTF-8 text",
                    diff::size(MAX_OLD_BYTES)
                )),
            ),
        };
        let verb = if existed { "Replaced" } else { "Created" };
        let mut details = json!({"path": path, "bytes": bytes, "created": !existed, "diff": diff});
        if let Some(note) = note {
            details["diffNote"] = json!(note);
        }
        Ok(ToolOutput::ok(format!("{verb} {shown} ({bytes} bytes)")).with_details(details))
    }
}
