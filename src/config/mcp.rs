//! `mcp_servers`: the MCP servers whose tools the model gets beside picogent's own.
//!
//! The file's shape follows Claude Code's and Codex's MCP configuration where they agree,
//! so an entry can be pasted from either: a stdio server is `{"command", "args"?, "env"?,
//! "cwd"?}`, a Streamable HTTP one `{"url", "headers"?}`; `type` (`stdio`, `http`) may
//! say which. The whole `mcpServers` object of a Claude Code or Claude Desktop
//! configuration can be pasted as `mcp_servers`; Codex's `http_headers`,
//! `bearer_token_env_var` (the token's variable, sent as `Authorization: Bearer`) and
//! `env_vars` (variables passed on to a stdio server by name) are taken too, and its
//! `env_http_headers` (a header's value from a variable). VS Code's `servers` object can
//! be pasted as `mcp_servers` as well. `${VAR}` and `${VAR:-default}` in any string —
//! also written `${env:VAR}`, as Cursor and VS Code write them — are taken from the
//! environment at load, so secrets stay out of the file; a variable that is not set is
//! a configuration error naming the server and field.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::types::Env;
use super::ConfigError;

/// One server as written in agent.json.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMcpServer {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<PathBuf>,
    /// `false`: the server runs unconfined (confined like the agent's commands by default).
    sandbox: Option<bool>,
    /// Codex: variables passed on from picogent's environment, by name.
    env_vars: Option<Vec<String>>,
    url: Option<String>,
    #[serde(alias = "http_headers")]
    headers: Option<BTreeMap<String, String>>,
    /// Codex: the variable holding a bearer token for a Streamable HTTP server.
    bearer_token_env_var: Option<String>,
    /// Codex: headers whose values come from variables (header name → variable).
    env_http_headers: Option<BTreeMap<String, String>>,
    enabled: Option<bool>,
    enabled_tools: Option<Vec<String>>,
    disabled_tools: Option<Vec<String>>,
    #[serde(alias = "tool_timeout_sec")]
    timeout_sec: Option<u64>,
    startup_timeout_sec: Option<u64>,
    /// VS Code: a `.env` file whose variables the server gets (its `env` wins).
    #[serde(rename = "envFile")]
    env_file: Option<String>,
    /// VS Code's development mode (watching, a debugger): an editor's, ignored here.
    #[allow(dead_code)]
    dev: Option<serde::de::IgnoredAny>,
}

/// The key `${workspaceFolder}` (VS Code's) is read from in an `Env`: no variable can
/// have a name with `:`.
const WORKSPACE: &str = "picogent:workspaceFolder";

/// How picogent reaches a server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Set on top of picogent's environment (secrets removed); a secret listed
        /// here is passed on.
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        /// Confined like the agent's commands (the default), or not.
        sandbox: bool,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One configured server, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    /// `[A-Za-z0-9_-]+`: it becomes part of the tool names (`mcp__<name>__<tool>`).
    pub name: String,
    pub transport: McpTransport,
    /// Only these tools (by the server's names), when given.
    pub enabled_tools: Option<Vec<String>>,
    /// Never these tools.
    pub disabled_tools: Vec<String>,
    /// Each tool call ends after this long (default `step_timeout_sec`).
    pub timeout: Duration,
    /// Connecting and listing the tools ends after this long (default 30 s).
    pub startup_timeout: Duration,
    /// VS Code's `envFile` the server's variables came from: kept from the agent like
    /// the configuration file, and refused inside the allowed paths.
    pub env_file: Option<PathBuf>,
}

impl McpServerConfig {
    /// `${workspaceFolder}` (VS Code's) in its command, arguments, variables, URL and
    /// headers, as the working folder the agent is made with.
    pub fn in_folder(mut self, folder: &std::path::Path) -> McpServerConfig {
        let folder = folder.display().to_string();
        let put = |s: &mut String| *s = s.replace("${workspaceFolder}", &folder);
        match &mut self.transport {
            McpTransport::Stdio {
                command, args, env, ..
            } => {
                put(command);
                args.iter_mut().for_each(put);
                env.values_mut().for_each(put);
            }
            McpTransport::Http { url, headers } => {
                put(url);
                headers.values_mut().for_each(put);
            }
        }
        self
    }
}

/// Expands `${VAR}` and `${VAR:-default}` from `env`; `field` names the place for errors.
fn expand(value: &str, env: &Env, field: &str, origin: &str) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(field_error(
                origin,
                field,
                format!("unclosed ${{ in {value:?}"),
            ));
        };
        let inner = &after[..end];
        // VS Code's name for the folder it works in: picogent's working folder, put in
        // when the agent is made (`in_folder`: `--dir`, an editor's folder), or here
        // for a path read now (`envFile`).
        if inner == "workspaceFolder" {
            match env.get(WORKSPACE) {
                Some(w) => out.push_str(w),
                None => out.push_str("${workspaceFolder}"),
            }
            rest = &after[end + 1..];
            continue;
        }
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        // Cursor and VS Code write `${env:VAR}`; VS Code's `${input:…}` asks a person,
        // which a daemon cannot.
        let name = name.strip_prefix("env:").unwrap_or(name);
        if name.contains(':') {
            return Err(field_error(
                origin,
                field,
                format!("${{{inner}}} is not an environment variable (only ${{VAR}} and ${{env:VAR}} are read): put the value in a variable"),
            ));
        }
        // Whatever a server is given by name stays out of commands' environments.
        crate::config::secrets::mark_secret(name);
        match (env.get(name), default) {
            (Some(v), _) => out.push_str(v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(field_error(
                    origin,
                    field,
                    format!("environment variable {name} is not set (referenced as ${{{name}}})"),
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// An `envFile` inside an allowed path could be changed by the agent's commands (under
/// Landlock alone, kept-from-the-agent paths there stay writable): refused, naming it.
pub(super) fn env_files_kept(config: &super::Config) -> Result<(), ConfigError> {
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    for s in &config.mcp_servers {
        let Some(f) = &s.env_file else { continue };
        let file = real(f);
        if config
            .policy
            .allowed_paths
            .iter()
            .any(|a| file.starts_with(real(a)))
        {
            return Err(ConfigError::Field {
                path: config
                    .config_file
                    .as_ref()
                    .map_or("environment".into(), |p| p.display().to_string()),
                field: format!("mcp_servers.{}.envFile", s.name),
                message: format!(
                    "{} lies where the agent's commands can write (allowed paths): keep the server's variables outside them",
                    f.display()
                ),
            });
        }
    }
    Ok(())
}

/// A `.env` file's variables (VS Code's `envFile`), for the server alone: the agent's
/// commands never had them (the file is kept from the agent, see `env_file`).
fn env_file(path: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let iter = dotenvy::from_path_iter(path).map_err(|e| format!("{}: {e}", path.display()))?;
    iter.map(|item| item.map_err(|e| format!("{}: {e}", path.display())))
        .collect()
}

/// A variable a server is given by name (kept out of commands' environments).
fn from_env(env: &Env, name: &str, field: &str, origin: &str) -> Result<String, ConfigError> {
    crate::config::secrets::mark_secret(name);
    env.get(name).map(str::to_string).ok_or_else(|| {
        field_error(
            origin,
            field,
            format!("environment variable {name} is not set"),
        )
    })
}

fn field_error(origin: &str, field: &str, message: String) -> ConfigError {
    ConfigError::Field {
        path: origin.into(),
        field: field.into(),
        message,
    }
}

fn expand_map(
    map: Option<&BTreeMap<String, String>>,
    env: &Env,
    field: &str,
    origin: &str,
) -> Result<BTreeMap<String, String>, ConfigError> {
    map.into_iter()
        .flatten()
        .map(|(k, v)| Ok((k.clone(), expand(v, env, &format!("{field}.{k}"), origin)?)))
        .collect()
}

/// Resolves the file's `mcp_servers` (in name order); disabled servers are left out.
/// `file_path` turns a relative `cwd` into one relative to the file's folder.
pub(super) fn resolve(
    servers: &BTreeMap<String, FileMcpServer>,
    env: &Env,
    origin: &str,
    step_timeout: Duration,
    workspace: &std::path::Path,
    file_path: &dyn Fn(&std::path::Path) -> PathBuf,
) -> Result<Vec<McpServerConfig>, ConfigError> {
    // Only a path read now (`envFile`) takes the folder at once.
    let mut at_load = env.clone();
    at_load.set(WORKSPACE, workspace.display().to_string());
    let mut out = Vec::new();
    for (name, s) in servers {
        let field = format!("mcp_servers.{name}");
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if name.is_empty() || !name.chars().all(valid) || name.contains("__") {
            return Err(field_error(
                origin,
                &field,
                "a server name must be letters, digits, `_` and `-` (no `__`): it becomes part of the tool names".into(),
            ));
        }
        if s.enabled == Some(false) {
            continue;
        }
        let mut transport = transport(s, env, &field, origin, file_path)?;
        let env_file = match (&s.env_file, &mut transport) {
            (None, _) => None,
            (Some(f), McpTransport::Stdio { env: vars, .. }) => {
                let at = format!("{field}.envFile");
                let path = file_path(std::path::Path::new(&expand(f, &at_load, &at, origin)?));
                for (k, v) in env_file(&path).map_err(|e| field_error(origin, &at, e))? {
                    vars.entry(k).or_insert(v);
                }
                Some(path)
            }
            (Some(_), McpTransport::Http { .. }) => {
                let why =
                    "envFile gives a stdio server its variables; an HTTP server takes headers"
                        .into();
                return Err(field_error(origin, &format!("{field}.envFile"), why));
            }
        };
        let secs = |v: Option<u64>, default: Duration, what: &str| match v {
            Some(0) => Err(field_error(
                origin,
                &format!("{field}.{what}"),
                "must be greater than 0".into(),
            )),
            // A year at most: more overflows the clock's arithmetic.
            Some(n) if n > 365 * 86_400 => Err(field_error(
                origin,
                &format!("{field}.{what}"),
                "must be at most a year".into(),
            )),
            Some(n) => Ok(Duration::from_secs(n)),
            None => Ok(default),
        };
        out.push(McpServerConfig {
            name: name.clone(),
            transport,
            enabled_tools: s.enabled_tools.clone(),
            disabled_tools: s.disabled_tools.clone().unwrap_or_default(),
            timeout: secs(s.timeout_sec, step_timeout, "timeout_sec")?,
            startup_timeout: secs(
                s.startup_timeout_sec,
                Duration::from_secs(30),
                "startup_timeout_sec",
            )?,
            env_file,
        });
    }
    Ok(out)
}

fn transport(
    s: &FileMcpServer,
    env: &Env,
    field: &str,
    origin: &str,
    file_path: &dyn Fn(&std::path::Path) -> PathBuf,
) -> Result<McpTransport, ConfigError> {
    let kind = s.kind.as_deref();
    match (kind, &s.command, &s.url) {
        (Some("sse"), _, _) => Err(field_error(
            origin,
            &format!("{field}.type"),
            "the old SSE transport is not supported; use the server's Streamable HTTP endpoint (`\"type\": \"http\"`)".into(),
        )),
        (None | Some("stdio"), Some(command), None) => Ok(McpTransport::Stdio {
            command: expand(command, env, &format!("{field}.command"), origin)?,
            args: (s.args.iter().flatten().enumerate())
                .map(|(i, a)| expand(a, env, &format!("{field}.args[{i}]"), origin))
                .collect::<Result<_, _>>()?,
            env: {
                let mut vars = expand_map(s.env.as_ref(), env, &format!("{field}.env"), origin)?;
                for (i, name) in s.env_vars.iter().flatten().enumerate() {
                    // Passed on as it is (`PATH`, `LANG`...): not made a secret, which
                    // would take it from the agent's commands.
                    let value = env.get(name).map(str::to_string).ok_or_else(|| {
                        field_error(
                            origin,
                            &format!("{field}.env_vars[{i}]"),
                            format!("environment variable {name} is not set"),
                        )
                    })?;
                    vars.insert(name.clone(), value);
                }
                vars
            },
            cwd: s.cwd.as_deref().map(file_path),
            sandbox: s.sandbox.unwrap_or(true),
        }),
        (None | Some("http" | "streamable-http" | "streamable_http"), None, Some(url)) => {
            let url = expand(url, env, &format!("{field}.url"), origin)?;
            match reqwest::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                _ => {
                    return Err(field_error(
                        origin,
                        &format!("{field}.url"),
                        format!("expected an http:// or https:// URL, got {url:?}"),
                    ))
                }
            }
            let mut headers =
                expand_map(s.headers.as_ref(), env, &format!("{field}.headers"), origin)?;
            for (header, var) in s.env_http_headers.iter().flatten() {
                let value = from_env(env, var, &format!("{field}.env_http_headers.{header}"), origin)?;
                headers.retain(|k, _| !k.eq_ignore_ascii_case(header));
                headers.insert(header.clone(), value);
            }
            if let Some(var) = &s.bearer_token_env_var {
                let token = from_env(env, var, &format!("{field}.bearer_token_env_var"), origin)?;
                headers.retain(|k, _| !k.eq_ignore_ascii_case("authorization"));
                headers.insert("Authorization".into(), format!("Bearer {token}"));
            }
            Ok(McpTransport::Http { url, headers })
        }
        (Some(k), _, _) if !matches!(k, "stdio" | "http" | "streamable-http" | "streamable_http") => {
            Err(field_error(
                origin,
                &format!("{field}.type"),
                format!("expected \"stdio\" or \"http\", got {k:?}"),
            ))
        }
        _ => Err(field_error(
            origin,
            field,
            "give either `command` (a stdio server) or `url` (a Streamable HTTP server), not both".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_with_defaults_and_missing_ones_are_named() {
        let env = Env::from_pairs([("TOKEN", "abc")]);
        assert_eq!(
            expand("Bearer ${TOKEN}", &env, "f", "o").unwrap(),
            "Bearer abc"
        );
        assert_eq!(expand("${NOPE:-x}/y", &env, "f", "o").unwrap(), "x/y");
        let err = expand(
            "${NOPE}",
            &env,
            "mcp_servers.gh.headers.Authorization",
            "agent.json",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "agent.json: field `mcp_servers.gh.headers.Authorization`: environment variable NOPE is not set (referenced as ${NOPE})"
        );
    }
}
