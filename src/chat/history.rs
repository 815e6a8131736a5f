//! A session read back for a client: `history` (the conversation on the session's
//! current branch as the items a page renders, and the `keepAlive` requests running in
//! it, to `subscribe` to) and `delete`.
//!
//! The invariant that makes a reload exact: `history` stops where the first running
//! request's prompt is in the file, and that request's log holds every frame from its
//! start (`subscribe` with `after` 0), so no item is shown twice or lost.

use std::collections::HashSet;
use std::sync::Arc;

use super::protocol::{History, HistoryItem, RunningRequest, ServerFrame, Shown};
use super::runs::{tool_output, RunLog, Runs};
use crate::message::{blocks_text, Content, Message};
use crate::session::records::Intervention;
use crate::session::{branches, Body, Known, Record, Session};

/// Waits until no request of the server is running (one that starts meanwhile is
/// waited for too).
pub(super) async fn none_running(runs: &Runs) {
    loop {
        let going: Vec<Arc<RunLog>> = match runs.lock() {
            Ok(m) => m.values().filter(|l| !l.is_done()).cloned().collect(),
            Err(_) => return,
        };
        if going.is_empty() {
            return;
        }
        for log in going {
            log.ended().await;
        }
    }
}

/// The running requests of `session` (each once), oldest first.
pub(super) fn running(runs: &Runs, session: &str) -> Vec<Arc<RunLog>> {
    let Ok(map) = runs.lock() else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    let mut out: Vec<Arc<RunLog>> = map
        .values()
        .filter(|l| l.session == session && !l.is_done())
        .filter(|l| seen.insert(Arc::as_ptr(l)))
        .cloned()
        .collect();
    out.sort_by_key(|l| l.made);
    out
}

/// Where the first running request's prompt is in the session's entries (the history
/// ends before it); none running: after the last entry.
fn cut(s: &Session, running: &[Arc<RunLog>]) -> usize {
    let entries = s.entries();
    running
        .iter()
        .filter_map(|log| entries.iter().position(|e| e.id() == log.prompt_entry))
        .min()
        .unwrap_or(entries.len())
}

/// A history reply is kept under this size: the oldest items go first.
const MAX_HISTORY_BYTES: usize = 4 << 20;

/// Drops the oldest items until the history fits in `MAX_HISTORY_BYTES`.
fn bounded(mut items: Vec<HistoryItem>) -> Vec<HistoryItem> {
    // Each item is measured once (plus its comma); the oldest go until the rest fit.
    let sizes: Vec<usize> = items
        .iter()
        .map(|i| serde_json::to_vec(i).map_or(0, |v| v.len() + 1))
        .collect();
    let mut total: usize = sizes.iter().sum::<usize>() + 1;
    let mut drop = 0;
    while drop + 1 < items.len() && total > MAX_HISTORY_BYTES {
        total -= sizes.get(drop).copied().unwrap_or(0);
        drop += 1;
    }
    // The model and folder in force where the kept items begin stay known (a page's
    // context row shows them).
    let context = items[..drop]
        .iter()
        .rev()
        .find(|i| matches!(i, HistoryItem::Frame(ServerFrame::Context { .. })))
        .cloned();
    items.drain(..drop);
    if let Some(c) = context {
        items.insert(0, c);
    }
    items
}

/// The `history` answer for a session from `s`, read after `running` was taken: a
/// request that ended in between is still cut at its prompt (its log is kept a while),
/// so none is half in the file and half nowhere.
pub(super) fn history(s: &Session, running: Vec<Arc<RunLog>>) -> History {
    let end = cut(s, &running);
    History {
        items: bounded(items(s, end)),
        running: running
            .iter()
            .filter_map(|l| {
                Some(RunningRequest {
                    id: l.id().to_string(),
                    run_id: l.run_id.clone()?,
                    prompt: l.prompt.clone(),
                    seq: l.seq(),
                })
            })
            .collect(),
    }
}

/// The entries from the root to the one before `end` (on the branch that holds it).
fn path_before(s: &Session, end: usize) -> Vec<usize> {
    let Some(last) = end.checked_sub(1) else {
        return Vec::new();
    };
    branches::branches(s)
        .into_iter()
        .find_map(|b| {
            let at = b.path.iter().position(|&i| i == last)?;
            Some(b.path[..=at].to_vec())
        })
        .unwrap_or_default()
}

/// The items of the conversation up to (not including) entry `end`. Where the path
/// was rolled back, what the rollback undid comes first (from the leaf it left), so
/// the page shows those steps greyed, as it did live, not as if they never happened.
fn items(s: &Session, end: usize) -> Vec<HistoryItem> {
    let entries = s.entries();
    let path = path_before(s, end);
    let on_path: HashSet<&str> = path.iter().map(|&i| entries[i].id()).collect();
    let index: std::collections::HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id(), i))
        .collect();
    let mut conv = Converter {
        work_dir: crate::session::find::header(s.file_path())
            .and_then(|h| h["cwd"].as_str().map(str::to_string))
            .unwrap_or_default(),
        ..Converter::default()
    };
    // Undone entries already shown (a later rollback may lead back through them).
    let mut shown: HashSet<usize> = HashSet::new();
    for (n, &i) in path.iter().enumerate() {
        if let Some(Record::Rollback(r)) = crate::session::record_of(&entries[i]) {
            let mut undone = abandoned(entries, &index, &on_path, r.from.as_deref());
            undone.retain(|j| shown.insert(*j));
            for (m, &j) in undone.iter().enumerate() {
                conv.entry(entries, j, undone.get(m + 1).copied());
            }
        }
        conv.entry(entries, i, path.get(n + 1).copied());
    }
    conv.out
}

/// The entries from where `leaf`'s branch left the current path down to `leaf`
/// (oldest first): what a rollback from `leaf` undid.
fn abandoned(
    entries: &[crate::session::Entry],
    index: &std::collections::HashMap<&str, usize>,
    on_path: &HashSet<&str>,
    leaf: Option<&str>,
) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = leaf.and_then(|l| index.get(l).copied());
    while let Some(i) = at {
        let e = &entries[i];
        if on_path.contains(e.id()) || out.len() > entries.len() {
            break;
        }
        out.push(i);
        at = e.parent_id.as_deref().and_then(|p| index.get(p).copied());
    }
    out.reverse();
    out
}

/// Turns entries into history items, one after another.
#[derive(Default)]
struct Converter {
    out: Vec<HistoryItem>,
    /// When the message that made each tool call was written: its result's time less
    /// that is how long the call took.
    called_at: std::collections::HashMap<String, i64>,
    /// The folder the session was made in, and the model last named: a `context` item
    /// when the model changes, so a page shows them after a reload as during the run.
    work_dir: String,
    model: String,
}

impl Converter {
    /// Entry `i`'s items; `next` is the entry after it on the same line.
    fn entry(&mut self, entries: &[crate::session::Entry], i: usize, next: Option<usize>) {
        let frame = HistoryItem::Frame;
        let next_is_instruction = next.is_some_and(|j| {
            matches!(
                crate::session::record_of(&entries[j]),
                Some(Record::Intervention(Intervention::Instruct { .. }))
            )
        });
        let out = &mut self.out;
        match &entries[i].body {
            Body::Known(Known::Message { message }) => match message {
                // An instruction is written as a user message, then its record.
                Message::User(_) if next_is_instruction => {}
                Message::User(u) => out.push(HistoryItem::User {
                    content: blocks_text(&u.content),
                }),
                Message::Assistant(a) => {
                    if !a.model.is_empty() && a.model != self.model {
                        self.model = a.model.clone();
                        out.push(frame(ServerFrame::Context {
                            provider: a.provider.clone(),
                            model: a.model.clone(),
                            work_dir: self.work_dir.clone(),
                        }));
                    }
                    out.push(frame(ServerFrame::Usage {
                        content: a.usage.clone(),
                        step: 0,
                    }));
                    for block in &a.content {
                        if let Content::ToolCall { id, .. } = block {
                            self.called_at.insert(id.clone(), a.timestamp);
                        }
                        out.push(frame(match block {
                            Content::Text { text } => ServerFrame::Text {
                                content: text.clone(),
                            },
                            Content::Thinking { thinking, .. } => ServerFrame::Thinking {
                                content: thinking.clone(),
                            },
                            Content::ToolCall {
                                id,
                                name,
                                arguments,
                            } => ServerFrame::ToolUse {
                                content: crate::tools::describe_call(name, arguments),
                                tool: Some(name.clone()),
                                args: Some(arguments.clone()),
                                call_id: Some(id.clone()),
                            },
                            Content::Image { .. } => continue,
                        }));
                    }
                    if let Some(e) = &a.error_message {
                        out.push(frame(ServerFrame::error(e.clone())));
                    }
                }
                Message::ToolResult(r) => {
                    let took = self
                        .called_at
                        .get(&r.tool_call_id)
                        .and_then(|at| u64::try_from(r.timestamp.saturating_sub(*at)).ok());
                    out.push(frame(tool_output(
                        r.tool_call_id.clone(),
                        r.tool_name.clone(),
                        r.is_error,
                        &blocks_text(&r.content),
                        r.details.clone(),
                        took,
                    )))
                }
            },
            Body::Known(Known::Custom { .. }) => {
                if let Some(item) = crate::session::record_of(&entries[i]).and_then(record_item) {
                    out.push(item);
                }
            }
            Body::Known(Known::Compaction { .. }) => out.push(frame(ServerFrame::State {
                content: Shown::Compacted,
            })),
            _ => {}
        }
    }
}

fn record_item(r: Record) -> Option<HistoryItem> {
    let frame = HistoryItem::Frame;
    Some(match r {
        Record::Checkpoint(c) => frame(ServerFrame::Checkpoint {
            content: c.message,
            step: c.step,
        }),
        Record::Rollback(r) => frame(ServerFrame::Rollback {
            content: format!("rolled back to step {}", r.step),
            step: r.step,
        }),
        Record::Branch(b) => HistoryItem::Branch {
            content: b.name,
            step: b.step,
        },
        Record::Intervention(Intervention::Instruct { text, .. }) => {
            frame(ServerFrame::Instruction { content: text })
        }
        Record::Intervention(Intervention::Pause { .. }) => frame(ServerFrame::State {
            content: Shown::Paused,
        }),
        Record::Intervention(Intervention::Resume { .. }) => frame(ServerFrame::State {
            content: Shown::Running,
        }),
        Record::StepLabel(l) => HistoryItem::Label {
            call_id: l.call_id,
            label: l.label,
            note: l.note,
        },
        Record::RunRating(r) => HistoryItem::Rating {
            rating: r.rating,
            note: r.note,
        },
        Record::Interrupted(i) => HistoryItem::Interrupted {
            run_id: i.run,
            content: i.prompt,
        },
        Record::Preference(_) | Record::ClaudeCodeSession(_) => return None,
    })
}

/// Deletes a session, unless a request of this server runs in it.
pub(super) async fn delete(
    agent: &crate::agent::Agent,
    session: &str,
    runs: &Runs,
) -> Result<(), super::refused::Refused> {
    use super::refused::Refused;
    if !running(runs, session).is_empty() {
        return Err(Refused::Busy(format!(
            "delete: a request is running in session {session}; stop it first"
        )));
    }
    agent
        .delete_session(session)
        .await
        .map_err(|e| Refused::Session("delete", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history cut to its size keeps the model and folder in force where it begins.
    #[test]
    fn a_cut_history_keeps_the_context_it_began_under() {
        let context = HistoryItem::Frame(ServerFrame::Context {
            provider: "anthropic".into(),
            model: "m1".into(),
            work_dir: "/w".into(),
        });
        let big = "x".repeat(1 << 20);
        let mut items = vec![context.clone()];
        for _ in 0..6 {
            items.push(HistoryItem::User {
                content: big.clone(),
            });
        }
        let kept = bounded(items);
        assert!(kept.len() < 7, "cut");
        assert_eq!(kept[0], context);
        assert!(matches!(kept[1], HistoryItem::User { .. }));
    }
}
