//! `write`: create or replace a file, creating parent folders.

use std::io::{Read, Seek, SeekFrom, Write};

use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, ToolContext, ToolError, ToolOutput};

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

pub(crate) async fn run(args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let a: Args = parse_args("write", args)?;
    let (sandbox, work_dir, raw) = (ctx.sandbox.clone(), ctx.work_dir.clone(), a.path.clone());
    let content = a.content.clone();
    let (path, existed, old) = tokio::task::spawn_blocking(move || {
        // Checked and opened in one step beneath the allowed root: no race with a
        // command that swaps a folder for a link.
        let (mut file, path, existed) = sandbox.open_write(&work_dir, &raw, true)?;
        let io = |e| ToolError::io(&path, e);
        // The old text, for the diff front doors show (files too large or not text: none).
        let len = file.metadata().map_err(io)?.len();
        let old = if !existed {
            Some(String::new())
        } else if len <= 1 << 20 {
            let mut buf = String::new();
            file.read_to_string(&mut buf).ok().map(|_| buf)
        } else {
            None
        };
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(content.as_bytes()).map_err(io)?;
        Ok::<_, ToolError>((path, existed, old))
    })
    .await
    .map_err(|e| ToolError::Failed(format!("write failed: {e}")))??;
    let diff = old.map(|old| {
        similar::TextDiff::from_lines(&old, &a.content)
            .unified_diff()
            .context_radius(3)
            .header(&a.path, &a.path)
            .to_string()
    });
    let verb = if existed { "Replaced" } else { "Created" };
    Ok(
        ToolOutput::ok(format!("{verb} {} ({} bytes)", a.path, a.content.len())).with_details(
            json!({"path": path, "bytes": a.content.len(), "created": !existed, "diff": diff}),
        ),
    )
}
