//! Keeping the conversation inside the model's context window: estimate the size of
//! the next request, and when it would not fit, summarise older messages into a pi-style
//! `compaction` entry. A cut is only ever made before a user or assistant message, so a
//! tool call is never separated from its result.

use std::borrow::Cow;

use tokio_util::sync::CancellationToken;

use crate::message::{blocks_text, Content, Message};
use crate::provider::{ModelRequest, Provider, ProviderError};

use crate::session::Context;

/// Tokens the next request is expected to take. Usage reported by the provider is
/// exact, so the newest assistant message that was produced after the last compaction
/// anchors the estimate; anything after it is estimated from its length.
pub(crate) fn estimate(ctx: &Context<'_>, fixed: u64) -> u64 {
    let msgs = &ctx.messages;
    let anchor = msgs
        .iter()
        .enumerate()
        .skip(ctx.fresh_from)
        .rev()
        .find_map(|(i, (_, m))| match m.as_ref() {
            Message::Assistant(a) if a.usage.context_tokens() > 0 => {
                Some((i, a.usage.context_tokens()))
            }
            _ => None,
        });
    match anchor {
        Some((i, tokens)) => {
            tokens
                + msgs[i + 1..]
                    .iter()
                    .map(|(_, m)| m.estimate_tokens())
                    .sum::<u64>()
        }
        None => fixed + msgs.iter().map(|(_, m)| m.estimate_tokens()).sum::<u64>(),
    }
}

pub(crate) struct Plan {
    pub(crate) first_kept_entry_id: String,
    transcript: String,
}

/// Chooses what to summarise: everything before the most recent `keep_recent` tokens,
/// cut before a user or assistant message. `None` when nothing can be cut.
pub(crate) fn plan(ctx: &Context<'_>, keep_recent: u64, budget_chars: usize) -> Option<Plan> {
    let msgs = &ctx.messages;
    let mut kept = 0u64;
    let mut cut = msgs.len();
    for (i, (_, m)) in msgs.iter().enumerate().rev() {
        kept += m.estimate_tokens();
        cut = i;
        if kept >= keep_recent {
            break;
        }
    }
    // A valid cut point is a stored user or assistant message.
    let valid = |i: usize| {
        let (id, m) = &msgs[i];
        !id.is_empty() && !matches!(m.as_ref(), Message::ToolResult(_))
    };
    // With an earlier summary in front, at least one real message must go with it.
    // Prefer moving the cut back (keeping a little more) to the assistant message that
    // owns the results at the cut; else forward.
    let lo = usize::from(ctx.has_summary) + 1;
    if msgs.len() <= lo {
        return None;
    }
    let from = cut.clamp(lo, msgs.len() - 1);
    let cut = (lo..=from)
        .rev()
        .find(|&i| valid(i))
        .or_else(|| (from..msgs.len()).find(|&i| valid(i)))?;
    let transcript = transcript(&msgs[..cut]);
    let transcript = crate::util::tail_bytes(&transcript, budget_chars).to_string();
    Some(Plan {
        first_kept_entry_id: msgs[cut].0.to_string(),
        transcript,
    })
}

fn transcript(msgs: &[(&str, Cow<'_, Message>)]) -> String {
    let mut out = String::new();
    for (_, m) in msgs {
        match m.as_ref() {
            Message::User(u) => out.push_str(&format!("[User]: {}\n\n", blocks_text(&u.content))),
            Message::Assistant(a) => {
                for b in &a.content {
                    match b {
                        Content::Text { text } => out.push_str(&format!("[Assistant]: {text}\n\n")),
                        Content::ToolCall {
                            name, arguments, ..
                        } => out.push_str(&format!(
                            "[Assistant tool call]: {name} {}\n\n",
                            crate::util::truncate_bytes(&arguments.to_string(), 2000)
                        )),
                        _ => {}
                    }
                }
            }
            Message::ToolResult(r) => {
                let text = blocks_text(&r.content);
                let err = if r.is_error { " (error)" } else { "" };
                out.push_str(&format!(
                    "[Tool result{err}]: {}\n\n",
                    crate::util::truncate_bytes(&text, 2000)
                ));
            }
        }
    }
    out
}

const SYSTEM: &str = "You write handoff summaries of coding-agent sessions. The summary replaces \
the conversation it describes, so the agent must be able to continue from it alone.";

const INSTRUCTIONS: &str = "Summarize the conversation above. Keep: the user's goal and \
constraints; decisions made and why; files read and changed (exact paths); commands run and \
their outcomes, with exact error messages that still matter; what is done and what remains. \
Be concise. Answer with the summary only.";

/// Asks the model for the summary.
pub(crate) async fn summarize(
    provider: &Provider,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<String, ProviderError> {
    let message = Message::user(format!(
        "<conversation>\n{}</conversation>\n\n{INSTRUCTIONS}",
        plan.transcript
    ));
    let req = ModelRequest {
        system: SYSTEM,
        messages: &[&message],
        tools: &[],
        cache_key: None,
        reuse: None,
    };
    let msg = provider.complete(&req, cancel, &mut |_| {}).await?;
    let text = msg.text();
    if text.trim().is_empty() {
        return Err(ProviderError::Protocol {
            provider: provider.kind().as_str(),
            message: "the model returned an empty summary".into(),
        });
    }
    Ok(text)
}
