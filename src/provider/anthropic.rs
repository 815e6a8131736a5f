//! Anthropic Messages API: request body and SSE stream parser.
//!
//! The stream is `message_start`, then per content block `content_block_start` /
//! `content_block_delta`* / `content_block_stop`, then `message_delta` (stop reason,
//! output usage) and `message_stop`. `ping` may appear anywhere; an `error` event may
//! arrive mid-stream. Tool input arrives as `input_json_delta` fragments to concatenate.

use serde::Serialize;
use serde_json::Value;

use super::stream::LineReader;
use super::{parse_arguments, Delta, ModelRequest, ProviderError};
use crate::message::{AssistantMessage, Content, Message, StopReason, Usage};

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    system: &'a str,
    messages: Vec<Turn<'a>>,
    // An empty tool list is refused by some servers; leave the field out instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    stream: bool,
}

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

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: ImageSource<'a>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: Vec<Block<'a>>,
        is_error: bool,
    },
}

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

/// The request body, serialised straight from borrowed history: building a
/// `serde_json::Value` tree first cost more than everything else in a step.
pub fn request_body(
    model: &str,
    max_tokens: u32,
    req: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    let tools = req
        .tools
        .iter()
        .map(|t| Tool {
            name: t.name,
            description: t.description,
            input_schema: &t.parameters,
        })
        .collect();
    serde_json::to_vec(&Body {
        model,
        max_tokens,
        system: req.system,
        messages: messages(req.messages),
        tools,
        stream: true,
    })
}

/// Converts history to Anthropic messages. Consecutive tool results (and a user message
/// after them) merge into one `user` turn, as the API wants strict alternation.
fn messages<'a>(history: &[&'a Message]) -> Vec<Turn<'a>> {
    let mut out: Vec<Turn<'a>> = Vec::with_capacity(history.len());
    let mut push = |role: &'static str, blocks: Vec<Block<'a>>| {
        if blocks.is_empty() {
            return;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(Turn {
                role,
                content: blocks,
            }),
        }
    };
    for m in history {
        match m {
            Message::User(u) => push("user", u.content.iter().filter_map(user_block).collect()),
            Message::Assistant(a) => {
                let blocks = a
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Content::Text { text } if !text.is_empty() => Some(Block::Text { text }),
                        Content::Thinking {
                            thinking,
                            signature: Some(signature),
                        } => Some(Block::Thinking {
                            thinking,
                            signature,
                        }),
                        Content::ToolCall {
                            id,
                            name,
                            arguments,
                        } => Some(Block::ToolUse {
                            id,
                            name,
                            input: arguments,
                        }),
                        _ => None,
                    })
                    .collect();
                push("assistant", blocks)
            }
            Message::ToolResult(r) => push(
                "user",
                vec![Block::ToolResult {
                    tool_use_id: &r.tool_call_id,
                    content: r.content.iter().filter_map(user_block).collect(),
                    is_error: r.is_error,
                }],
            ),
        }
    }
    out
}

fn user_block(b: &Content) -> Option<Block<'_>> {
    match b {
        Content::Text { text } => Some(Block::Text { text }),
        Content::Image { data, mime_type } => Some(Block::Image {
            source: ImageSource {
                kind: "base64",
                media_type: mime_type,
                data,
            },
        }),
        _ => None,
    }
}

/// A content block being assembled from deltas.
enum Building {
    Text(String),
    Thinking(String, Option<String>),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

pub async fn read_stream(
    reader: &mut LineReader,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<AssistantMessage, ProviderError> {
    let mut blocks: Vec<(usize, Building)> = Vec::new();
    let mut content: Vec<(usize, Content)> = Vec::new();
    let mut usage = Usage::default();
    let mut model = String::new();
    let mut stop = StopReason::Stop;
    let mut stopped = false;
    while let Some(ev) = reader.next_event().await? {
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| reader.protocol(format!("bad event data {:?}: {e}", ev.data)))?;
        let kind = v["type"].as_str().or(ev.event.as_deref()).unwrap_or("");
        match kind {
            "message_start" => {
                let m = &v["message"];
                model = m["model"].as_str().unwrap_or_default().to_string();
                let u = &m["usage"];
                usage.input = u["input_tokens"].as_u64().unwrap_or(0);
                usage.cache_read = u["cache_read_input_tokens"].as_u64().unwrap_or(0);
                usage.cache_write = u["cache_creation_input_tokens"].as_u64().unwrap_or(0);
                usage.output = u["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let index = v["index"].as_u64().unwrap_or(0) as usize;
                let b = &v["content_block"];
                let building = match b["type"].as_str() {
                    Some("text") => {
                        let t = b["text"].as_str().unwrap_or_default().to_string();
                        if !t.is_empty() {
                            on_delta(Delta::Text(t.clone()));
                        }
                        Building::Text(t)
                    }
                    Some("thinking") => Building::Thinking(String::new(), None),
                    Some("tool_use") => Building::Tool {
                        id: b["id"].as_str().unwrap_or_default().to_string(),
                        name: b["name"].as_str().unwrap_or_default().to_string(),
                        json: String::new(),
                    },
                    _ => Building::Other,
                };
                blocks.push((index, building));
            }
            "content_block_delta" => {
                let index = v["index"].as_u64().unwrap_or(0) as usize;
                let d = &v["delta"];
                let Some((_, b)) = blocks.iter_mut().find(|(i, _)| *i == index) else {
                    return Err(reader.protocol(format!("delta for unknown block {index}")));
                };
                match (d["type"].as_str(), b) {
                    (Some("text_delta"), Building::Text(t)) => {
                        let s = d["text"].as_str().unwrap_or_default();
                        t.push_str(s);
                        on_delta(Delta::Text(s.to_string()));
                    }
                    (Some("thinking_delta"), Building::Thinking(t, _)) => {
                        let s = d["thinking"].as_str().unwrap_or_default();
                        t.push_str(s);
                        on_delta(Delta::Thinking(s.to_string()));
                    }
                    (Some("signature_delta"), Building::Thinking(_, sig)) => {
                        *sig = d["signature"].as_str().map(str::to_string);
                    }
                    (Some("input_json_delta"), Building::Tool { json, .. }) => {
                        json.push_str(d["partial_json"].as_str().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = v["index"].as_u64().unwrap_or(0) as usize;
                if let Some(pos) = blocks.iter().position(|(i, _)| *i == index) {
                    let (i, b) = blocks.remove(pos);
                    if let Some(c) = finish_block(b) {
                        content.push((i, c));
                    }
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    stop = match r {
                        "tool_use" => StopReason::ToolUse,
                        "max_tokens" => StopReason::Length,
                        _ => StopReason::Stop,
                    };
                }
                if let Some(o) = v["usage"]["output_tokens"].as_u64() {
                    usage.output = o;
                }
                if let Some(i) = v["usage"]["input_tokens"].as_u64() {
                    usage.input = i;
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => {
                let e = &v["error"];
                let etype = e["type"].as_str().unwrap_or("error");
                return Err(ProviderError::Api {
                    provider: "anthropic",
                    message: format!("{etype}: {}", e["message"].as_str().unwrap_or_default()),
                    retryable: matches!(
                        etype,
                        "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error"
                    ),
                });
            }
            _ => {} // ping and future event types
        }
    }
    if !stopped {
        return Err(reader.broken("the stream ended before message_stop"));
    }
    // Blocks never closed are kept: the message was complete.
    for (i, b) in blocks {
        if let Some(c) = finish_block(b) {
            content.push((i, c));
        }
    }
    content.sort_by_key(|(i, _)| *i);
    usage.total_tokens = usage.input + usage.output + usage.cache_read + usage.cache_write;
    Ok(AssistantMessage {
        content: content.into_iter().map(|(_, c)| c).collect(),
        api: "anthropic-messages".into(),
        provider: String::new(),
        model,
        usage,
        stop_reason: stop,
        error_message: None,
        timestamp: 0,
    })
}

fn finish_block(b: Building) -> Option<Content> {
    match b {
        Building::Text(text) => Some(Content::Text { text }),
        Building::Thinking(thinking, signature) => Some(Content::Thinking {
            thinking,
            signature,
        }),
        Building::Tool { id, name, json } => Some(Content::ToolCall {
            id,
            name,
            arguments: parse_arguments(&json),
        }),
        Building::Other => None,
    }
}
