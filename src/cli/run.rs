//! `picogent run`: one run on one prompt, its steps printed (or only its answer),
//! its session chosen (`--session`, `--continue`, `--resume`, `--fork`,
//! `--no-session`), approvals asked at the terminal, signals turned into a cancel.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::Context;
use picogent::agent::{AgentEvent, Outcome, RunRequest};
use picogent::config::{self, Config, Env};

use super::printer::{Printer, Shown};
use super::session_arg::{pick_session, Scratch};
use super::task::read_task;
use crate::{load_config_from, new_agent, run_signal, RunArgs, LAST_SIGNAL};

pub(crate) async fn run_once(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut env = Env::from_process();
    if let Some(m) = &args.model {
        env.set("PICOGENT_MODEL", m.as_str());
    }
    if let Some(p) = &args.provider {
        env.set("PICOGENT_PROVIDER", p.as_str());
    }
    let mut config = load_config_from(args.agent.as_deref(), &env)?;
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    if let Some(dir) = &args.dir {
        config.work_dir = config::absolute(&cwd, dir);
    } else if config.config_file.is_none() && std::env::var_os("PICOGENT_WORK_DIR").is_none() {
        config.work_dir = cwd;
    }
    super::approve::check(&config)?;
    let prompt = read_task(&args.prompt)?;
    let scratch = if args.no_session {
        Some(scratch_session(&mut config)?)
    } else {
        None
    };
    let session_id = session_for(&args, &mut config)?;
    let agent = new_agent(config).await?;
    let mut handle = agent.start(RunRequest::new(prompt, session_id.clone()));
    let cancel = handle.cancel_token();
    let signals = tokio::spawn(async move {
        let code = run_signal().await;
        say!("\npicogent: cancelling (again to quit at once)");
        cancel.cancel();
        run_signal().await;
        std::process::exit(i32::from(code));
    });
    // Ctrl-C ends with 130, SIGTERM and SIGHUP with 143, after the run is cancelled
    // (its commands killed, its session consistent).
    let mut printer = Printer::new(if args.print {
        Shown::Print
    } else if args.json {
        Shown::Json
    } else {
        Shown::Person
    });
    let mut outcome = None;
    while let Some(ev) = handle.events.recv().await {
        if let AgentEvent::Approval {
            id,
            name,
            arguments,
            ..
        } = &ev
        {
            let (answer, control, id) = (
                super::approve::ask(name, arguments),
                handle.control.clone(),
                id.clone(),
            );
            tokio::spawn(async move {
                let answer = answer
                    .await
                    .unwrap_or(picogent::agent::approval::ApprovalAnswer::RejectOnce);
                let _ = control.approve(&id, answer);
            });
        }
        printer.print(&ev);
        if let AgentEvent::Finished { outcome: o } = ev {
            outcome = Some(o);
        }
    }
    let outcome = match outcome {
        Some(o) => o,
        None => handle.finish().await,
    };
    signals.abort();
    if scratch.is_none() && !args.print {
        say!("session: {session_id}");
    }
    drop(scratch);
    Ok(match outcome {
        Outcome::Completed { .. } => ExitCode::SUCCESS,
        Outcome::Failed { .. } => ExitCode::from(1),
        Outcome::Cancelled { .. } => ExitCode::from(LAST_SIGNAL.load(Ordering::Relaxed)),
    })
}

/// --no-session: the session lives in a folder of its own that goes with the run.
fn scratch_session(config: &mut Config) -> anyhow::Result<Scratch> {
    let dir = std::env::temp_dir().join(format!(
        "picogent-no-session-{}",
        picogent::util::new_session_id()
    ));
    // Only this user reads the conversation while it lasts.
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&dir)
        .context("cannot make a folder for the run's session")?;
    config.session_dir = Some(dir.clone());
    Ok(Scratch(dir))
}

/// The run's session: the one `--session` names, the latest here (`--continue`), or a
/// new one.
fn session_for(args: &RunArgs, config: &mut Config) -> anyhow::Result<String> {
    if args.resume {
        return super::session_arg::resume(config);
    }
    if let Some(arg) = &args.fork {
        return super::session_arg::fork(config, arg, args.dir.is_some());
    }
    Ok(match &args.session {
        Some(arg) => pick_session(config, arg, args.dir.is_some())?,
        None if args.cont => {
            match picogent::session::find::latest_in(&config.own_sessions_dir(), &config.work_dir) {
                Some(id) => {
                    say!("continuing session {id}");
                    id
                }
                None => anyhow::bail!(
                    "no session to continue: none was started in {}",
                    config.work_dir.display()
                ),
            }
        }
        None => picogent::util::new_session_id(),
    })
}
