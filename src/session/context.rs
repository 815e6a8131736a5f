//! The model's view of a session: the walk from the leaf back to the newest
//! compaction, and the messages built from it (the summary, then the kept and newer
//! messages, repaired so every tool call has exactly one result).

use std::borrow::Cow;

use super::{repair, Body, Entry, Known, Session};
use crate::message::{Message, StopReason};

impl Session {
    /// The entries the model's context is built from, oldest first: from the first
    /// entry the newest compaction on the path kept (or the root) to the leaf. The walk
    /// stops there, so its cost follows the context, not the session's length.
    pub(super) fn path_to_leaf(&self) -> Vec<&Entry> {
        let mut out = Vec::new();
        let mut cur = self
            .leaf
            .as_deref()
            .and_then(|id| self.index.get(id).copied());
        // Set at the newest compaction: the index of the entry it kept first (`None`
        // inside when that entry is not in the file: the walk then goes to the root).
        let mut first_kept: Option<Option<usize>> = None;
        while let Some(i) = cur {
            // A cycle in a hand-edited file must not loop forever.
            if out.len() > self.entries.len() {
                break;
            }
            let Some(e) = self.entries.get(i) else { break };
            out.push(e);
            if first_kept == Some(Some(i)) {
                break;
            }
            if let (
                None,
                Body::Known(Known::Compaction {
                    first_kept_entry_id,
                    ..
                }),
            ) = (first_kept, &e.body)
            {
                first_kept = Some(self.index.get(first_kept_entry_id.as_str()).copied());
            }
            cur = self.parents.get(i).copied().flatten();
        }
        out.reverse();
        out
    }

    /// The messages the model sees, each with the entry id it came from: the summary
    /// of the last compaction (if any), then the kept and newer messages, repaired so
    /// every tool call has exactly one result. Stored messages are borrowed, not copied:
    /// this runs before every model call.
    pub fn context(&self) -> Context<'_> {
        let path = self.path_to_leaf();
        let mut out: Vec<(&str, Cow<'_, Message>)> = Vec::with_capacity(path.len() + 1);
        let mut fresh_from_entry: Option<usize> = None;
        let compaction = path
            .iter()
            .rposition(|e| matches!(e.body, Body::Known(Known::Compaction { .. })));
        let mut start = 0;
        if let Some(c) = compaction {
            if let Body::Known(Known::Compaction {
                summary,
                first_kept_entry_id,
                ..
            }) = &path[c].body
            {
                out.push((&path[c].id, Cow::Owned(summary_message(summary))));
                start = path[..c]
                    .iter()
                    .position(|e| &e.id == first_kept_entry_id)
                    .unwrap_or(c);
            }
        }
        for (i, e) in path.iter().enumerate().skip(start) {
            if Some(i) == compaction {
                fresh_from_entry = Some(out.len());
                continue;
            }
            match &e.body {
                // A turn that ended in an error or was aborted is not replayed, as pi
                // does: its partial text is not an answer.
                Body::Known(Known::Message {
                    message: Message::Assistant(a),
                }) if matches!(a.stop_reason, StopReason::Error | StopReason::Aborted) => {}
                Body::Known(Known::Message { message }) => {
                    out.push((&e.id, Cow::Borrowed(message)))
                }
                Body::UserText(_, text) => {
                    out.push((&e.id, Cow::Owned(Message::user(text.clone()))))
                }
                Body::Evicted { offset, len } => {
                    if let Some(m) = self.read_back(*offset, *len) {
                        out.push((&e.id, Cow::Owned(m)));
                    }
                }
                Body::Known(Known::BranchSummary { summary, .. }) => out.push((
                    &e.id,
                    Cow::Owned(Message::user(format!(
                        "{BRANCH_SUMMARY_PREFIX}{summary}{SUMMARY_SUFFIX}"
                    ))),
                )),
                _ => {}
            }
        }
        // Repair may insert synthetic results, so find the compaction point again by id.
        let first_fresh: Option<&str> =
            fresh_from_entry.and_then(|f| out.get(f).map(|(id, _)| *id));
        let messages = repair::repair(out);
        let fresh_from = match (fresh_from_entry, first_fresh) {
            (Some(_), Some(id)) => messages
                .iter()
                .position(|(mid, _)| *mid == id)
                .unwrap_or(messages.len()),
            (Some(_), None) => messages.len(),
            (None, _) => 0,
        };
        Context {
            messages,
            fresh_from,
            has_summary: compaction.is_some(),
        }
    }
}

/// What the model sees of a session.
#[derive(Debug, Clone, Default)]
pub struct Context<'a> {
    /// Messages with the id of the entry each came from ("" for synthetic ones).
    pub messages: Vec<(&'a str, Cow<'a, Message>)>,
    /// Index of the first message newer than the last compaction (0 without one);
    /// usage reported before that index described a longer context.
    pub(crate) fresh_from: usize,
    /// `messages[0]` is a compaction summary.
    pub(crate) has_summary: bool,
}

/// How pi words a compaction summary and a branch summary to the model, so a session
/// reads the same in either program (and its prompt cache holds across them).
const COMPACTION_SUMMARY_PREFIX: &str =
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
const SUMMARY_SUFFIX: &str = "\n</summary>";

fn summary_message(summary: &str) -> Message {
    Message::user(format!(
        "{COMPACTION_SUMMARY_PREFIX}{summary}{SUMMARY_SUFFIX}"
    ))
}
