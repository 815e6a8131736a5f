//! What an editor is shown: a run's events as ACP `session/update`s (message and
//! thought chunks, tool calls with their kind, their results with a diff or the
//! output), a stored session replayed the same way, and a prompt's content blocks
//! (text, embedded resources, resource links) as the text the model gets.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Diff, EmbeddedResourceResource, SessionUpdate, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind as AcpKind,
};
use serde_json::Value;

use crate::agent::approval::{kind_of, ToolKind};
use crate::agent::AgentEvent;
use crate::message::{Content, Message};

/// A prompt's text, at most (bytes, resources included).
pub(crate) const MAX_PROMPT: usize = 16 << 20;

pub(crate) fn acp_kind(kind: ToolKind) -> AcpKind {
    match kind {
        ToolKind::Read => AcpKind::Read,
        ToolKind::Search => AcpKind::Search,
        ToolKind::Edit => AcpKind::Edit,
        ToolKind::Execute => AcpKind::Execute,
        ToolKind::Mcp => AcpKind::Other,
    }
}

fn chunk(text: String) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text))
}

/// The file a call is about, for the editor to follow.
fn location(args: &Value, work_dir: &Path) -> Vec<ToolCallLocation> {
    args.get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(|p| vec![ToolCallLocation::new(work_dir.join(p))])
        .unwrap_or_default()
}

/// A tool call as announced.
pub(crate) fn tool_call(
    id: &str,
    name: &str,
    args: &Value,
    title: &str,
    work_dir: &Path,
) -> ToolCall {
    ToolCall::new(id.to_string(), title.to_string())
        .kind(acp_kind(kind_of(name)))
        .status(ToolCallStatus::Pending)
        .locations(location(args, work_dir))
        .raw_input(args.clone())
}

/// The old and new text of the changed region, read back from the diff picogent's
/// `write` (unified) and `edit` (pi's lines: a sign, a line number, the text) answer
/// with.
fn region(diff: &str, numbered: bool) -> (String, String) {
    let (mut old, mut new) = (String::new(), String::new());
    for line in diff.lines() {
        if !numbered
            && (line.starts_with("--- ") || line.starts_with("+++ ") || line.starts_with("@@"))
        {
            continue;
        }
        let Some(sign) = line.chars().next() else {
            continue;
        };
        let rest = &line[sign.len_utf8()..];
        let text = if numbered {
            let rest = rest.trim_start();
            let (n, text) = rest.split_once(' ').unwrap_or((rest, ""));
            if n.parse::<u64>().is_err() {
                continue; // the "..." between far-apart changes
            }
            text
        } else {
            rest
        };
        match sign {
            '+' => new.push_str(&format!("{text}\n")),
            '-' => old.push_str(&format!("{text}\n")),
            ' ' => {
                old.push_str(&format!("{text}\n"));
                new.push_str(&format!("{text}\n"));
            }
            _ => {}
        }
    }
    (old, new)
}

/// A finished call's content: a diff for a file written or edited, else its output.
fn result_content(
    name: &str,
    output: &str,
    details: Option<&Value>,
    work_dir: &Path,
) -> Vec<ToolCallContent> {
    let diff = details.and_then(|d| Some((d.get("path")?.as_str()?, d.get("diff")?.as_str()?)));
    if let (true, Some((path, diff))) = (matches!(name, "write" | "edit"), diff) {
        let (old, new) = region(diff, name == "edit");
        let created = details
            .and_then(|d| d.get("created"))
            .and_then(Value::as_bool)
            == Some(true);
        let d = Diff::new(work_dir.join(path), new).old_text((!created).then_some(old));
        return vec![
            ToolCallContent::from(d),
            ToolCallContent::from(output.to_string()),
        ];
    }
    vec![ToolCallContent::from(output.to_string())]
}

/// A finished call as an update.
pub(crate) fn tool_result(
    id: &str,
    name: &str,
    is_error: bool,
    output: &str,
    details: Option<&Value>,
    work_dir: &Path,
) -> ToolCallUpdate {
    let status = if is_error {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    ToolCallUpdate::new(
        id.to_string(),
        ToolCallUpdateFields::new()
            .status(status)
            .content(result_content(name, output, details, work_dir)),
    )
}

/// Turns a run's events into updates, keeping what a later event needs.
pub(crate) struct Translator {
    work_dir: PathBuf,
    /// Calls whose output has begun (marked in progress once).
    running: HashSet<String>,
}

/// A call that now runs (its first output, or its approval).
fn in_progress(id: &str) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id.to_string(),
        ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
    ))
}

impl Translator {
    pub(crate) fn new(work_dir: PathBuf) -> Translator {
        Translator {
            work_dir,
            running: HashSet::new(),
        }
    }

    pub(crate) fn update(&mut self, ev: &AgentEvent) -> Option<SessionUpdate> {
        Some(match ev {
            AgentEvent::TextDelta { text } => SessionUpdate::AgentMessageChunk(chunk(text.clone())),
            AgentEvent::ThinkingDelta { text } => {
                SessionUpdate::AgentThoughtChunk(chunk(text.clone()))
            }
            AgentEvent::ToolCall {
                id,
                name,
                arguments,
                summary,
            } => SessionUpdate::ToolCall(tool_call(id, name, arguments, summary, &self.work_dir)),
            AgentEvent::ToolOutputDelta { id, .. } => {
                if !self.running.insert(id.clone()) {
                    return None;
                }
                in_progress(id)
            }
            AgentEvent::Approved { id, answer } if answer.allows() => in_progress(id),
            AgentEvent::ToolResult {
                id,
                name,
                is_error,
                output,
                details,
            } => {
                self.running.remove(id);
                SessionUpdate::ToolCallUpdate(tool_result(
                    id,
                    name,
                    *is_error,
                    output,
                    details.as_ref(),
                    &self.work_dir,
                ))
            }
            AgentEvent::Retry {
                reason,
                attempt,
                of,
                ..
            } => SessionUpdate::AgentThoughtChunk(chunk(format!(
                "\n(the model call failed, trying again: attempt {} of {of}: {reason})\n",
                attempt + 1
            ))),
            _ => return None,
        })
    }
}

/// A stored session's conversation as the updates that show it again.
pub(crate) fn replay(messages: &[Message], work_dir: &Path) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    let mut names: HashMap<&str, &str> = HashMap::new();
    for m in messages {
        match m {
            Message::User(u) => {
                for c in &u.content {
                    if let Content::Text { text } = c {
                        out.push(SessionUpdate::UserMessageChunk(chunk(text.clone())));
                    }
                }
            }
            Message::Assistant(a) => {
                for c in &a.content {
                    match c {
                        Content::Text { text } => {
                            out.push(SessionUpdate::AgentMessageChunk(chunk(text.clone())))
                        }
                        Content::Thinking {
                            thinking,
                            redacted: false,
                            ..
                        } => out.push(SessionUpdate::AgentThoughtChunk(chunk(thinking.clone()))),
                        Content::ToolCall {
                            id,
                            name,
                            arguments,
                        } => {
                            names.insert(id, name);
                            let title = crate::tools::describe_call(name, arguments);
                            out.push(SessionUpdate::ToolCall(tool_call(
                                id, name, arguments, &title, work_dir,
                            )));
                        }
                        _ => {}
                    }
                }
            }
            Message::ToolResult(r) => {
                let text: String = r
                    .content
                    .iter()
                    .filter_map(|c| match c {
                        Content::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                let name = names
                    .get(r.tool_call_id.as_str())
                    .copied()
                    .unwrap_or(&r.tool_name);
                out.push(SessionUpdate::ToolCallUpdate(tool_result(
                    &r.tool_call_id,
                    name,
                    r.is_error,
                    &text,
                    r.details.as_ref(),
                    work_dir,
                )));
            }
        }
    }
    out
}

/// A prompt's blocks as the model's text: text as is, an embedded resource inside a
/// tag naming it, a link as its name and address. Too long, or an image or audio
/// (not advertised), is refused.
pub(crate) fn prompt_text(blocks: &[ContentBlock]) -> Result<String, String> {
    let mut out = String::new();
    for b in blocks {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        match b {
            ContentBlock::Text(t) => out.push_str(&t.text),
            ContentBlock::ResourceLink(l) => {
                out.push_str(&format!("[{}]({})", l.name, l.uri));
                if let Some(d) = &l.description {
                    out.push_str(&format!(": {d}"));
                }
            }
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => {
                    out.push_str(&format!("<resource uri=\"{}\">\n{}\n</resource>", t.uri, t.text));
                }
                EmbeddedResourceResource::BlobResourceContents(b) => {
                    out.push_str(&format!(
                        "(a binary resource, {}, {} bytes of base64, not shown)",
                        b.uri,
                        b.blob.len()
                    ));
                }
                _ => return Err("a resource of a kind picogent does not know".into()),
            },
            ContentBlock::Image(_) | ContentBlock::Audio(_) => {
                return Err("picogent takes text, resources and resource links (images and audio are not advertised)".into())
            }
            _ => return Err("a content block of a kind picogent does not know".into()),
        }
        if out.len() > MAX_PROMPT {
            return Err(format!("the prompt is over {} MiB", MAX_PROMPT >> 20));
        }
    }
    if out.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_gives_back_the_changed_region() {
        let diff = "  1 keep\n- 2 old line\n+ 2 new line\n  3 after\n    ...";
        let (old, new) = region(diff, true);
        assert_eq!(old, "keep\nold line\nafter\n");
        assert_eq!(new, "keep\nnew line\nafter\n");
        let unified = "--- a.txt\n+++ a.txt\n@@ -1,2 +1,2 @@\n A\n-B\n+C\n";
        assert_eq!(region(unified, false), ("A\nB\n".into(), "A\nC\n".into()));
    }
}
