//! Request bodies from cached per-message fragments: a run encodes each message of its
//! conversation once, in the provider's wire format, and splices the stored JSON into
//! every later request. Without it the whole context was serialised again every step,
//! so a step's cost followed the context's size.
//!
//! A fragment is keyed by the id of the session entry its message came from: entries
//! never change once written (an evicted one reads back the same), so neither does the
//! encoding. Messages without an entry (repair's synthetic results, id "") are encoded
//! fresh each time. Whatever one request does not use is dropped after it, so the cache
//! holds one context's worth of JSON, not the session's.

use std::sync::Mutex;

use serde_json::value::RawValue;

use super::ModelRequest;
use crate::message::Message;

/// A request body of a chat format (OpenAI, Ollama) built around its message list.
pub(crate) trait ChatBody {
    fn encode<M: serde::Serialize>(self, messages: Vec<M>) -> serde_json::Result<Vec<u8>>;
}

/// The body of a chat request whose messages follow one system message (OpenAI,
/// Ollama): the messages from the run's cached fragments of `wire` when the request
/// brings them, else encoded afresh. `convert` gives a message's wire form (`None`:
/// not sent).
pub(crate) fn chat_body<'a, W: serde::Serialize>(
    wire: &str,
    head: impl ChatBody,
    system: W,
    req: &ModelRequest<'a>,
    convert: impl Fn(&'a Message) -> Option<W>,
) -> serde_json::Result<Vec<u8>> {
    match req.reuse {
        Some(r) if r.ids.len() == req.messages.len() => {
            let system = serde_json::value::to_raw_value(&system)?;
            r.fragments.with(
                wire,
                r.ids,
                req.messages,
                |m| Encoded::one(convert(m).as_ref()),
                |encoded| head.encode(Encoded::spliced(&system, encoded)),
            )
        }
        _ => {
            let mut messages = Vec::with_capacity(req.messages.len() + 1);
            messages.push(system);
            messages.extend(req.messages.iter().filter_map(|m| convert(m)));
            head.encode(messages)
        }
    }
}

/// One message in a wire format: the turn's role (Anthropic, which merges a role's
/// consecutive messages into one turn; "" for the others) and its JSON parts (the
/// Anthropic content blocks, or the one OpenAI/Ollama message; none when the message
/// is left out of the request).
pub(crate) struct Encoded {
    pub(crate) role: &'static str,
    pub(crate) parts: Vec<Part>,
}

pub(crate) struct Part {
    pub(crate) json: Box<RawValue>,
    /// Whether an Anthropic cache breakpoint can sit on this block.
    pub(crate) markable: bool,
}

impl Encoded {
    /// A message that is one JSON value in the wire format, or none when left out.
    pub(crate) fn one(value: Option<&impl serde::Serialize>) -> serde_json::Result<Encoded> {
        let parts = match value {
            Some(v) => vec![Part::new(v, false)?],
            None => Vec::new(),
        };
        Ok(Encoded { role: "", parts })
    }

    /// `first` (the system message), then every part of `encoded`, in order.
    pub(crate) fn spliced<'a>(first: &'a RawValue, encoded: &[&'a Encoded]) -> Vec<&'a RawValue> {
        let parts = encoded
            .iter()
            .flat_map(|e| e.parts.iter().map(|p| &*p.json));
        std::iter::once(first).chain(parts).collect()
    }
}

impl Part {
    pub(crate) fn new(value: &impl serde::Serialize, markable: bool) -> serde_json::Result<Part> {
        Ok(Part {
            json: serde_json::value::to_raw_value(value)?,
            markable,
        })
    }
}

/// A run's fragment cache, shared by its model calls.
#[derive(Default)]
pub(crate) struct Fragments {
    store: Mutex<Store>,
}

#[derive(Default)]
struct Store {
    /// The wire format and model the fragments were encoded for.
    wire: String,
    /// The previous request's messages that came from entries, in its order. A request
    /// mostly repeats them and adds a few at the end (after a compaction: drops some at
    /// the start), so they are matched in order, without hashing every id every step.
    held: Vec<(Box<str>, Encoded)>,
}

/// Where a request's message is: kept in the store, or encoded for this request only.
enum Slot {
    Held(usize),
    Fresh(usize),
}

/// What a request needs to reuse fragments: the entry id of each message (parallel to
/// `ModelRequest::messages`, "" for synthetic ones) and the run's cache.
#[derive(Clone, Copy)]
pub(crate) struct Reuse<'a> {
    pub(crate) ids: &'a [&'a str],
    pub(crate) fragments: &'a Fragments,
}

impl Fragments {
    /// Runs `assemble` over the encoded form of each of `messages`, reusing stored
    /// fragments of `wire` (a provider and model: `encode` depends on both) and
    /// encoding only the others. What this request does not use is dropped.
    pub(crate) fn with<'m, R>(
        &self,
        wire: &str,
        ids: &[&str],
        messages: &[&'m Message],
        encode: impl Fn(&'m Message) -> serde_json::Result<Encoded>,
        assemble: impl FnOnce(&[&Encoded]) -> serde_json::Result<R>,
    ) -> serde_json::Result<R> {
        // A poisoned lock only means a panic elsewhere mid-request: the store is
        // replaced whole at the end of a request, so it is still consistent.
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if store.wire != wire {
            store.held.clear();
            store.wire = wire.to_string();
        }
        let mut old: Vec<Option<(Box<str>, Encoded)>> = std::mem::take(&mut store.held)
            .into_iter()
            .map(Some)
            .collect();
        let mut cursor = 0;
        let mut held = Vec::with_capacity(ids.len());
        let mut fresh = Vec::new();
        let mut slots = Vec::with_capacity(ids.len());
        for (&id, m) in ids.iter().zip(messages) {
            if id.is_empty() {
                fresh.push(encode(m)?);
                slots.push(Slot::Fresh(fresh.len() - 1));
                continue;
            }
            let found = (cursor..old.len())
                .find(|&k| old[k].as_ref().is_some_and(|(o, _)| **o == *id))
                .and_then(|k| {
                    cursor = k + 1;
                    old[k].take()
                });
            let entry = match found {
                Some(e) => e,
                None => (id.into(), encode(m)?),
            };
            held.push(entry);
            slots.push(Slot::Held(held.len() - 1));
        }
        let encoded: Vec<&Encoded> = slots
            .iter()
            .filter_map(|s| match *s {
                Slot::Held(i) => held.get(i).map(|(_, e)| e),
                Slot::Fresh(i) => fresh.get(i),
            })
            .collect();
        let result = assemble(&encoded);
        drop(encoded);
        store.held = held;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, Content, StopReason, ToolResultMessage, Usage};
    use crate::provider::{anthropic, ollama, openai, ModelRequest, Sampling, ToolSpec};
    use crate::session::{Known, Session, SessionStore};

    fn assistant(content: Vec<Content>, stop_reason: StopReason) -> Message {
        Message::Assistant(AssistantMessage {
            content,
            api: "anthropic-messages".into(),
            provider: "anthropic".into(),
            model: "m".into(),
            usage: Usage::default(),
            stop_reason,
            error_message: None,
            response_id: None,
            timestamp: 1,
        })
    }

    fn call(id: &str) -> Content {
        Content::ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: serde_json::json!({"path": "a \"quoted\" ü.txt", "limit": 3}),
        }
    }

    fn result(id: &str, content: Vec<Content>) -> Message {
        Message::ToolResult(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "read".into(),
            content,
            details: None,
            is_error: id.ends_with('e'),
            timestamp: 1,
        })
    }

    fn user_blocks(content: Vec<Content>) -> Message {
        let mut m = Message::user("");
        if let Message::User(u) = &mut m {
            u.content = content;
        }
        m
    }

    /// Per wire format, the body from a fresh encoding of the whole context must be the
    /// body from the run's fragments, byte for byte; returns the fragments' entry count.
    fn same_bytes(session: &Session, caches: &[Fragments; 3]) -> usize {
        let ctx = session.context();
        let messages: Vec<&Message> = ctx.messages.iter().map(|(_, m)| m.as_ref()).collect();
        let ids: Vec<&str> = ctx.messages.iter().map(|(id, _)| *id).collect();
        let tools = [ToolSpec {
            name: "read".into(),
            description: "Reads a file.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }];
        let sampling = Sampling::max_tokens(100);
        for (i, cache) in caches.iter().enumerate() {
            for cache_key in [Some("s"), None] {
                let mut req = ModelRequest {
                    system: "You are a \"test\".\n",
                    messages: &messages,
                    tools: &tools,
                    cache_key,
                    reuse: None,
                };
                let encode = |req: &ModelRequest<'_>| match i {
                    0 => anthropic::request_body("m", &sampling, req),
                    1 => openai::request_body("m", &sampling, req, cache_key),
                    _ => ollama::request_body("m", &sampling, req),
                };
                let full = encode(&req).unwrap();
                req.reuse = Some(Reuse {
                    ids: &ids,
                    fragments: cache,
                });
                let spliced = encode(&req).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&spliced),
                    String::from_utf8_lossy(&full),
                    "wire format {i}, {} messages",
                    messages.len()
                );
            }
        }
        let stored = caches[0].store.lock().unwrap().held.len();
        assert_eq!(stored, ids.iter().filter(|id| !id.is_empty()).count());
        stored
    }

    #[test]
    fn spliced_bodies_are_the_fresh_encoding_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let mut s = store
            .open(store.lock_blocking("frag").unwrap(), dir.path())
            .unwrap();
        let caches: [Fragments; 3] = Default::default();
        let check = |s: &Session| same_bytes(s, &caches);
        s.append_message(Message::user("the task: read \"a\""))
            .unwrap();
        check(&s);
        let thinking = Content::Thinking {
            thinking: "hm".into(),
            signature: Some("sig".into()),
            redacted: false,
        };
        let first_call = s
            .append_message(assistant(
                vec![thinking, Content::text("reading"), call("call|1")],
                StopReason::ToolUse,
            ))
            .unwrap();
        check(&s);
        s.append_message(result("call|1", vec![Content::text("line 1\nline 2")]))
            .unwrap();
        check(&s);
        for step in 0..6 {
            // Two calls a turn: their results merge into one user turn.
            let (a, b) = (format!("c{step}a"), format!("c{step}e"));
            s.append_message(assistant(vec![call(&a), call(&b)], StopReason::ToolUse))
                .unwrap();
            s.append_message(result(&a, vec![Content::text(format!("text {step}"))]))
                .unwrap();
            let image = Content::Image {
                data: "aGk=".into(),
                mime_type: "image/png".into(),
            };
            s.append_message(result(&b, vec![image])).unwrap();
            check(&s);
        }
        // A failed turn (left out), an empty answer (no blocks: the user turns around
        // it merge), a user turn ending in an empty text block, an interrupted call
        // (a synthetic result, id "").
        s.append_message(assistant(vec![Content::text("part")], StopReason::Error))
            .unwrap();
        s.append_message(Message::user("go on")).unwrap();
        s.append_message(assistant(vec![Content::text("")], StopReason::Stop))
            .unwrap();
        s.append_message(user_blocks(vec![Content::text("x"), Content::text("")]))
            .unwrap();
        check(&s);
        let kept = s
            .append_message(assistant(vec![call("lost")], StopReason::ToolUse))
            .unwrap();
        s.append_message(Message::user("after the interruption"))
            .unwrap();
        check(&s);
        let before_compaction = s.leaf().unwrap().to_string();
        // A compaction: the summary comes first, older messages leave the cache.
        s.append(Known::Compaction {
            summary: "so far: read files".into(),
            first_kept_entry_id: kept,
            tokens_before: 1000,
        })
        .unwrap();
        let after = check(&s);
        assert!(after <= 4, "{after} fragments kept after the compaction");
        s.append_message(assistant(vec![call("c9")], StopReason::ToolUse))
            .unwrap();
        s.append_message(result("c9", vec![Content::text("nine")]))
            .unwrap();
        check(&s);
        // Rollbacks: to before the compaction (evicted entries read back), then to
        // the first tool call, each continued with new messages.
        s.branch_from(Some(&before_compaction)).unwrap();
        check(&s);
        s.append_message(Message::user("a new instruction"))
            .unwrap();
        check(&s);
        s.branch_from(Some(&first_call)).unwrap();
        s.append_message(result("call|1", vec![Content::text("again")]))
            .unwrap();
        check(&s);
    }
}
