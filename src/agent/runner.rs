//! The agent loop: call the model, run the tools it asks for, feed the results back,
//! until it answers without tool calls. Bounded by `max_steps`, `step_timeout_sec`,
//! cancellation, the repeat guard and the context window.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::checkpoint::Checkpoints;
use super::control::{Role, RunControl};
use super::event::{AgentEvent, FailureKind, Outcome};
use super::event::{Emitter, RunError};
use super::guard::{self, RepeatGuard};
use super::live::{boundary, Ckpt};
use super::{compaction, prompt, Inner, RunRequest};
use crate::message::{AssistantMessage, Content, Message, StopReason, ToolResultMessage, Usage};
use crate::provider::{Delta, ModelRequest, ProviderError};
use crate::session::{Known, Session, SessionError};
use crate::tools::{self, ToolContext, ToolOutput};

struct Counters {
    steps: u32,
    usage: Usage,
}

pub(super) async fn run(
    inner: Arc<Inner>,
    req: RunRequest,
    tx: UnboundedSender<AgentEvent>,
    cancel: CancellationToken,
    control: RunControl,
) -> Outcome {
    let out = Emitter(tx);
    let mut counters = Counters {
        steps: 0,
        usage: Usage::default(),
    };
    let lock = inner.session_lock(&req.session_id);
    let result = tokio::select! {
        guard = lock.lock() => {
            let r = run_locked(&inner, &req, &out, &cancel, &control, &mut counters).await;
            drop(guard);
            r
        }
        _ = cancel.cancelled() => Err(RunError::Cancelled),
    };
    let Counters { steps, usage } = counters;
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
                _ => FailureKind::Infrastructure,
            },
            error: e.to_string(),
            steps,
            usage,
        },
    };
    match &outcome {
        Outcome::Failed { error, .. } => {
            tracing::warn!(session = %req.session_id, steps, "run failed: {error}")
        }
        _ => tracing::info!(session = %req.session_id, steps, "run ended"),
    }
    out.emit(AgentEvent::Finished {
        outcome: outcome.clone(),
    });
    outcome
}

/// What ended a turn's tool calls.
enum CallsEnd {
    Done,
    /// The repeat guard tripped; the run stops with this reason.
    Repeated(String),
    /// A rollback moved the conversation; the rest of this turn is void.
    RolledBack,
}

async fn run_locked(
    inner: &Inner,
    req: &RunRequest,
    out: &Emitter,
    cancel: &CancellationToken,
    control: &RunControl,
    counters: &mut Counters,
) -> Result<String, RunError> {
    let cfg = &inner.config;
    let requested = req.work_dir.clone().unwrap_or_else(|| cfg.work_dir.clone());
    let work_dir: PathBuf = inner.sandbox.check_work_dir(&requested).map_err(|e| {
        RunError::Stop(FailureKind::WorkDir, format!("working folder refused: {e}"))
    })?;
    let mut session = inner.sessions.open(&req.session_id, &work_dir)?;
    out.emit(AgentEvent::Started {
        session_id: req.session_id.clone(),
        provider: inner.provider.kind().as_str().into(),
        model: inner.provider.model().into(),
    });
    session.append_message(Message::user(req.prompt.clone()))?;
    let mut ckpt = match cfg.checkpoints {
        Some(true) => {
            let repo =
                Checkpoints::open(&cfg.state_dir(), &req.session_id, &work_dir, &inner.sandbox)
                    .map_err(|e| RunError::Stop(FailureKind::Infrastructure, e.to_string()))?;
            let next_step = (0..)
                .find(|n| session.checkpoint(*n).is_none())
                .unwrap_or(0);
            let mut c = Ckpt { repo, next_step };
            let first = crate::util::one_line(&req.prompt, 60);
            c.take(&mut session, &format!("start: {first}"), out)
                .await?;
            Some(c)
        }
        _ => None,
    };

    let role = req.system_prompt.as_deref().or(cfg.prompt.as_deref());
    let system = prompt::build(
        role,
        &work_dir,
        inner.sandbox.allowed_paths(),
        &inner.skills,
    );
    let names: Vec<&str> = inner.tool_specs.iter().map(|t| t.name).collect();
    let fixed_tokens = (system.len()
        + inner
            .tool_specs
            .iter()
            .map(|t| t.description.len() + t.parameters.to_string().len())
            .sum::<usize>()) as u64
        / 4;
    let tool_ctx = ToolContext {
        work_dir: work_dir.clone(),
        sandbox: inner.sandbox.clone(),
        step_timeout: cfg.step_timeout,
        command_timeout_max: cfg.command_timeout_max,
        cancel: cancel.clone(),
        output_dir: inner.output_dir.join(&req.session_id),
    };
    let mut repeats = RepeatGuard::default();
    let mut nudged = false;

    loop {
        boundary(control, cancel, out, &mut session, ckpt.as_ref()).await?;
        for mut ins in control.take_instructions() {
            let text = match ins.role {
                Role::User => ins.text.clone(),
                // No provider takes a system message mid-conversation; mark it instead.
                Role::System => {
                    format!("<system-instruction>\n{}\n</system-instruction>", ins.text)
                }
            };
            session.append_message(Message::user(text))?;
            session.append_custom(
                "intervention",
                serde_json::json!({"kind": "instruct", "role": ins.role, "text": ins.text, "time": crate::util::now_iso()}),
            )?;
            if let Some(receipt) = ins.receipt.take() {
                // Durable before it is acknowledged to whoever sent it (the sync runs
                // off the runtime's threads).
                session.sync().await?;
                let _ = receipt.send(());
            }
            out.emit(AgentEvent::Instruction {
                text: ins.text,
                role: ins.role,
            });
        }
        if counters.steps >= cfg.max_steps {
            return Err(RunError::Stop(
                FailureKind::MaxSteps,
                format!(
                    "stopped after {} model turns without a final answer (max_steps)",
                    cfg.max_steps
                ),
            ));
        }
        let plan = {
            let ctx = session.context();
            let needed = compaction::estimate(&ctx, fixed_tokens) + u64::from(cfg.max_tokens);
            (needed > cfg.context_window).then(|| (plan_compaction(cfg, &ctx), needed))
        };
        if let Some((plan, needed)) = plan {
            compact(inner, &mut session, plan, cancel, out, needed).await?;
        }
        let ctx = session.context();
        let messages: Vec<&Message> = ctx.messages.iter().map(|(_, m)| m.as_ref()).collect();
        let request = ModelRequest {
            system: &system,
            messages: &messages,
            tools: &inner.tool_specs,
        };
        counters.steps += 1;
        let step = counters.steps;
        let mut partial = String::new();
        let result = inner
            .provider
            .complete(&request, cancel, &mut |d| match d {
                Delta::Text(text) => {
                    partial.push_str(&text);
                    out.emit(AgentEvent::TextDelta { text })
                }
                Delta::Thinking(text) => out.emit(AgentEvent::ThinkingDelta { text }),
                Delta::Retry {
                    attempt,
                    delay,
                    reason,
                } => {
                    partial.clear();
                    out.emit(AgentEvent::Retry {
                        attempt,
                        delay_ms: delay.as_millis() as u64,
                        reason,
                    })
                }
            })
            .await;
        drop(messages);
        drop(ctx);
        let msg = match result {
            Ok(m) => m,
            Err(e) => {
                let cancelled = matches!(e, ProviderError::Cancelled);
                record_failed_turn(&mut session, inner, partial, &e, cancelled)?;
                return Err(if cancelled {
                    RunError::Cancelled
                } else {
                    RunError::Stop(FailureKind::Model, format!("model call failed: {e}"))
                });
            }
        };
        counters.usage.add(&msg.usage);
        out.emit(AgentEvent::Usage {
            step,
            usage: msg.usage.clone(),
        });
        session.append_message(Message::Assistant(msg.clone()))?;

        let calls: Vec<(String, String, serde_json::Value)> = msg
            .tool_calls()
            .map(|(id, name, args)| (id.to_string(), name.to_string(), args.clone()))
            .collect();
        if calls.is_empty() {
            let text = msg.text();
            if !nudged && guard::looks_like_text_tool_call(&text, &names) {
                nudged = true;
                out.emit(AgentEvent::Notice {
                    message:
                        "the model wrote a tool call as text; asking it to use a real tool call"
                            .into(),
                });
                session.append_message(Message::user(guard::TEXT_CALL_NUDGE))?;
                continue;
            }
            if msg.stop_reason == StopReason::Length && text.trim().is_empty() {
                return Err(RunError::Stop(
                    FailureKind::OutputLimit,
                    "the model hit its output limit (max_tokens) without answering".into(),
                ));
            }
            return Ok(text);
        }

        let steer = Steer { out, control, cfg };
        let end = run_calls(
            &calls,
            &tool_ctx,
            &mut repeats,
            &mut session,
            ckpt.as_mut(),
            steer,
        )
        .await?;
        if let Some(n) = cfg.auto_pause_after_steps {
            if counters.steps.is_multiple_of(n) && control.pause().is_ok() {
                out.emit(AgentEvent::Notice {
                    message: format!(
                        "paused after {} model turns (auto_pause_after_steps)",
                        counters.steps
                    ),
                });
            }
        }
        if cancel.is_cancelled() {
            return Err(RunError::Cancelled);
        }
        match end {
            CallsEnd::Done | CallsEnd::RolledBack => {}
            CallsEnd::Repeated(why) => return Err(RunError::Stop(FailureKind::RepeatLoop, why)),
        }
    }
}

/// Runs one turn's tool calls in order: consecutive read-only calls side by side,
/// others alone. Every call gets a result in the session, whatever happens. Returns a
/// reason to stop the run, if the repeat guard tripped.
/// What a turn's tool calls report to and are steered by.
struct Steer<'a> {
    out: &'a Emitter,
    control: &'a RunControl,
    cfg: &'a crate::config::Config,
}

async fn run_calls(
    calls: &[(String, String, serde_json::Value)],
    ctx: &ToolContext,
    repeats: &mut RepeatGuard,
    session: &mut Session,
    mut ckpt: Option<&mut Ckpt>,
    steer: Steer<'_>,
) -> Result<CallsEnd, RunError> {
    let Steer {
        out,
        control,
        cfg: live,
    } = steer;
    let mut stop: Option<String> = None;
    let mut i = 0;
    while i < calls.len() {
        // A pause holds the next tool call; a stop turns the rest into "not run"; after
        // a rollback, the calls of this (now abandoned) turn are not run at all.
        let halted = match boundary(control, &ctx.cancel, out, session, ckpt.as_deref()).await {
            Ok(true) => return Ok(CallsEnd::RolledBack),
            Ok(false) => false,
            Err(_) => true,
        };
        let parallel = tools::is_read_only(&calls[i].1);
        let mut j = i + 1;
        while parallel && j < calls.len() && tools::is_read_only(&calls[j].1) {
            j += 1;
        }
        let batch = &calls[i..j];
        let mut plans = Vec::with_capacity(batch.len());
        for (id, name, args) in batch {
            out.emit(AgentEvent::ToolCall {
                id: id.clone(),
                name: name.clone(),
                arguments: args.clone(),
                summary: tools::describe_call(name, args),
            });
            let count = repeats.observe(name, args);
            if count >= guard::STOP_AT && live.loop_action == crate::config::LoopAction::Pause {
                // A person decides instead: the call still runs, the run pauses after.
                *repeats = RepeatGuard::default();
                let _ = control.pause();
                out.emit(AgentEvent::Notice {
                    message: format!("paused: the model called {name} with the same arguments {count} times in a row"),
                });
            } else if stop.is_none() && count >= guard::STOP_AT {
                stop = Some(format!(
                    "stopped: the model called {name} with the same arguments {count} times in a row"
                ));
            }
            plans.push((stop.is_some(), count));
        }
        let results = futures_util::future::join_all(batch.iter().zip(&plans).map(
            |((_, name, args), (skip, _))| async move {
                if halted {
                    ToolOutput::error("not run: the run was stopped")
                } else if *skip {
                    ToolOutput::error(
                        "not run: the run is stopping because this call kept repeating",
                    )
                } else {
                    tools::execute(name, args, ctx).await
                }
            },
        ))
        .await;
        for (((id, name, _), (_, count)), mut result) in batch.iter().zip(&plans).zip(results) {
            if *count >= guard::WARN_AT && *count < guard::STOP_AT {
                result.text.push_str(&guard::repeat_warning(name, *count));
            }
            out.emit(AgentEvent::ToolResult {
                id: id.clone(),
                name: name.clone(),
                is_error: result.is_error,
                output: result.text.clone(),
                details: result.details.clone(),
            });
            let changed_files = !tools::is_read_only(name) && !halted;
            if live.auto_pause_on_error
                && name == "bash"
                && result.is_error
                && !halted
                && control.pause().is_ok()
            {
                out.emit(AgentEvent::Notice {
                    message: "paused: a bash command failed (auto_pause_on_error)".into(),
                });
            }
            session.append_message(Message::ToolResult(ToolResultMessage {
                tool_call_id: id.clone(),
                tool_name: name.clone(),
                content: vec![Content::text(result.text)],
                details: result.details,
                is_error: result.is_error,
                timestamp: crate::util::now_millis(),
            }))?;
            if let (true, Some(c)) = (changed_files, ckpt.as_deref_mut()) {
                let what = tools::describe_call(name, args_of(calls, id));
                c.take(session, &what, out).await?;
            }
        }
        i = j;
    }
    Ok(match stop {
        Some(why) => CallsEnd::Repeated(why),
        None => CallsEnd::Done,
    })
}

fn args_of<'a>(
    calls: &'a [(String, String, serde_json::Value)],
    id: &str,
) -> &'a serde_json::Value {
    calls
        .iter()
        .find(|(i, _, _)| i == id)
        .map(|(_, _, a)| a)
        .unwrap_or(&serde_json::Value::Null)
}

/// Keeps a record of a model call that did not complete: the text streamed so far
/// (when cancelled) or the error, so the session shows what happened.
fn record_failed_turn(
    session: &mut Session,
    inner: &Inner,
    partial: String,
    err: &ProviderError,
    cancelled: bool,
) -> Result<(), SessionError> {
    let content = if partial.is_empty() {
        Vec::new()
    } else {
        vec![Content::Text { text: partial }]
    };
    session
        .append_message(Message::Assistant(AssistantMessage {
            content,
            api: String::new(),
            provider: inner.provider.kind().as_str().into(),
            model: inner.provider.model().into(),
            usage: Usage::default(),
            stop_reason: if cancelled {
                StopReason::Aborted
            } else {
                StopReason::Error
            },
            error_message: Some(err.to_string()),
            timestamp: crate::util::now_millis(),
        }))
        .map(|_| ())
}

/// What to summarise, when the context is near the window; `None` when nothing can go.
fn plan_compaction(
    cfg: &crate::config::Config,
    ctx: &crate::session::Context<'_>,
) -> Option<compaction::Plan> {
    let keep_recent = cfg.context_window / 4;
    let budget_chars = (cfg.context_window.saturating_sub(u64::from(cfg.max_tokens)) as usize)
        .saturating_mul(3)
        .min(2_000_000);
    compaction::plan(ctx, keep_recent, budget_chars)
}

/// Summarises older history into a compaction entry. When nothing can be cut or the
/// summary fails, the run goes on uncompacted and the provider has the last word.
async fn compact(
    inner: &Inner,
    session: &mut Session,
    plan: Option<compaction::Plan>,
    cancel: &CancellationToken,
    out: &Emitter,
    tokens_before: u64,
) -> Result<(), RunError> {
    let Some(plan) = plan else {
        tracing::warn!(
            session = session.id(),
            "context is near the window but nothing can be compacted"
        );
        return Ok(());
    };
    match compaction::summarize(&inner.provider, &plan, cancel).await {
        Ok(summary) => {
            session.append(Known::Compaction {
                summary,
                first_kept_entry_id: plan.first_kept_entry_id.clone(),
                tokens_before,
            })?;
            tracing::info!(
                session = session.id(),
                tokens_before,
                "compacted the conversation"
            );
            out.emit(AgentEvent::Compacted {
                tokens_before,
                first_kept_entry_id: plan.first_kept_entry_id,
            });
            Ok(())
        }
        Err(ProviderError::Cancelled) => Err(RunError::Cancelled),
        Err(e) => {
            out.emit(AgentEvent::Notice {
                message: format!("compaction failed, continuing without it: {e}"),
            });
            Ok(())
        }
    }
}
