//! Helpers shared by the integration tests: the scripted LLM server, temporary agent
//! directories with a real agent.json, and a way to run the agent and collect events.
#![allow(dead_code)]

pub mod chat;
pub mod git_https;
pub mod github;
pub mod github_many;
pub mod mcp;
pub mod repo;
pub mod slow_git;
// The scripted model and the fake tracker: the test kit's crate, shared with examples.
pub use picogent_testkit::{llm, tracker};

use std::path::{Path, PathBuf};
use std::time::Duration;

use picogent::agent::{Agent, AgentEvent, Outcome, RunRequest};
use picogent::config::{Config, Env};
use picogent::provider::{Provider, RetryPolicy};
use serde_json::{json, Value};
use tempfile::TempDir;

pub use llm::{text, tool, ModelGate, ScriptedLlm, Turn, Wire};
pub use repo::{repository, with_origin};
pub use slow_git::SlowGit;

/// A temporary agent home (`agent.json`, `skills/`, `sessions/`), a separate working
/// folder, and a fake `$HOME`, all deleted on drop.
pub struct Sandbox {
    pub root: TempDir,
    pub home: PathBuf,
    pub work: PathBuf,
    pub user_home: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        let home = base.join("agent");
        let work = base.join("work");
        let user_home = base.join("home");
        for d in [&home, &work, &user_home] {
            std::fs::create_dir_all(d).unwrap();
        }
        Sandbox {
            root,
            home,
            work,
            user_home,
        }
    }

    pub fn base(&self) -> PathBuf {
        self.home.parent().unwrap().to_path_buf()
    }

    /// A gate for a command to wait at until the test opens it: a file in the working
    /// folder, so the command sees it under any sandbox level.
    pub fn gate(&self, name: &str) -> Gate {
        Gate {
            path: self.work.join(format!(".gate-{name}")),
            name: format!(".gate-{name}"),
        }
    }

    /// A gate outside the working folder (named by its absolute path), for tests whose
    /// working folder must hold nothing but the run's own files; only for commands not
    /// confined to the working folder.
    pub fn gate_outside(&self, name: &str) -> Gate {
        let path = self.base().join(format!(".gate-{name}"));
        Gate {
            name: path.display().to_string(),
            path,
        }
    }

    /// Waits until a command has made `rel` in the working folder (at most 30 s): the
    /// sign that the command is running.
    pub async fn wait_file(&self, rel: &str) {
        let path = self.work.join(rel);
        for _ in 0..1500 {
            if path.exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{} never appeared", path.display());
    }

    /// A tool context in the working folder under `sandbox`: `timeout` for a step and
    /// for a command, outputs saved under the temporary folder, nobody watching.
    pub fn tool_ctx(
        &self,
        sandbox: picogent::sandbox::Sandbox,
        timeout: Duration,
    ) -> picogent::tools::ToolContext {
        picogent::tools::ToolContext {
            work_dir: self.work.clone(),
            sandbox: std::sync::Arc::new(sandbox),
            step_timeout: timeout,
            command_timeout_max: timeout,
            cancel: tokio_util::sync::CancellationToken::new(),
            output_dir: self.base().join("outputs"),
            max_saved_output: 64 << 20,
            on_output: None,
        }
    }

    /// Writes agent.json pointing at the scripted server, merged with `extra`.
    pub fn write_config(&self, llm: &ScriptedLlm, wire: Wire, extra: Value) -> PathBuf {
        let mut cfg = json!({
            "name": "Test",
            "slug": "test",
            "provider": wire.provider(),
            "base_url": llm.base_url(wire),
            "model": "scripted-model",
            "work_dir": self.work,
            "step_timeout_sec": 10,
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            cfg[k] = v;
        }
        let path = self.home.join("agent.json");
        std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
        path
    }

    /// The environment a test passes instead of the process's own.
    pub fn env(&self) -> Env {
        Env::from_pairs([
            ("HOME", self.user_home.display().to_string()),
            ("PICOGENT_API_KEY", llm::API_KEY.to_string()),
        ])
    }

    pub fn config(&self, llm: &ScriptedLlm, wire: Wire, extra: Value) -> Config {
        self.write_config(llm, wire, extra);
        Config::load(Some(&self.home), &self.env(), &self.base()).unwrap()
    }

    /// An agent whose provider retries quickly, so fault tests stay fast.
    pub fn agent(&self, llm: &ScriptedLlm, wire: Wire, extra: Value) -> Agent {
        agent_from(self.config(llm, wire, extra))
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.work.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.work.join(rel)).unwrap()
    }

    pub fn add_skill(&self, name: &str, description: &str, body: &str) -> PathBuf {
        let dir = self.home.join("skills").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("SKILL.md");
        std::fs::write(
            &p,
            format!("---\nname: {name}\ndescription: \"{description}\"\n---\n{body}\n"),
        )
        .unwrap();
        p
    }
}

/// Agent mode in-process: a running daemon and the token that stops it.
pub struct Daemon {
    pub stop: tokio_util::sync::CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), picogent::tracker::daemon::DaemonError>>,
}

impl Daemon {
    /// Stops (drains) the daemon and returns how it ended.
    pub async fn stop(self) -> Result<(), picogent::tracker::daemon::DaemonError> {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the daemon did not stop")
            .unwrap()
    }
}

/// A command that waits for the test instead of sleeping for a window the test must
/// fit in: it returns once the test opens the gate (after 60 s at the latest, so a
/// failed test does not hang).
pub struct Gate {
    path: PathBuf,
    name: String,
}

impl Gate {
    /// The bash command that waits at the gate (run in the working folder).
    pub fn command(&self) -> String {
        format!(
            "for i in $(seq 3000); do [ -e {} ] && break; sleep 0.02; done",
            self.name
        )
    }

    pub fn open(&self) {
        std::fs::write(&self.path, "").unwrap();
    }
}

pub fn fast_timing() -> picogent::tracker::daemon::Timing {
    picogent::tracker::daemon::Timing {
        register_retry: Duration::from_millis(100),
        ws_backoff: (Duration::from_millis(100), Duration::from_secs(1)),
        report_backoff: (Duration::from_millis(50), Duration::from_millis(200)),
        report_refused_for: Duration::from_secs(3),
        report_timeout: Duration::from_secs(30),
    }
}

impl Sandbox {
    /// Starts agent mode against the fake tracker; `extra` is merged into agent.json.
    pub fn daemon(
        &self,
        llm: &ScriptedLlm,
        tracker: &tracker::FakeTracker,
        extra: Value,
    ) -> Daemon {
        let mut cfg =
            json!({"tracker_url": tracker.url(), "listen_port": 0, "shutdown_grace_sec": 5});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            cfg[k] = v;
        }
        self.write_config(llm, Wire::Anthropic, cfg);
        let env = picogent::config::Env::from_pairs([
            ("HOME", self.user_home.display().to_string()),
            ("PICOGENT_API_KEY", llm::API_KEY.to_string()),
            ("AGENT_TOKEN", tracker::TOKEN.to_string()),
        ]);
        let config = Config::load(Some(&self.home), &env, &self.base()).unwrap();
        let agent = agent_from(config);
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(picogent::tracker::daemon::run(
            agent,
            fast_timing(),
            stop.clone(),
        ));
        Daemon { stop, task }
    }
}

pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base: Duration::from_millis(20),
        cap: Duration::from_millis(100),
    }
}

pub fn agent_from(mut config: Config) -> Agent {
    // Bash confinement re-executes picogent itself; in tests that is the built binary.
    config.policy.sandbox_helper = Some(env!("CARGO_BIN_EXE_picogent").into());
    let provider = Provider::from_config(&config)
        .unwrap()
        .with_retry(fast_retry());
    Agent::with_provider(config, provider)
}

/// Fails when a process whose command line matches `pattern` (pgrep -f) is still alive
/// after 3 s. Not at once: a command in its own PID namespace is killed by the kernel
/// when the namespace's first process dies, which can end a moment after picogent.
pub fn assert_no_process(pattern: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let ps = loop {
        let ps = std::process::Command::new("pgrep")
            .args(["-f", pattern])
            .output()
            .unwrap();
        if ps.stdout.is_empty() || std::time::Instant::now() > deadline {
            break ps;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        ps.stdout.is_empty(),
        "leftover processes: {}",
        String::from_utf8_lossy(&ps.stdout)
    );
}

/// Runs one prompt to the end and returns every event and the outcome.
pub async fn run(agent: &Agent, prompt: &str, session: &str) -> (Vec<AgentEvent>, Outcome) {
    let mut h = agent.start(RunRequest::new(prompt, session));
    let mut events = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(60), h.events.recv())
        .await
        .expect("the run produced no event for 60 s")
    {
        events.push(ev);
    }
    let outcome = h.finish().await;
    (events, outcome)
}

pub fn final_text(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Completed { text, .. } => text,
        other => panic!("expected a completed run, got {other:?}"),
    }
}

pub fn failure(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Failed { error, .. } => error,
        other => panic!("expected a failed run, got {other:?}"),
    }
}

/// The kind of a failed run.
pub fn failure_kind(outcome: &Outcome) -> picogent::agent::FailureKind {
    match outcome {
        Outcome::Failed { kind, .. } => *kind,
        other => panic!("expected a failed run, got {other:?}"),
    }
}

/// The tool results in the order they happened: (name, is_error, output).
pub fn tool_results(events: &[AgentEvent]) -> Vec<(String, bool, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult {
                name,
                is_error,
                output,
                ..
            } => Some((name.clone(), *is_error, output.clone())),
            _ => None,
        })
        .collect()
}

pub fn streamed_text(events: &[AgentEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text of the last content block of the last message of an Anthropic request.
pub fn last_text(body: &Value) -> String {
    let msg = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    let block = msg["content"]
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or(Value::Null);
    block["text"].as_str().unwrap_or_default().to_string()
}

/// Reads a session file as JSON lines.
pub fn session_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The text and error flag of the tool result in the last message of an Anthropic
/// request (what the model was sent back for its last tool call).
pub fn last_tool_result(body: &Value) -> (String, bool) {
    let msg = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    let block = &msg["content"][0];
    assert_eq!(block["type"], "tool_result", "not a tool result: {msg}");
    let text: Vec<&str> = block["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect();
    (
        text.join("\n"),
        block["is_error"].as_bool().unwrap_or(false),
    )
}

/// Agent mode as a real child process on the agent folder, logging to `daemon.log`.
pub fn spawn_daemon(sb: &Sandbox) -> tokio::process::Child {
    spawn_daemon_env(sb, &std::env::var("PATH").unwrap_or_default(), &[])
}

/// `spawn_daemon`, finding programs (git too, whatever `PICOGENT_GIT` says) on `path`.
pub fn spawn_daemon_with_path(sb: &Sandbox, path: &str) -> tokio::process::Child {
    spawn_daemon_env(sb, path, &[("PICOGENT_GIT", "")])
}

/// `spawn_daemon` with more variables in its environment.
pub fn spawn_daemon_with(sb: &Sandbox, extra: &[(&str, &str)]) -> tokio::process::Child {
    spawn_daemon_env(sb, &std::env::var("PATH").unwrap_or_default(), extra)
}

fn spawn_daemon_env(sb: &Sandbox, path: &str, extra: &[(&str, &str)]) -> tokio::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(sb.base().join("daemon.log"))
        .unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .arg(&sb.home)
        .current_dir(sb.base())
        .env_clear()
        .env("PATH", path)
        .env("HOME", &sb.user_home)
        .env("AGENT_TOKEN", tracker::TOKEN)
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("RUST_LOG", "info")
        // The git this test run was given (CI runs the git tests with each git).
        .envs(
            std::env::var("PICOGENT_GIT")
                .ok()
                .map(|g| ("PICOGENT_GIT", g)),
        )
        .envs(extra.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Starts a daemon again with `spawn` (after a kill) and returns it once it registered
/// with `tracker` anew.
pub async fn restarted(
    tracker: &tracker::FakeTracker,
    spawn: impl FnOnce() -> tokio::process::Child,
) -> tokio::process::Child {
    let regs = tracker.ok_calls("/api/v1/agents/register").len();
    let daemon = spawn();
    tracker
        .wait_for(20, "re-registration", |t| {
            t.ok_calls("/api/v1/agents/register").len() > regs
        })
        .await;
    daemon
}

/// The git this test run uses: `PICOGENT_GIT` (as picogent itself takes it), else the
/// first `git` on `PATH`.
pub fn git_program() -> String {
    std::env::var("PICOGENT_GIT")
        .ok()
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| {
            let found = std::process::Command::new("sh")
                .args(["-c", "command -v git"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&found.stdout).trim().to_string()
        })
}

/// Runs git in `dir` as a person would (a user identity, no global or system
/// configuration, no `GIT_*` variable from the machine running the tests); its trimmed
/// output, or the test fails naming the command.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(git_program());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd
        .args(["-c", "user.name=User", "-c", "user.email=user@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Says why a test cannot exercise what it tests here and returns, or fails it where
/// that must not happen: in CI (`CI` set) and wherever `PICOGENT_REQUIRE_SANDBOX=1` (a
/// test that prints SKIPPED and passes would be a test that checks nothing).
pub fn skip(reason: &str) {
    assert!(
        !skipping_refused(),
        "cannot run here, and this run requires it (CI or PICOGENT_REQUIRE_SANDBOX=1): {reason}"
    );
    eprintln!("SKIPPED: {reason}");
}

/// Whether [`skip`] fails: in CI (`CI` set, not empty, not `false`) or where
/// `PICOGENT_REQUIRE_SANDBOX=1`.
pub fn skipping_refused() -> bool {
    std::env::var_os("PICOGENT_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
        || std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
}

/// A small tmpfs mounted on `dir` for as long as this lives (unmounted on drop).
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it) on `dir`, or `None`
    /// when this machine does not let the test (it needs root).
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).ok()?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the disk `dir` is on to the last byte; the file that does it.
pub fn fill_disk(dir: &std::path::Path) -> std::path::PathBuf {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let block = vec![0u8; 4096];
    while std::io::Write::write_all(&mut f, &block).is_ok() {}
    while std::io::Write::write_all(&mut f, &[0u8]).is_ok() {}
    filler
}

/// Waits until `/healthz` says degraded for a reason of `kind`; its answer.
pub async fn degraded_with(health: &str, kind: &str) -> serde_json::Value {
    let client = reqwest::Client::new();
    let mut last = serde_json::Value::Null;
    for _ in 0..400 {
        let r = client.get(health).send().await.unwrap();
        let code = r.status().as_u16();
        last = r.json().await.unwrap();
        let reasons = last["reasons"].as_array().cloned().unwrap_or_default();
        if reasons.iter().any(|r| r["kind"] == kind) {
            assert_eq!(code, 503, "{last}");
            assert_eq!(last["status"], "degraded", "{last}");
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("/healthz never said degraded for {kind}: {last}");
}

impl Sandbox {
    /// `BINARY run --json --agent <home> PROMPT` from the sandbox's base folder, with
    /// only `PATH`, the fake `HOME` and the scripted model's key in its environment.
    pub fn run_command(&self, binary: &Path, prompt: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(binary);
        cmd.args(["run", "--json", "--agent"])
            .arg(&self.home)
            .arg(prompt)
            .current_dir(self.base())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.user_home)
            .env("PICOGENT_API_KEY", llm::API_KEY)
            // No input: the test runner's own standard input is none of the run's.
            .stdin(std::process::Stdio::null());
        cmd
    }
}

/// Whether a test can make a user namespace here (to take namespaces away in).
pub fn can_nest_user_namespaces() -> bool {
    std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// `picogent run` as on a machine without user namespaces (a container under Docker's
/// default seccomp profile): inside a user namespace that may make no more of them.
pub fn run_without_user_namespaces(sb: &Sandbox, level: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "--", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_picogent"))
        .args(["run", "--json", "--agent"])
        .arg(&sb.home)
        .arg("go")
        .env("HOME", &sb.user_home)
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("PICOGENT_SANDBOX", level);
    cmd
}

/// Whether commands get the namespace sandbox here; says SKIPPED (failing in CI) when
/// they do not.
pub fn namespaces_here() -> bool {
    let helper = std::path::Path::new(env!("CARGO_BIN_EXE_picogent"));
    if let Err(e) = picogent::sandbox::namespaces_work(helper) {
        skip(&format!("no namespace sandbox on this machine: {e}"));
        return false;
    }
    true
}

/// A port nothing listens on now (for a server a test starts as a process).
/// Makes a FIFO at `path` (readable and writable by its owner).
pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// `GET http://127.0.0.1:<port><path>` once something answers there (at most 10 s):
/// its status and JSON body.
pub async fn get_when_up(port: u16, path: &str) -> (u16, Value) {
    let url = format!("http://127.0.0.1:{port}{path}");
    for _ in 0..500 {
        if let Ok(r) = reqwest::get(&url).await {
            return (r.status().as_u16(), r.json().await.unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("nothing answers {url}");
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}
