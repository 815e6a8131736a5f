//! The agent: configuration, provider, sandbox, skills and sessions put together
//! (`Agent`), and the one entry point every front door drives it through: `start` (or
//! `start_with_cancel`) runs one `RunRequest` and hands back a `RunHandle` (the run's
//! events, its live control and its cancellation).
//!
//! The run itself is the `engine`'s: the shared start and end of every run, and either
//! picogent's own loop (`engine::native`) or the Claude Code CLI (`engine::claude_code`).
//! Around it: `event` (what a run emits and how it ends), `control` (the run's state
//! machine: pause, resume, stop, instruct, rollback) and `live` (the native loop's side
//! of it at step boundaries), `checkpoint` (git snapshots of the working folder), `rewind`
//! (going back to a checkpoint, live or between runs),
//! `compaction` (the context window), `guard` (repeats, tool calls written as text),
//! `prompt` (the system prompt), `project_docs` (AGENTS.md) and `skills` (SKILL.md
//! discovery).

pub mod approval;
pub mod checkpoint;
mod checkpoint_store;
mod compaction;
pub mod control;
mod engine;
mod event;
mod guard;
mod live;
mod project_docs;
mod prompt;
mod rewind;
pub(crate) use rewind::RewindError;
pub mod skills;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::provider::{Provider, ProviderError, ToolSpec};
use crate::sandbox::Sandbox;
use crate::session::{self, SessionStore};
pub use event::{AgentEvent, FailureKind, Outcome};
use skills::Skill;

/// One prompt to run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub(crate) prompt: String,
    pub(crate) session_id: String,
    /// Overrides the configured working folder.
    pub(crate) work_dir: Option<PathBuf>,
    /// Overrides the configured role prompt.
    pub(crate) system_prompt: Option<String>,
    /// The run works in a git worktree of the user's checkout: the sandbox moves the
    /// allowed paths there and keeps the checkout read-only.
    pub(crate) worktree: Option<WorktreeRun>,
    /// The id the prompt's session entry gets (when free): where a chat request's
    /// history ends and its own log begins.
    pub(crate) prompt_entry: Option<String>,
}

/// Where a run in a worktree works instead of the user's checkout.
#[derive(Debug, Clone)]
pub(crate) struct WorktreeRun {
    /// The checkout's top folder (canonical).
    pub(crate) checkout: PathBuf,
    /// The repository's git folder (canonical; may lie outside the checkout).
    pub(crate) repository: PathBuf,
    /// The worktree's top folder (canonical).
    pub(crate) worktree: PathBuf,
    /// The checkout is a clone picogent made (GitHub's `repos`), outside the allowed
    /// paths: the run writes its worktree alone.
    pub(crate) own_clone: bool,
}

impl RunRequest {
    /// A prompt in a session, in the configured working folder with the configured role.
    pub fn new(prompt: impl Into<String>, session_id: impl Into<String>) -> Self {
        RunRequest {
            prompt: prompt.into(),
            session_id: session_id.into(),
            work_dir: None,
            system_prompt: None,
            worktree: None,
            prompt_entry: None,
        }
    }
}

/// A run in progress.
pub struct RunHandle {
    /// Events in order; `Finished` is the last one.
    pub events: mpsc::UnboundedReceiver<AgentEvent>,
    /// Pause, resume, stop and instruct the run.
    pub control: control::RunControl,
    cancel: CancellationToken,
    task: JoinHandle<Outcome>,
}

impl RunHandle {
    /// A token that cancels this run when cancelled.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Discards remaining events and waits for the outcome.
    pub async fn finish(mut self) -> Outcome {
        while self.events.recv().await.is_some() {}
        match self.task.await {
            Ok(o) => o,
            Err(e) => Outcome::Failed {
                kind: FailureKind::Internal,
                error: format!("the run panicked: {e}"),
                steps: 0,
                usage: Default::default(),
            },
        }
    }
}

pub(crate) struct Inner {
    config: Config,
    provider: Provider,
    sandbox: Arc<Sandbox>,
    skills: Vec<Skill>,
    sessions: SessionStore,
    tool_specs: Vec<ToolSpec>,
    /// The MCP servers' supervisors; their tools join `tool_specs` per run.
    mcp: crate::mcp::Mcp,
    output_dir: PathBuf,
    /// The "always" answers to approvals, per session.
    approvals: approval::Remembered,
}

/// Says at start which sandbox level is active and why.
fn log_sandbox(config: &Config, sandbox: &Sandbox) {
    use crate::sandbox::confine::kernel_abi;
    let abi = kernel_abi();
    let network = match config.policy.network {
        crate::config::NetworkPolicy::Allow => "allow",
        crate::config::NetworkPolicy::Deny => "deny",
    };
    if let Some(reason) = sandbox.refusal() {
        tracing::error!(level = "refused", landlock_abi = abi, "{reason}");
        return;
    }
    if !sandbox.is_restricted()
        && crate::sandbox::sys::euid() == 0
        && sandbox.confinement().is_some()
    {
        tracing::warn!("picogent runs as root without allowed_paths: commands can change the whole machine (a cron job, a service) and through it reach picogent's own files. Set allowed_paths, or run picogent as an ordinary user");
    }
    if let Ok(cwd) = std::env::current_dir() {
        let looks_here = [cwd.join(".env"), cwd.join("agent.json")];
        if sandbox.is_restricted()
            && sandbox.allowed_paths().iter().any(|a| cwd.starts_with(a))
            && looks_here.iter().any(|p| !p.exists())
        {
            tracing::warn!(folder = %cwd.display(), "picogent looks for ./.env and ./agent.json in this folder at start, and it lies inside allowed_paths: a command could create them for the next start. Start picogent from another folder, or name its configuration explicitly");
        }
    }
    let Some(c) = sandbox.confinement().cloned() else {
        tracing::warn!(
            level = "off",
            landlock_abi = abi,
            "sandbox is off: commands run without kernel confinement"
        );
        return;
    };
    if abi < c.needed_abi() {
        tracing::warn!(
            level = "partial",
            landlock_abi = abi,
            needed_abi = c.needed_abi(),
            network,
            "this kernel cannot enforce every sandbox rule; commands will be refused (set sandbox: \"off\" to run them unconfined)"
        );
        return;
    }
    sandbox.say_level();
}

/// The binary that confines commands: configured (tests), else the program that is
/// running, opened through `/proc/self/exe` (never by a path a command could replace).
fn sandbox_helper(config: &Config) -> PathBuf {
    config
        .policy
        .sandbox_helper
        .clone()
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"))
}

/// Why an agent could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("sandbox: {0}")]
    Sandbox(String),
}

/// Full bash outputs older than this are removed at start.
const OUTPUT_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Where swept run folders wait for removal: session ids never start with a dot.
const SWEPT: &str = ".swept-";

/// Removes run folders (full outputs, leftover temporary folders) past their retention.
/// They are renamed aside at once, so a run of the same session starting now gets a
/// fresh folder, and removed on a blocking thread: a command may have left any tree
/// there, and removing a large one takes long. Folders a removal cut short earlier
/// (picogent stopped) are removed again.
fn sweep_outputs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > OUTPUT_RETENTION);
        let swept = e.file_name().to_string_lossy().starts_with(SWEPT);
        if old && !swept && e.file_type().is_ok_and(|t| t.is_dir()) {
            let aside = dir.join(format!("{SWEPT}{}", crate::util::random_hex(12)));
            if let Err(err) = std::fs::rename(e.path(), &aside) {
                tracing::warn!("cannot sweep {}: {err}", e.path().display());
            }
        }
    }
    let dir = dir.to_path_buf();
    let remove = move || {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(SWEPT) {
                if let Err(err) = crate::util::remove_tree(&e.path()) {
                    tracing::warn!("sweeping old outputs: {err}");
                }
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(remove)),
        Err(_) => remove(),
    }
}

/// The skills folders the tools may read: the operator's, with each skill's own
/// (resolved) folder, since one reached through a symlink lies outside the folder it is
/// listed in. Not so for skills folders inside the allowed paths: the model writes
/// there, and a link it made must not widen what the tools may read.
fn readable_skill_dirs(config: &Config, skill_dirs: &[PathBuf], skills: &[Skill]) -> Vec<PathBuf> {
    use crate::sandbox::resolved;
    let allowed: Vec<PathBuf> = config
        .policy
        .allowed_paths
        .iter()
        .map(|a| resolved(a))
        .collect();
    let model_writes = |d: &Path| {
        let real = resolved(d);
        allowed.iter().any(|a| real.starts_with(a))
    };
    (skill_dirs.iter().filter(|d| d.is_dir()))
        .filter(|d| !model_writes(d))
        .cloned()
        .chain(
            skills
                .iter()
                .filter(|s| !model_writes(s.from()))
                .map(|s| s.dir().to_path_buf()),
        )
        .collect()
}

/// The MCP servers of picogent's own loop, started like the agent's commands are
/// confined; none under the claude-code engine, which has its own.
fn start_mcp(config: &Config, sandbox: &Sandbox, state: &Path) -> crate::mcp::Mcp {
    match config.llm.engine {
        crate::config::Engine::Native => {
            let launch = crate::mcp::Launch {
                home: state.join("mcp"),
                confinement: sandbox.confinement().cloned(),
                writable: sandbox.allowed_paths().to_vec(),
                operator_home: config.home_dir.clone(),
            };
            let servers: Vec<_> = (config.mcp_servers.iter().cloned())
                .map(|s| s.in_folder(&config.work_dir))
                .collect();
            crate::mcp::Mcp::start(&servers, launch)
        }
        crate::config::Engine::ClaudeCode => {
            if !config.mcp_servers.is_empty() {
                tracing::warn!("mcp_servers apply to picogent's own loop; the claude-code engine uses Claude Code's own MCP configuration");
            }
            crate::mcp::Mcp::default()
        }
    }
}

/// The engine every front door drives. Cheap to clone.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl Agent {
    /// An agent, or why not (a provider that cannot be set up, or a sandbox this
    /// machine cannot provide for the configuration).
    pub fn new(config: Config) -> Result<Agent, AgentError> {
        let provider = Provider::from_config(&config)?;
        let agent = Agent::with_provider(config, provider);
        if let Some(reason) = agent.sandbox().refusal() {
            return Err(AgentError::Sandbox(reason.to_string()));
        }
        Ok(agent)
    }

    pub fn with_provider(config: Config, provider: Provider) -> Agent {
        let skill_dirs = config.skill_dirs();
        let skills = skills::discover(&skill_dirs);
        let readable = readable_skill_dirs(&config, &skill_dirs, &skills);
        // picogent's own folders exist before any command could make one of its own.
        let state = config.state_dir();
        let _ = std::fs::create_dir_all(&state);
        let output_dir = state.join("outputs");
        sweep_outputs(&output_dir);
        let mut sandbox = Sandbox::new(
            &config.policy.allowed_paths,
            &config.protected_paths(),
            &readable,
        )
        // The sessions folder, unless it holds the working folder: then the session
        // file alone is protected (`session_file`).
        .with_read_only(&if config.session_file.is_some() {
            vec![]
        } else {
            vec![config.sessions_dir()]
        })
        .with_read_only(&config.worktree_folders());
        let level = match config.policy.sandbox {
            crate::config::SandboxMode::On => Some(crate::sandbox::Level::Full),
            crate::config::SandboxMode::Landlock => Some(crate::sandbox::Level::Landlock),
            crate::config::SandboxMode::Off => None,
        };
        if let Some(level) = level {
            let deny = config.policy.network == crate::config::NetworkPolicy::Deny;
            sandbox = sandbox
                .with_confinement_level(sandbox_helper(&config), deny, level)
                .allowing_nested_user_namespaces(config.policy.nested_user_namespaces);
        }
        log_sandbox(&config, &sandbox);
        let caps = config.llm.engine.capabilities();
        if caps != crate::config::Engine::Native.capabilities() {
            tracing::info!(
                engine = config.llm.engine.as_str(),
                live_control = caps.live_control,
                rollback = caps.rollback,
                step_limits = caps.step_limits,
                "this engine runs its own loop: what picogent cannot control in it is off"
            );
        }
        let sessions = SessionStore::new(config.sessions_dir());
        let mcp = start_mcp(&config, &sandbox, &state);
        Agent {
            inner: Arc::new(Inner {
                provider,
                sandbox: Arc::new(sandbox),
                skills,
                sessions,
                tool_specs: crate::tools::specs(),
                mcp,
                output_dir,
                approvals: Default::default(),
                config,
            }),
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn skills(&self) -> &[Skill] {
        &self.inner.skills
    }

    /// The configured MCP servers (their tools, for the start-up log).
    pub fn mcp(&self) -> &crate::mcp::Mcp {
        &self.inner.mcp
    }

    /// What this agent's engine can do; front doors ask this instead of assuming it.
    pub(crate) fn capabilities(&self) -> engine::Capabilities {
        self.inner.config.llm.engine.capabilities()
    }

    /// Whether runs can be paused, resumed, stopped at a step and instructed mid-run.
    pub(crate) fn live_control(&self) -> bool {
        self.capabilities().live_control
    }

    /// For a daemon: finds out the sandbox level now, on a thread of its own, and says
    /// it in the log (a one-off run leaves that to its first command instead).
    pub fn announce_sandbox(&self) {
        let sandbox = self.sandbox().clone();
        // A kernel that cannot enforce every rule refuses commands (said at start).
        let enforced = sandbox
            .confinement()
            .is_none_or(|c| crate::sandbox::confine::kernel_abi() >= c.needed_abi());
        if !enforced {
            return;
        }
        if sandbox.level_settled() {
            sandbox.say_level();
            return;
        }
        if let Err(e) = std::thread::Builder::new()
            .name("sandbox-probe".into())
            .spawn(move || {
                sandbox.namespaces();
                sandbox.say_level();
            })
        {
            tracing::warn!("cannot probe the sandbox level early ({e}); the first command does");
        }
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.inner.sandbox
    }

    pub(crate) fn sessions(&self) -> &SessionStore {
        &self.inner.sessions
    }

    /// Appends an entry (a preference, a name) to a session, waiting for any run in it to end
    /// first so entries never interleave.
    pub(crate) async fn annotate(
        &self,
        session_id: &str,
        entry: session::Known,
    ) -> Result<String, session::SessionError> {
        let (store, id) = (self.inner.sessions.clone(), session_id.to_string());
        // A task of its own, awaited here: if the caller goes away (a closed tab), the
        // lock is still held until the entry is written and the file closed, never
        // released while its blocking load or write goes on.
        tokio::spawn(async move {
            let lock = store.lock(&id).await?;
            let mut s = store.open_existing_off_runtime(lock).await?;
            let id = s.append(entry)?;
            s.sync().await?;
            s.close().await?;
            Ok(id)
        })
        .await
        .unwrap_or_else(|e| Err(session::SessionError::Internal(e.to_string())))
    }

    /// Deletes a session: its file, its checkpoint repository and its private outputs,
    /// under the session's lock (a run starting in it waits, then starts afresh).
    pub(crate) async fn delete_session(&self, id: &str) -> Result<(), session::SessionError> {
        let _lock = self.inner.sessions.lock(id).await?;
        let path = self.inner.sessions.path(id)?;
        let checkpoints = self
            .inner
            .config
            .state_dir()
            .join("checkpoints")
            .join(format!("{id}.git"));
        let outputs = self.inner.output_dir.join(id);
        // A checkpoint repository can be large: removed off the runtime's threads.
        let removed = tokio::task::spawn_blocking(move || {
            std::fs::remove_file(&path).map_err(|source| session::SessionError::Io {
                path: path.clone(),
                source,
            })?;
            for tree in [checkpoints, outputs] {
                if let Err(e) = crate::util::remove_tree(&tree) {
                    tracing::warn!("deleting a session: {e}");
                }
            }
            Ok(())
        })
        .await;
        removed.unwrap_or_else(|e| {
            Err(session::SessionError::Io {
                path: self.inner.sessions.path(id).unwrap_or_default(),
                source: std::io::Error::other(e),
            })
        })
    }

    /// Starts a run. Events stream on the handle; dropping the receiver does not stop
    /// the run (cancel it for that).
    pub fn start(&self, req: RunRequest) -> RunHandle {
        self.start_with_cancel(req, CancellationToken::new())
    }

    /// Like `start`, cancelled when `cancel` is.
    pub(crate) fn start_with_cancel(
        &self,
        req: RunRequest,
        cancel: CancellationToken,
    ) -> RunHandle {
        // Unbounded on purpose: the provider's delta callback is synchronous, events
        // are small, and every consumer drains them as they come.
        let (tx, rx) = mpsc::unbounded_channel();
        let control = control::RunControl::default();
        let (inner, c) = (self.inner.clone(), cancel.clone());
        let task = tokio::spawn(engine::run(inner, req, tx, c, control.clone()));
        RunHandle {
            events: rx,
            control,
            cancel,
            task,
        }
    }
}
