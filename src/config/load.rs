//! Loading the configuration: which file (CLI argument, `PICOGENT_CONFIG`,
//! `./agent.json`, or none), the file's fields, the environment over them, defaults and
//! validation. Every error names the file and field, or the variable, at fault.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::types::{Engine, Env, LoopAction, NetworkPolicy, SandboxMode, Transport, Workspace};
use super::{absolute, Config, ConfigError, Tracker};

/// agent.json as written by a person. Every field optional; unknown fields refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    name: Option<String>,
    slug: Option<String>,
    prompt: Option<String>,
    tracker_url: Option<String>,
    token: Option<String>,
    transport: Option<Transport>,
    listen_port: Option<u16>,
    callback_url: Option<String>,
    work_dir: Option<PathBuf>,
    pub(super) model: Option<String>,
    pub(super) provider: Option<String>,
    pub(super) engine: Option<Engine>,
    pub(super) base_url: Option<String>,
    pub(super) api_key: Option<String>,
    capabilities: Option<Vec<String>>,
    pub(super) max_concurrent_tasks: Option<usize>,
    pub(super) heartbeat_interval_sec: Option<u64>,
    allowed_paths: Option<Vec<PathBuf>>,
    pub(super) max_steps: Option<u32>,
    pub(super) step_timeout_sec: Option<u64>,
    pub(super) command_timeout_max_sec: Option<u64>,
    pub(super) max_saved_output_mb: Option<u64>,
    pub(super) context_window: Option<u64>,
    pub(super) max_tokens: Option<u32>,
    pub(super) shutdown_grace_sec: Option<u64>,
    network: Option<NetworkPolicy>,
    sandbox: Option<SandboxMode>,
    nested_user_namespaces: Option<bool>,
    checkpoints: Option<bool>,
    auto_pause_on_error: Option<bool>,
    claude_code_path: Option<PathBuf>,
    auto_pause_after_steps: Option<u32>,
    loop_action: Option<LoopAction>,
    pub(super) approval: Option<super::approval::FileApproval>,
    workspace: Option<Workspace>,
    base_branch: Option<String>,
    git_email: Option<String>,
    push: Option<bool>,
    remote: Option<String>,
    worktree_retention_days: Option<u64>,
    pub(super) git_timeout_sec: Option<u64>,
    pub(super) temperature: Option<f64>,
    pub(super) keep_alive: Option<serde_json::Value>,
    /// `mcpServers`: pasted as is from a Claude Code or Claude Desktop configuration;
    /// `servers`, from VS Code's.
    #[serde(alias = "mcpServers", alias = "servers")]
    mcp_servers: Option<std::collections::BTreeMap<String, super::mcp::FileMcpServer>>,
    project_docs: Option<bool>,
    pi_home: Option<bool>,
    /// Which tracker agent mode speaks: `team-board` (the default) or `github`.
    pub(super) tracker: Option<super::types::TrackerKind>,
    /// GitHub as the tracker (`tracker: "github"`).
    pub(super) github: Option<super::types::FileGithub>,
    /// A PostgreSQL URL: the state a fleet of workers shares (default: local files).
    pub(super) store: Option<String>,
    pub(super) lease_sec: Option<u64>,
    pub(super) fleet_max_tasks: Option<usize>,
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

fn expand_home(p: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => p.to_path_buf(),
    }
}

pub(super) fn check_url(value: &str, field: &str, origin: &str) -> Result<String, ConfigError> {
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

/// Picks one of `options` by name: the variable, else the file's value, else `default`.
pub(super) fn choice<T: Copy>(
    env: &Env,
    var: &str,
    options: &[(&str, T)],
    file: Option<T>,
    default: T,
) -> Result<T, ConfigError> {
    let Some(v) = env.get(var) else {
        return Ok(file.unwrap_or(default));
    };
    options
        .iter()
        .find(|(name, _)| *name == v)
        .map(|(_, t)| *t)
        .ok_or_else(|| ConfigError::Env {
            var: var.into(),
            message: format!("expected {}, got {v:?}", one_of(options)),
        })
}

/// `"a", "b" or "c"`.
fn one_of<T>(options: &[(&str, T)]) -> String {
    let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// Where each setting comes from in one load.
pub(super) struct Sources<'a> {
    pub(super) file: FileConfig,
    pub(super) env: &'a Env,
    cwd: &'a Path,
    /// Relative paths in the file are relative to this folder.
    file_dir: PathBuf,
    /// The file's path (or "environment"), for errors.
    pub(super) origin: String,
    home_dir: Option<PathBuf>,
}

impl Sources<'_> {
    pub(super) fn pick(&self, var: &str, from_file: &Option<String>) -> Option<String> {
        self.env
            .get(var)
            .map(str::to_string)
            .or_else(|| from_file.clone())
    }

    pub(super) fn field_error(&self, field: &str, message: String) -> ConfigError {
        ConfigError::Field {
            path: self.origin.clone(),
            field: field.into(),
            message,
        }
    }

    /// A path from the file: `~` expanded, relative to the file's folder.
    pub(super) fn file_path(&self, p: &Path) -> PathBuf {
        absolute(&self.file_dir, &expand_home(p, self.home_dir.as_deref()))
    }

    fn url(
        &self,
        var: &str,
        field: &str,
        from_file: &Option<String>,
    ) -> Result<Option<String>, ConfigError> {
        self.pick(var, from_file)
            .map(|u| check_url(&u, field, &self.origin))
            .transpose()
    }

    fn slug(&self) -> Result<String, ConfigError> {
        let slug = self
            .pick("AGENT_SLUG", &self.file.slug)
            .unwrap_or_else(|| "agent".into());
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if slug.is_empty() || !slug.chars().all(valid) {
            return Err(self.field_error("slug", format!("expected [a-z0-9-]+, got {slug:?}")));
        }
        Ok(slug)
    }

    fn work_dir(&self, agent_home: Option<&PathBuf>) -> PathBuf {
        match (self.env.get("PICOGENT_WORK_DIR"), &self.file.work_dir) {
            (Some(v), _) => absolute(
                self.cwd,
                &expand_home(Path::new(v), self.home_dir.as_deref()),
            ),
            (None, Some(p)) => self.file_path(p),
            (None, None) => agent_home
                .cloned()
                .unwrap_or_else(|| self.cwd.to_path_buf()),
        }
    }

    fn policies(&self) -> Result<(NetworkPolicy, SandboxMode, Option<bool>), ConfigError> {
        let network = choice(
            self.env,
            "PICOGENT_NETWORK",
            &[
                ("allow", NetworkPolicy::Allow),
                ("deny", NetworkPolicy::Deny),
            ],
            self.file.network,
            NetworkPolicy::Allow,
        )?;
        let sandbox = choice(
            self.env,
            "PICOGENT_SANDBOX",
            &[
                ("on", SandboxMode::On),
                ("landlock", SandboxMode::Landlock),
                ("off", SandboxMode::Off),
            ],
            self.file.sandbox,
            SandboxMode::On,
        )?;
        let checkpoints = choice(
            self.env,
            "PICOGENT_CHECKPOINTS",
            &[("on", Some(true)), ("off", Some(false))],
            Some(self.file.checkpoints),
            None,
        )?;
        Ok((network, sandbox, checkpoints))
    }

    fn allowed_origins(&self) -> Vec<String> {
        self.env
            .get("PICOGENT_ALLOWED_ORIGINS")
            .map(|v| {
                v.split(',')
                    .map(|o| o.trim().trim_end_matches('/').to_string())
                    .filter(|o| !o.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Who the agent is and how it meets the tracker (agent mode).
struct Identity {
    name: String,
    slug: String,
    prompt: Option<String>,
    tracker_url: Option<String>,
    token: Option<String>,
    transport: Transport,
    listen_port: u16,
    callback_url: Option<String>,
}

/// Where a task's work happens in git, and what becomes of it.
struct Git {
    workspace: Option<Workspace>,
    base_branch: Option<String>,
    git_email: Option<String>,
    push: bool,
    remote: String,
    worktree_retention_days: u64,
}

impl Git {
    /// Agent mode's git settings, with the limit on one git command.
    fn resolved(self, timeout: Duration) -> super::GitSettings {
        super::GitSettings {
            workspace: self.workspace,
            base_branch: self.base_branch,
            email: self.git_email,
            push: self.push,
            remote: self.remote,
            worktree_retention_days: self.worktree_retention_days,
            timeout,
        }
    }
}

/// The chat server's address and who may call it (chat mode).
struct Chat {
    host: String,
    port: u16,
    token: Option<String>,
    allowed_origins: Vec<String>,
}

impl<'a> Sources<'a> {
    /// The sources of one load: the file the priority rules pick (if any), read, and
    /// the environment; with that file's path and the agent home it implies.
    fn open(
        cli: Option<&Path>,
        env: &'a Env,
        cwd: &'a Path,
    ) -> Result<(Self, Option<PathBuf>, Option<PathBuf>), ConfigError> {
        let (file, config_file, agent_home) = match locate(cli, env, cwd)? {
            Some((f, home)) => (read_file_config(&f)?, Some(f), Some(home)),
            None => (FileConfig::default(), None, None),
        };
        let s = Sources {
            origin: config_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "environment".into()),
            home_dir: env.get("HOME").map(PathBuf::from),
            file_dir: agent_home.clone().unwrap_or_else(|| cwd.to_path_buf()),
            file,
            env,
            cwd,
        };
        Ok((s, config_file, agent_home))
    }

    fn identity(&self) -> Result<Identity, ConfigError> {
        let f = &self.file;
        let transports = [("http", Transport::Http), ("ws", Transport::Ws)];
        Ok(Identity {
            name: self
                .pick("AGENT_NAME", &f.name)
                .unwrap_or_else(|| "Agent".into()),
            slug: self.slug()?,
            prompt: self.pick("AGENT_PROMPT", &f.prompt),
            tracker_url: self.url("TRACKER_URL", "tracker_url", &f.tracker_url)?,
            token: self.pick("AGENT_TOKEN", &f.token),
            transport: choice(
                self.env,
                "AGENT_TRANSPORT",
                &transports,
                f.transport,
                Transport::Http,
            )?,
            listen_port: parse_env(self.env, "AGENT_PORT", "a port number")?
                .or(f.listen_port)
                .unwrap_or(3200),
            callback_url: self.url("AGENT_CALLBACK_URL", "callback_url", &f.callback_url)?,
        })
    }

    fn git(&self) -> Result<Git, ConfigError> {
        let f = &self.file;
        Ok(Git {
            workspace: choice(
                self.env,
                "PICOGENT_WORKSPACE",
                &[
                    ("worktree", Some(Workspace::Worktree)),
                    ("shared", Some(Workspace::Shared)),
                ],
                Some(f.workspace),
                None,
            )?,
            base_branch: f.base_branch.clone().filter(|b| !b.is_empty()),
            git_email: f.git_email.clone().filter(|e| !e.is_empty()),
            push: f.push.unwrap_or(false),
            remote: f.remote.clone().unwrap_or_else(|| "origin".into()),
            worktree_retention_days: f.worktree_retention_days.unwrap_or(7),
        })
    }

    fn chat(&self) -> Result<Chat, ConfigError> {
        let env = self.env;
        Ok(Chat {
            host: env.get("PICOGENT_HOST").unwrap_or("127.0.0.1").to_string(),
            port: parse_env(env, "PICOGENT_PORT", "a port number")?.unwrap_or(3100),
            token: env.get("PICOGENT_CHAT_TOKEN").map(str::to_string),
            allowed_origins: self.allowed_origins(),
        })
    }

    /// `mcp_servers` resolved: their paths relative to the file's folder, their calls
    /// given a step's time.
    fn mcp_servers(
        &self,
        step_timeout: Duration,
        work_dir: &Path,
    ) -> Result<Vec<super::McpServerConfig>, ConfigError> {
        super::mcp::resolve(
            self.file
                .mcp_servers
                .as_ref()
                .unwrap_or(&Default::default()),
            self.env,
            &self.origin,
            step_timeout,
            work_dir,
            &|p| self.file_path(p),
        )
    }

    /// The variable as given, else the file's path relative to the file's folder.
    fn claude_code_path(&self) -> Option<PathBuf> {
        self.env
            .get("PICOGENT_CLAUDE_CODE_PATH")
            .map(PathBuf::from)
            .or_else(|| {
                self.file
                    .claude_code_path
                    .as_ref()
                    .map(|p| absolute(&self.file_dir, p))
            })
    }
}

impl Config {
    /// Loads the configuration by the priority rules of spec §1.
    pub fn load(cli: Option<&Path>, env: &Env, cwd: &Path) -> Result<Config, ConfigError> {
        let (s, config_file, agent_home) = Sources::open(cli, env, cwd)?;
        let f = &s.file;
        let m = s.model_settings()?;
        let l = s.limits(m.provider)?;
        let (network, sandbox, checkpoints) = s.policies()?;
        let mcp_servers = s.mcp_servers(
            Duration::from_secs(l.step_timeout_sec),
            &s.work_dir(agent_home.as_ref()),
        )?;
        let (id, git, chat) = (s.identity()?, s.git()?, s.chat()?);
        let store = s.store()?;
        let kind = s.tracker_kind()?;
        let github = s.github(kind, &|p| s.file_path(p))?;
        let tracker = match (github, id.tracker_url) {
            (Some(g), _) => Some(Tracker::Github(Box::new(g))),
            (None, Some(url)) => Some(Tracker::Board { url }),
            (None, None) => None,
        };
        let approval = s.approval(tracker.is_some(), m.engine)?;
        let config = Config {
            name: id.name,
            slug: id.slug,
            prompt: id.prompt,

            tracker,
            token: id.token,
            transport: id.transport,
            listen_port: id.listen_port,
            callback_url: id.callback_url,
            work_dir: s.work_dir(agent_home.as_ref()),
            llm: super::ModelSettings {
                model_origins: m.origins.clone(),
                model: m.model,
                provider: m.provider,
                engine: m.engine,
                base_url: m.base_url,
                api_key: m.api_key,
                auth_token: m.auth_token,
                temperature: m.temperature,
                keep_alive: f.keep_alive.clone().filter(|v| !v.is_null()),
                claude_code_path: s.claude_code_path(),
                openai_account: m.openai_account,
            },
            capabilities: f
                .capabilities
                .clone()
                .unwrap_or_else(|| vec!["coding".into()]),
            policy: super::Policy {
                allowed_paths: (f.allowed_paths.iter().flatten())
                    .map(|p| s.file_path(p))
                    .collect(),
                network,
                sandbox,
                nested_user_namespaces: f.nested_user_namespaces.unwrap_or(false),
                sandbox_helper: None,
            },
            limits: l.resolved(),
            checkpoints,
            auto_pause_on_error: f.auto_pause_on_error.unwrap_or(false),
            git: git.resolved(Duration::from_secs(l.git_timeout_sec)),
            auto_pause_after_steps: f.auto_pause_after_steps.filter(|n| *n > 0),
            loop_action: f.loop_action.unwrap_or(LoopAction::Stop),
            approval,
            mcp_servers,
            project_docs: f.project_docs.unwrap_or(true),
            pi_home: f.pi_home.unwrap_or(false),
            chat: super::ChatServer {
                host: chat.host,
                port: chat.port,
                token: chat.token,
                allowed_origins: chat.allowed_origins,
            },
            env_file: Some(cwd.join(".env")).filter(|p| p.is_file()),
            secrets_in_file: f.token.is_some()
                || f.api_key.is_some()
                || f.store.as_deref().is_some_and(|u| {
                    u.parse::<tokio_postgres::Config>()
                        .is_ok_and(|c| c.get_password().is_some())
                }),
            store,
            session_dir: None,
            session_file: None,
            home_dir: s.home_dir.clone(),
            config_file,
            agent_home,
        };
        super::mcp::env_files_kept(&config)?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    /// `agent.example.json` promises every field with its default: the field list comes
    /// from serde itself (the unknown-field error names every expected field).
    #[test]
    fn the_example_lists_every_field() {
        let err = serde_json::from_str::<super::FileConfig>(r#"{"no such field": 1}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let expected: Vec<&str> = err.split('`').skip(3).step_by(2).collect();
        assert!(expected.len() > 30, "{err}");
        let example = include_str!("../../agent.example.json");
        let keys: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(example).unwrap_or_default();
        // Aliases (`mcpServers` and `servers`, as Claude's and VS Code's files spell
        // `mcp_servers`) are not fields.
        let aliases = ["mcpServers", "servers"];
        let missing: Vec<_> = expected
            .iter()
            .filter(|f| !keys.contains_key(**f) && !aliases.contains(*f))
            .collect();
        assert!(missing.is_empty(), "agent.example.json lacks {missing:?}");
    }
}
