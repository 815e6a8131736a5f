//! Ollama native `/api/chat`: request body and NDJSON stream parser.
//!
//! Tool calls arrive whole in `message.tool_calls[].function` with `arguments` as an
//! object, without ids (we make them); `done_reason` says `stop` even after tool calls;
//! tool results go back as `{"role": "tool", "content", "tool_name"}`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{json, Value};

use super::fragments::{chat_body, ChatBody};
use super::stream::LineReader;
use super::{function_tools, Delta, FunctionTool, ModelRequest, ProviderError};
use crate::message::{blocks_text, AssistantMessage, Content, Message, StopReason, Usage};

/// The request; `M` is a message built from history (`Msg`) or a cached fragment.
#[derive(Serialize)]
struct Body<'a, M> {
    model: &'a str,
    messages: Vec<M>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<FunctionTool<'a>>,
    stream: bool,
    options: Options,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_alive: Option<&'a serde_json::Value>,
}

#[derive(Serialize)]
struct Options {
    num_predict: u32,
    /// Without it Ollama cuts prompts at its own small default window.
    num_ctx: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
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

pub(crate) fn request_body(
    model: &str,
    sampling: &super::Sampling,
    req: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    let system = msg("system", Cow::Borrowed(req.system));
    let head = Head {
        model,
        sampling,
        tools: function_tools(req.tools),
    };
    chat_body(&format!("ollama {model}"), head, system, req, wire_message)
}

/// One history message as an Ollama message; `None` for an assistant turn with neither
/// text nor tool calls.
fn wire_message(m: &Message) -> Option<Msg<'_>> {
    match m {
        Message::User(u) => Some(msg("user", Cow::Owned(blocks_text(&u.content)))),
        Message::Assistant(a) => {
            let tool_calls: Vec<Call<'_>> = a
                .tool_calls()
                .map(|(_, name, arguments)| Call {
                    function: CallFunction { name, arguments },
                })
                .collect();
            let text = a.text();
            if text.is_empty() && tool_calls.is_empty() {
                return None;
            }
            let mut m = msg("assistant", Cow::Owned(text));
            m.tool_calls = tool_calls;
            Some(m)
        }
        Message::ToolResult(r) => {
            let mut m = msg("tool", Cow::Owned(blocks_text(&r.content)));
            m.tool_name = Some(&r.tool_name);
            Some(m)
        }
    }
}

/// Everything in a request but the conversation.
struct Head<'a> {
    model: &'a str,
    sampling: &'a super::Sampling,
    tools: Vec<FunctionTool<'a>>,
}

impl ChatBody for Head<'_> {
    fn encode<M: Serialize>(self, messages: Vec<M>) -> serde_json::Result<Vec<u8>> {
        let s = self.sampling;
        serde_json::to_vec(&Body {
            model: self.model,
            messages,
            tools: self.tools,
            stream: true,
            options: Options {
                num_predict: s.max_tokens,
                num_ctx: s.num_ctx,
                temperature: s.temperature,
            },
            keep_alive: s.keep_alive.as_ref(),
        })
    }
}

pub(crate) async fn read_stream(
    reader: &mut LineReader,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<AssistantMessage, ProviderError> {
    let mut msg = Assembly::default();
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
        msg.line(&v, on_delta);
        if v["done"].as_bool() == Some(true) {
            return Ok(msg.finish(&v));
        }
    }
    Err(reader.broken("the stream ended before a line with \"done\": true"))
}

/// A message being assembled from NDJSON lines.
#[derive(Default)]
struct Assembly {
    text: String,
    thinking: String,
    calls: Vec<Content>,
    model: String,
}

impl Assembly {
    /// One line's model, text, thinking and tool calls.
    fn line(&mut self, v: &Value, on_delta: &mut (dyn FnMut(Delta) + Send)) {
        if let Some(m) = v["model"].as_str() {
            self.model = m.to_string();
        }
        let msg = &v["message"];
        if let Some(s) = msg["content"].as_str().filter(|s| !s.is_empty()) {
            self.text.push_str(s);
            on_delta(Delta::Text(s.to_string()));
        }
        if let Some(s) = msg["thinking"].as_str().filter(|s| !s.is_empty()) {
            self.thinking.push_str(s);
            on_delta(Delta::Thinking(s.to_string()));
        }
        for tc in msg["tool_calls"].as_array().into_iter().flatten() {
            self.calls.push(tool_call(tc));
        }
    }

    /// The message, given the final line (`"done": true`) with the stop reason and usage.
    fn finish(self, last: &Value) -> AssistantMessage {
        let mut content = super::stream::thinking_and_text(self.thinking, self.text);
        let has_calls = !self.calls.is_empty();
        content.extend(self.calls);
        let stop_reason = match last["done_reason"].as_str() {
            _ if has_calls => StopReason::ToolUse,
            Some("length") => StopReason::Length,
            _ => StopReason::Stop,
        };
        let mut usage = Usage {
            input: last["prompt_eval_count"].as_u64().unwrap_or(0),
            output: last["eval_count"].as_u64().unwrap_or(0),
            ..Usage::default()
        };
        usage.total_tokens = usage.input + usage.output;
        AssistantMessage {
            content,
            api: "ollama-chat".into(),
            provider: String::new(),
            model: self.model,
            usage,
            stop_reason,
            error_message: None,
            response_id: None,
            timestamp: 0,
        }
    }
}

/// A whole tool call; Ollama sends no id, so one is made.
fn tool_call(tc: &Value) -> Content {
    let f = &tc["function"];
    let arguments = match &f["arguments"] {
        // Some builds send a JSON string like OpenAI does.
        Value::String(s) => super::parse_arguments(s),
        Value::Null => json!({}),
        other => other.clone(),
    };
    Content::ToolCall {
        id: tc["id"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("call_{}", crate::util::random_hex(8))),
        name: f["name"].as_str().unwrap_or_default().to_string(),
        arguments,
    }
}
