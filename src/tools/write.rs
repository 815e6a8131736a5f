//! `write`: create or replace a file, creating parent folders.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, ToolContext, ToolError, ToolOutput};

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

pub async fn run(args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let a: Args = parse_args("write", args)?;
    let path = ctx.sandbox.check_write(&ctx.work_dir, &a.path)?;
    if path.is_dir() {
        return Err(ToolError::Failed(format!(
            "{} is a folder; give a file path",
            a.path
        )));
    }
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| ToolError::io(parent, e))?;
    }
    let existed = path.exists();
    // The old text, for the diff front doors show (files too large or not text: none).
    let old = match tokio::fs::metadata(&path).await {
        Ok(m) if m.len() <= 1 << 20 => tokio::fs::read_to_string(&path).await.ok(),
        Ok(_) => None,
        Err(_) => Some(String::new()),
    };
    tokio::fs::write(&path, a.content.as_bytes())
        .await
        .map_err(|e| ToolError::io(&path, e))?;
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
