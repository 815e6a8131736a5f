//! History repair before every model call: the conversation every provider accepts.

use std::borrow::Cow;

use crate::message::{Content, Message, ToolResultMessage};

/// Makes history valid for every provider: each tool call is followed by exactly one
/// result (a synthetic "aborted" one where the run was interrupted), results without a
/// call are dropped, and failed empty assistant turns are left out.
pub(super) fn repair<'a>(
    messages: Vec<(&'a str, Cow<'a, Message>)>,
) -> Vec<(&'a str, Cow<'a, Message>)> {
    // Almost always there is nothing to repair: checking that costs no copy of the
    // history, which this runs over before every model call.
    if is_whole(&messages) {
        return messages;
    }
    let mut out: Vec<(&'a str, Cow<'a, Message>)> = Vec::with_capacity(messages.len());
    let mut open: Vec<(String, String)> = Vec::new(); // calls awaiting a result
    let close_open = |out: &mut Vec<(&'a str, Cow<'a, Message>)>,
                      open: &mut Vec<(String, String)>| {
        for (call_id, name) in open.drain(..) {
            out.push((
                "",
                Cow::Owned(Message::ToolResult(ToolResultMessage {
                    tool_call_id: call_id,
                    tool_name: name,
                    content: vec![Content::text(
                        "aborted: the run was interrupted before this tool call finished",
                    )],
                    details: None,
                    is_error: true,
                    timestamp: crate::util::now_millis(),
                })),
            ));
        }
    };
    for (id, m) in messages {
        match m.as_ref() {
            Message::ToolResult(r) => {
                if let Some(pos) = open.iter().position(|(c, _)| *c == r.tool_call_id) {
                    open.remove(pos);
                    out.push((id, m));
                }
            }
            Message::Assistant(a) => {
                close_open(&mut out, &mut open);
                if a.content.is_empty() {
                    continue;
                }
                open = a
                    .tool_calls()
                    .map(|(c, n, _)| (c.to_string(), n.to_string()))
                    .collect();
                out.push((id, m));
            }
            Message::User(_) => {
                close_open(&mut out, &mut open);
                out.push((id, m));
            }
        }
    }
    close_open(&mut out, &mut open);
    out
}

/// Whether `messages` need no repair: every result answers a call of the assistant turn
/// before it, every call is answered before the next turn, no assistant turn is empty.
fn is_whole(messages: &[(&str, Cow<'_, Message>)]) -> bool {
    let mut open: Vec<&str> = Vec::new();
    for (_, m) in messages {
        match m.as_ref() {
            Message::ToolResult(r) => match open.iter().position(|c| *c == r.tool_call_id) {
                Some(pos) => {
                    open.remove(pos);
                }
                None => return false,
            },
            Message::Assistant(a) => {
                if !open.is_empty() || a.content.is_empty() {
                    return false;
                }
                open.extend(a.tool_calls().map(|(c, _, _)| c));
            }
            Message::User(_) => {
                if !open.is_empty() {
                    return false;
                }
            }
        }
    }
    open.is_empty()
}
