//! How picogent reaches a server: a supervised child over stdio, or Streamable HTTP.
//!
//! A stdio server is started like bash's commands are supervised: its own session and
//! process group (so everything it starts can be killed together, `npx` and the node
//! process under it included), a parent-death signal (killed if picogent is), and the
//! secrets scrubbed from its environment, except those its configuration lists in
//! `env`. It is not confined by the sandbox: it is the operator's program, not the
//! model's. Its stderr goes to the log; the last lines are kept to say why it died.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use tokio::io::AsyncBufReadExt;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

/// How many of the server's last stderr lines are kept, and how long each may be.
const KEEP_LINES: usize = 5;
const LINE_CHARS: usize = 300;

/// A running stdio server. Dropping it kills its whole process group.
pub(super) struct Child {
    child: tokio::process::Child,
    pgid: Option<i32>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Forwards stderr to the log; aborted on drop.
    stderr_task: JoinHandle<()>,
}

impl Child {
    pub(super) async fn wait(&mut self) -> String {
        match self.child.wait().await {
            Ok(st) => st.to_string(),
            Err(e) => format!("waiting for it failed: {e}"),
        }
    }

    /// ": <its last stderr lines>", or nothing.
    pub(super) fn last_words(&self) -> String {
        let lines = match self.stderr.lock() {
            Ok(l) => l.clone(),
            Err(p) => p.into_inner().clone(),
        };
        if lines.is_empty() {
            String::new()
        } else {
            let v: Vec<String> = lines.into_iter().collect();
            format!("; its last output: {}", v.join(" | "))
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            // SAFETY: a plain system call. The group is the child's own (setsid), and a
            // group id is not reused while any member of the group lives.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        self.stderr_task.abort();
        // kill_on_drop reaps the leader itself.
    }
}

/// Starts a stdio server: its stdout and stdin are the transport.
pub(super) fn spawn(
    name: &str,
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<(Child, ChildStdout, ChildStdin), String> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Secrets removed from what it inherits; what its configuration sets comes after,
    // so a secret listed in `env` is passed on.
    crate::tools::sandbox::supervise(&mut cmd);
    cmd.envs(env);
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "cannot start {command:?}: no such command (is it installed and on PATH, or is cwd {} missing?)",
            cwd.display()
        ),
        _ => format!("cannot start {command:?}: {e}"),
    })?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the child's pipes are missing".into());
    };
    let stderr = Arc::new(Mutex::new(VecDeque::new()));
    let stderr_task = match child.stderr.take() {
        Some(pipe) => tokio::spawn(forward_stderr(name.to_string(), pipe, stderr.clone())),
        None => tokio::spawn(async {}),
    };
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    Ok((
        Child {
            child,
            pgid,
            stderr,
            stderr_task,
        },
        stdout,
        stdin,
    ))
}

async fn forward_stderr(
    name: String,
    pipe: tokio::process::ChildStderr,
    keep: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = tokio::io::BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(LINE_CHARS).collect();
        tracing::debug!(server = %name, "MCP server: {line}");
        let mut k = match keep.lock() {
            Ok(k) => k,
            Err(p) => p.into_inner(),
        };
        if k.len() == KEEP_LINES {
            k.pop_front();
        }
        k.push_back(line);
    }
}

/// The Streamable HTTP transport for `url`, sending `headers` with every request.
pub(super) fn http_transport(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<impl rmcp::transport::Transport<rmcp::RoleClient> + 'static, String> {
    // rmcp's reqwest uses rustls without a built-in crypto provider; picogent's is ring.
    // Installing it again when it already is returns an error, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut map = HashMap::new();
    for (k, v) in headers {
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| format!("header {k:?}: {e}"))?;
        let value =
            reqwest::header::HeaderValue::from_str(v).map_err(|e| format!("header {k:?}: {e}"))?;
        map.insert(name, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(map);
    Ok(StreamableHttpClientTransport::from_config(config))
}
