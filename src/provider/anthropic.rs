//! Anthropic Messages API: request body and SSE stream parser.
//!
//! The stream is `message_start`, then per content block `content_block_start` /
//! `content_block_delta`* / `content_block_stop`, then `message_delta` (stop reason,
//! output usage) and `message_stop`. `ping` may appear anywhere; an `error` event may
//! arrive mid-stream. Tool input arrives as `input_json_delta` fragments to concatenate.

use serde_json::{json, Value};

use super::stream::LineReader;
use super::{parse_arguments, Delta, ModelRequest, ProviderError};
use crate::message::{AssistantMessage, Content, Message, StopReason, Usage};

pub fn request_body(model: &str, max_tokens: u32, req: &ModelRequest<'_>) -> Value {
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "system": req.system,
        "messages": messages(req.messages),
        "tools": tools,
        "stream": true,
    });
    // An empty tool list is refused by some servers; leave the field out instead.
    if req.tools.is_empty() {
        if let Some(o) = body.as_object_mut() {
            o.remove("tools");
        }
    }
    body
}

/// Converts history to Anthropic messages. Consecutive tool results (and a user message
/// after them) merge into one `user` turn, as the API wants strict alternation.
fn messages(history: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut push = |role: &str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        if let Some(last) = out.last_mut() {
            if last["role"] == role {
                if let Some(arr) = last["content"].as_array_mut() {
                    arr.extend(blocks);
                    return;
                }
            }
        }
        out.push(json!({"role": role, "content": blocks}));
    };
    for m in history {
        match m {
            Message::User(u) => push("user", u.content.iter().filter_map(user_block).collect()),
            Message::Assistant(a) => {
                let blocks = a
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Content::Text { text } if !text.is_empty() => {
                            Some(json!({"type": "text", "text": text}))
                        }
                        Content::Thinking {
                            thinking,
                            signature: Some(sig),
                        } => Some(
                            json!({"type": "thinking", "thinking": thinking, "signature": sig}),
                        ),
                        Content::ToolCall {
                            id,
                            name,
                            arguments,
                        } => Some(
                            json!({"type": "tool_use", "id": id, "name": name, "input": arguments}),
                        ),
                        _ => None,
                    })
                    .collect();
                push("assistant", blocks)
            }
            Message::ToolResult(r) => {
                let content: Vec<Value> = r.content.iter().filter_map(user_block).collect();
                push(
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": r.tool_call_id,
                        "content": content,
                        "is_error": r.is_error,
                    })],
                )
            }
        }
    }
    out
}

fn user_block(b: &Content) -> Option<Value> {
    match b {
        Content::Text { text } => Some(json!({"type": "text", "text": text})),
        Content::Image { data, mime_type } => Some(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": mime_type, "data": data}
        })),
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
