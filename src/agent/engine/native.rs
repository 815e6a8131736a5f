//! The native engine: call the model, run the tools it asks for, feed the results
//! back, until it answers without tool calls. Bounded by `max_steps`,
//! `step_timeout_sec`, cancellation, the repeat guard and the context window; paused,
//! instructed, stopped and rolled back at step boundaries (`live`).

use tokio_util::sync::CancellationToken;

use super::super::checkpoint::Checkpoints;
use super::super::control::Role;
use super::super::event::{AgentEvent, Emitter, FailureKind, RunError};
use super::super::guard::{self, RepeatGuard};
use super::super::live::{boundary, Ckpt};
use super::super::{compaction, project_docs, prompt};
use super::calls::{run_calls, Call, CallsEnd, Steer};
use super::Run;
use crate::mcp::Mcp;
use crate::message::{AssistantMessage, Content, Message, StopReason, Usage};
use crate::provider::{Delta, Fragments, ModelRequest, Provider, ProviderError, Reuse, ToolSpec};
use crate::session::records::Intervention;
use crate::session::{Known, Record, Session, SessionError};
use crate::tools::registry::Source;
use crate::tools::ToolContext;

/// What stays fixed through a native run, and the loop's own state.
struct Loop<'a> {
    provider: &'a Provider,
    /// picogent's own tools.
    builtin: &'a [ToolSpec],
    mcp: &'a Mcp,
    /// The tools offered: the built-in ones, then the MCP servers'. The same at every
    /// step unless a server announced a change of its list (`mcp_generation`).
    tool_specs: Vec<ToolSpec>,
    mcp_generation: u64,
    system: String,
    /// Token estimate of the system prompt and tool definitions.
    fixed_tokens: u64,
    tool_ctx: ToolContext,
    ckpt: Option<Ckpt>,
    repeats: RepeatGuard,
    /// The model was already asked once to use a real tool call instead of text.
    nudged: bool,
    /// Each message's request JSON, encoded once for the whole run.
    fragments: Fragments,
}

pub(super) async fn drive(
    run: &mut Run<'_>,
    provider: &Provider,
    tool_specs: &[ToolSpec],
    mcp: &Mcp,
) -> Result<String, RunError> {
    let mut lp = Loop::new(run, provider, tool_specs, mcp).await?;
    let cfg = run.config;
    loop {
        let ckpt = lp.ckpt.as_ref();
        boundary(run.control, run.cancel, run.out, &mut run.session, ckpt).await?;
        take_instructions(run).await?;
        if run.steps >= cfg.limits.max_steps {
            return Err(RunError::Stop(
                FailureKind::MaxSteps,
                format!(
                    "stopped after {} model turns without a final answer (max_steps)",
                    cfg.limits.max_steps
                ),
            ));
        }
        lp.refresh_tools();
        let msg = lp.model_turn(run).await?;
        let calls: Vec<Call> = msg
            .tool_calls()
            .map(|(id, name, args)| (id.to_string(), name.to_string(), args.clone()))
            .collect();
        if calls.is_empty() {
            match lp.answer(run, &msg)? {
                Some(text) => return Ok(text),
                None => continue,
            }
        }
        let steer = Steer {
            out: run.out,
            control: run.control,
            cfg,
            mcp,
            known_tools: &lp.tool_specs,
            gate: super::super::approval::Gate {
                policy: &cfg.approval,
                remembered: run.approvals,
                session: &run.req.session_id,
                control: run.control,
                out: run.out,
            },
        };
        let end = run_calls(
            &calls,
            &lp.tool_ctx,
            &mut lp.repeats,
            &mut run.session,
            lp.ckpt.as_mut(),
            steer,
        )
        .await?;
        if let Some(n) = cfg.auto_pause_after_steps {
            if run.steps.is_multiple_of(n) && run.control.pause().is_ok() {
                run.out.emit(AgentEvent::Notice {
                    message: format!(
                        "paused after {} model turns (auto_pause_after_steps)",
                        run.steps
                    ),
                });
            }
        }
        if run.cancel.is_cancelled() {
            return Err(RunError::Cancelled);
        }
        if let CallsEnd::Repeated(why) = end {
            return Err(RunError::Stop(FailureKind::RepeatLoop, why));
        }
    }
}

/// Writes the instructions sent since the last step into the conversation.
async fn take_instructions(run: &mut Run<'_>) -> Result<(), RunError> {
    for mut ins in run.control.take_instructions() {
        let text = match ins.role {
            Role::User => ins.text.clone(),
            // No provider takes a system message mid-conversation; mark it instead.
            Role::System => {
                format!("<system-instruction>\n{}\n</system-instruction>", ins.text)
            }
        };
        run.session.append_message(Message::user(text))?;
        run.session
            .append_record(&Record::Intervention(Intervention::Instruct {
                role: ins.role,
                text: ins.text.clone(),
                time: crate::util::now_iso(),
            }))?;
        if let Some(receipt) = ins.receipt.take() {
            // Durable before it is acknowledged to whoever sent it (the sync runs off
            // the runtime's threads).
            run.session.sync().await?;
            let _ = receipt.send(());
        }
        run.out.emit(AgentEvent::Instruction {
            text: ins.text,
            role: ins.role,
        });
    }
    Ok(())
}

impl<'a> Loop<'a> {
    /// The system prompt, the tools' context and (when on) the first checkpoint.
    async fn new(
        run: &mut Run<'_>,
        provider: &'a Provider,
        builtin: &'a [ToolSpec],
        mcp: &'a Mcp,
    ) -> Result<Loop<'a>, RunError> {
        let (cfg, req) = (run.config, run.req);
        let ckpt = match cfg.checkpoints {
            Some(true) => {
                // Files and perhaps git: off the runtime's threads.
                let (state, id) = (cfg.state_dir(), req.session_id.clone());
                let (work, sandbox) = (run.work_dir.clone(), run.sandbox.clone());
                let repo = tokio::task::spawn_blocking(move || {
                    Checkpoints::open(&state, &id, &work, &sandbox).map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
                .map_err(|e| RunError::Stop(FailureKind::Infrastructure, e))?;
                let next_step = (0..)
                    .find(|n| run.session.checkpoint(*n).is_none())
                    .unwrap_or(0);
                let mut c = Ckpt { repo, next_step };
                let first = crate::util::one_line(&req.prompt, 60);
                c.take(&mut run.session, &format!("start: {first}"), run.out)
                    .await?;
                Some(c)
            }
            _ => None,
        };
        let role = run.role();
        let docs = match cfg.project_docs {
            true => project_docs::prompt_block(
                &run.work_dir,
                cfg.home_dir.as_deref(),
                cfg.pi_home,
                !cfg.is_agent_mode(),
            ),
            false => String::new(),
        };
        let system = prompt::build(
            role.as_deref(),
            &run.work_dir,
            run.sandbox.allowed_paths(),
            run.skills,
            &docs,
        );
        // The first run after start waits for the servers' first connection attempts.
        mcp.ready(run.cancel).await;
        let mcp_generation = mcp.generation();
        let tool_specs = [builtin, &mcp.specs()].concat();
        Ok(Loop {
            provider,
            builtin,
            mcp,
            fixed_tokens: fixed_tokens(&system, &tool_specs),
            tool_specs,
            mcp_generation,
            system,
            tool_ctx: ToolContext {
                work_dir: run.work_dir.clone(),
                sandbox: run.sandbox.clone(),
                step_timeout: cfg.limits.step_timeout,
                command_timeout_max: cfg.limits.command_timeout_max,
                cancel: run.cancel.clone(),
                output_dir: run.output_dir.clone(),
                max_saved_output: cfg.limits.max_saved_output,
                on_output: None,
            },
            ckpt,
            repeats: RepeatGuard::default(),
            nudged: false,
            fragments: Fragments::default(),
        })
    }

    /// Takes up a changed MCP tool list for the next model call.
    fn refresh_tools(&mut self) {
        let generation = self.mcp.generation();
        if generation != self.mcp_generation {
            self.mcp_generation = generation;
            self.tool_specs = [self.builtin, &self.mcp.specs()].concat();
            self.fixed_tokens = fixed_tokens(&self.system, &self.tool_specs);
        }
    }

    /// The tokens the next request would need, when that overflows the window.
    fn overflow(
        &self,
        cfg: &crate::config::Config,
        ctx: &crate::session::Context<'_>,
    ) -> Option<u64> {
        let needed =
            compaction::estimate(ctx, self.fixed_tokens) + u64::from(cfg.limits.max_tokens);
        (needed > cfg.limits.context_window).then_some(needed)
    }

    /// Summarises older history so the next request fits.
    async fn compact(&self, run: &mut Run<'_>, needed: u64) -> Result<(), RunError> {
        let plan = plan_compaction(run.config, &run.session.context());
        compact(
            self.provider,
            &mut run.session,
            plan,
            run.cancel,
            run.out,
            needed,
        )
        .await
    }

    /// One model call, streamed as events, recorded in the session; first a compaction
    /// when the request would overflow the window. The context is built once a step
    /// (twice when compacting): its cost follows the conversation's size.
    async fn model_turn(&self, run: &mut Run<'_>) -> Result<AssistantMessage, RunError> {
        let out = run.out;
        let mut ctx = run.session.context();
        if let Some(needed) = self.overflow(run.config, &ctx) {
            drop(ctx);
            self.compact(run, needed).await?;
            ctx = run.session.context();
        }
        let messages: Vec<&Message> = ctx.messages.iter().map(|(_, m)| m.as_ref()).collect();
        let ids: Vec<&str> = ctx.messages.iter().map(|(id, _)| *id).collect();
        let request = ModelRequest {
            system: &self.system,
            messages: &messages,
            tools: &self.tool_specs,
            cache_key: Some(run.session.id()),
            reuse: Some(Reuse {
                ids: &ids,
                fragments: &self.fragments,
            }),
        };
        run.steps += 1;
        let step = run.steps;
        let mut partial = String::new();
        let result = self
            .provider
            .complete(&request, run.cancel, &mut |d| match d {
                Delta::Text(text) => {
                    partial.push_str(&text);
                    out.emit(AgentEvent::TextDelta { text })
                }
                Delta::Thinking(text) => out.emit(AgentEvent::ThinkingDelta { text }),
                Delta::Retry {
                    attempt,
                    of,
                    delay,
                    reason,
                } => {
                    partial.clear();
                    out.emit(AgentEvent::Retry {
                        attempt,
                        of,
                        delay_ms: delay.as_millis() as u64,
                        reason,
                    })
                }
            })
            .await;
        drop((messages, ids));
        drop(ctx);
        let msg = match result {
            Ok(m) => m,
            Err(e) => {
                let cancelled = matches!(e, ProviderError::Cancelled);
                record_failed_turn(&mut run.session, self.provider, partial, &e, cancelled)?;
                return Err(if cancelled {
                    RunError::Cancelled
                } else {
                    let why = match e.setting() {
                        Some(s) => format!(" ({})", run.config.origin_of(s)),
                        None => String::new(),
                    };
                    RunError::Stop(FailureKind::Model, format!("model call failed: {e}{why}"))
                });
            }
        };
        run.usage.add(&msg.usage);
        out.emit(AgentEvent::Usage {
            step,
            usage: msg.usage.clone(),
        });
        run.session
            .append_message(Message::Assistant(msg.clone()))?;
        Ok(msg)
    }

    /// A turn without tool calls: the final answer, or `None` when the model wrote a
    /// tool call as text and was asked once to use a real one.
    fn answer(
        &mut self,
        run: &mut Run<'_>,
        msg: &AssistantMessage,
    ) -> Result<Option<String>, RunError> {
        let text = msg.text();
        let names: Vec<&str> = self.tool_specs.iter().map(|t| t.name.as_ref()).collect();
        if !self.nudged && guard::looks_like_text_tool_call(&text, &names) {
            self.nudged = true;
            run.out.emit(AgentEvent::Notice {
                message: "the model wrote a tool call as text; asking it to use a real tool call"
                    .into(),
            });
            run.session
                .append_message(Message::user(guard::TEXT_CALL_NUDGE))?;
            return Ok(None);
        }
        if msg.stop_reason == StopReason::Length && text.trim().is_empty() {
            return Err(RunError::Stop(
                FailureKind::OutputLimit,
                "the model hit its output limit (max_tokens) without answering".into(),
            ));
        }
        Ok(Some(text))
    }
}

/// Token estimate of the system prompt and tool definitions.
fn fixed_tokens(system: &str, tools: &[ToolSpec]) -> u64 {
    let tool_chars: usize = tools
        .iter()
        .map(|t| t.description.len() + t.parameters.to_string().len())
        .sum();
    (system.len() + tool_chars) as u64 / 4
}

/// Keeps a record of a model call that did not complete: the text streamed so far
/// (when cancelled) or the error, so the session shows what happened.
fn record_failed_turn(
    session: &mut Session,
    provider: &Provider,
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
            provider: provider.kind().as_str().into(),
            model: provider.model().into(),
            usage: Usage::default(),
            stop_reason: if cancelled {
                StopReason::Aborted
            } else {
                StopReason::Error
            },
            error_message: Some(err.to_string()),
            response_id: None,
            timestamp: crate::util::now_millis(),
        }))
        .map(|_| ())
}

/// What to summarise, when the context is near the window; `None` when nothing can go.
fn plan_compaction(
    cfg: &crate::config::Config,
    ctx: &crate::session::Context<'_>,
) -> Option<compaction::Plan> {
    let keep_recent = cfg.limits.context_window / 4;
    let budget_chars = (cfg
        .limits
        .context_window
        .saturating_sub(u64::from(cfg.limits.max_tokens)) as usize)
        .saturating_mul(3)
        .min(2_000_000);
    compaction::plan(ctx, keep_recent, budget_chars)
}

/// Summarises older history into a compaction entry. When nothing can be cut or the
/// summary fails, the run goes on uncompacted and the provider has the last word.
async fn compact(
    provider: &Provider,
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
    match compaction::summarize(provider, &plan, cancel).await {
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
