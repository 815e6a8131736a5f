//! One editor session: the agent confined to the session's `cwd` (its only allowed
//! path) with the editor's MCP servers beside the configured ones, the picogent
//! session it writes, and the run going on in it now.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use agent_client_protocol::v1::schema::McpServer;
use tokio_util::sync::CancellationToken;

use crate::agent::control::RunControl;
use crate::agent::Agent;
use crate::config::{Config, McpServerConfig, McpTransport};
use crate::util::lock;

/// An editor's MCP servers per session, at most (each is a process).
const MAX_EDITOR_SERVERS: usize = 32;

/// A session's run now: how to cancel it.
pub(crate) struct Running {
    pub(crate) cancel: CancellationToken,
    pub(crate) control: Option<RunControl>,
}

pub(crate) struct AcpSession {
    pub(crate) agent: Agent,
    /// The id the editor knows the session by (picogent's id, or pi's UUID for a pi
    /// session loaded).
    pub(crate) acp_id: String,
    /// The session's file name in its folder (picogent's session id).
    pub(crate) id: String,
    pub(crate) work_dir: PathBuf,
    pub(crate) running: Mutex<Option<Running>>,
}

impl AcpSession {
    /// Cancels the run going on (if any) when dropped.
    pub(crate) fn cancel_guard(&self) -> Option<tokio_util::sync::DropGuard> {
        lock(&self.running)
            .as_ref()
            .map(|r| r.cancel.clone().drop_guard())
    }

    /// Cancels the run going on, if any.
    pub(crate) fn cancel(&self) {
        if let Some(r) = lock(&self.running).as_ref() {
            r.cancel.cancel();
        }
    }
}

/// A name an editor gave a server, as a tool name's part (`[A-Za-z0-9_-]`).
fn server_name(name: &str, taken: &[McpServerConfig]) -> String {
    let mut n: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    if n.is_empty() {
        n = "editor".into();
    }
    let base = n.clone();
    let mut i = 2;
    while taken.iter().any(|s| s.name == n) {
        n = format!("{base}_{i}");
        i += 1;
    }
    n
}

/// The editor's MCP servers as picogent's (stdio ones confined like its commands).
fn mcp_servers(given: &[McpServer], base: &Config) -> Result<Vec<McpServerConfig>, String> {
    if given.len() > MAX_EDITOR_SERVERS {
        return Err(format!(
            "{} MCP servers: picogent starts at most {MAX_EDITOR_SERVERS} of an editor's per session",
            given.len()
        ));
    }
    let mut out: Vec<McpServerConfig> = base.mcp_servers.clone();
    let timeout = base.limits.step_timeout;
    for s in given {
        let (name, transport) = match s {
            McpServer::Stdio(s) => (
                &s.name,
                McpTransport::Stdio {
                    command: s.command.to_string_lossy().into_owned(),
                    args: s.args.clone(),
                    env: s
                        .env
                        .iter()
                        .map(|e| (e.name.clone(), e.value.clone()))
                        .collect::<BTreeMap<_, _>>(),
                    cwd: None,
                    sandbox: true,
                },
            ),
            McpServer::Http(h) => (
                &h.name,
                McpTransport::Http {
                    url: h.url.clone(),
                    headers: h
                        .headers
                        .iter()
                        .map(|e| (e.name.clone(), e.value.clone()))
                        .collect(),
                },
            ),
            _ => return Err("picogent takes MCP servers over stdio and HTTP (not SSE)".into()),
        };
        let name = server_name(name, &out);
        out.push(McpServerConfig {
            name,
            transport,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            timeout,
            startup_timeout: Duration::from_secs(30),
            env_file: None,
        });
    }
    Ok(out)
}

/// The configuration of a session in `cwd`: the tools confined to it (inside the
/// configured allowed paths, when there are any).
pub(crate) fn config_for(
    base: &Config,
    cwd: &Path,
    mcp: &[McpServer],
    session_dir: Option<PathBuf>,
) -> Result<Config, String> {
    if !cwd.is_absolute() {
        return Err(format!("cwd {} is not an absolute path", cwd.display()));
    }
    let cwd = std::fs::canonicalize(cwd).map_err(|e| format!("cwd {}: {e}", cwd.display()))?;
    if !cwd.is_dir() {
        return Err(format!("cwd {} is not a folder", cwd.display()));
    }
    if !base.within_allowed_paths(&cwd) {
        return Err(format!(
            "cwd {} is outside the configured allowed_paths",
            cwd.display()
        ));
    }
    let mut cfg = base.clone();
    cfg.mcp_servers = mcp_servers(mcp, base)?;
    cfg.work_dir = cwd.clone();
    cfg.policy.allowed_paths = vec![cwd];
    cfg.session_dir = session_dir;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    #[test]
    fn editor_server_names_become_tool_name_parts() {
        let taken = vec![];
        assert_eq!(super::server_name("my server/1", &taken), "my_server_1");
        assert_eq!(super::server_name("", &taken), "editor");
    }
}
