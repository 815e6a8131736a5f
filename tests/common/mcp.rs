//! Real MCP servers for the tests, installed from the registries when missing (pinned):
//! `@modelcontextprotocol/server-everything` (npm, `tests/mcp/package.json` and its
//! lock file) and `mcp-server-time` (PyPI, into `tests/mcp/.venv`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The PyPI version of mcp-server-time the tests use.
pub const TIME_VERSION: &str = "2026.10.19";

static INSTALL: Mutex<()> = Mutex::new(());

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dist/index.js` of server-everything, installed with `npm ci` when missing.
pub fn everything() -> PathBuf {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let index = dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !index.is_file() {
        eprintln!("installing @modelcontextprotocol/server-everything for the MCP tests");
        run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(dir()),
            "npm ci in tests/mcp",
        );
    }
    index
}

/// The `mcp-server-time` program, installed into a virtual environment when missing.
pub fn time_server() -> PathBuf {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let venv = dir().join(".venv");
    let bin = venv.join("bin/mcp-server-time");
    if !bin.is_file() {
        eprintln!("installing mcp-server-time for the MCP tests");
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "python3 -m venv",
        );
        run(
            Command::new(venv.join("bin/pip")).args([
                "install",
                "-q",
                &format!("mcp-server-time=={TIME_VERSION}"),
            ]),
            "pip install mcp-server-time",
        );
    }
    bin
}
