//! Configuration: where it comes from (CLI argument, `PICOGENT_CONFIG`, `./agent.json`,
//! the environment alone), how the environment overrides the file, defaults, and
//! validation. Every error names the file and the field or variable at fault, because a
//! typo in a restriction (say `alowed_paths`) must never silently disable it.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub mod secrets;
mod types;
pub use types::{Env, LoopAction, NetworkPolicy, ProviderKind, SandboxMode, Transport};

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

/// agent.json as written by a person. Every field optional; unknown fields refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    name: Option<String>,
    slug: Option<String>,
    prompt: Option<String>,
    tracker_url: Option<String>,
    token: Option<String>,
    transport: Option<Transport>,
    listen_port: Option<u16>,
    callback_url: Option<String>,
    work_dir: Option<PathBuf>,
    model: Option<String>,
    provider: Option<ProviderKind>,
    base_url: Option<String>,
    api_key: Option<String>,
    capabilities: Option<Vec<String>>,
    max_concurrent_tasks: Option<usize>,
    heartbeat_interval_sec: Option<u64>,
    allowed_paths: Option<Vec<PathBuf>>,
    max_steps: Option<u32>,
    step_timeout_sec: Option<u64>,
    command_timeout_max_sec: Option<u64>,
    context_window: Option<u64>,
    max_tokens: Option<u32>,
    shutdown_grace_sec: Option<u64>,
    network: Option<NetworkPolicy>,
    sandbox: Option<SandboxMode>,
    checkpoints: Option<bool>,
    auto_pause_on_error: Option<bool>,
    claude_code_path: Option<PathBuf>,
    auto_pause_after_steps: Option<u32>,
    loop_action: Option<LoopAction>,
}

/// The resolved configuration every part of picogent reads.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub slug: String,
    pub prompt: Option<String>,
    pub tracker_url: Option<String>,
    pub token: Option<String>,
    pub transport: Transport,
    pub listen_port: u16,
    /// `None` means the default, `http://127.0.0.1:<bound port>/events`.
    pub callback_url: Option<String>,
    pub work_dir: PathBuf,
    pub model: String,
    pub provider: ProviderKind,
    pub base_url: String,
    pub api_key: Option<String>,
    pub capabilities: Vec<String>,
    pub max_concurrent_tasks: usize,
    pub heartbeat_interval_sec: u64,
    pub allowed_paths: Vec<PathBuf>,
    pub max_steps: u32,
    pub step_timeout: Duration,
    /// The longest `timeout` a bash call may ask for (`command_timeout_max_sec`,
    /// default `step_timeout_sec`): a model cannot hold a task slot for a day.
    pub command_timeout_max: Duration,
    pub context_window: u64,
    pub max_tokens: u32,
    /// How long running tasks may finish after SIGTERM before they are cancelled.
    pub shutdown_grace: Duration,
    pub network: NetworkPolicy,
    pub sandbox: SandboxMode,
    /// Snapshot the working folder after every changing tool call (for rollback).
    /// `None`: the front door's default (on in chat mode, off elsewhere).
    pub checkpoints: Option<bool>,
    /// `provider: "claude-code"`: the `claude` binary (default: found on PATH).
    pub claude_code_path: Option<PathBuf>,
    /// Pause the run when a bash command fails.
    pub auto_pause_on_error: bool,
    /// Pause the run every N model turns.
    pub auto_pause_after_steps: Option<u32>,
    pub loop_action: LoopAction,
    /// The binary that confines bash (`picogent sandbox-exec`); default: this program.
    pub sandbox_helper: Option<PathBuf>,
    /// Chat mode: where to listen (`PICOGENT_HOST`, `PICOGENT_PORT`).
    pub chat_host: String,
    pub chat_port: u16,
    /// Chat mode: the token clients must present (`PICOGENT_CHAT_TOKEN`).
    pub chat_token: Option<String>,
    /// Chat mode: browser origins admitted besides the server's own
    /// (`PICOGENT_ALLOWED_ORIGINS`, comma separated; `null` admits a page opened from disk).
    pub allowed_origins: Vec<String>,
    /// The JSON file the configuration came from, if any.
    pub config_file: Option<PathBuf>,
    /// The agent directory (directory mode) or the config file's folder (file mode).
    pub agent_home: Option<PathBuf>,
    /// The `.env` file loaded at start, if any; the tools refuse it like the config file.
    pub env_file: Option<PathBuf>,
    /// `$HOME`, for `~/.picogent/`.
    pub home_dir: Option<PathBuf>,
    /// The file itself holds a token or API key (start-up warns about it).
    pub secrets_in_file: bool,
}

/// Model aliases of spec §1; anything else passes through unchanged.
pub fn resolve_model(model: &str) -> String {
    match model {
        "sonnet" | "sonnet-4" => "claude-sonnet-4-6",
        "opus" | "opus-4" => "claude-opus-4-6",
        "haiku" => "claude-haiku-4-5",
        "sonnet-3.5" => "claude-3-5-sonnet-20241022",
        other => other,
    }
    .to_string()
}

/// Which JSON file (if any) the priority rules pick, and the agent home it implies.
fn locate(
    cli: Option<&Path>,
    env: &Env,
    cwd: &Path,
) -> Result<Option<(PathBuf, PathBuf)>, ConfigError> {
    let given = cli
        .map(Path::to_path_buf)
        .or_else(|| env.get("PICOGENT_CONFIG").map(PathBuf::from));
    if let Some(p) = given {
        let p = absolute(cwd, &p);
        if p.is_dir() {
            let file = p.join("agent.json");
            if !file.is_file() {
                return Err(ConfigError::File {
                    path: p,
                    message: "this agent directory has no agent.json".into(),
                });
            }
            return Ok(Some((file, p)));
        }
        if !p.exists() {
            return Err(ConfigError::File {
                path: p,
                message: "no such file or directory".into(),
            });
        }
        let home = p.parent().map(Path::to_path_buf).unwrap_or(cwd.into());
        return Ok(Some((p, home)));
    }
    let local = cwd.join("agent.json");
    if local.is_file() {
        return Ok(Some((local, cwd.to_path_buf())));
    }
    Ok(None)
}

fn read_file_config(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.into(),
        source,
    })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    match serde_path_to_error::deserialize::<_, FileConfig>(&mut de) {
        Ok(c) => Ok(c),
        Err(e) => {
            let field = e.path().to_string();
            let inner = e.into_inner();
            if inner.is_syntax() || inner.is_eof() || field == "." {
                Err(ConfigError::File {
                    path: path.into(),
                    message: format!("invalid configuration: {inner}"),
                })
            } else {
                Err(ConfigError::Field {
                    path: path.display().to_string(),
                    field,
                    message: inner.to_string(),
                })
            }
        }
    }
}

fn parse_env<T: std::str::FromStr>(
    env: &Env,
    var: &str,
    what: &str,
) -> Result<Option<T>, ConfigError> {
    match env.get(var) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| ConfigError::Env {
            var: var.into(),
            message: format!("expected {what}, got {v:?}"),
        }),
    }
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

fn expand_home(p: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => p.to_path_buf(),
    }
}

fn check_url(value: &str, field: &str, origin: &str) -> Result<String, ConfigError> {
    let trimmed = value.trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
            Ok(trimmed.to_string())
        }
        _ => Err(ConfigError::Field {
            path: origin.into(),
            field: field.into(),
            message: format!("expected an http:// or https:// URL, got {value:?}"),
        }),
    }
}

impl Config {
    /// Loads the configuration by the priority rules of spec §1.
    pub fn load(cli: Option<&Path>, env: &Env, cwd: &Path) -> Result<Config, ConfigError> {
        let located = locate(cli, env, cwd)?;
        let (file, file_path, agent_home) = match &located {
            Some((f, home)) => (read_file_config(f)?, Some(f.clone()), Some(home.clone())),
            None => (FileConfig::default(), None, None),
        };
        let origin = file_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "environment".into());
        let home_dir = env.get("HOME").map(PathBuf::from);
        let file_dir = agent_home.clone().unwrap_or_else(|| cwd.to_path_buf());
        let secrets_in_file = file.token.is_some() || file.api_key.is_some();

        let pick = |var: &str, from_file: &Option<String>| -> Option<String> {
            env.get(var)
                .map(str::to_string)
                .or_else(|| from_file.clone())
        };

        let name = pick("AGENT_NAME", &file.name).unwrap_or_else(|| "Agent".into());
        let slug = pick("AGENT_SLUG", &file.slug).unwrap_or_else(|| "agent".into());
        if slug.is_empty()
            || !slug
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(ConfigError::Field {
                path: origin,
                field: "slug".into(),
                message: format!("expected [a-z0-9-]+, got {slug:?}"),
            });
        }
        let prompt = pick("AGENT_PROMPT", &file.prompt);
        let tracker_url = match pick("TRACKER_URL", &file.tracker_url) {
            Some(u) => Some(check_url(&u, "tracker_url", &origin)?),
            None => None,
        };
        let token = pick("AGENT_TOKEN", &file.token);
        let transport = match env.get("AGENT_TRANSPORT") {
            Some("http") => Transport::Http,
            Some("ws") => Transport::Ws,
            Some(other) => {
                return Err(ConfigError::Env {
                    var: "AGENT_TRANSPORT".into(),
                    message: format!("expected \"http\" or \"ws\", got {other:?}"),
                })
            }
            None => file.transport.unwrap_or(Transport::Http),
        };
        let listen_port = parse_env(env, "AGENT_PORT", "a port number")?
            .or(file.listen_port)
            .unwrap_or(3200);
        let callback_url = match pick("AGENT_CALLBACK_URL", &file.callback_url) {
            Some(u) => Some(check_url(&u, "callback_url", &origin)?),
            None => None,
        };

        let work_dir = match (env.get("PICOGENT_WORK_DIR"), &file.work_dir) {
            (Some(v), _) => absolute(cwd, &expand_home(Path::new(v), home_dir.as_deref())),
            (None, Some(p)) => absolute(&file_dir, &expand_home(p, home_dir.as_deref())),
            (None, None) => agent_home.clone().unwrap_or_else(|| cwd.to_path_buf()),
        };

        let provider = match env.get("PICOGENT_PROVIDER") {
            Some(v) => ProviderKind::parse(v).ok_or_else(|| ConfigError::Env {
                var: "PICOGENT_PROVIDER".into(),
                message: format!(
                    "expected \"anthropic\", \"openai\", \"ollama\" or \"claude-code\", got {v:?}"
                ),
            })?,
            None => file.provider.unwrap_or(ProviderKind::Anthropic),
        };
        let model =
            resolve_model(&pick("PICOGENT_MODEL", &file.model).unwrap_or_else(|| "sonnet".into()));
        let base_url = env
            .get("PICOGENT_BASE_URL")
            .or_else(|| env.get(provider.base_url_var()))
            .map(str::to_string)
            .or(file.base_url)
            .unwrap_or_else(|| provider.default_base_url().into());
        // OLLAMA_HOST is often written without a scheme ("127.0.0.1:11434").
        let base_url = if provider == ProviderKind::Ollama && !base_url.contains("://") {
            format!("http://{base_url}")
        } else {
            base_url
        };
        let base_url = check_url(&base_url, "base_url", &origin)?;
        let api_key = env
            .get("PICOGENT_API_KEY")
            .or_else(|| provider.api_key_var().and_then(|v| env.get(v)))
            .map(str::to_string)
            .or(file.api_key);

        let positive = |field: &str, v: u64| -> Result<(), ConfigError> {
            if v == 0 {
                Err(ConfigError::Field {
                    path: origin.clone(),
                    field: field.into(),
                    message: "must be greater than 0".into(),
                })
            } else {
                Ok(())
            }
        };
        let max_concurrent_tasks = file.max_concurrent_tasks.unwrap_or(2);
        positive("max_concurrent_tasks", max_concurrent_tasks as u64)?;
        let heartbeat_interval_sec = file.heartbeat_interval_sec.unwrap_or(30);
        positive("heartbeat_interval_sec", heartbeat_interval_sec)?;
        let max_steps = file.max_steps.unwrap_or(50);
        positive("max_steps", max_steps as u64)?;
        let step_timeout_sec = file.step_timeout_sec.unwrap_or(120);
        positive("step_timeout_sec", step_timeout_sec)?;
        let command_timeout_max_sec = file.command_timeout_max_sec.unwrap_or(step_timeout_sec);
        positive("command_timeout_max_sec", command_timeout_max_sec)?;
        let context_window = file.context_window.unwrap_or(match provider {
            ProviderKind::Anthropic | ProviderKind::ClaudeCode => 200_000,
            ProviderKind::Openai => 128_000,
            ProviderKind::Ollama => 32_768,
        });
        positive("context_window", context_window)?;
        let max_tokens = file.max_tokens.unwrap_or(8192);
        positive("max_tokens", max_tokens as u64)?;
        if u64::from(max_tokens) * 2 > context_window {
            return Err(ConfigError::Field {
                path: origin,
                field: "max_tokens".into(),
                message: format!(
                    "{max_tokens} leaves too little of context_window {context_window} for the conversation"
                ),
            });
        }

        let allowed_paths = file
            .allowed_paths
            .unwrap_or_default()
            .iter()
            .map(|p| absolute(&file_dir, &expand_home(p, home_dir.as_deref())))
            .collect();

        let env_file = {
            let p = cwd.join(".env");
            p.is_file().then_some(p)
        };

        Ok(Config {
            name,
            slug,
            prompt,
            tracker_url,
            token,
            transport,
            listen_port,
            callback_url,
            work_dir,
            model,
            provider,
            base_url,
            api_key,
            capabilities: file.capabilities.unwrap_or_else(|| vec!["coding".into()]),
            max_concurrent_tasks,
            heartbeat_interval_sec,
            allowed_paths,
            max_steps,
            step_timeout: Duration::from_secs(step_timeout_sec),
            command_timeout_max: Duration::from_secs(command_timeout_max_sec),
            context_window,
            max_tokens,
            shutdown_grace: Duration::from_secs(file.shutdown_grace_sec.unwrap_or(30)),
            network: match env.get("PICOGENT_NETWORK") {
                Some("allow") => NetworkPolicy::Allow,
                Some("deny") => NetworkPolicy::Deny,
                Some(other) => {
                    return Err(ConfigError::Env {
                        var: "PICOGENT_NETWORK".into(),
                        message: format!("expected \"allow\" or \"deny\", got {other:?}"),
                    })
                }
                None => file.network.unwrap_or(NetworkPolicy::Allow),
            },
            sandbox: match env.get("PICOGENT_SANDBOX") {
                Some("on") => SandboxMode::On,
                Some("landlock") => SandboxMode::Landlock,
                Some("off") => SandboxMode::Off,
                Some(other) => {
                    return Err(ConfigError::Env {
                        var: "PICOGENT_SANDBOX".into(),
                        message: format!("expected \"on\", \"landlock\" or \"off\", got {other:?}"),
                    })
                }
                None => file.sandbox.unwrap_or(SandboxMode::On),
            },
            sandbox_helper: None,
            checkpoints: match env.get("PICOGENT_CHECKPOINTS") {
                Some("on") => Some(true),
                Some("off") => Some(false),
                Some(other) => {
                    return Err(ConfigError::Env {
                        var: "PICOGENT_CHECKPOINTS".into(),
                        message: format!("expected \"on\" or \"off\", got {other:?}"),
                    })
                }
                None => file.checkpoints,
            },
            auto_pause_on_error: file.auto_pause_on_error.unwrap_or(false),
            claude_code_path: env
                .get("PICOGENT_CLAUDE_CODE_PATH")
                .map(PathBuf::from)
                .or(file.claude_code_path.map(|p| absolute(&file_dir, &p))),
            auto_pause_after_steps: file.auto_pause_after_steps.filter(|n| *n > 0),
            loop_action: file.loop_action.unwrap_or(LoopAction::Stop),
            chat_host: env.get("PICOGENT_HOST").unwrap_or("127.0.0.1").to_string(),
            chat_port: parse_env(env, "PICOGENT_PORT", "a port number")?.unwrap_or(3100),
            chat_token: env.get("PICOGENT_CHAT_TOKEN").map(str::to_string),
            allowed_origins: env
                .get("PICOGENT_ALLOWED_ORIGINS")
                .map(|v| {
                    v.split(',')
                        .map(|o| o.trim().trim_end_matches('/').to_string())
                        .filter(|o| !o.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            config_file: file_path,
            agent_home,
            env_file,
            home_dir,
            secrets_in_file,
        })
    }

    /// The URL the tracker is told to call, for the port actually bound.
    pub fn callback_url_for(&self, port: u16) -> String {
        self.callback_url
            .clone()
            .unwrap_or_else(|| format!("http://127.0.0.1:{port}/events"))
    }

    /// Where agent mode keeps its journal and outbox: `agentHome/state`, else
    /// `~/.picogent/state/<slug>`.
    pub fn state_dir(&self) -> PathBuf {
        match (&self.agent_home, &self.home_dir) {
            (Some(h), _) => h.join("state"),
            (None, Some(home)) => home.join(".picogent").join("state").join(&self.slug),
            (None, None) => self.work_dir.join(".picogent-state").join(&self.slug),
        }
    }

    /// `allowed_paths` for logs: the list, or "unrestricted".
    pub fn allowed_paths_display(&self) -> String {
        if self.allowed_paths.is_empty() {
            return "unrestricted".into();
        }
        let list: Vec<String> = self
            .allowed_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        list.join(", ")
    }

    /// Agent mode runs when a tracker is configured.
    pub fn is_agent_mode(&self) -> bool {
        self.tracker_url.is_some()
    }

    /// Where session files live: `agentHome/sessions`, else `~/.picogent/sessions`.
    pub fn sessions_dir(&self) -> PathBuf {
        match (&self.agent_home, &self.home_dir) {
            (Some(h), _) => h.join("sessions"),
            (None, Some(home)) => home.join(".picogent").join("sessions"),
            (None, None) => self.work_dir.join(".picogent").join("sessions"),
        }
    }

    /// Skill folders, most specific first (the first one wins a name clash).
    pub fn skill_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self
            .agent_home
            .as_ref()
            .unwrap_or(&self.work_dir)
            .join("skills")];
        if let Some(home) = &self.home_dir {
            dirs.push(home.join(".picogent").join("skills"));
        }
        dirs
    }

    /// Files and folders no tool may open: the configuration, the loaded `.env`, and
    /// the agent home's `state/` (journals and outbox hold the tracker's traffic).
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        out.extend(self.config_file.clone());
        out.extend(self.env_file.clone());
        out.push(self.state_dir());
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
