//! Configuration: the resolved `Config` every part of picogent reads, its errors, and
//! the paths derived from it (state, sessions, skills, protected files).
//!
//! Loading is `load`'s: which file (CLI argument, `PICOGENT_CONFIG`, `./agent.json`, or
//! the environment alone), how the environment overrides the file, defaults, and
//! validation. Every error names the file and the field or variable at fault, because a
//! typo in a restriction (say `alowed_paths`) must never silently disable it. `types`
//! holds the small value types and the environment snapshot; `secrets` keeps keys and
//! tokens out of the process image.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

pub mod approval;
mod chat_git;
mod github;
mod limits;
mod load;
mod mcp;
mod mcp_import;
mod model;
pub mod secrets;
mod store;
mod types;
pub use chat_git::NeedsGit;
pub use github::{valid_repo_name, GithubAuth, GithubConfig, Trigger};
pub use mcp::{McpServerConfig, McpTransport};
pub use mcp_import::import_mcp;
pub use store::{Postgres, StoreSettings};
pub use types::{Engine, Env, ProviderKind, TrackerKind, Transport};
pub(crate) use types::{LoopAction, NetworkPolicy, SandboxMode, Workspace};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path}: field `{field}`: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("{0}")]
    Other(String),
}

/// Where the model settings were set: a variable's name, a field of a file, or a
/// default; an error about one of them names it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ModelOrigins {
    pub(crate) model: String,
    pub(crate) base_url: String,
    pub(crate) api_key: String,
}

/// A model setting an error may be about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ModelSetting {
    Model,
    BaseUrl,
    ApiKey,
}

impl Config {
    /// Says where the setting an error is about was set (`model` from PICOGENT_MODEL...).
    pub(crate) fn origin_of(&self, setting: ModelSetting) -> String {
        let o = &self.llm.model_origins;
        match setting {
            ModelSetting::Model => format!("the model {:?} was set by {}", self.llm.model, o.model),
            ModelSetting::BaseUrl => {
                format!("the URL {} was set by {}", self.llm.base_url, o.base_url)
            }
            ModelSetting::ApiKey => format!("the key was set by {}", o.api_key),
        }
    }
}

/// Which tracker agent mode works for (`tracker`, `PICOGENT_TRACKER`), and the settings
/// only that tracker has.
#[derive(Debug, Clone)]
pub enum Tracker {
    /// Team Board (docs/tracker-protocol.md) at `url` (`tracker_url`, `TRACKER_URL`).
    Board { url: String },
    /// GitHub issues and pull requests (the `github` block; boxed, as it is large).
    Github(Box<GithubConfig>),
}

/// The model, its provider and the engine that drives it.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    pub model: String,
    /// Where `model`, `base_url` and the key were set, for errors that name them.
    pub(crate) model_origins: ModelOrigins,
    pub provider: ProviderKind,
    /// Which loop does the work: picogent's own, or Claude Code's (`engine`).
    pub engine: Engine,
    pub base_url: String,
    pub api_key: Option<String>,
    /// Anthropic: `ANTHROPIC_AUTH_TOKEN`, sent as a bearer token (no key needed).
    pub(crate) auth_token: Option<String>,
    /// Sampling temperature for every provider (provider default when unset).
    pub(crate) temperature: Option<f64>,
    /// Ollama: how long the model stays loaded after a call (`"5m"`, seconds, `-1`).
    pub keep_alive: Option<serde_json::Value>,
    /// `engine: "claude-code"`: the `claude` binary (default: found on PATH).
    pub(crate) claude_code_path: Option<PathBuf>,
    /// OpenAI: the organization and project the OpenAI SDK sends (`OPENAI_ORG_ID`,
    /// `OPENAI_PROJECT_ID`).
    pub(crate) openai_account: OpenaiAccount,
}

/// The `OpenAI-Organization` and `OpenAI-Project` an OpenAI request names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenaiAccount {
    pub organization: Option<String>,
    pub project: Option<String>,
}

/// What commands and tools may reach, and how they are confined.
#[derive(Debug, Clone)]
pub struct Policy {
    pub allowed_paths: Vec<PathBuf>,
    pub(crate) network: NetworkPolicy,
    pub(crate) sandbox: SandboxMode,
    /// Commands may make user namespaces of their own (off: they cannot).
    pub(crate) nested_user_namespaces: bool,
    /// The binary that confines bash (`picogent sandbox-exec`); default: this program.
    pub sandbox_helper: Option<PathBuf>,
}

impl Policy {
    /// The allowed paths as they really are (links and `..` resolved); one that does
    /// not exist is left out.
    pub(crate) fn real_allowed_paths(&self) -> Vec<PathBuf> {
        self.allowed_paths
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect()
    }
}

/// How long and how much (each checked against its bounds when loaded).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_concurrent_tasks: usize,
    pub heartbeat_interval_sec: u64,
    pub max_steps: u32,
    pub step_timeout: Duration,
    /// The longest `timeout` a bash call may ask for (`command_timeout_max_sec`,
    /// default `step_timeout_sec`): a model cannot hold a task slot for a day.
    pub command_timeout_max: Duration,
    /// The most of one bash command's output saved to a file, in bytes
    /// (`max_saved_output_mb`, default 64; 0 saves none).
    pub max_saved_output: u64,
    pub context_window: u64,
    pub(crate) max_tokens: u32,
    /// How long running tasks may finish after SIGTERM before they are cancelled.
    pub(crate) shutdown_grace: Duration,
}

/// What picogent does with git in agent mode.
#[derive(Debug, Clone)]
pub struct GitSettings {
    /// A git worktree per task, or the shared folder; `None`: decided at start
    /// (worktree when `work_dir` is in a repository with a commit).
    pub(crate) workspace: Option<Workspace>,
    /// Worktrees start from this branch (default: the repository's `HEAD`).
    pub(crate) base_branch: Option<String>,
    /// The author email of the commits picogent makes (default `<slug>@picogent.local`).
    pub(crate) email: Option<String>,
    /// Push a task's branch to `remote` after committing.
    pub(crate) push: bool,
    pub(crate) remote: String,
    /// A task's worktree is removed after this many days without an event.
    pub(crate) worktree_retention_days: u64,
    /// The longest one git command of picogent's may take (agent mode's worktrees,
    /// commits, pushes, shared mode's status): then it is stopped and reported.
    pub(crate) timeout: Duration,
}

/// Chat mode's server: where it listens and whom it admits.
#[derive(Debug, Clone)]
pub struct ChatServer {
    /// `PICOGENT_HOST`, `PICOGENT_PORT`.
    pub host: String,
    pub port: u16,
    /// The token clients must present (`PICOGENT_CHAT_TOKEN`).
    pub token: Option<String>,
    /// Browser origins admitted besides the server's own (`PICOGENT_ALLOWED_ORIGINS`,
    /// comma separated; `null` admits a page opened from disk).
    pub allowed_origins: Vec<String>,
}

/// The resolved configuration every part of picogent reads.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub slug: String,
    pub(crate) prompt: Option<String>,
    /// The tracker agent mode works for, with what only it needs; `None`: chat mode.
    pub tracker: Option<Tracker>,
    pub(crate) token: Option<String>,
    pub transport: Transport,
    pub listen_port: u16,
    /// `None` means the default, `http://127.0.0.1:<bound port>/events`.
    pub(crate) callback_url: Option<String>,
    pub work_dir: PathBuf,
    /// The model, its provider and the engine that drives it.
    pub llm: ModelSettings,
    pub capabilities: Vec<String>,
    /// What commands and tools may reach, and how they are confined.
    pub policy: Policy,
    /// How long and how much: steps, timeouts, sizes, tasks at once.
    pub limits: Limits,
    /// What picogent does with git in agent mode.
    pub git: GitSettings,
    /// Chat mode's server.
    pub chat: ChatServer,
    /// Where agent mode keeps its durable state, and the fleet's settings.
    pub store: StoreSettings,
    /// Snapshot the working folder after every changing tool call (for rollback).
    /// `None`: the front door's default (on in chat mode, off elsewhere).
    pub checkpoints: Option<bool>,
    /// Pause the run when a bash command fails.
    pub(crate) auto_pause_on_error: bool,
    /// Pause the run every N model turns.
    pub(crate) auto_pause_after_steps: Option<u32>,
    pub(crate) loop_action: LoopAction,
    /// Which kinds of tool call wait for a person's yes (`approval`).
    pub approval: approval::Approval,
    /// MCP servers whose tools the model gets beside picogent's own, in name order.
    pub mcp_servers: Vec<McpServerConfig>,
    /// Put the AGENTS.md (or CLAUDE.md) files that apply to the working folder into the
    /// system prompt (`project_docs`, default on).
    pub(crate) project_docs: bool,
    /// Also read other agents' own user resources: pi's `~/.pi/agent/skills` and
    /// `~/.pi/agent/AGENTS.md`, Claude Code's `~/.claude/skills` and
    /// `~/.claude/CLAUDE.md`, Codex's `~/.codex/AGENTS.md` (`pi_home`, default off:
    /// they are other programs').
    pub(crate) pi_home: bool,
    /// The JSON file the configuration came from, if any.
    pub config_file: Option<PathBuf>,
    /// The agent directory (directory mode) or the config file's folder (file mode).
    pub agent_home: Option<PathBuf>,
    /// The `.env` file loaded at start, if any; the tools refuse it like the config file.
    pub env_file: Option<PathBuf>,
    /// `$HOME`, for `~/.picogent/`.
    pub(crate) home_dir: Option<PathBuf>,
    /// The file itself holds a token or API key (start-up warns about it).
    pub secrets_in_file: bool,
    /// The folder of a session continued from elsewhere (`run --session` given a pi
    /// file): sessions are read and written there instead of `sessions/`.
    pub session_dir: Option<PathBuf>,
    /// The session file itself, when its folder holds the working folder (`run
    /// --session FILE` inside or above it, as pi allows): that file alone is kept from
    /// the agent (as the configuration file is), not its whole folder.
    pub session_file: Option<PathBuf>,
}

/// Model aliases of spec §1; anything else passes through unchanged.
fn resolve_model(model: &str) -> String {
    match model {
        "sonnet" | "sonnet-4" => "claude-sonnet-4-6",
        "opus" | "opus-4" => "claude-opus-4-6",
        "haiku" => "claude-haiku-4-5",
        "sonnet-3.5" => "claude-3-5-sonnet-20241022",
        other => other,
    }
    .to_string()
}

/// Joins `p` onto `base` when relative and removes `.` and `..` lexically. Symlinks are
/// resolved later by the sandbox, which is where it matters.
pub fn absolute(base: &Path, p: &Path) -> PathBuf {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Config {
    /// The URL the tracker is told to call, for the port actually bound.
    pub fn callback_url_for(&self, port: u16) -> String {
        self.callback_url
            .clone()
            .unwrap_or_else(|| format!("http://127.0.0.1:{port}/events"))
    }

    /// Where agent mode keeps its journal and outbox: `agentHome/state`, else
    /// `~/.picogent/state/<slug>`.
    pub(crate) fn state_dir(&self) -> PathBuf {
        match (&self.agent_home, &self.home_dir) {
            (Some(h), _) => h.join("state"),
            (None, Some(home)) => home.join(".picogent").join("state").join(&self.slug),
            (None, None) => self.work_dir.join(".picogent-state").join(&self.slug),
        }
    }

    /// `allowed_paths` for logs: the list, or "unrestricted".
    pub fn allowed_paths_display(&self) -> String {
        if self.policy.allowed_paths.is_empty() {
            return "unrestricted".into();
        }
        let list: Vec<String> = self
            .policy
            .allowed_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        list.join(", ")
    }

    /// Agent mode runs when a tracker is configured: Team Board's URL, or GitHub.
    pub fn is_agent_mode(&self) -> bool {
        self.tracker.is_some()
    }

    /// Team Board's URL, when it is the tracker.
    pub fn tracker_url(&self) -> Option<&str> {
        match &self.tracker {
            Some(Tracker::Board { url }) => Some(url),
            _ => None,
        }
    }

    /// The `github` block, when GitHub is the tracker.
    pub fn github(&self) -> Option<&GithubConfig> {
        match &self.tracker {
            Some(Tracker::Github(g)) => Some(g),
            _ => None,
        }
    }

    /// Where session files live: `agentHome/sessions`, else `~/.picogent/sessions`.
    pub fn sessions_dir(&self) -> PathBuf {
        if let Some(dir) = &self.session_dir {
            return dir.clone();
        }
        self.own_sessions_dir()
    }

    /// picogent's own sessions folder, whatever `session_dir` says.
    pub fn own_sessions_dir(&self) -> PathBuf {
        match (&self.agent_home, &self.home_dir) {
            (Some(h), _) => h.join("sessions"),
            (None, Some(home)) => home.join(".picogent").join("sessions"),
            (None, None) => self.work_dir.join(".picogent").join("sessions"),
        }
    }

    /// The folders task worktrees go in (`agentHome/worktrees` in agent mode or once it
    /// exists, and `~/.picogent/worktrees`, shared by every agent of the user):
    /// read-only to every run but for its own worktree.
    pub(crate) fn worktree_folders(&self) -> Vec<PathBuf> {
        let agent = self
            .agent_home
            .as_ref()
            .map(|h| h.join("worktrees"))
            // Another mode's daemon on the same agent folder may have trees there; a
            // chat project gets no new folder of picogent's for it.
            .filter(|w| self.is_agent_mode() || w.exists());
        let home = self
            .home_dir
            .as_ref()
            .map(|h| h.join(".picogent").join("worktrees"));
        agent.into_iter().chain(home).collect()
    }

    /// Skill folders, most specific first (the first one wins a name clash): the
    /// agent's `skills/` (or the working folder's), `.agents/skills/` in the working
    /// folder and each folder above it up to the repository's top, the project's
    /// `.pi/skills/` and `.claude/skills/` (Claude Code's), then `~/.picogent/skills/`,
    /// `~/.agents/skills/` and, with `pi_home`, `~/.pi/agent/skills/` and
    /// `~/.claude/skills/` (the places pi and Claude Code look).
    pub fn skill_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self
            .agent_home
            .as_ref()
            .unwrap_or(&self.work_dir)
            .join("skills")];
        // As pi looks: `.agents/skills` in the working folder and each folder above it
        // up to the repository's top (only the working folder's outside a repository),
        // and the project's `.pi/skills`.
        let top = self.work_dir.ancestors().find(|d| d.join(".git").exists());
        for dir in self.work_dir.ancestors() {
            dirs.push(dir.join(".agents").join("skills"));
            if top.is_none_or(|t| dir == t) {
                break;
            }
        }
        dirs.push(self.work_dir.join(".pi").join("skills"));
        // Where Claude Code keeps a project's skills.
        dirs.push(self.work_dir.join(".claude").join("skills"));
        if let Some(home) = &self.home_dir {
            dirs.push(home.join(".picogent").join("skills"));
            dirs.push(home.join(".agents").join("skills"));
            if self.pi_home {
                dirs.push(home.join(".pi").join("agent").join("skills"));
                dirs.push(home.join(".claude").join("skills"));
            }
        }
        let mut seen = std::collections::HashSet::new();
        dirs.retain(|d| seen.insert(d.clone()));
        dirs
    }

    /// Where GitHub's `repos` are cloned: beside the worktrees (a run reads its clone's
    /// git folder as it reads a checkout's), never in the state (which no tool may
    /// open) nor in the working folder (which a tool may write). `None` without an
    /// agent home or a home folder.
    pub(crate) fn clones_dir(&self) -> Option<PathBuf> {
        match (&self.agent_home, &self.home_dir) {
            (Some(h), _) => Some(h.join("repos")),
            (None, Some(home)) => Some(home.join(".picogent").join("repos").join(&self.slug)),
            (None, None) => None,
        }
    }

    /// Files and folders no tool may open: the configuration, the loaded `.env`, the
    /// agent home's `state/` (journals and outbox hold the tracker's traffic), and a
    /// GitHub App's private key.
    /// Whether a resolved folder lies inside the allowed paths (every folder does when
    /// there are none).
    pub fn within_allowed_paths(&self, real: &Path) -> bool {
        let allowed = &self.policy.allowed_paths;
        allowed.is_empty()
            || allowed
                .iter()
                .any(|a| real.starts_with(std::fs::canonicalize(a).unwrap_or_else(|_| a.clone())))
    }

    /// Whether `path` is among the files kept from the agent (for tests of the
    /// configuration).
    pub fn protected_paths_include(&self, path: &Path) -> bool {
        self.protected_paths().iter().any(|p| p == path)
    }

    pub(crate) fn protected_paths(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        out.extend(self.config_file.clone());
        out.extend(self.env_file.clone());
        out.extend(self.session_file.clone());
        out.extend(self.mcp_servers.iter().filter_map(|s| s.env_file.clone()));
        out.push(self.state_dir());
        // A GitHub App's private key mints tokens for the whole installation.
        if let Some(GithubAuth::App {
            private_key_file, ..
        }) = self.github().map(|g| &g.auth)
        {
            out.push(private_key_file.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_and_unknown_models_pass_through() {
        assert_eq!(resolve_model("sonnet"), "claude-sonnet-4-6");
        assert_eq!(resolve_model("opus-4"), "claude-opus-4-6");
        assert_eq!(resolve_model("haiku"), "claude-haiku-4-5");
        assert_eq!(resolve_model("qwen3:8b"), "qwen3:8b");
    }

    #[test]
    fn absolute_removes_dots() {
        assert_eq!(
            absolute(Path::new("/a/b"), Path::new("../c/./d")),
            PathBuf::from("/a/c/d")
        );
    }
}
