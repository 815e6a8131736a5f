//! `picogent import-mcp FILE`: the MCP servers of another agent's configuration —
//! Codex's `config.toml` (`[mcp_servers.NAME]` tables), Claude Code's, Claude
//! Desktop's or Cursor's JSON (`mcpServers`), VS Code's (`servers`) — as an
//! agent.json `mcp_servers` block, checked as picogent will read it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::mcp::FileMcpServer;
use super::types::Env;
use super::ConfigError;

fn file_error(path: &Path, message: impl Into<String>) -> ConfigError {
    ConfigError::File {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The servers of `path` as `{"mcp_servers": {...}}`, and how many there are.
pub fn import_mcp(path: &Path, env: &Env) -> Result<(serde_json::Value, usize), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let whole: serde_json::Value = if path.extension().is_some_and(|e| e == "toml") {
        let t: toml::Table = toml::from_str(&text).map_err(|e| file_error(path, e.to_string()))?;
        serde_json::to_value(t).map_err(|e| file_error(path, e.to_string()))?
    } else {
        serde_json::from_str(&text).map_err(|e| file_error(path, e.to_string()))?
    };
    let servers = ["mcp_servers", "mcpServers", "servers"]
        .iter()
        .find_map(|k| whole.get(*k))
        .cloned()
        .ok_or_else(|| {
            file_error(
                path,
                "no MCP servers here (mcp_servers, mcpServers or servers)",
            )
        })?;
    // Read as agent.json's field is, so what it refuses is said now, naming the server.
    let mut de = servers.clone();
    let typed: BTreeMap<String, FileMcpServer> = serde_path_to_error::deserialize(de.take())
        .map_err(|e| ConfigError::Field {
            path: path.display().to_string(),
            field: format!("mcp_servers.{}", e.path()),
            message: e.inner().to_string(),
        })?;
    let origin = path.display().to_string();
    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    super::mcp::resolve(&typed, env, &origin, Duration::from_secs(60), &dir, &|p| {
        super::absolute(&dir, p)
    })?;
    Ok((serde_json::json!({ "mcp_servers": servers }), typed.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_toml_becomes_mcp_servers() {
        let dir = std::env::temp_dir().join(format!("picogent-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let file = dir.join("config.toml");
        let toml = r#"
model = "o3"
[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-server"]
env = { LEVEL = "2" }
tool_timeout_sec = 30

[mcp_servers.search]
url = "https://mcp.example.com/mcp"
bearer_token_env_var = "SEARCH_TOKEN"
env_http_headers = { "X-Team" = "TEAM_ID" }
"#;
        std::fs::write(&file, toml).unwrap_or_default();
        let env = Env::from_pairs([("SEARCH_TOKEN", "t"), ("TEAM_ID", "7")]);
        let (out, n) = import_mcp(&file, &env).expect("imported");
        assert_eq!(n, 2);
        assert_eq!(out["mcp_servers"]["docs"]["args"][1], "docs-server");
        assert_eq!(
            out["mcp_servers"]["search"]["env_http_headers"]["X-Team"],
            "TEAM_ID"
        );
        std::fs::write(&file, "[mcp_servers.bad]\ncommand = \"x\"\nshell = true\n")
            .unwrap_or_default();
        let e = import_mcp(&file, &env)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("mcp_servers.bad") && e.contains("shell"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
