//! Configuration: priority, environment overrides, clear errors.

use std::path::Path;

use picogent::config::{Config, ConfigError, Env, ProviderKind, Transport};
use pretty_assertions::assert_eq;

use crate::common::Sandbox;

fn write(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn defaults_from_the_environment_alone() {
    let sb = Sandbox::new();
    let c = Config::load(None, &Env::default(), &sb.work).unwrap();
    assert_eq!(c.name, "Agent");
    assert_eq!(c.slug, "agent");
    assert_eq!(c.llm.model, "claude-sonnet-4-6");
    assert_eq!(c.llm.provider, ProviderKind::Anthropic);
    assert_eq!(c.llm.base_url, "https://api.anthropic.com");
    assert_eq!(c.transport, Transport::Http);
    assert_eq!(c.listen_port, 3200);
    assert_eq!(
        c.callback_url_for(c.listen_port),
        "http://127.0.0.1:3200/events"
    );
    assert_eq!(c.work_dir, sb.work);
    assert_eq!(
        (
            c.limits.max_steps,
            c.limits.max_concurrent_tasks,
            c.limits.heartbeat_interval_sec
        ),
        (50, 2, 30)
    );
    assert_eq!(c.limits.step_timeout.as_secs(), 120);
    assert_eq!(c.capabilities, vec!["coding".to_string()]);
    assert!(c.policy.allowed_paths.is_empty());
    assert!(!c.is_agent_mode());
}

#[test]
fn priority_is_cli_then_picogent_config_then_local_agent_json() {
    let sb = Sandbox::new();
    let cli_dir = sb.base().join("cli");
    write(&cli_dir, "agent.json", r#"{"name": "FromCli"}"#);
    let env_file = write(
        &sb.base().join("envcfg"),
        "my.json",
        r#"{"name": "FromEnvVar"}"#,
    );
    write(&sb.work, "agent.json", r#"{"name": "FromCwd"}"#);
    let env = Env::from_pairs([("PICOGENT_CONFIG", env_file.display().to_string())]);
    let c = Config::load(Some(&cli_dir), &env, &sb.work).unwrap();
    assert_eq!(
        (c.name.as_str(), c.agent_home.as_deref()),
        ("FromCli", Some(cli_dir.as_path()))
    );
    assert_eq!(
        c.work_dir, cli_dir,
        "work_dir defaults to the agent directory"
    );
    let c = Config::load(None, &env, &sb.work).unwrap();
    assert_eq!(c.name, "FromEnvVar");
    assert_eq!(c.agent_home.as_deref(), env_file.parent());
    let c = Config::load(None, &Env::default(), &sb.work).unwrap();
    assert_eq!(c.name, "FromCwd");
}

#[test]
fn environment_overrides_the_file_and_paths_resolve_against_the_file() {
    let sb = Sandbox::new();
    write(
        &sb.home,
        "agent.json",
        r#"{"name": "File", "model": "opus", "provider": "openai",
        "work_dir": "../work", "allowed_paths": ["../work", "/abs"], "base_url": "http://file:1/v1"}"#,
    );
    let env = Env::from_pairs([
        ("AGENT_NAME", "Env"),
        ("PICOGENT_MODEL", "haiku"),
        ("OPENAI_BASE_URL", "http://env:2/v1/"),
        ("OPENAI_API_KEY", "k-openai"),
    ]);
    let c = Config::load(Some(&sb.home), &env, &sb.base()).unwrap();
    assert_eq!(c.name, "Env");
    assert_eq!(c.llm.model, "claude-haiku-4-5");
    assert_eq!(c.llm.base_url, "http://env:2/v1");
    assert_eq!(c.llm.api_key.as_deref(), Some("k-openai"));
    assert_eq!(c.work_dir, sb.work);
    assert_eq!(c.policy.allowed_paths, vec![sb.work.clone(), "/abs".into()]);
    assert_eq!(c.limits.context_window, 128_000);
}

#[test]
fn an_unknown_field_is_an_error_naming_file_and_field() {
    let sb = Sandbox::new();
    let f = write(&sb.home, "agent.json", r#"{"alowed_paths": ["/"]}"#);
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&f.display().to_string()) && e.contains("alowed_paths"),
        "{e}"
    );
}

#[test]
fn a_wrong_type_names_the_field_and_what_was_expected() {
    let sb = Sandbox::new();
    write(&sb.home, "agent.json", r#"{"max_steps": "many"}"#);
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base()).unwrap_err();
    match &e {
        ConfigError::Field { field, message, .. } => {
            assert_eq!(field, "max_steps");
            assert!(message.contains("expected u32"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    write(&sb.home, "agent.json", r#"{"provider": "gemini"}"#);
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(e.contains("provider") && e.contains("gemini"), "{e}");
}

#[test]
fn invalid_json_and_bad_values_are_clear() {
    let sb = Sandbox::new();
    let f = write(&sb.home, "agent.json", "{\"name\": ");
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&f.display().to_string()) && e.contains("line 1"),
        "{e}"
    );
    write(&sb.home, "agent.json", r#"{"slug": "Bad Slug"}"#);
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(e.contains("slug") && e.contains("[a-z0-9-]+"), "{e}");
    write(
        &sb.home,
        "agent.json",
        r#"{"tracker_url": "localhost:8100"}"#,
    );
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(e.contains("tracker_url"), "{e}");
    let env = Env::from_pairs([("AGENT_PORT", "eighty")]);
    let e = Config::load(None, &env, &sb.work).unwrap_err().to_string();
    assert!(e.contains("AGENT_PORT") && e.contains("eighty"), "{e}");
    let e = Config::load(Some(&sb.work), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no agent.json"), "{e}");
    // Durations the clock's arithmetic would overflow are refused, naming the field.
    for field in [
        "heartbeat_interval_sec",
        "shutdown_grace_sec",
        "step_timeout_sec",
        "git_timeout_sec",
    ] {
        write(
            &sb.home,
            "agent.json",
            &format!(r#"{{"{field}": 18446744073709551615}}"#),
        );
        let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
            .unwrap_err()
            .to_string();
        assert!(e.contains(field) && e.contains("at most"), "{e}");
    }
}

#[test]
fn ollama_host_without_a_scheme_is_accepted() {
    let sb = Sandbox::new();
    let env = Env::from_pairs([
        ("PICOGENT_PROVIDER", "ollama"),
        ("PICOGENT_MODEL", "qwen3:8b"),
        ("OLLAMA_HOST", "127.0.0.1:11434"),
    ]);
    let c = Config::load(None, &env, &sb.work).unwrap();
    assert_eq!(c.llm.base_url, "http://127.0.0.1:11434");
    assert_eq!(c.llm.api_key, None);
    // As the Ollama client reads OLLAMA_HOST.
    for (host, url) in [
        ("127.0.0.1", "http://127.0.0.1:11434"),
        ("gpu-box", "http://gpu-box:11434"),
        (":11434", "http://127.0.0.1:11434"),
        (":8080", "http://127.0.0.1:8080"),
        ("[::1]", "http://[::1]:11434"),
        ("[::1]:9000", "http://[::1]:9000"),
        ("http://ollama.internal", "http://ollama.internal"),
        (
            "https://ollama.example.com/proxy",
            "https://ollama.example.com/proxy",
        ),
    ] {
        let env = Env::from_pairs([
            ("PICOGENT_PROVIDER", "ollama"),
            ("PICOGENT_MODEL", "qwen3:8b"),
            ("OLLAMA_HOST", host),
        ]);
        assert_eq!(
            Config::load(None, &env, &sb.work).unwrap().llm.base_url,
            url,
            "{host}"
        );
    }
}

#[test]
fn the_shipped_example_configurations_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let env = Env::default();
    let c = Config::load(Some(&root.join("agent.example.json")), &env, root).unwrap();
    assert_eq!(
        (c.name.as_str(), c.limits.max_steps, c.listen_port),
        ("Agent", 50, 3200)
    );
    let c = Config::load(Some(&root.join("agents/coder")), &env, root).unwrap();
    assert_eq!(c.slug, "coder");
    assert_eq!(c.tracker_url(), Some("http://localhost:8100"));
    // It works in a folder of its own, not in the one with its configuration.
    assert_eq!(
        c.policy.allowed_paths,
        vec![root.join("agents/coder/workspace")]
    );
    assert_eq!(c.work_dir, root.join("agents/coder/workspace"));
    let skills = picogent::agent::skills::discover(&c.skill_dirs());
    assert_eq!(skills.len(), 1);
    assert_eq!(skills[0].name, "review");
}

#[test]
fn the_engine_is_a_setting_and_provider_claude_code_is_its_alias() {
    use picogent::config::Engine;
    let sb = Sandbox::new();
    let load = |body: &str, env: &[(&str, &str)]| {
        write(&sb.home, "agent.json", body);
        Config::load(
            Some(&sb.home),
            &Env::from_pairs(env.iter().copied()),
            &sb.base(),
        )
    };
    let c = load("{}", &[]).unwrap();
    assert_eq!(
        (c.llm.engine, c.llm.provider),
        (Engine::Native, ProviderKind::Anthropic)
    );
    let c = load(r#"{"engine": "claude-code"}"#, &[]).unwrap();
    assert_eq!(
        (c.llm.engine, c.llm.provider),
        (Engine::ClaudeCode, ProviderKind::Anthropic)
    );
    // The documented alias, in the file and in the environment.
    let c = load(r#"{"provider": "claude-code"}"#, &[]).unwrap();
    assert_eq!(
        (c.llm.engine, c.llm.provider, c.llm.base_url.as_str()),
        (
            Engine::ClaudeCode,
            ProviderKind::Anthropic,
            "https://api.anthropic.com"
        )
    );
    let c = load("{}", &[("PICOGENT_PROVIDER", "claude-code")]).unwrap();
    assert_eq!(c.llm.engine, Engine::ClaudeCode);
    // An explicit engine wins over the alias.
    let c = load(r#"{"provider": "claude-code", "engine": "native"}"#, &[]).unwrap();
    assert_eq!(c.llm.engine, Engine::Native);
    let c = load(
        r#"{"engine": "claude-code"}"#,
        &[("PICOGENT_ENGINE", "native")],
    )
    .unwrap();
    assert_eq!(c.llm.engine, Engine::Native);
    // Claude Code speaks only to Anthropic's API.
    let e = load(r#"{"engine": "claude-code", "provider": "openai"}"#, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("engine") && e.contains("openai"), "{e}");
    let e = load(r#"{"engine": "claude"}"#, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("engine") && e.contains("agent.json"), "{e}");
    let e = load(r#"{"provider": "gemini"}"#, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`provider`") && e.contains("gemini"), "{e}");
    let e = load("{}", &[("PICOGENT_ENGINE", "codex")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("PICOGENT_ENGINE") && e.contains(r#""native" or "claude-code""#),
        "{e}"
    );
}

#[test]
fn openai_and_ollama_need_a_model_and_anthropic_reads_its_clients_variables() {
    let sb = Sandbox::new();
    for provider in ["openai", "ollama"] {
        let env = Env::from_pairs([("PICOGENT_PROVIDER", provider)]);
        let e = Config::load(None, &env, &sb.work).unwrap_err().to_string();
        assert!(e.contains("`model`") && e.contains(provider), "{e}");
    }
    let env = Env::from_pairs([
        ("ANTHROPIC_MODEL", "claude-opus-4-6"),
        ("ANTHROPIC_AUTH_TOKEN", "tok"),
    ]);
    let c = Config::load(None, &env, &sb.work).unwrap();
    assert_eq!(c.llm.model, "claude-opus-4-6");
    assert_eq!(c.llm.api_key, None);
    // A bearer token is enough for Anthropic: no key needed.
    assert!(picogent::agent::Agent::new(c).is_ok());
    let c = Config::load(None, &Env::default(), &sb.work).unwrap();
    let e = picogent::agent::Agent::new(c).err().unwrap().to_string();
    assert!(e.contains("ANTHROPIC_AUTH_TOKEN"), "{e}");
    write(&sb.home, "agent.json", r#"{"temperature": 3}"#);
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(e.contains("temperature"), "{e}");
    write(&sb.home, "agent.json", r#"{"keep_alive": {"minutes": 5}}"#);
    let e = Config::load(Some(&sb.home), &Env::default(), &sb.base())
        .unwrap_err()
        .to_string();
    assert!(e.contains("keep_alive") && e.contains("5m"), "{e}");
    // null is unset, as everywhere in agent.json.
    write(&sb.home, "agent.json", r#"{"keep_alive": null}"#);
    let c = Config::load(Some(&sb.home), &Env::default(), &sb.base()).unwrap();
    assert_eq!(c.llm.keep_alive, None);
}

/// The transport of the configured MCP server `name`.
fn transport_of(c: &Config, name: &str) -> picogent::config::McpTransport {
    c.mcp_servers
        .iter()
        .find(|s| s.name == name)
        .unwrap()
        .transport
        .clone()
}

/// `mcpServers` pasted from Claude Desktop or Claude Code, and Codex's
/// `http_headers`, `bearer_token_env_var` and `env_vars`, load as they read.
#[test]
fn mcp_servers_pasted_from_claude_or_codex_load() {
    use picogent::config::McpTransport;
    let sb = Sandbox::new();
    write(
        &sb.home,
        "agent.json",
        r#"{"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                   "env": {"A": "1"}, "env_vars": ["FOO"]},
            "gh": {"type": "http", "url": "https://mcp.example.com/mcp",
                   "http_headers": {"X-Team": "core"}, "bearer_token_env_var": "GH_TOKEN"}
        }}"#,
    );
    let env = Env::from_pairs([("FOO", "bar"), ("GH_TOKEN", "t0k")]);
    let c = Config::load(Some(&sb.home), &env, &sb.base()).unwrap();
    let by_name = |n: &str| transport_of(&c, n);
    match by_name("fs") {
        McpTransport::Stdio { command, env, .. } => {
            assert_eq!(command, "npx");
            assert_eq!(env.get("A").map(String::as_str), Some("1"));
            assert_eq!(env.get("FOO").map(String::as_str), Some("bar"));
        }
        other => panic!("{other:?}"),
    }
    match by_name("gh") {
        McpTransport::Http { headers, .. } => {
            assert_eq!(headers.get("X-Team").map(String::as_str), Some("core"));
            assert_eq!(
                headers.get("Authorization").map(String::as_str),
                Some("Bearer t0k")
            );
        }
        other => panic!("{other:?}"),
    }
    // A variable named but not set is an error naming the field.
    let e = Config::load(
        Some(&sb.home),
        &Env::from_pairs([("FOO", "bar")]),
        &sb.base(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("bearer_token_env_var") && e.contains("GH_TOKEN"),
        "{e}"
    );
}

/// Pasted from Cursor (`${env:VAR}`), VS Code (`servers`) and Codex
/// (`env_http_headers`): they load as they read; VS Code's `${input:…}` is refused,
/// naming the field.
#[test]
fn mcp_servers_pasted_from_cursor_vs_code_or_codex_load() {
    use picogent::config::McpTransport;
    let sb = Sandbox::new();
    write(
        &sb.home,
        "agent.json",
        r#"{"servers": {
            "cursor": {"command": "npx", "args": ["-y", "srv"], "env": {"KEY": "${env:API_KEY}"}},
            "codex": {"url": "https://mcp.example.com/mcp", "env_http_headers": {"X-Api-Key": "CODEX_KEY"}}
        }}"#,
    );
    let env = Env::from_pairs([("API_KEY", "k1"), ("CODEX_KEY", "k2")]);
    let c = Config::load(Some(&sb.home), &env, &sb.base()).unwrap();
    let by_name = |n: &str| transport_of(&c, n);
    match by_name("cursor") {
        McpTransport::Stdio { env, .. } => {
            assert_eq!(env.get("KEY").map(String::as_str), Some("k1"))
        }
        other => panic!("{other:?}"),
    }
    match by_name("codex") {
        McpTransport::Http { headers, .. } => {
            assert_eq!(headers.get("X-Api-Key").map(String::as_str), Some("k2"))
        }
        other => panic!("{other:?}"),
    }
    // A header's variable not set: the error names it.
    let e = Config::load(
        Some(&sb.home),
        &Env::from_pairs([("API_KEY", "k1")]),
        &sb.base(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("env_http_headers") && e.contains("CODEX_KEY"),
        "{e}"
    );
    write(
        &sb.home,
        "agent.json",
        r#"{"servers": {"v": {"command": "srv", "env": {"T": "${input:token}"}}}}"#,
    );
    let e = Config::load(Some(&sb.home), &env, &sb.base())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mcp_servers.v.env.T") && e.contains("input:token"),
        "{e}"
    );
    // VS Code's envFile and ${workspaceFolder} are read, its dev settings ignored.
    write(&sb.home, "vscode.env", "FROM_FILE=f1\nT=from-file\n");
    write(
        &sb.home,
        "agent.json",
        r#"{"work_dir": "proj", "servers": {"v": {"type": "stdio", "command": "srv",
            "args": ["--root", "${workspaceFolder}/src"], "env": {"T": "given"},
            "envFile": "vscode.env", "dev": {"watch": "src/**/*.ts", "debug": {"type": "node"}}}}}"#,
    );
    let c = Config::load(Some(&sb.home), &env, &sb.base()).unwrap();
    // The folder is put in when the agent is made (after --dir, for an editor's folder).
    let v = c.mcp_servers.iter().find(|s| s.name == "v").unwrap();
    assert!(c.protected_paths_include(&sb.home.join("vscode.env")));
    let there = v.clone().in_folder(std::path::Path::new("/elsewhere"));
    match &there.transport {
        McpTransport::Stdio { args, .. } => assert_eq!(args[1], "/elsewhere/src"),
        other => panic!("{other:?}"),
    }
    match transport_of(&c, "v") {
        McpTransport::Stdio { args, env, .. } => {
            assert_eq!(args[1], "${workspaceFolder}/src");
            assert_eq!(env.get("FROM_FILE").map(String::as_str), Some("f1"));
            assert_eq!(
                env.get("T").map(String::as_str),
                Some("given"),
                "env wins over envFile"
            );
        }
        other => panic!("{other:?}"),
    }
    write(
        &sb.home,
        "agent.json",
        r#"{"servers": {"v": {"command": "srv", "envFile": "missing.env"}}}"#,
    );
    let e = Config::load(Some(&sb.home), &env, &sb.base())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mcp_servers.v.envFile") && e.contains("missing.env"),
        "{e}"
    );
    // Inside the allowed paths the agent's commands could change it: refused.
    write(&sb.work, ".env", "T=planted\n");
    write(
        &sb.home,
        "agent.json",
        &format!(
            r#"{{"allowed_paths": [{:?}], "servers": {{"v": {{"command": "srv", "envFile": {:?}}}}}}}"#,
            sb.work,
            sb.work.join(".env")
        ),
    );
    let e = Config::load(Some(&sb.home), &env, &sb.base())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mcp_servers.v.envFile") && e.contains("allowed paths"),
        "{e}"
    );
}

/// Only OpenAI's key chooses OpenAI; anything that says Anthropic (Claude Code's engine,
/// which needs no key, or an Anthropic URL or model) keeps Anthropic.
#[test]
fn openais_key_alone_chooses_openai_and_nothing_else_does() {
    use picogent::config::ProviderKind;
    let sb = Sandbox::new();
    write(&sb.home, "agent.json", "{}");
    let load = |pairs: &[(&str, &str)]| {
        Config::load(
            Some(&sb.home),
            &Env::from_pairs(pairs.iter().copied()),
            &sb.base(),
        )
        .map(|c| c.llm.provider)
    };
    let openai = [("OPENAI_API_KEY", "k"), ("PICOGENT_MODEL", "gpt-4.1")];
    assert_eq!(load(&openai).unwrap(), ProviderKind::Openai);
    for also in [
        ("PICOGENT_ENGINE", "claude-code"),
        ("ANTHROPIC_BASE_URL", "http://proxy.example"),
        ("ANTHROPIC_API_KEY", "a"),
    ] {
        let pairs = [openai[0], openai[1], also];
        assert_eq!(load(&pairs).unwrap(), ProviderKind::Anthropic, "{also:?}");
    }
}

/// The store: local files unless a postgres:// URL is given (the variable over the
/// file); the password from the URL, a file or PGPASSWORD, never shown; each mistake
/// names its field or variable.
#[test]
fn the_store_and_the_fleets_settings_are_checked_and_the_password_never_shown() {
    let sb = Sandbox::new();
    let load = |body: &str, env: &[(&str, &str)]| {
        let file = write(&sb.home, "agent.json", body);
        let env = Env::from_pairs(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Config::load(Some(&file), &env, &sb.work)
    };
    let c = load("{}", &[]).unwrap();
    assert!(c.store.postgres.is_none());
    assert_eq!(c.store.lease.as_secs(), 30);

    let c = load(r#"{"store": "postgres://fleet:s3cret@db:5433/agents", "lease_sec": 10, "fleet_max_tasks": 6}"#, &[]).unwrap();
    let pg = c.store.postgres.as_ref().unwrap();
    assert_eq!(pg.shown(), "postgres://fleet@db:5433/agents");
    assert!(
        !format!("{c:?}").contains("s3cret"),
        "Debug shows the password"
    );
    assert!(
        c.secrets_in_file,
        "a password in agent.json is warned about"
    );
    assert_eq!(
        (c.store.lease.as_secs(), c.store.fleet_max_tasks),
        (10, Some(6))
    );

    let pw = write(&sb.base(), "pw", "from-file\n");
    let c = load(
        r#"{"store": "postgres://old@db/x"}"#,
        &[
            ("PICOGENT_STORE_URL", "postgresql://fleet@db/agents"),
            ("PICOGENT_STORE_PASSWORD_FILE", pw.to_str().unwrap()),
            ("PGPASSWORD", "not-this"),
        ],
    )
    .unwrap();
    let pg = c.store.postgres.as_ref().unwrap();
    assert_eq!(pg.shown(), "postgres://fleet@db:5432/agents");
    assert!(!c.secrets_in_file);

    let err = |body: &str, env: &[(&str, &str)]| load(body, env).err().unwrap().to_string();
    let e = err(r#"{"store": "mysql://db/x"}"#, &[]);
    assert!(
        e.contains("field `store`") && e.contains("postgres://"),
        "{e}"
    );
    let e = err(
        "{}",
        &[("PICOGENT_STORE_URL", "postgres://u:hunter2@db:notaport/x")],
    );
    assert!(
        e.contains("PICOGENT_STORE_URL") && !e.contains("hunter2"),
        "{e}"
    );
    let e = err(r#"{"store": "postgres://u@db"}"#, &[]);
    assert!(e.contains("names no database"), "{e}");
    let e = err(
        r#"{"store": "postgres://u@db/x"}"#,
        &[("PICOGENT_STORE_PASSWORD_FILE", "/nonexistent/pw")],
    );
    assert!(
        e.contains("PICOGENT_STORE_PASSWORD_FILE") && e.contains("/nonexistent/pw"),
        "{e}"
    );
    let e = err(r#"{"fleet_max_tasks": 4}"#, &[]);
    assert!(
        e.contains("field `fleet_max_tasks`") && e.contains("shared store"),
        "{e}"
    );
    let e = err(r#"{"store": "postgres://u@db/x", "lease_sec": 1}"#, &[]);
    assert!(e.contains("field `lease_sec`"), "{e}");
}
