//! How picogent reaches a server: a supervised child over stdio, or Streamable HTTP.
//!
//! A stdio server is started like bash's commands are supervised: its own session and
//! process group (so everything it starts can be killed together, `npx` and the node
//! process under it included), a parent-death signal (killed if picogent is), and,
//! where user namespaces work, a PID namespace of its own, confined or not (`"sandbox":
//! false` keeps only that): what it starts in a session of its own dies with it too.
//!
//! It acts for the agent, so nothing the agent wrote may steer it: its program is found
//! on a `PATH` without folders the agent's commands can write (an absolute program
//! there is refused), it starts in a folder of picogent's own (never the agent's
//! working folder, where a planted `mcp_server_git.py` or `node_modules` would be
//! loaded), with a pinned environment (picogent's secrets never, only what its
//! configuration lists in `env`), and by default confined like the agent's commands
//! (`"sandbox": false` per server opts out, with a warning). Its stderr goes to the
//! log; the last lines are kept to say why it died.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use tokio::io::AsyncBufReadExt;
use tokio::io::DuplexStream;
use tokio::process::ChildStdin;
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
    /// Passes stdout on to the client, line by line (`lines.rs`); aborted on drop.
    stdout_task: JoinHandle<()>,
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
            crate::sandbox::kill_group(pgid);
        }
        self.stderr_task.abort();
        self.stdout_task.abort();
        // kill_on_drop reaps the leader itself.
    }
}

/// What every stdio server of an agent starts from.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// picogent's own folder for its servers (in its state, out of commands' reach).
    pub(crate) home: PathBuf,
    /// The agent's confinement, when commands are confined.
    pub(crate) confinement: Option<crate::sandbox::confine::Confinement>,
    /// What the agent's commands can write (resolved; empty: everything).
    pub(crate) writable: Vec<PathBuf>,
    /// The operator's home (`HOME` at start).
    pub(crate) operator_home: Option<PathBuf>,
}

/// One stdio server's settings, as configured.
pub(super) struct StdioSpec<'a> {
    pub(super) name: &'a str,
    pub(super) command: &'a str,
    pub(super) args: &'a [String],
    pub(super) env: &'a BTreeMap<String, String>,
    pub(super) cwd: Option<&'a Path>,
    pub(super) confined: bool,
}

impl Launch {
    /// The server's program, working folder and the command that starts it.
    fn command(&self, spec: &StdioSpec) -> Result<tokio::process::Command, String> {
        let path = crate::sandbox::programs::trusted_path(&self.writable);
        let program = self.program(spec, &path)?;
        let own = self.home.join(spec.name);
        let (cwd, tmp) = (own.join("cwd"), own.join("tmp"));
        for d in [&cwd, &tmp] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let confinement = self.confinement.as_ref().filter(|_| spec.confined);
        let home =
            crate::sandbox::programs::trusted_home(self.operator_home.as_deref(), &self.writable);
        if self.confinement.is_some() && !spec.confined {
            tracing::warn!(server = spec.name, "MCP server runs unconfined (\"sandbox\": false): it can do whatever picogent's user can");
        }
        let (mut cmd, dir) = match confinement {
            Some(c) => confined_command(
                c,
                &program,
                spec,
                &tmp,
                self.npm_cache(home.as_deref(), spec.name),
            ),
            None => {
                let supervised = self
                    .confinement
                    .as_ref()
                    .and_then(|c| c.supervised_command(&program, spec.args));
                let mut cmd = supervised.unwrap_or_else(|| {
                    let mut cmd = tokio::process::Command::new(&program);
                    cmd.args(spec.args);
                    cmd
                });
                cmd.env_clear().env("TMPDIR", &tmp);
                (cmd, spec.cwd.map_or(cwd, Path::to_path_buf))
            }
        };
        // The operator's home only when no command could have written what programs
        // read from it (Python's user site, `.npmrc`, uv's configuration); otherwise
        // one of picogent's own, and no user site.
        match home {
            Some(home) => {
                cmd.env("HOME", home);
            }
            None => {
                let home = own.join("home");
                std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
                cmd.env("HOME", home).env("PYTHONNOUSERSITE", "1");
            }
        }
        // Only these of picogent's variables, and `TERM`.
        for var in crate::sandbox::programs::BASE_ENV.iter().chain(&["TERM"]) {
            if let Some(v) = std::env::var_os(var) {
                cmd.env(var, v);
            }
        }
        cmd.env("PATH", path).current_dir(dir);
        Ok(cmd)
    }

    /// An npm cache of the server's own in the operator's home
    /// (`~/.cache/picogent/mcp/<name>/npm`), kept between its starts so that `npx -y
    /// pkg` downloads once: only when that home is trusted and the cache lies outside
    /// every path the agent's commands write. Never `~/.npm`: what a confined server
    /// wrote there, the operator's own `npx` (or an unconfined server) would run; and
    /// one per server, so that one cannot change another's packages.
    fn npm_cache(&self, home: Option<&Path>, name: &str) -> Option<PathBuf> {
        let cache = home?.join(".cache/picogent/mcp").join(name).join("npm");
        std::fs::create_dir_all(&cache).ok()?;
        let real = crate::sandbox::resolved(&cache);
        let reachable = self
            .writable
            .iter()
            .any(|w| real.starts_with(w) || w.starts_with(&real));
        (!reachable).then_some(real)
    }

    /// The server's program found on `path`, refused when it or the configured `cwd`
    /// lies where the agent's commands can write.
    fn program(&self, spec: &StdioSpec, path: &std::ffi::OsString) -> Result<PathBuf, String> {
        // With no allowed paths, commands may write anywhere picogent's user can: that
        // is the operator's choice, and no place is safer than another then.
        let inside = |p: &Path| {
            let real = crate::sandbox::resolved(p);
            self.writable.iter().any(|w| real.starts_with(w))
        };
        let program = crate::sandbox::programs::resolve(spec.command, path)
            .map_err(|e| format!("cannot start {:?}: {e}", spec.command))?;
        if inside(&program) {
            return Err(format!(
                "cannot start {}: it lies where the agent's commands can write (allowed paths), so the agent could replace it",
                program.display()
            ));
        }
        if let Some(cwd) = spec.cwd.filter(|c| inside(c)) {
            return Err(format!(
                "cwd {} lies where the agent's commands can write (allowed paths): the agent could plant modules the server loads from there; leave cwd unset",
                cwd.display()
            ));
        }
        Ok(program)
    }
}

/// The confined command that starts `program`, and the folder it starts in.
fn confined_command(
    c: &crate::sandbox::confine::Confinement,
    program: &Path,
    spec: &StdioSpec,
    tmp: &Path,
    npm_cache: Option<PathBuf>,
) -> (tokio::process::Command, PathBuf) {
    // Its own private /tmp is its working folder and its caches' home: empty,
    // and gone with it (under Landlock alone, picogent's folder for it) — but for
    // npm's cache, a folder of this server's where the agent cannot write it
    // (`npm_cache`), so `npx` starts warm. The operator's home stays its home, read-only like the rest
    // of the system (version managers' shims find their installs there).
    // Settled before (see `server::connect`): no probe runs on the runtime here.
    let inner = if c.namespaces_now() {
        PathBuf::from("/tmp")
    } else {
        tmp.to_path_buf()
    };
    // The server's own files named in its configuration stay visible.
    let shown: Vec<PathBuf> = spec
        .args
        .iter()
        .map(PathBuf::from)
        .filter(|a| a.is_absolute())
        .collect();
    let mut cmd = c.command_showing(program, spec.args, tmp, &shown, npm_cache.as_deref());
    cmd.env_clear()
        .env("TMPDIR", &inner)
        .env("XDG_CACHE_HOME", inner.join(".cache"))
        .env(
            "npm_config_cache",
            npm_cache.unwrap_or_else(|| inner.join(".npm")),
        );
    (cmd, spec.cwd.map_or(inner, Path::to_path_buf))
}

/// Starts a stdio server: its stdout and stdin are the transport.
pub(super) fn spawn(
    spec: &StdioSpec,
    launch: &Launch,
) -> Result<(Child, DuplexStream, ChildStdin), String> {
    let (name, command) = (spec.name, spec.command);
    let mut cmd = launch.command(spec)?;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::sandbox::supervise(&mut cmd);
    // Only what its configuration sets (a secret listed there is passed on).
    cmd.envs(spec.env);
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("cannot start {command:?}: no such command (is it installed and on PATH?)")
        }
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
    let (messages, pipe) = tokio::io::duplex(64 << 10);
    let stdout_task = tokio::spawn(super::lines::pump(name.to_string(), stdout, pipe));
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    Ok((
        Child {
            child,
            pgid,
            stderr,
            stderr_task,
            stdout_task,
        },
        messages,
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
