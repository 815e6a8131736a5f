//! A turn's tool calls: run in order (consecutive read-only calls side by side), each
//! announced, counted by the repeat guard, watched as it runs (bash's live output),
//! recorded in the session, and followed by a checkpoint when it changed files.

use super::super::approval::{Ask, Gate};
use super::super::control::RunControl;
use super::super::event::{AgentEvent, Emitter, RunError};
use super::super::guard::{self, RepeatGuard};
use super::super::live::{boundary, Ckpt};
use crate::mcp::Mcp;
use crate::message::{Content, Message, ToolResultMessage};
use crate::provider::ToolSpec;
use crate::session::Session;
use crate::tools::registry::{Builtins, Source};
use crate::tools::{self, ToolContext, ToolOutput};
use futures_util::StreamExt;

/// Read-only calls of one turn that run at the same time, at most.
const AT_ONCE: usize = 4;

/// What ended a turn's tool calls.
pub(super) enum CallsEnd {
    Done,
    /// The repeat guard tripped; the run stops with this reason.
    Repeated(String),
    /// A rollback moved the conversation; the rest of this turn is void.
    RolledBack,
}

/// What a turn's tool calls report to and are steered by.
pub(super) struct Steer<'a> {
    pub(super) out: &'a Emitter,
    pub(super) control: &'a RunControl,
    pub(super) cfg: &'a crate::config::Config,
    pub(super) mcp: &'a Mcp,
    /// The tools offered this turn (a call to another name is unknown).
    pub(super) known_tools: &'a [ToolSpec],
    /// Where calls wait for a person's approval.
    pub(super) gate: Gate<'a>,
}

pub(super) type Call = (String, String, serde_json::Value);

/// Runs one turn's tool calls in order: consecutive read-only calls side by side,
/// others alone. Every call gets a result in the session, whatever happens. Returns a
/// reason to stop the run, if the repeat guard tripped.
pub(super) async fn run_calls(
    calls: &[Call],
    ctx: &ToolContext,
    repeats: &mut RepeatGuard,
    session: &mut Session,
    mut ckpt: Option<&mut Ckpt>,
    steer: Steer<'_>,
) -> Result<CallsEnd, RunError> {
    let mut stop: Option<String> = None;
    let mut i = 0;
    while i < calls.len() {
        // A pause holds the next tool call; a stop turns the rest into "not run"; after
        // a rollback, the calls of this (now abandoned) turn are not run at all.
        let at = boundary(
            steer.control,
            &ctx.cancel,
            steer.out,
            session,
            ckpt.as_deref(),
        )
        .await;
        let halted = match at {
            Ok(true) => return Ok(CallsEnd::RolledBack),
            Ok(false) => false,
            Err(_) => true,
        };
        let sources: [&dyn Source; 2] = [steer.mcp, &Builtins];
        let read_only = |name: &str| source_of(&sources, name).read_only(name);
        let parallel = read_only(&calls[i].1);
        let mut j = i + 1;
        while parallel && j < calls.len() && read_only(&calls[j].1) {
            j += 1;
        }
        let batch = &calls[i..j];
        let counts = announce(batch, repeats, &steer, &mut stop);
        // Asked one at a time, in call order, before any of the batch runs.
        let mut refused = Vec::with_capacity(batch.len());
        for ((id, name, args), (skip, _)) in batch.iter().zip(&counts) {
            refused.push(if halted || *skip {
                None
            } else {
                let summary = tools::describe_call(name, args);
                let ask = Ask {
                    id,
                    name,
                    summary,
                    args,
                };
                steer.gate.check(ask, &ctx.cancel).await
            });
        }
        let out = steer.out;
        let sources = &sources;
        // At most `AT_ONCE` at a time, answered in order: a turn of many read-only calls
        // cannot hold all their buffers at once.
        let calls: Vec<_> = batch
            .iter()
            .zip(&counts)
            .zip(refused)
            .map(|(((id, name, args), (skip, _)), refused)| async move {
                if halted {
                    ToolOutput::error("not run: the run was stopped")
                } else if let Some(why) = refused {
                    ToolOutput::error(why)
                } else if *skip {
                    ToolOutput::error(
                        "not run: the run is stopping because this call kept repeating",
                    )
                } else if tools::streams_output(name) {
                    Builtins.call(name, args, &watched(ctx, out, id)).await
                } else {
                    source_of(sources, name).call(name, args, ctx).await
                }
            })
            .collect();
        let results: Vec<ToolOutput> = futures_util::stream::iter(calls)
            .buffered(AT_ONCE)
            .collect()
            .await;
        for ((call, (_, count)), result) in batch.iter().zip(&counts).zip(results) {
            let done = Done {
                call,
                count: *count,
                halted,
            };
            record(done, result, session, &steer).await?;
            if let (true, Some(c)) = (!read_only(&call.1) && !halted, ckpt.as_deref_mut()) {
                let what = tools::describe_call(&call.1, &call.2);
                c.take(session, &what, steer.out).await?;
            }
        }
        i = j;
    }
    Ok(match stop {
        Some(why) => CallsEnd::Repeated(why),
        None => CallsEnd::Done,
    })
}

/// The source that owns a tool; the built-ins answer a name nobody owns (as unknown).
fn source_of<'a>(sources: &[&'a dyn Source], name: &str) -> &'a dyn Source {
    sources
        .iter()
        .copied()
        .find(|s| s.owns(name))
        .unwrap_or(&Builtins)
}

/// The context for a command whose output people watch as it comes: its pieces become
/// `ToolOutputDelta` events of call `id`.
fn watched(ctx: &ToolContext, out: &Emitter, id: &str) -> ToolContext {
    let (tx, id) = (out.0.clone(), id.to_string());
    let mut ctx = ctx.clone();
    ctx.on_output = Some(std::sync::Arc::new(move |text| {
        let _ = tx.send(AgentEvent::ToolOutputDelta {
            id: id.clone(),
            text,
        });
    }));
    ctx
}

/// Announces a batch of calls and counts their repeats: per call, whether it is
/// skipped (the run is stopping for a repeat) and how often it was repeated.
fn announce(
    batch: &[Call],
    repeats: &mut RepeatGuard,
    steer: &Steer<'_>,
    stop: &mut Option<String>,
) -> Vec<(bool, u32)> {
    let mut counts = Vec::with_capacity(batch.len());
    for (id, name, args) in batch {
        steer.out.emit(AgentEvent::ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: args.clone(),
            summary: tools::describe_call(name, args),
        });
        let count = repeats.observe(name, args);
        if count >= guard::STOP_AT && steer.cfg.loop_action == crate::config::LoopAction::Pause {
            // A person decides instead: the call still runs, the run pauses after.
            *repeats = RepeatGuard::default();
            let _ = steer.control.pause();
            steer.out.emit(AgentEvent::Notice {
                message: format!("paused: the model called {name} with the same arguments {count} times in a row"),
            });
        } else if stop.is_none() && count >= guard::STOP_AT {
            *stop = Some(format!(
                "stopped: the model called {name} with the same arguments {count} times in a row"
            ));
        }
        counts.push((stop.is_some(), count));
    }
    counts
}

/// A finished call: which, how often repeated, and whether the run was halted.
struct Done<'a> {
    call: &'a Call,
    count: u32,
    halted: bool,
}

/// Reports a call's result and records it in the session.
async fn record(
    done: Done<'_>,
    mut result: ToolOutput,
    session: &mut Session,
    steer: &Steer<'_>,
) -> Result<(), RunError> {
    let (id, name, _) = done.call;
    let known = steer.known_tools.iter().any(|t| t.name == name.as_str());
    crate::metrics::tool_call(name, known, result.is_error);
    if done.count >= guard::WARN_AT && done.count < guard::STOP_AT {
        result
            .text
            .push_str(&guard::repeat_warning(name, done.count));
    }
    steer.out.emit(AgentEvent::ToolResult {
        id: id.clone(),
        name: name.clone(),
        is_error: result.is_error,
        output: result.text.clone(),
        details: result.details.clone(),
    });
    if steer.cfg.auto_pause_on_error
        && name == "bash"
        && result.is_error
        && !done.halted
        && steer.control.pause().is_ok()
    {
        steer.out.emit(AgentEvent::Notice {
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
    Ok(())
}
