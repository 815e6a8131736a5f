//! MCP servers as tools, through the official Rust SDK (`rmcp`).
//!
//! `Mcp` owns one supervisor task per configured server (`server`): it connects (a
//! supervised child over stdio, `stdio`, or Streamable HTTP), lists the tools, keeps the
//! list current when the server announces a change, and reconnects with backoff when the
//! connection ends. A server's tools reach the model as `mcp__<server>__<tool>` with the
//! server's description and JSON schema; a call is forwarded with its arguments, bounded
//! by the server's `timeout_sec` and cancelled with the run, and its result becomes a
//! bounded tool output (text; a note for what cannot be passed on).
//!
//! Nothing here can take picogent down: a server that fails to start, dies or hangs is
//! logged, its tools are reported as failed at call time, and it is restarted. The last
//! known tool list is kept while a server is down, so the tools the model sees change
//! only when a server says its list changed. Dropping the last `Mcp` clone stops the
//! supervisors, which kill their children's process groups.

mod lines;
mod server;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::McpServerConfig;
use crate::provider::ToolSpec;
use crate::tools::ToolOutput;
use server::Server;
pub use transport::Launch;

/// Every tool name of an MCP server starts with this.
pub(crate) const PREFIX: &str = "mcp__";

/// The MCP servers of an agent. Cheap to clone; the default has none.
#[derive(Clone, Default)]
pub struct Mcp {
    shared: Option<Arc<Shared>>,
}

struct Shared {
    servers: Vec<Arc<Server>>,
    /// Cancelled on drop: the supervisors end and kill their children.
    stop: CancellationToken,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Mcp {
    /// Starts a supervisor for each server; returns at once (runs wait for the first
    /// connection attempts with `ready`). Stdio servers start as `launch` says (in a
    /// folder of picogent's, confined unless opted out). Needs a Tokio runtime;
    /// without one no server is started.
    pub fn start(configs: &[McpServerConfig], launch: Launch) -> Mcp {
        if configs.is_empty() {
            return Mcp::default();
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::error!("MCP servers need the async runtime; none started");
            return Mcp::default();
        };
        let stop = CancellationToken::new();
        let launch = Arc::new(launch);
        let servers: Vec<Arc<Server>> = configs
            .iter()
            .map(|c| Arc::new(Server::new(c.clone(), launch.clone())))
            .collect();
        for s in &servers {
            // Owned by `stop`: the task ends when the last `Mcp` clone is dropped.
            rt.spawn(server::supervise(s.clone(), stop.clone()));
        }
        Mcp {
            shared: Some(Arc::new(Shared { servers, stop })),
        }
    }

    fn servers(&self) -> &[Arc<Server>] {
        self.shared.as_ref().map_or(&[], |s| &s.servers)
    }

    /// Waits until every server has had its first connection attempt (each bounded by
    /// its `startup_timeout_sec`), or `cancel`.
    pub(crate) async fn ready(&self, cancel: &CancellationToken) {
        for s in self.servers() {
            tokio::select! {
                _ = s.started() => {}
                _ = cancel.cancelled() => return,
            }
        }
    }

    /// A number that changes whenever some server's tool list changes.
    pub(crate) fn generation(&self) -> u64 {
        self.servers().iter().map(|s| s.generation()).sum()
    }

    /// Each server's name and its tool count, or why it has none.
    pub fn summary(&self) -> Vec<(String, Result<usize, String>)> {
        self.servers()
            .iter()
            .map(|s| (s.config.name.clone(), s.tool_count()))
            .collect()
    }

    /// Runs an `mcp__<server>__<tool>` call. Never fails: errors become error outputs.
    pub(crate) async fn call(
        &self,
        name: &str,
        args: &Value,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let Some((server, tool)) = self
            .servers()
            .iter()
            .find_map(|s| s.tool_named(name).map(|t| (s, t)))
        else {
            return ToolOutput::error(format!(
                "unknown tool {name:?}: no configured MCP server offers it"
            ));
        };
        let arguments = match args {
            Value::Object(m) if m.contains_key("_raw") => {
                return ToolOutput::error(format!(
                    "invalid arguments for {name}: the arguments were not valid JSON"
                ))
            }
            Value::Object(m) => m.clone(),
            Value::Null => Default::default(),
            _ => {
                return ToolOutput::error(format!(
                    "invalid arguments for {name}: expected a JSON object"
                ))
            }
        };
        let timeout = server.config.timeout;
        tokio::select! {
            r = tokio::time::timeout(timeout, server.call(&tool, arguments)) => match r {
                Ok(out) => out,
                Err(_) => ToolOutput::error(format!(
                    "{name} timed out after {} (MCP server {}, timeout_sec)",
                    secs(timeout),
                    server.config.name
                )),
            },
            _ = cancel.cancelled() => ToolOutput::error("aborted: the run was cancelled"),
        }
    }
}

/// MCP servers' tools are one more source of tools for the loop. Each call is bounded
/// by its server's `timeout_sec` and cancelled with the run.
impl crate::tools::registry::Source for Mcp {
    /// Server by server in name order.
    fn specs(&self) -> Vec<ToolSpec> {
        self.servers().iter().flat_map(|s| s.specs()).collect()
    }
    fn owns(&self, name: &str) -> bool {
        name.starts_with(PREFIX)
    }
    fn read_only(&self, _name: &str) -> bool {
        false
    }
    fn call<'a>(
        &'a self,
        name: &'a str,
        args: &'a Value,
        ctx: &'a crate::tools::ToolContext,
    ) -> crate::tools::registry::CallFuture<'a> {
        Box::pin(Mcp::call(self, name, args, &ctx.cancel))
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// `mcp__<server>__<tool>`, with characters providers refuse replaced by `_` and cut to
/// the 64 characters every provider accepts.
fn exposed_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("{PREFIX}{server}__{clean}");
    name.truncate(64);
    name
}

/// A tool result as text for the model: text blocks as they are, embedded text
/// resources with their URI, and a note for what picogent cannot pass on.
fn result_text(content: &Value, structured: Option<&Value>) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in content.as_array().into_iter().flatten() {
        let s = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
        match s("type") {
            "text" => parts.push(s("text").to_string()),
            "resource" => {
                let r = &block["resource"];
                let uri = r["uri"].as_str().unwrap_or("");
                match r["text"].as_str() {
                    Some(t) => parts.push(format!("[resource {uri}]\n{t}")),
                    None => parts.push(format!(
                        "[binary resource {uri} ({}) not shown: picogent passes on text only]",
                        r["mimeType"].as_str().unwrap_or("unknown type")
                    )),
                }
            }
            "resource_link" => parts.push(format!("[resource link: {} {}]", s("uri"), s("name"))),
            kind @ ("image" | "audio") => parts.push(format!(
                "[{kind} ({}) not shown: picogent passes on text only]",
                s("mimeType")
            )),
            other => parts.push(format!("[{other} content not shown]")),
        }
    }
    if parts.is_empty() {
        if let Some(v) = structured {
            parts.push(v.to_string());
        }
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_cleaned_and_bounded() {
        assert_eq!(exposed_name("fs", "read.file"), "mcp__fs__read_file");
        assert_eq!(exposed_name("s", &"x".repeat(100)).len(), 64);
    }

    #[test]
    fn results_keep_text_and_note_what_they_drop() {
        let content = json!([
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}},
        ]);
        assert_eq!(
            result_text(&content, None),
            "hello\n[image (image/png) not shown: picogent passes on text only]\n[resource file:///a.txt]\nA"
        );
        assert_eq!(result_text(&json!([]), Some(&json!({"n": 1}))), "{\"n\":1}");
    }
}
