//! The engine seam. An engine does the work of one run: picogent's own loop
//! (`native`: model calls and tools) or Claude Code's (`claude_code`: the `claude` CLI),
//! as the configuration's `engine` says (`Engine`).
//! This module owns what every run shares whatever its engine: the session lock, the
//! working-folder check, the session opened with the user's message, `Started` first and
//! `Finished` last, the outcome and the run's end state. Each engine declares what it
//! can do (`Capabilities`), and front doors ask that instead of assuming it.

mod calls;
pub(crate) mod claude_code;
mod native;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::control::RunControl;
use super::event::{AgentEvent, Emitter, FailureKind, Outcome, RunError};
use super::skills::Skill;
use super::{Inner, RunRequest};
use crate::config::Config;
use crate::config::Engine;
use crate::message::{Message, Usage};
use crate::sandbox::Sandbox;
use crate::session::{Session, SessionLock};

/// What an engine can do beyond running a prompt to its end (and being cancelled,
/// which every engine honours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// Pause, resume, stop at a step boundary, and instructions written into a run
    /// while it works.
    pub(crate) live_control: bool,
    /// Checkpoints of the working folder, rollback and branches.
    pub(crate) rollback: bool,
    /// `max_steps`, `auto_pause_*` and the repeat guard are enforced by picogent.
    pub(crate) step_limits: bool,
}

impl Engine {
    pub(crate) fn capabilities(self) -> Capabilities {
        match self {
            Engine::Native => Capabilities {
                live_control: true,
                rollback: true,
                step_limits: true,
            },
            // Claude Code runs its own loop in a child process: picogent sees its steps
            // only after they happen.
            Engine::ClaudeCode => Capabilities {
                live_control: false,
                rollback: false,
                step_limits: false,
            },
        }
    }
}

/// One run as an engine sees it: the session is open with the user's message in it,
/// `Started` has been sent, and the working folder passed the sandbox.
pub(super) struct Run<'a> {
    config: &'a Config,
    /// The agent's sandbox, or this run's when it works in a worktree.
    sandbox: Arc<Sandbox>,
    skills: &'a [Skill],
    req: &'a RunRequest,
    out: &'a Emitter,
    cancel: &'a CancellationToken,
    control: &'a RunControl,
    /// The session's "always" answers to approvals.
    approvals: &'a super::approval::Remembered,
    work_dir: PathBuf,
    /// Where this run's private files go (full outputs, temporary folders).
    output_dir: PathBuf,
    session: Session,
    steps: u32,
    usage: Usage,
}

impl Run<'_> {
    /// The role: the agent's `prompt`, then the request's own system prompt (a chat
    /// client's `systemPrompt`) added to it, never replacing it.
    fn role(&self) -> Option<String> {
        let parts: Vec<&str> = [
            self.config.prompt.as_deref(),
            self.req.system_prompt.as_deref(),
        ]
        .into_iter()
        .flatten()
        .filter(|p| !p.trim().is_empty())
        .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

/// Runs one request on the configured engine, from the session lock to `Finished`.
pub(super) async fn run(
    inner: Arc<Inner>,
    req: RunRequest,
    tx: UnboundedSender<AgentEvent>,
    cancel: CancellationToken,
    control: RunControl,
) -> Outcome {
    let out = Emitter(tx);
    crate::metrics::run_started();
    let _busy = crate::memory::Busy::new();
    let mut counted = (0, Usage::default());
    let result = tokio::select! {
        lock = inner.sessions.lock(&req.session_id) => match lock {
            Ok(lock) => locked(&inner, &req, lock, &out, &cancel, &control, &mut counted).await,
            Err(e) => Err(e.into()),
        },
        _ = cancel.cancelled() => Err(RunError::Cancelled),
    };
    finish(&req, &out, &control, result, counted)
}

/// The session's side of a run's start: the model noted, `Started`, the prompt.
fn begin(
    session: &mut Session,
    req: &RunRequest,
    out: &Emitter,
    (provider, model): (&str, &str),
    work_dir: &std::path::Path,
) -> Result<(), crate::session::SessionError> {
    session.note_model(provider, model)?;
    out.emit(AgentEvent::Started {
        session_id: req.session_id.clone(),
        provider: provider.into(),
        model: model.into(),
        work_dir: work_dir.display().to_string(),
    });
    session.append_as(
        crate::session::Known::Message {
            message: Message::user(req.prompt.clone()),
        },
        req.prompt_entry.as_deref(),
    )?;
    Ok(())
}

/// The run under its session lock: the shared start, then the engine.
async fn locked(
    inner: &Inner,
    req: &RunRequest,
    lock: SessionLock,
    out: &Emitter,
    cancel: &CancellationToken,
    control: &RunControl,
    counted: &mut (u32, Usage),
) -> Result<String, RunError> {
    let config = &inner.config;
    let requested = req
        .work_dir
        .clone()
        .unwrap_or_else(|| config.work_dir.clone());
    let sandbox = match &req.worktree {
        Some(w) if w.own_clone => Arc::new(inner.sandbox.for_own_clone(
            &w.checkout,
            &w.repository,
            &w.worktree,
        )),
        Some(w) => Arc::new(
            inner
                .sandbox
                .for_worktree(&w.checkout, &w.repository, &w.worktree),
        ),
        None => inner.sandbox.clone(),
    };
    let work_dir = sandbox.check_work_dir(&requested).map_err(|e| {
        RunError::Stop(FailureKind::WorkDir, format!("working folder refused: {e}"))
    })?;
    let mut session = inner.sessions.open_off_runtime(lock, &work_dir).await?;
    let (provider, model) = match config.llm.engine {
        Engine::Native => (inner.provider.kind().as_str(), inner.provider.model()),
        Engine::ClaudeCode => ("claude-code", config.llm.model.as_str()),
    };
    if let Err(e) = begin(&mut session, req, out, (provider, model), &work_dir) {
        // Closed (awaited) before the run says it finished: the session lock is free
        // by the time a client hears of the failure.
        let _ = session.close().await;
        return Err(e.into());
    }
    let mut run = Run {
        config,
        sandbox,
        skills: &inner.skills,
        req,
        out,
        cancel,
        control,
        approvals: &inner.approvals,
        work_dir,
        output_dir: inner.output_dir.join(&req.session_id),
        session,
        steps: 0,
        usage: Usage::default(),
    };
    let result = match config.llm.engine {
        Engine::Native => {
            native::drive(&mut run, &inner.provider, &inner.tool_specs, &inner.mcp).await
        }
        Engine::ClaudeCode => claude_code::drive(&mut run).await,
    };
    *counted = (run.steps, run.usage);
    // Everything the run appended is in the file before the session lock is let go:
    // the next run of the session loads it whole.
    // A session that could not be written is the run's failure, whatever else went
    // wrong: what it did is not on record.
    match run.session.close().await {
        Ok(()) => result,
        Err(e) => {
            if let Err(other) = &result {
                tracing::warn!(session = %req.session_id, "the run also failed: {other}");
            }
            Err(e.into())
        }
    }
}

/// The shared end: the run's final state, the outcome, a log line, `Finished` last.
fn finish(
    req: &RunRequest,
    out: &Emitter,
    control: &RunControl,
    result: Result<String, RunError>,
    (steps, usage): (u32, Usage),
) -> Outcome {
    control.end(matches!(
        result,
        Err(RunError::Stop(..) | RunError::Session(_))
    ));
    if control.stop_requested() && matches!(result, Err(RunError::Cancelled)) {
        out.emit(AgentEvent::Notice {
            message: "stopped by the operator".into(),
        });
    }
    let outcome = match result {
        Ok(text) => Outcome::Completed { text, steps, usage },
        Err(RunError::Cancelled) => Outcome::Cancelled { steps, usage },
        Err(e) => Outcome::Failed {
            kind: match &e {
                RunError::Stop(kind, _) => *kind,
                RunError::Session(_) => FailureKind::Infrastructure,
                RunError::Cancelled => FailureKind::Internal,
            },
            error: e.to_string(),
            steps,
            usage,
        },
    };
    let (status, kind) = match &outcome {
        Outcome::Completed { .. } => ("completed", None),
        Outcome::Failed { kind, .. } => ("failed", Some(kind.as_str())),
        Outcome::Cancelled { .. } => ("cancelled", None),
    };
    crate::metrics::run_finished(status, kind, steps);
    match &outcome {
        Outcome::Failed { error, .. } => {
            tracing::warn!(target: crate::util::REPORTED, session = %req.session_id, steps, "run failed: {error}")
        }
        _ => tracing::info!(session = %req.session_id, steps, "run ended"),
    }
    out.emit(AgentEvent::Finished {
        outcome: outcome.clone(),
    });
    outcome
}
