//! The command line: picks the mode, loads configuration, drives the agent, and turns
//! errors into a message on stderr and a non-zero exit status.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::Context;
use clap::{Parser, Subcommand};
use picogent::agent::Agent;
use picogent::config::{self, Config, Env};

/// `eprintln!` that never panics: with stderr closed (a pipe whose reader left), the
/// line is lost, not the run.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod cli;
use cli::task::print_is_run;

const ABOUT: &str = "picogent: a small, fast agent daemon. An LLM works tasks with real tools \
(read, write, edit, bash, grep, find, ls) inside the folders it is allowed to touch.";

const MODES: &str = "Modes:
  picogent                      chat mode with the configuration found by the priority rules
                                (agent mode instead when a tracker is configured)
  picogent ./agents/coder/      directory mode: agent.json, skills/, sessions/ in that folder
  picogent ./my-agent.json      file mode: that JSON file is the configuration
  picogent run \"task\"           run the agent once on one prompt and print its steps
  picogent -p \"task\"            the same, printing only the final answer (as claude -p)
  picogent acp                  speak the Agent Client Protocol on stdin/stdout, for editors

Configuration priority: the CLI argument, then PICOGENT_CONFIG, then ./agent.json, then the
environment alone. Environment variables override the file; ./.env is loaded at start.
Common variables: ANTHROPIC_API_KEY, PICOGENT_PROVIDER (anthropic|openai|ollama),
PICOGENT_MODEL, PICOGENT_BASE_URL, TRACKER_URL, AGENT_TOKEN, RUST_LOG.";

#[derive(Parser)]
#[command(name = "picogent", version, about = ABOUT, after_help = MODES)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// An agent directory (with agent.json) or a JSON configuration file.
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent once on one prompt, streaming its steps; exit 0 when it finished.
    Run(RunArgs),
    /// Speak the Agent Client Protocol on standard input and output, for an editor
    /// (Zed, JetBrains IDEs, Neovim, Emacs): each editor session works in its folder.
    Acp(AcpArgs),
    /// Print the MCP servers of another agent's configuration (Codex's config.toml,
    /// Claude Code's, Cursor's or VS Code's JSON) as an agent.json `mcp_servers` block.
    ImportMcp {
        /// The file: `~/.codex/config.toml`, `.mcp.json`, `.cursor/mcp.json`, `.vscode/mcp.json`.
        file: PathBuf,
    },
    /// Export a session's branches as JSONL: trajectory, tree, dpo, prm or annotations.
    Export(ExportArgs),
    /// Show what this machine's kernel enforces for commands, layer by layer, and
    /// attack a throwaway setup to show it working; exit 0 when every attack failed.
    SandboxCheck(SandboxCheckArgs),
    /// Print a shell completion script: `picogent completions bash > /etc/bash_completion.d/picogent`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(clap::Args)]
struct SandboxCheckArgs {
    /// Test the relaxed level (Landlock and seccomp, no namespaces) instead of the default.
    #[arg(long)]
    landlock: bool,
}

/// `--format`: one of the export formats, offered by name to shell completions.
fn export_format(
) -> impl clap::builder::TypedValueParser<Value = picogent::session::branches::ExportFormat> {
    use clap::builder::TypedValueParser;
    use picogent::session::branches::ExportFormat;
    clap::builder::PossibleValuesParser::new(ExportFormat::ALL.map(ExportFormat::as_str))
        .try_map(|s| s.parse::<ExportFormat>())
}

#[derive(clap::Args)]
struct ExportArgs {
    /// The session to export.
    #[arg(long, value_name = "ID")]
    session: String,
    /// trajectory (one line per branch), tree (the whole tree), dpo (one pair per
    /// recorded preference), prm (per-step labels) or annotations (labels and ratings).
    #[arg(long, default_value = "trajectory", value_parser = export_format())]
    format: picogent::session::branches::ExportFormat,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Agent directory or JSON file (for where sessions live).
    #[arg(long, value_name = "DIR|FILE")]
    agent: Option<PathBuf>,
}

#[derive(clap::Args)]
struct AcpArgs {
    /// Agent directory or JSON file to take the configuration from.
    #[arg(long, value_name = "DIR|FILE")]
    agent: Option<PathBuf>,
    /// The model (overrides PICOGENT_MODEL and `model`).
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// The provider (overrides PICOGENT_PROVIDER and `provider`).
    #[arg(long, value_name = "PROVIDER", value_parser = ["anthropic", "openai", "ollama"])]
    provider: Option<String>,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Agent directory or JSON file to take the configuration from.
    #[arg(long, value_name = "DIR|FILE")]
    agent: Option<PathBuf>,
    /// Working folder (default: the configuration's work_dir; with --agent FILE and no
    /// work_dir, that file's folder; with no configuration file, the current folder).
    #[arg(long, value_name = "WORKDIR")]
    dir: Option<PathBuf>,
    /// Continue (or start) this session: a file path, the id in its header or a unique
    /// prefix of either, in picogent's sessions folder or pi's (~/.pi/agent/sessions).
    #[arg(long, value_name = "ID", conflicts_with_all = ["cont", "no_session"])]
    session: Option<String>,
    /// Continue the latest session started in this working folder.
    #[arg(
        short = 'c',
        long = "continue",
        id = "cont",
        conflicts_with = "no_session"
    )]
    cont: bool,
    /// Resume a session started in this working folder: a list to pick from on a
    /// terminal, else the latest.
    #[arg(short = 'r', long, conflicts_with_all = ["session", "cont", "no_session", "fork"])]
    resume: bool,
    /// Continue a copy of this session (found as --session finds it); the original
    /// stays as it was.
    #[arg(long, value_name = "ID", conflicts_with_all = ["session", "cont", "no_session"])]
    fork: Option<String>,
    /// Keep no session: the conversation is gone when the run ends.
    #[arg(long)]
    no_session: bool,
    /// The model (overrides PICOGENT_MODEL and `model`).
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// The provider (overrides PICOGENT_PROVIDER and `provider`).
    #[arg(long, value_name = "PROVIDER", value_parser = ["anthropic", "openai", "ollama", "claude-code"])]
    provider: Option<String>,
    /// Print every event as a JSON line instead of readable text.
    #[arg(long, conflicts_with = "print")]
    json: bool,
    /// Print only the final answer, once the run ended (as `claude -p` and `pi -p`;
    /// `picogent -p TASK` is `picogent run -p TASK`).
    #[arg(short = 'p', long)]
    print: bool,
    /// The task; `-` reads it from standard input. Standard input piped into a run that
    /// has a task comes first in the prompt, the task after it (as pi does).
    #[arg(required = true, value_name = "TASK")]
    prompt: Vec<String>,
}

fn main() -> ExitCode {
    // The bash confinement helper: before anything else, while single-threaded.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "sandbox-exec") {
        return picogent::sandbox::confine::helper_main(args);
    }
    // Fewer allocator arenas, so what a burst frees can be given back (`memory`).
    picogent::memory::limit_arenas();
    // Keys and tokens out of /proc/<pid>/environ, while still single-threaded.
    config::secrets::hide_from_proc();
    // A low descriptor number for the socket that hands git GitHub's token, while few
    // are taken.
    picogent::sandbox::git_credential::reserve();
    // Only ./.env, never a parent's; variables already set win.
    let env_error = config::secrets::load_env_file(std::path::Path::new(".env"))
        .err()
        .map(|e| e.to_string());
    let cli = Cli::parse_from(print_is_run(std::env::args_os().collect()));
    // `picogent run` keeps the terminal for the answer: only warnings and errors log,
    // and not those it prints itself from the run's events (retries, the failure).
    let quiet = matches!(cli.command, Some(Command::Run(_) | Command::Acp(_)));
    let run_filter = format!("warn,{}=off", picogent::util::REPORTED);
    // rmcp logs its peers' details at info: only its warnings belong in picogent's log.
    init_logging(if quiet { &run_filter } else { "info,rmcp=warn" });
    if let Some(e) = env_error {
        return fail(&format!("cannot load ./.env: {e}"), 2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}"), 2),
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Some(Command::Run(args)) => cli::run::run_once(args).await,
            Some(Command::Acp(args)) => acp(args).await,
            Some(Command::Export(args)) => export(args),
            Some(Command::ImportMcp { file }) => {
                let (servers, n) = config::import_mcp(&file, &Env::from_process())?;
                write_stdout(format!("{}\n", serde_json::to_string_pretty(&servers)?).as_bytes())?;
                say!(
                    "{n} MCP server(s) from {}: put this `mcp_servers` into agent.json",
                    file.display()
                );
                Ok(ExitCode::SUCCESS)
            }
            Some(Command::SandboxCheck(args)) => sandbox_check(args).await,
            Some(Command::Completions { shell }) => {
                use clap::CommandFactory;
                let mut cmd = Cli::command();
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut cmd, "picogent", &mut script);
                write_stdout(&script)?;
                Ok(ExitCode::SUCCESS)
            }
            None => serve(cli.config.as_deref()).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => fail(&format!("{e:#}"), 2),
    }
}

async fn sandbox_check(args: SandboxCheckArgs) -> anyhow::Result<ExitCode> {
    use picogent::sandbox::Level;
    // The running binary, opened by descriptor (never by a path a command could replace).
    let helper = std::path::PathBuf::from("/proc/self/exe");
    let level = if args.landlock {
        Level::Landlock
    } else {
        Level::Full
    };
    let all = cli::sandbox_check::run(helper, level)
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Writes a command's output; a reader that went away (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (else `default`), in colour only on a
/// terminal and without `NO_COLOR`.
fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour())
        .with_target(false)
        // Its own complaint about a closed stderr would go to stderr with a panic.
        .log_internal_errors(false)
        .init();
}

fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// The one line an error gets, on stderr.
fn fail(msg: &str, code: u8) -> ExitCode {
    say!("picogent: {msg}");
    ExitCode::from(code)
}

fn load_config(arg: Option<&Path>) -> anyhow::Result<Config> {
    load_config_from(arg, &Env::from_process())
}

/// `load_config` with the environment given (the process's, with flags set in it).
fn load_config_from(arg: Option<&Path>, env: &Env) -> anyhow::Result<Config> {
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    let config = Config::load(arg, env, &cwd)?;
    if config.secrets_in_file {
        if let Some(f) = &config.config_file {
            tracing::warn!(
                "{} holds a token or API key; tools cannot open it, but a bash command could still read it. Prefer the environment or a .env file",
                f.display()
            );
        }
    }
    Ok(config)
}

/// The agent, or why not; a newcomer without a key is pointed at a local model server
/// when one answers on its usual port.
async fn new_agent(config: Config) -> anyhow::Result<Agent> {
    let unset = [
        "PICOGENT_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "PICOGENT_PROVIDER",
    ]
    .iter()
    .all(|v| std::env::var_os(v).is_none())
        && config.config_file.is_none();
    // It reads skills and folders and may probe the sandbox: off the runtime's threads.
    let made = tokio::task::spawn_blocking(move || Agent::new(config))
        .await
        .context("starting the agent failed")?;
    match made {
        Ok(a) => Ok(a),
        Err(e @ picogent::agent::AgentError::Provider(_)) if unset => {
            let hint = picogent::provider::local::model_server().await.unwrap_or_else(|| {
                "no key? picogent runs on a local model too: install Ollama (https://ollama.com), `ollama pull qwen3:8b`, then run with PICOGENT_PROVIDER=ollama PICOGENT_MODEL=qwen3:8b".into()
            });
            Err(anyhow::anyhow!("{e}\n{hint}"))
        }
        Err(e) => Err(e.into()),
    }
}

async fn serve(arg: Option<&Path>) -> anyhow::Result<ExitCode> {
    // Files read and git asked its version: off the runtime's threads.
    let arg = arg.map(Path::to_path_buf);
    let config = tokio::task::spawn_blocking(move || {
        let mut config = load_config(arg.as_deref())?;
        if !config.is_agent_mode() {
            config.settle_chat_checkpoints()?;
        }
        anyhow::Ok(config)
    })
    .await
    .context("reading the configuration failed")??;
    let agent_mode = config.is_agent_mode();
    let agent = new_agent(config).await?;
    agent.announce_sandbox();
    let stop = tokio_util::sync::CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received; stopping (send it again to quit at once)");
        on_signal.cancel();
        // As `picogent run` ends: 130 for Ctrl-C, 143 for SIGTERM or SIGHUP.
        let code = run_signal().await;
        std::process::exit(i32::from(code));
    });
    // Its own token: stopped once serving is over, however it ended.
    let trimming = tokio_util::sync::CancellationToken::new();
    let trim = tokio::spawn(picogent::memory::trim_when_idle(trimming.clone()));
    let served = if agent_mode {
        picogent::tracker::daemon::run(agent, picogent::tracker::daemon::Timing::default(), stop)
            .await
            .map_err(anyhow::Error::from)
    } else {
        chat(agent, stop).await
    };
    trimming.cancel();
    let _ = trim.await;
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Chat mode: the browser chat on PICOGENT_HOST:PICOGENT_PORT.
async fn chat(agent: Agent, stop: tokio_util::sync::CancellationToken) -> anyhow::Result<()> {
    use picogent::chat;
    let cfg = agent.config().clone();
    let listener = chat::bind(&cfg.chat.host, cfg.chat.port, cfg.chat.token.as_deref()).await?;
    let addr = listener.local_addr()?;
    let allowed = cfg.allowed_paths_display();
    tracing::info!(
        work_dir = %cfg.work_dir.display(),
        engine = cfg.llm.engine.as_str(),
        provider = cfg.llm.provider.as_str(),
        model = %cfg.llm.model,
        allowed_paths = %allowed,
        token = cfg.chat.token.is_some(),
        "chat mode: open http://{addr}/ in a browser"
    );
    chat::serve(agent, listener, stop).await?;
    Ok(())
}

fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(args.agent.as_deref())?;
    // The session is found as `run --session` finds it: an id, a prefix or a path.
    use picogent::session::find;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let pi = home.as_deref().map(find::pi_sessions_dir);
    let (dir, id) = match find::resolve(&args.session, &config.own_sessions_dir(), pi.as_deref())? {
        find::Found::Existing { dir, id } => (dir, id),
        find::Found::New(_) | find::Found::NewAt { .. } => {
            anyhow::bail!("no session {:?} to export", args.session)
        }
    };
    let store = picogent::session::SessionStore::new(dir);
    let session = store.snapshot(&id)?;
    let lines = picogent::session::branches::export(&session, args.format);
    let mut text = String::new();
    for l in &lines {
        text.push_str(&serde_json::to_string(l)?);
        text.push('\n');
    }
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => write_stdout(text.as_bytes())?,
    }
    say!(
        "{} line(s) of {} for session {}",
        lines.len(),
        args.format.as_str(),
        args.session
    );
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM or SIGINT.
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The exit status of a run ended by a signal: 130 for Ctrl-C, 143 for SIGTERM/SIGHUP.
static LAST_SIGNAL: AtomicU8 = AtomicU8::new(130);

/// Waits for Ctrl-C, SIGTERM or SIGHUP; the exit status it stands for.
async fn run_signal() -> u8 {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return 130;
    };
    let code = tokio::select! {
        _ = tokio::signal::ctrl_c() => 130,
        _ = term.recv() => 143,
        _ = hup.recv() => 143,
    };
    LAST_SIGNAL.store(code, Ordering::Relaxed);
    code
}

/// `picogent acp`: the configuration as `picogent run` reads it, each editor session
/// in its own folder.
async fn acp(args: AcpArgs) -> anyhow::Result<ExitCode> {
    let mut env = Env::from_process();
    if let Some(m) = &args.model {
        env.set("PICOGENT_MODEL", m.as_str());
    }
    if let Some(p) = &args.provider {
        env.set("PICOGENT_PROVIDER", p.as_str());
    }
    let config = load_config_from(args.agent.as_deref(), &env)?;
    // A key or model missing is said now, not at the editor's first prompt.
    picogent::provider::Provider::from_config(&config)?;
    picogent::acp::serve(config).await?;
    Ok(ExitCode::SUCCESS)
}
