//! `picogent sandbox-check`: what this machine enforces, layer by layer, and a short
//! self-test that attacks a throwaway setup through the real bash tool.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use picogent::sandbox::confine::kernel_abi;
use picogent::sandbox::{namespaces_work, Level, Sandbox};
use picogent::tools::{execute, ToolContext};

/// The layers this kernel offers, one line each.
fn layers(helper: &Path) -> String {
    let abi = kernel_abi();
    let yes = |b: bool| if b { "yes" } else { "no " };
    let ns = namespaces_work(helper);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {} namespaces (user, mount, PID, network): {}",
        yes(ns.is_ok()),
        match &ns {
            Ok(()) => "commands get their own view of files, processes and network".to_string(),
            Err(e) => format!("unavailable: {e}"),
        }
    );
    let _ = writeln!(
        out,
        "  {} Landlock file rules (ABI 3+, Linux 6.2): writes only under the allowed paths; this kernel has ABI {abi}",
        yes(abi >= 3)
    );
    let _ = writeln!(
        out,
        "  {} Landlock network rules (ABI 4+, Linux 6.7): no TCP under network: deny",
        yes(abi >= 4)
    );
    let _ = writeln!(
        out,
        "  {} Landlock scopes (ABI 6+, Linux 6.12): no signals to, no abstract sockets of processes outside",
        yes(abi >= 6)
    );
    let _ = writeln!(
        out,
        "  yes seccomp: no io_uring; under network: deny no UNIX, UDP, raw or netlink sockets"
    );
    let _ = writeln!(
        out,
        "  yes secrets: keys and tokens wiped from picogent's /proc environ; commands never inherit them"
    );
    out
}

/// One attack of the self-test: a bash command, and whether its output shows it held.
struct Attack<'a> {
    what: &'a str,
    command: String,
    held: Box<dyn Fn(&str) -> bool + 'a>,
}

fn attack<'a>(what: &'a str, command: String, held: impl Fn(&str) -> bool + 'a) -> Attack<'a> {
    Attack {
        what,
        command,
        held: Box::new(held),
    }
}

struct Setup {
    base: PathBuf,
    allowed: PathBuf,
    outside: PathBuf,
    config: PathBuf,
    state: PathBuf,
}

fn setup() -> std::io::Result<Setup> {
    let base = std::env::temp_dir().join(format!(
        "picogent-sandbox-check-{}",
        picogent::util::random_hex(8)
    ));
    let allowed = base.join("work");
    let outside = base.join("outside");
    let state = allowed.join("state");
    // The project's own files (at the Landlock level the folder holding picogent's
    // files can get no new entries of its own; its subfolders can).
    let src = allowed.join("src");
    for d in [&allowed, &outside, &state, &src] {
        std::fs::create_dir_all(d)?;
    }
    let config = allowed.join("agent.json");
    std::fs::write(&config, "{\"token\": \"SECRET-IN-CONFIG\"}")?;
    std::fs::write(state.join("journal.jsonl"), "")?;
    Ok(Setup {
        base,
        allowed,
        outside,
        config,
        state,
    })
}

/// Runs the self-test; prints each attack and its result. `Ok(true)` when every
/// attack was stopped.
pub(crate) async fn run(helper: PathBuf, level: Level) -> Result<bool, String> {
    println!("picogent sandbox-check\n\nLayers on this machine:");
    print!("{}", layers(&helper));
    let s = setup().map_err(|e| format!("cannot make the test folders: {e}"))?;
    let sandbox = Sandbox::new(
        std::slice::from_ref(&s.allowed),
        &[s.config.clone(), s.state.clone()],
        &[],
    )
    .with_confinement_level(helper, true, level);
    if let Some(c) = sandbox.confinement() {
        match c.why_not_namespaces() {
            None => println!("\nLevel in force: {}", c.level().as_str()),
            Some(why) => println!("\nLevel in force: {} ({why})", c.level().as_str()),
        }
    }
    if let Some(r) = sandbox.refusal() {
        println!("\nThis level is refused here: {r}");
        let _ = std::fs::remove_dir_all(&s.base);
        return Ok(false);
    }
    let ctx = ToolContext {
        work_dir: s.allowed.clone(),
        sandbox: Arc::new(sandbox),
        step_timeout: Duration::from_secs(10),
        command_timeout_max: Duration::from_secs(10),
        cancel: CancellationToken::new(),
        output_dir: s.base.join("outputs"),
        max_saved_output: 64 << 20,
        on_output: None,
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let outside = s.outside.join("escaped");
    let secrets = held_secrets();
    let attacks = attacks(&s, &outside, &secrets, port);
    println!("\nSelf-test (network: deny, one allowed folder holding a config file and state/):");
    let all = run_attacks(&attacks, &ctx).await;
    drop(listener);
    let _ = std::fs::remove_dir_all(&s.base);
    println!(
        "\n{}",
        if all {
            "Every attack was stopped."
        } else {
            "Some attacks got through: see the README's Security section."
        }
    );
    Ok(all)
}

/// The secrets this picogent holds (the values must appear nowhere a command reads).
fn held_secrets() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, v)| picogent::config::secrets::is_secret(k) && v.len() >= 8)
        .map(|(_, v)| v)
        .collect()
}

/// The attacks on the setup `s`: `outside` is a path outside the allowed ones, and
/// `port` one a listener holds on 127.0.0.1.
fn attacks<'a>(
    s: &'a Setup,
    outside: &'a Path,
    secrets: &'a [String],
    port: u16,
) -> Vec<Attack<'a>> {
    let me = std::process::id();
    vec![
        attack(
            "write outside the allowed paths",
            format!("echo x > {}", outside.display()),
            |_| !outside.exists(),
        ),
        attack(
            "read picogent's configuration",
            format!("cat {}", s.config.display()),
            |out| !out.contains("SECRET-IN-CONFIG"),
        ),
        attack(
            "write picogent's state inside an allowed path",
            format!("echo x > {}/planted", s.state.display()),
            |_| !s.state.join("planted").exists(),
        ),
        attack(
            "read picogent's secrets through /proc",
            format!("tr '\\0' '\\n' < /proc/{me}/environ; tr '\\0' ' ' < /proc/{me}/cmdline"),
            |out| !secrets.iter().any(|v| out.contains(v.as_str())),
        ),
        attack(
            "signal picogent (kill -STOP)",
            format!("kill -0 {me} && echo REACHED"),
            |out| !out.contains("REACHED"),
        ),
        attack(
            "open a TCP connection under network: deny",
            format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
            |out| !out.contains("CONNECTED"),
        ),
        attack(
            "write inside the allowed paths (must work)",
            "echo ok > src/inside.txt && cat src/inside.txt".to_string(),
            |out| out.starts_with("ok"),
        ),
    ]
}

/// Runs each attack through the bash tool and prints whether it held; true when all
/// did.
async fn run_attacks(attacks: &[Attack<'_>], ctx: &ToolContext) -> bool {
    let mut all = true;
    for Attack {
        what,
        command,
        held,
    } in attacks
    {
        let r = execute("bash", &json!({ "command": command }), ctx).await;
        let ok = held(&r.text);
        all &= ok;
        let first = r.text.lines().next().unwrap_or("").to_string();
        println!(
            "  {} {what}: {}",
            if ok { "PASS" } else { "FAIL" },
            picogent::util::one_line(&first, 100)
        );
    }
    all
}
