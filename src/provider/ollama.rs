//! Ollama native `/api/chat`: request body and NDJSON stream parser.
//!
//! Tool calls arrive whole in `message.tool_calls[].function` with `arguments` as an
//! object, without ids (we make them); `done_reason` says `stop` even after tool calls;
//! tool results go back as `{"role": "tool", "content", "tool_name"}`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{json, Value};

use super::stream::LineReader;
use super::{function_tools, Delta, FunctionTool, ModelRequest, ProviderError};
use crate::message::{blocks_text, AssistantMessage, Content, Message, StopReason, Usage};

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Msg<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<FunctionTool<'a>>,
    stream: bool,
    options: Options,
}

#[derive(Serialize)]
struct Options {
    num_predict: u32,
}

#[derive(Serialize)]
struct Msg<'a> {
    role: &'static str,
    content: Cow<'a, str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Call<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
}

#[derive(Serialize)]
struct Call<'a> {
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    /// An object, not a string, unlike OpenAI.
    arguments: &'a Value,
}

fn msg<'a>(role: &'static str, content: Cow<'a, str>) -> Msg<'a> {
    Msg {
        role,
        content,
        tool_calls: Vec::new(),
        tool_name: None,
    }
}

pub fn request_body(
    model: &str,
    max_tokens: u32,
    req: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    messages.push(msg("system", Cow::Borrowed(req.system)));
    for m in req.messages {
        match m {
            Message::User(u) => messages.push(msg("user", Cow::Owned(blocks_text(&u.content)))),
            Message::Assistant(a) => {
                let tool_calls: Vec<Call<'_>> = a
                    .tool_calls()
                    .map(|(_, name, arguments)| Call {
                        function: CallFunction { name, arguments },
                    })
                    .collect();
                let text = a.text();
                if text.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                let mut m = msg("assistant", Cow::Owned(text));
                m.tool_calls = tool_calls;
                messages.push(m);
            }
            Message::ToolResult(r) => {
                let mut m = msg("tool", Cow::Owned(blocks_text(&r.content)));
                m.tool_name = Some(&r.tool_name);
                messages.push(m);
            }
        }
    }
    let tools = function_tools(req.tools);
    serde_json::to_vec(&Body {
        model,
        messages,
        tools,
        stream: true,
        options: Options {
            num_predict: max_tokens,
        },
    })
}

pub async fn read_stream(
    reader: &mut LineReader,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<AssistantMessage, ProviderError> {
    let mut text = String::new();
    let mut thinking = String::new();
    let mut calls: Vec<Content> = Vec::new();
    let mut usage = Usage::default();
    let mut model = String::new();
    let mut done_reason: Option<String> = None;
    let mut done = false;
    while let Some(line) = reader.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| reader.protocol(format!("bad NDJSON line {line:?}: {e}")))?;
        if let Some(err) = v["error"].as_str() {
            return Err(ProviderError::Api {
                provider: "ollama",
                message: err.to_string(),
                retryable: false,
            });
        }
        if let Some(m) = v["model"].as_str() {
            model = m.to_string();
        }
        let msg = &v["message"];
        if let Some(s) = msg["content"].as_str().filter(|s| !s.is_empty()) {
            text.push_str(s);
            on_delta(Delta::Text(s.to_string()));
        }
        if let Some(s) = msg["thinking"].as_str().filter(|s| !s.is_empty()) {
            thinking.push_str(s);
            on_delta(Delta::Thinking(s.to_string()));
        }
        if let Some(tcs) = msg["tool_calls"].as_array() {
            for tc in tcs {
                let f = &tc["function"];
                let arguments = match &f["arguments"] {
                    // Some builds send a JSON string like OpenAI does.
                    Value::String(s) => super::parse_arguments(s),
                    Value::Null => json!({}),
                    other => other.clone(),
                };
                calls.push(Content::ToolCall {
                    id: tc["id"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("call_{}", crate::util::random_hex(8))),
                    name: f["name"].as_str().unwrap_or_default().to_string(),
                    arguments,
                });
            }
        }
        if v["done"].as_bool() == Some(true) {
            done = true;
            done_reason = v["done_reason"].as_str().map(str::to_string);
            usage.input = v["prompt_eval_count"].as_u64().unwrap_or(0);
            usage.output = v["eval_count"].as_u64().unwrap_or(0);
            break;
        }
    }
    if !done {
        return Err(reader.broken("the stream ended before a line with \"done\": true"));
    }
    let mut content = Vec::new();
    if !thinking.is_empty() {
        content.push(Content::Thinking {
            thinking,
            signature: None,
        });
    }
    if !text.is_empty() {
        content.push(Content::Text { text });
    }
    let has_calls = !calls.is_empty();
    content.extend(calls);
    let stop_reason = match done_reason.as_deref() {
        _ if has_calls => StopReason::ToolUse,
        Some("length") => StopReason::Length,
        _ => StopReason::Stop,
    };
    usage.total_tokens = usage.input + usage.output;
    Ok(AssistantMessage {
        content,
        api: "ollama-chat".into(),
        provider: String::new(),
        model,
        usage,
        stop_reason,
        error_message: None,
        timestamp: 0,
    })
}
