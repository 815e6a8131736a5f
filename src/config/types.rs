//! The small value types of the configuration: transports, providers, engines,
//! policies, and the environment snapshot configuration is read from.

use std::collections::HashMap;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Http,
    Ws,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Anthropic,
    Openai,
    Ollama,
}

/// Which tracker agent mode speaks (`tracker`, `PICOGENT_TRACKER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum TrackerKind {
    /// Team Board's protocol (docs/tracker-protocol.md): the default.
    #[default]
    #[serde(rename = "team-board")]
    TeamBoard,
    /// GitHub issues and pull requests.
    #[serde(rename = "github")]
    Github,
}

/// The `github` block as written in agent.json.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileGithub {
    pub(super) repo: Option<String>,
    pub(super) api_url: Option<String>,
    pub(super) webhook_secret: Option<String>,
    pub(super) remote_url: Option<String>,
    pub(super) poll_interval_sec: Option<u64>,
    pub(super) trigger: Option<FileTrigger>,
    pub(super) app: Option<FileApp>,
    pub(super) trusted_users: Option<Vec<String>>,
    pub(super) repos: Option<Vec<FileRepoRule>>,
    pub(super) clone_cache_mb: Option<u64>,
}

/// One entry of `github.repos`: a repository or a pattern (`"acme/*"`), or one with
/// settings of its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum FileRepoRule {
    Name(String),
    With(FileRepoSettings),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRepoSettings {
    pub(super) repo: String,
    pub(super) base_branch: Option<String>,
    pub(super) trigger: Option<FileTrigger>,
    pub(super) remote_url: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileTrigger {
    pub(super) assignee: Option<String>,
    pub(super) label: Option<String>,
    pub(super) mention: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileApp {
    pub(super) app_id: u64,
    pub(super) private_key_file: std::path::PathBuf,
    pub(super) installation_id: u64,
}

/// Where agent mode's tasks work (`workspace`): each in a git worktree of its own on
/// a branch, or all in the working folder itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workspace {
    Worktree,
    Shared,
}

/// Which loop does a run's work (`engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Engine {
    /// picogent's own loop: model calls through the provider, picogent's tools.
    #[serde(rename = "native")]
    Native,
    /// Claude Code's own agent, run as a child process (`claude -p`).
    #[serde(rename = "claude-code")]
    ClaudeCode,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Native => "native",
            Engine::ClaudeCode => "claude-code",
        }
    }
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
            ProviderKind::Ollama => "ollama",
        }
    }

    /// A `provider` setting: a provider, or the `claude-code` alias, which means the
    /// Claude Code engine speaking to Anthropic's API.
    pub(super) fn parse(s: &str) -> Option<(Self, Option<Engine>)> {
        match s {
            "anthropic" => Some((Self::Anthropic, None)),
            "openai" => Some((Self::Openai, None)),
            "ollama" => Some((Self::Ollama, None)),
            "claude-code" => Some((Self::Anthropic, Some(Engine::ClaudeCode))),
            _ => None,
        }
    }

    pub(super) fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Openai => "https://api.openai.com/v1",
            ProviderKind::Ollama => "http://localhost:11434",
        }
    }

    /// The variable the provider's own SDK reads for its endpoint.
    pub(super) fn base_url_var(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "ANTHROPIC_BASE_URL",
            ProviderKind::Openai => "OPENAI_BASE_URL",
            ProviderKind::Ollama => "OLLAMA_HOST",
        }
    }

    pub(super) fn api_key_var(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::Openai => Some("OPENAI_API_KEY"),
            ProviderKind::Ollama => None,
        }
    }
}

/// Whether bash commands may open TCP connections (`network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NetworkPolicy {
    Allow,
    Deny,
}

/// How commands are confined (`sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SandboxMode {
    /// Namespaces + Landlock + seccomp; Landlock + seccomp where the kernel has no user
    /// namespaces, refusing configurations whose protected paths would be writable.
    On,
    /// The relaxed level: Landlock + seccomp only, even where namespaces work.
    Landlock,
    /// No kernel confinement (the path checks still apply).
    Off,
}

/// What the repeat guard does on the fifth identical tool call (`loop_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LoopAction {
    /// End the run (unattended work).
    Stop,
    /// Pause the run for a person to step in (live sessions).
    Pause,
}

/// A snapshot of environment variables. Loading reads this, never the live process
/// environment, so tests can pass their own and run in parallel.
#[derive(Debug, Clone, Default)]
pub struct Env(HashMap<String, String>);

impl Env {
    pub fn from_process() -> Self {
        // A variable that is not UTF-8 (name or value) cannot be a setting: skipped,
        // never a panic.
        Env(std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect())
    }

    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Env(pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect())
    }

    /// Sets a variable (a command-line flag that stands for one).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }

    /// A set, non-empty variable.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}
