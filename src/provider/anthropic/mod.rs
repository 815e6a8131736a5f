//! Anthropic Messages API: the request body here, the SSE stream parser in `stream`.
//!
//! The stream is `message_start`, then per content block `content_block_start` /
//! `content_block_delta`* / `content_block_stop`, then `message_delta` (stop reason,
//! output usage) and `message_stop`. `ping` may appear anywhere; an `error` event may
//! arrive mid-stream. Tool input arrives as `input_json_delta` fragments to concatenate.
//!
//! Prompt caching: a request for a conversation that goes on (`ModelRequest::cache_key`)
//! carries `cache_control` breakpoints. The API caches the prefix up to a breakpoint in
//! its own order (tools, then system, then messages), so one breakpoint on the system
//! prompt covers tools + system, which never change within a run. Two more sit on the
//! last block of the newest and of the previous user turn: the newest writes the grown
//! prefix for the next step, the previous one is exactly the prefix the last step wrote,
//! so it is read back even when a turn added more blocks than the API's look-back (about
//! 20 blocks before a breakpoint). Three breakpoints, within the API's limit of four;
//! they move forward with the conversation, and after a compaction the new prefix is
//! written again by the same rule.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

mod stream;

pub(crate) use stream::read_stream;

use super::fragments::{Encoded, Part};
use super::ModelRequest;
use crate::message::{Content, Message};

/// The request; `M` is a turn, built from history (`Turn`) or spliced from cached
/// fragments (`RawTurn`), which serialise alike.
#[derive(Serialize)]
struct Body<'a, M> {
    model: &'a str,
    max_tokens: u32,
    system: System<'a>,
    messages: Vec<M>,
    // An empty tool list is refused by some servers; leave the field out instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
}

/// The system prompt: a plain string, or one text block carrying a breakpoint.
#[derive(Serialize)]
#[serde(untagged)]
enum System<'a> {
    Plain(&'a str),
    Cached([SystemBlock<'a>; 1]),
}

#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    cache_control: CacheControl,
}

/// A cache breakpoint: the prefix up to and including this block is cached (5 minutes,
/// renewed by every read).
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

/// Breakpoints on user turns, counted from the newest (see the module docs).
const TURN_BREAKPOINTS: usize = 2;

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

/// A turn of cached blocks.
#[derive(Serialize)]
struct RawTurn<'a> {
    role: &'static str,
    content: &'a [&'a RawValue],
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: std::borrow::Cow<'a, str>,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: std::borrow::Cow<'a, str>,
        content: Vec<Block<'a>>,
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl Block<'_> {
    /// Whether a breakpoint can sit on this block: not on thinking, tool use or empty
    /// text. `cache_control` is its last field, so a marked block's JSON is the
    /// unmarked one with the field added before the closing brace.
    fn markable(&self) -> bool {
        match self {
            Block::Text { text, .. } => !text.is_empty(),
            Block::Image { .. } | Block::ToolResult { .. } => true,
            _ => false,
        }
    }

    /// Puts a breakpoint on this block; false for blocks that cannot carry one here.
    fn mark(&mut self) -> bool {
        let slot = match self {
            Block::Text {
                text,
                cache_control,
            } if !text.is_empty() => cache_control,
            Block::Image { cache_control, .. } | Block::ToolResult { cache_control, .. } => {
                cache_control
            }
            _ => return false,
        };
        *slot = Some(EPHEMERAL);
        true
    }
}

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

/// The request body, serialised straight from borrowed history (building a
/// `serde_json::Value` tree first cost more than everything else in a step), or with
/// `ModelRequest::reuse` spliced from the run's cached message fragments.
pub(crate) fn request_body(
    model: &str,
    sampling: &super::Sampling,
    req: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    let tools: Vec<Tool<'_>> = req
        .tools
        .iter()
        .map(|t| Tool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.parameters,
        })
        .collect();
    let cache = req.cache_key.is_some();
    // An empty text block is refused, with or without a breakpoint.
    let system = if cache && !req.system.is_empty() {
        System::Cached([SystemBlock {
            kind: "text",
            text: req.system,
            cache_control: EPHEMERAL,
        }])
    } else {
        System::Plain(req.system)
    };
    let head = Head {
        model,
        max_tokens: sampling.max_tokens,
        temperature: sampling.temperature,
        system,
        tools,
    };
    match req.reuse {
        Some(r) if r.ids.len() == req.messages.len() => r.fragments.with(
            &format!("anthropic {model}"),
            r.ids,
            req.messages,
            |m| encode(m, model),
            |encoded| {
                let flat = flatten(encoded);
                let marks = if cache {
                    raw_marks(&flat, TURN_BREAKPOINTS)?
                } else {
                    Vec::new()
                };
                encode_flat(head, &flat, &marks)
            },
        ),
        _ => {
            let mut messages = messages(req.messages, model);
            if cache {
                mark_turns(&mut messages, TURN_BREAKPOINTS);
            }
            head.encode(messages, 0)
        }
    }
}

/// Everything in a request but the conversation.
struct Head<'a> {
    model: &'a str,
    max_tokens: u32,
    temperature: Option<f64>,
    system: System<'a>,
    tools: Vec<Tool<'a>>,
}

impl Head<'_> {
    /// The body; `capacity` is the messages' expected size, so the buffer is not
    /// grown (and copied) step by step.
    fn encode<M: Serialize>(
        self,
        messages: Vec<M>,
        capacity: usize,
    ) -> serde_json::Result<Vec<u8>> {
        let tools: usize = self.tools.iter().map(|t| t.description.len() + 256).sum();
        let system = match &self.system {
            System::Plain(s) => s.len(),
            System::Cached([b]) => b.text.len(),
        };
        let mut out = Vec::with_capacity(capacity + tools + system + 256);
        serde_json::to_writer(
            &mut out,
            &Body {
                model: self.model,
                max_tokens: self.max_tokens,
                system: self.system,
                messages,
                tools: self.tools,
                stream: true,
                temperature: self.temperature,
            },
        )?;
        Ok(out)
    }
}

/// Marks the last markable block of each of the newest `n` user turns.
fn mark_turns(turns: &mut [Turn<'_>], n: usize) {
    let user_turns = turns.iter_mut().rev().filter(|t| t.role == "user");
    for turn in user_turns.take(n) {
        for block in turn.content.iter_mut().rev() {
            if block.mark() {
                break;
            }
        }
    }
}

/// One message's blocks, each encoded on its own.
fn encode(m: &Message, model: &str) -> serde_json::Result<Encoded> {
    let (role, blocks) = message_blocks(m, model);
    let parts = blocks
        .iter()
        .map(|b| Part::new(b, b.markable()))
        .collect::<serde_json::Result<_>>()?;
    Ok(Encoded { role, parts })
}

/// Cached blocks in request order, with the turns `messages` would make of them: a
/// message without blocks adds nothing, consecutive messages of one role share a turn.
struct Flat<'a> {
    blocks: Vec<&'a Part>,
    /// Each turn's role and its blocks' range in `blocks`.
    turns: Vec<(&'static str, std::ops::Range<usize>)>,
}

fn flatten<'a>(encoded: &[&'a Encoded]) -> Flat<'a> {
    let mut blocks = Vec::with_capacity(encoded.len() + encoded.len() / 2);
    let mut turns: Vec<(&'static str, std::ops::Range<usize>)> = Vec::new();
    for e in encoded.iter().filter(|e| !e.parts.is_empty()) {
        let start = blocks.len();
        blocks.extend(&e.parts);
        match turns.last_mut() {
            Some((role, range)) if *role == e.role => range.end = blocks.len(),
            _ => turns.push((e.role, start..blocks.len())),
        }
    }
    Flat { blocks, turns }
}

/// `mark_turns` for cached blocks: the last markable block of each of the newest `n`
/// user turns, by its index in `blocks`, with its marked JSON.
fn raw_marks(flat: &Flat<'_>, n: usize) -> serde_json::Result<Vec<(usize, Box<RawValue>)>> {
    let control = serde_json::to_string(&EPHEMERAL)?;
    let user_turns = flat.turns.iter().rev().filter(|(role, _)| *role == "user");
    let mut out = Vec::new();
    for (_, range) in user_turns.take(n) {
        let last = range.clone().rev().find(|&b| flat.blocks[b].markable);
        if let Some(b) = last {
            let json = flat.blocks[b].json.get();
            let open = json.strip_suffix('}').unwrap_or(json);
            let marked = format!("{open},\"cache_control\":{control}}}");
            out.push((b, RawValue::from_string(marked)?));
        }
    }
    Ok(out)
}

/// Encodes the request from cached blocks, the marked ones in place of theirs.
fn encode_flat(
    head: Head<'_>,
    flat: &Flat<'_>,
    marks: &[(usize, Box<RawValue>)],
) -> serde_json::Result<Vec<u8>> {
    let blocks: Vec<&RawValue> = flat
        .blocks
        .iter()
        .enumerate()
        .map(|(b, p)| match marks.iter().find(|(at, _)| *at == b) {
            Some((_, marked)) => &**marked,
            None => &*p.json,
        })
        .collect();
    let turns: Vec<RawTurn<'_>> = flat
        .turns
        .iter()
        .map(|(role, range)| RawTurn {
            role,
            content: blocks.get(range.clone()).unwrap_or_default(),
        })
        .collect();
    let size: usize = blocks.iter().map(|b| b.get().len() + 1).sum();
    head.encode(turns, size + 30 * flat.turns.len())
}

/// Converts history to Anthropic messages. Consecutive tool results (and a user message
/// after them) merge into one `user` turn, as the API wants strict alternation.
fn messages<'a>(history: &[&'a Message], model: &str) -> Vec<Turn<'a>> {
    let mut out: Vec<Turn<'a>> = Vec::with_capacity(history.len());
    for m in history {
        let (role, blocks) = message_blocks(m, model);
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(Turn {
                role,
                content: blocks,
            }),
        }
    }
    out
}

/// One message's role and blocks.
fn message_blocks<'a>(m: &'a Message, model: &str) -> (&'static str, Vec<Block<'a>>) {
    match m {
        Message::User(u) => ("user", u.content.iter().filter_map(user_block).collect()),
        Message::Assistant(a) => {
            let same = same_model(a, model);
            let blocks = a
                .content
                .iter()
                .filter_map(|b| assistant_block(b, same))
                .collect();
            ("assistant", blocks)
        }
        Message::ToolResult(r) => (
            "user",
            vec![Block::ToolResult {
                tool_use_id: super::wire_call_id(&r.tool_call_id),
                content: r.content.iter().filter_map(user_block).collect(),
                is_error: r.is_error,
                cache_control: None,
            }],
        ),
    }
}

/// Whether an assistant turn came from this model, so its thinking signatures hold.
fn same_model(a: &crate::message::AssistantMessage, model: &str) -> bool {
    a.api == "anthropic-messages"
        && (a.model == model || a.model.starts_with(model) || model.starts_with(&a.model))
}

/// One assistant block as pi sends it: redacted thinking back as `redacted_thinking`
/// and signed thinking as it was, for the same model only; other thinking as text.
fn assistant_block(b: &Content, same: bool) -> Option<Block<'_>> {
    match b {
        Content::Text { text } if !text.is_empty() => Some(Block::Text {
            text,
            cache_control: None,
        }),
        Content::Thinking {
            signature: Some(data),
            redacted: true,
            ..
        } => same.then_some(Block::RedactedThinking { data }),
        Content::Thinking {
            thinking,
            signature: Some(signature),
            redacted: false,
        } if same && !signature.trim().is_empty() => Some(Block::Thinking {
            thinking,
            signature,
        }),
        Content::Thinking {
            thinking,
            redacted: false,
            ..
        } if !thinking.trim().is_empty() => Some(Block::Text {
            text: thinking,
            cache_control: None,
        }),
        Content::ToolCall {
            id,
            name,
            arguments,
        } => Some(Block::ToolUse {
            id: super::wire_call_id(id),
            name,
            input: arguments,
        }),
        _ => None,
    }
}

fn user_block(b: &Content) -> Option<Block<'_>> {
    match b {
        Content::Text { text } => Some(Block::Text {
            text,
            cache_control: None,
        }),
        Content::Image { data, mime_type } => Some(Block::Image {
            source: ImageSource {
                kind: "base64",
                media_type: mime_type,
                data,
            },
            cache_control: None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, StopReason, Usage};

    fn body(history: &[&Message], cache_key: Option<&str>) -> String {
        let req = ModelRequest {
            system: "sys",
            messages: history,
            tools: &[],
            cache_key,
            reuse: None,
        };
        String::from_utf8(
            request_body("m", &crate::provider::Sampling::max_tokens(10), &req).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_continued_conversation_has_three_breakpoints_a_one_off_call_none() {
        let answer = Message::Assistant(AssistantMessage {
            content: vec![Content::text("ok")],
            api: String::new(),
            provider: String::new(),
            model: String::new(),
            usage: Usage::default(),
            stop_reason: StopReason::Stop,
            error_message: None,
            response_id: None,
            timestamp: 0,
        });
        let turns: Vec<Message> = (0..10)
            .map(|i| Message::user(format!("turn {i}")))
            .collect();
        let mut history: Vec<&Message> = Vec::new();
        for t in &turns {
            history.extend([t, &answer]);
        }
        history.pop();
        let cached = body(&history, Some("s"));
        assert_eq!(cached.matches("cache_control").count(), 3, "{cached}");
        for marked in ["turn 8", "turn 9"] {
            let block = format!(
                r#"{{"type":"text","text":"{marked}","cache_control":{{"type":"ephemeral"}}}}"#
            );
            assert!(cached.contains(&block), "{cached}");
        }
        let one_off = body(&history, None);
        assert_eq!(one_off.matches("cache_control").count(), 0, "{one_off}");
        // Consecutive user messages merge into one turn: one breakpoint, on its last block.
        let merged: Vec<&Message> = turns.iter().collect();
        assert_eq!(body(&merged, Some("s")).matches("cache_control").count(), 2);
    }
}
