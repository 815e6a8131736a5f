//! One MCP server: its supervisor task (connect, list tools, follow list changes,
//! reconnect with backoff) and the state calls read (the peer, the tool list).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::transport::{self, Launch};
use crate::config::{McpServerConfig, McpTransport};
use crate::provider::ToolSpec;
use crate::tools::ToolOutput;

/// The first delay before reconnecting; it doubles up to `BACKOFF_MAX`, and starts
/// over after a connection that lasted `STABLE`.
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
const STABLE: Duration = Duration::from_secs(60);

/// A tool as offered to the model, and the server's own name for it.
#[derive(Debug, Clone)]
pub(super) struct McpTool {
    exposed: String,
    original: String,
    description: String,
    schema: Value,
}

#[derive(Default)]
struct State {
    /// The last known list (kept while the server is down).
    tools: Vec<McpTool>,
    /// `Some` while connected.
    peer: Option<Peer<RoleClient>>,
    /// Why the server is not connected, when it is not.
    down: Option<String>,
}

pub(super) struct Server {
    pub(super) config: McpServerConfig,
    launch: Arc<Launch>,
    state: Mutex<State>,
    generation: AtomicU64,
    /// `true` once the first connection attempt has ended, either way.
    started: watch::Sender<bool>,
}

impl Server {
    pub(super) fn new(config: McpServerConfig, launch: Arc<Launch>) -> Server {
        Server {
            config,
            launch,
            state: Mutex::new(State::default()),
            generation: AtomicU64::new(0),
            started: watch::Sender::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub(super) async fn started(&self) {
        let mut rx = self.started.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    pub(super) fn specs(&self) -> Vec<ToolSpec> {
        self.state()
            .tools
            .iter()
            .map(|t| ToolSpec {
                name: Cow::Owned(t.exposed.clone()),
                description: Cow::Owned(t.description.clone()),
                parameters: t.schema.clone(),
            })
            .collect()
    }

    pub(super) fn tool_count(&self) -> Result<usize, String> {
        let st = self.state();
        match (&st.down, st.tools.len()) {
            (Some(why), 0) => Err(why.clone()),
            (_, n) => Ok(n),
        }
    }

    pub(super) fn tool_named(&self, exposed: &str) -> Option<McpTool> {
        self.state()
            .tools
            .iter()
            .find(|t| t.exposed == exposed)
            .cloned()
    }

    /// Forwards one call (the caller bounds it in time).
    pub(super) async fn call(&self, tool: &McpTool, arguments: JsonObject) -> ToolOutput {
        let name = &self.config.name;
        let (peer, down) = {
            let st = self.state();
            (st.peer.clone(), st.down.clone())
        };
        let Some(peer) = peer else {
            return ToolOutput::error(format!(
                "MCP server {name} is not running ({}); picogent is restarting it, try again later",
                down.unwrap_or_else(|| "not connected".into())
            ));
        };
        let params = CallToolRequestParams::new(tool.original.clone()).with_arguments(arguments);
        match peer.call_tool(params).await {
            Err(e) => ToolOutput::error(format!("MCP server {name}: {e}")),
            Ok(result) => {
                let content = serde_json::to_value(&result.content).unwrap_or_default();
                let text = super::result_text(&content, result.structured_content.as_ref());
                let (text, cut) = crate::tools::truncate::head_bytes(text);
                let text = if cut {
                    format!("{text}\n[output cut at 50 KB]")
                } else {
                    text
                };
                if result.is_error == Some(true) {
                    ToolOutput::error(text)
                } else {
                    ToolOutput::ok(text)
                }
            }
        }
    }

    fn set_down(&self, why: String) {
        let mut st = self.state();
        st.peer = None;
        st.down = Some(why);
    }

    /// Records a fresh tool list; bumps the generation only when it differs.
    fn set_tools(&self, tools: Vec<McpTool>, peer: Option<Peer<RoleClient>>) {
        let mut st = self.state();
        let same = st.tools.len() == tools.len()
            && st.tools.iter().zip(&tools).all(|(a, b)| {
                a.exposed == b.exposed && a.description == b.description && a.schema == b.schema
            });
        st.tools = tools;
        if peer.is_some() {
            st.peer = peer;
            st.down = None;
        }
        if !same {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The server's tools after `enabled_tools` and `disabled_tools`.
    fn select(&self, listed: Vec<rmcp::model::Tool>) -> Vec<McpTool> {
        let c = &self.config;
        let mut out: Vec<McpTool> = Vec::new();
        for t in listed {
            let original = t.name.to_string();
            let wanted = c
                .enabled_tools
                .as_ref()
                .is_none_or(|e| e.contains(&original))
                && !c.disabled_tools.contains(&original);
            if !wanted {
                continue;
            }
            let exposed = super::exposed_name(&c.name, &original);
            if out.iter().any(|o| o.exposed == exposed) {
                tracing::warn!(server = %c.name, tool = %original, "MCP tool left out: its name clashes with another tool's after cleaning ({exposed})");
                continue;
            }
            out.push(McpTool {
                exposed,
                original,
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                schema: Value::Object((*t.input_schema).clone()),
            });
        }
        out
    }
}

/// Receives the server's notifications: a tool-list change wakes the supervisor.
struct Handler {
    refresh: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.refresh.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info.name = "picogent".into();
        info.client_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }
}

/// A live connection: the service and, for stdio, the child it talks to.
struct Connection {
    service: RunningService<RoleClient, Handler>,
    child: Option<transport::Child>,
    refresh: Arc<Notify>,
}

async fn connect(server: &Server) -> Result<Connection, String> {
    let refresh = Arc::new(Notify::new());
    let handler = Handler {
        refresh: refresh.clone(),
    };
    match &server.config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
            sandbox,
        } => {
            let spec = transport::StdioSpec {
                name: &server.config.name,
                command,
                args,
                env,
                cwd: cwd.as_deref(),
                confined: *sandbox,
            };
            if let Some(c) = &server.launch.confinement {
                c.settle().await;
            }
            let (child, stdout, stdin) = transport::spawn(&spec, &server.launch)?;
            let service = handler
                .serve((stdout, stdin))
                .await
                .map_err(|e| format!("{e}{}", child.last_words()))?;
            Ok(Connection {
                service,
                child: Some(child),
                refresh,
            })
        }
        McpTransport::Http { url, headers } => {
            let transport = transport::http_transport(url, headers)?;
            let service = handler.serve(transport).await.map_err(|e| e.to_string())?;
            Ok(Connection {
                service,
                child: None,
                refresh,
            })
        }
    }
}

/// Lists the tools of a connected server.
async fn list(server: &Server, peer: &Peer<RoleClient>) -> Result<Vec<McpTool>, String> {
    match tokio::time::timeout(server.config.startup_timeout, peer.list_all_tools()).await {
        Ok(Ok(tools)) => Ok(server.select(tools)),
        Ok(Err(e)) => Err(format!("listing its tools failed: {e}")),
        Err(_) => Err("listing its tools timed out".into()),
    }
}

/// Connects and lists the tools, within the startup timeout.
async fn open(server: &Server) -> Result<(Connection, Vec<McpTool>), String> {
    let limit = server.config.startup_timeout;
    let attempt = async {
        let conn = connect(server).await?;
        let tools = list(server, conn.service.peer()).await?;
        Ok::<_, String>((conn, tools))
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no answer within {} s (startup_timeout_sec)",
            limit.as_secs()
        )),
    }
}

/// Follows a connection until it ends (or `stop`): tool-list changes are picked up as
/// they are announced. Returns why it ended.
async fn follow(server: &Server, conn: Connection, stop: &CancellationToken) -> String {
    let Connection {
        service,
        mut child,
        refresh,
    } = conn;
    let peer = service.peer().clone();
    let quit = service.waiting();
    tokio::pin!(quit);
    loop {
        tokio::select! {
            r = &mut quit => {
                let words = child.as_ref().map(|c| c.last_words()).unwrap_or_default();
                return match r {
                    Ok(reason) => format!("the connection ended ({reason:?}){words}"),
                    Err(e) => format!("the connection failed: {e}{words}"),
                };
            }
            status = async { match child.as_mut() { Some(c) => c.wait().await, None => std::future::pending().await } } => {
                let words = child.as_ref().map(|c| c.last_words()).unwrap_or_default();
                return format!("the server exited ({status}){words}");
            }
            _ = refresh.notified() => match list(server, &peer).await {
                Ok(tools) => {
                    tracing::info!(server = %server.config.name, tools = tools.len(), "MCP server changed its tools");
                    server.set_tools(tools, None);
                }
                Err(e) => tracing::warn!(server = %server.config.name, "MCP tool list after a change: {e}"),
            },
            _ = stop.cancelled() => return String::new(),
        }
    }
}

/// The supervisor of one server: connect, follow, reconnect with backoff, until `stop`.
pub(super) async fn supervise(server: Arc<Server>, stop: CancellationToken) {
    let name = server.config.name.clone();
    let mut delay = BACKOFF_START;
    loop {
        let began = Instant::now();
        let opened = tokio::select! {
            r = open(&server) => r,
            _ = stop.cancelled() => return,
        };
        match opened {
            Ok((conn, tools)) => {
                tracing::info!(server = %name, tools = tools.len(), "MCP server connected");
                server.set_tools(tools, Some(conn.service.peer().clone()));
                server.started.send_replace(true);
                let why = follow(&server, conn, &stop).await;
                if stop.is_cancelled() {
                    return;
                }
                server.set_down(why.clone());
                if began.elapsed() >= STABLE {
                    delay = BACKOFF_START;
                }
                tracing::warn!(server = %name, "MCP server stopped: {why}; restarting in {} s", delay.as_secs());
            }
            Err(why) => {
                server.set_down(why.clone());
                server.started.send_replace(true);
                tracing::warn!(server = %name, "MCP server failed to start: {why}; its tools are left out; retrying in {} s", delay.as_secs());
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.cancelled() => return,
        }
        delay = (delay * 2).min(BACKOFF_MAX);
    }
}
