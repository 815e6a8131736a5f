//! OpenAI Chat Completions (and any compatible server: vLLM, llama.cpp, LM Studio,
//! Ollama's `/v1`): request body and SSE stream parser.
//!
//! Tool calls stream as `choices[0].delta.tool_calls[]` fragments keyed by `index`: the
//! id and name once, then `function.arguments` pieces. The stream ends with
//! `data: [DONE]`; usage comes in a final chunk because we ask for it.
//!
//! Prompt caching: OpenAI caches long prompt prefixes by itself and reports the cached
//! part as `usage.prompt_tokens_details.cached_tokens` (recorded as `cacheRead`; the
//! fresh `input` is the rest). A stable `prompt_cache_key` (the session id) routes a
//! conversation's requests to the same cache; it is sent only to `api.openai.com`,
//! since compatible servers may refuse fields they do not know. Local servers
//! (llama.cpp, vLLM, Ollama) reuse their prefix cache when the prompt's start is
//! byte-identical from step to step, which the loop keeps it.

use serde::Serialize;
use serde_json::Value;

use super::fragments::{chat_body, ChatBody};
use super::stream::LineReader;
use super::{function_tools, parse_arguments, Delta, FunctionTool, ModelRequest, ProviderError};
use crate::message::{blocks_text, AssistantMessage, Content, Message, StopReason, Usage};

/// The request; `M` is a message built from history (`Msg`) or a cached fragment.
#[derive(Serialize)]
struct Body<'a, M> {
    model: &'a str,
    messages: Vec<M>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<FunctionTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// Whether the server at `base_url` takes `prompt_cache_key`: OpenAI's own API only.
pub(crate) fn takes_cache_key(base_url: &str) -> bool {
    reqwest::Url::parse(base_url)
        .is_ok_and(|u| u.scheme() == "https" && u.host_str() == Some("api.openai.com"))
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Msg<'a> {
    System {
        content: &'a str,
    },
    User {
        content: String,
    },
    Assistant {
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    },
    Tool {
        tool_call_id: std::borrow::Cow<'a, str>,
        content: String,
    },
}

#[derive(Serialize)]
struct Call<'a> {
    id: std::borrow::Cow<'a, str>,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    /// A JSON string, as the API wants.
    arguments: String,
}

pub(crate) fn request_body(
    model: &str,
    sampling: &super::Sampling,
    req: &ModelRequest<'_>,
    prompt_cache_key: Option<&str>,
) -> serde_json::Result<Vec<u8>> {
    let system = Msg::System {
        content: req.system,
    };
    let head = Head {
        model,
        sampling,
        tools: function_tools(req.tools),
        prompt_cache_key,
    };
    chat_body(&format!("openai {model}"), head, system, req, wire_message)
}

/// Everything in a request but the conversation.
struct Head<'a> {
    model: &'a str,
    sampling: &'a super::Sampling,
    tools: Vec<FunctionTool<'a>>,
    prompt_cache_key: Option<&'a str>,
}

impl ChatBody for Head<'_> {
    fn encode<M: Serialize>(self, messages: Vec<M>) -> serde_json::Result<Vec<u8>> {
        let s = self.sampling;
        serde_json::to_vec(&Body {
            model: self.model,
            messages,
            tools: self.tools,
            max_tokens: (!s.completion_tokens).then_some(s.max_tokens),
            max_completion_tokens: s.completion_tokens.then_some(s.max_tokens),
            temperature: s.temperature,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            prompt_cache_key: self.prompt_cache_key,
        })
    }
}

/// One history message as a chat message; `None` for an assistant turn with neither
/// text nor tool calls.
fn wire_message(m: &Message) -> Option<Msg<'_>> {
    match m {
        Message::User(u) => Some(Msg::User {
            content: blocks_text(&u.content),
        }),
        Message::Assistant(a) => {
            let tool_calls: Vec<Call<'_>> = a
                .tool_calls()
                .map(|(id, name, args)| Call {
                    id: super::wire_call_id(id),
                    kind: "function",
                    function: CallFunction {
                        name,
                        arguments: args.to_string(),
                    },
                })
                .collect();
            let text = a.text();
            if text.is_empty() && tool_calls.is_empty() {
                return None;
            }
            Some(Msg::Assistant {
                content: (!text.is_empty()).then_some(text),
                tool_calls,
            })
        }
        Message::ToolResult(r) => Some(Msg::Tool {
            tool_call_id: super::wire_call_id(&r.tool_call_id),
            content: blocks_text(&r.content),
        }),
    }
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    args: String,
}

pub(crate) async fn read_stream(
    reader: &mut LineReader,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<AssistantMessage, ProviderError> {
    let mut msg = Assembly::default();
    let mut done = false;
    while let Some(ev) = reader.next_event().await? {
        if ev.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| reader.protocol(format!("bad chunk {:?}: {e}", ev.data)))?;
        if let Some(err) = v.get("error") {
            return Err(stream_error(err));
        }
        msg.chunk(&v, on_delta);
    }
    // Some compatible servers close without [DONE] after a finish_reason; that is a
    // complete answer. Without either, the stream was cut.
    if !done && msg.finish.is_none() {
        return Err(reader.broken("the stream ended without finish_reason or [DONE]"));
    }
    Ok(msg.finish())
}

/// An error object in place of a chunk.
fn stream_error(err: &Value) -> ProviderError {
    let message = err["message"]
        .as_str()
        .or(err.as_str())
        .unwrap_or("unknown error")
        .to_string();
    ProviderError::Api {
        provider: "openai",
        message,
        retryable: true,
    }
}

/// A message being assembled from stream chunks.
#[derive(Default)]
struct Assembly {
    text: String,
    thinking: String,
    /// Tool calls by their `index`.
    calls: Vec<(u64, PartialCall)>,
    usage: Usage,
    model: String,
    response_id: Option<String>,
    finish: Option<String>,
}

impl Assembly {
    /// One chunk: model, usage, and the first choice's delta and finish reason.
    fn chunk(&mut self, v: &Value, on_delta: &mut (dyn FnMut(Delta) + Send)) {
        if let Some(m) = v["model"].as_str() {
            self.model = m.to_string();
        }
        if let Some(id) = v["id"].as_str() {
            self.response_id = Some(id.to_string());
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage.input = u["prompt_tokens"].as_u64().unwrap_or(0);
            self.usage.output = u["completion_tokens"].as_u64().unwrap_or(0);
            self.usage.cache_read = u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
            self.usage.input = self.usage.input.saturating_sub(self.usage.cache_read);
        }
        let Some(choice) = v["choices"].get(0) else {
            return;
        };
        let d = &choice["delta"];
        if let Some(s) = d["content"].as_str().filter(|s| !s.is_empty()) {
            self.text.push_str(s);
            on_delta(Delta::Text(s.to_string()));
        }
        // Reasoning servers (vLLM, DeepSeek, LM Studio) use one of these two names.
        for key in ["reasoning_content", "reasoning"] {
            if let Some(s) = d[key].as_str().filter(|s| !s.is_empty()) {
                self.thinking.push_str(s);
                on_delta(Delta::Thinking(s.to_string()));
            }
        }
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            self.tool_call(tc);
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            self.finish = Some(f.to_string());
        }
    }

    /// A fragment of a tool call, added to the call with its `index`.
    fn tool_call(&mut self, tc: &Value) {
        let index = tc["index"].as_u64().unwrap_or(self.calls.len() as u64);
        let pos = match self.calls.iter().position(|(i, _)| *i == index) {
            Some(p) => p,
            None => {
                self.calls.push((index, PartialCall::default()));
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[pos].1;
        if let Some(id) = tc["id"].as_str().filter(|s| !s.is_empty()) {
            call.id = id.to_string();
        }
        if let Some(n) = tc["function"]["name"].as_str() {
            call.name.push_str(n);
        }
        if let Some(a) = tc["function"]["arguments"].as_str() {
            call.args.push_str(a);
        }
    }

    /// The message: thinking, text, then tool calls in index order.
    fn finish(mut self) -> AssistantMessage {
        let mut content = super::stream::thinking_and_text(self.thinking, self.text);
        self.calls.sort_by_key(|(i, _)| *i);
        let has_calls = !self.calls.is_empty();
        for (n, (_, c)) in self.calls.into_iter().enumerate() {
            content.push(Content::ToolCall {
                // A server that sends no ids (some local ones) gets ids of ours, unique
                // across turns: verdicts, branches and approvals are keyed by them.
                id: if c.id.is_empty() {
                    format!("call_{n}_{}", crate::util::random_hex(8))
                } else {
                    c.id
                },
                name: c.name,
                arguments: parse_arguments(&c.args),
            });
        }
        let stop_reason = match self.finish.as_deref() {
            _ if has_calls => StopReason::ToolUse,
            Some("length") => StopReason::Length,
            _ => StopReason::Stop,
        };
        let mut usage = self.usage;
        usage.total_tokens = usage.input + usage.output + usage.cache_read;
        AssistantMessage {
            content,
            api: "openai-completions".into(),
            provider: String::new(),
            model: self.model,
            usage,
            stop_reason,
            error_message: None,
            response_id: self.response_id,
            timestamp: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_without_ids_get_ids_unique_across_turns() {
        let turn = || {
            let mut a = Assembly::default();
            let chunk = serde_json::json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "function": {"name": "ls", "arguments": "{}"}},
                {"index": 1, "function": {"name": "ls", "arguments": "{}"}}
            ]}}]});
            a.chunk(&chunk, &mut |_| {});
            a.finish()
                .content
                .into_iter()
                .filter_map(|c| match c {
                    Content::ToolCall { id, .. } => Some(id),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let (first, second) = (turn(), turn());
        let all: std::collections::HashSet<_> = first.iter().chain(&second).collect();
        assert_eq!(all.len(), 4, "{first:?} {second:?}");
    }

    #[test]
    fn only_openai_itself_is_sent_a_prompt_cache_key() {
        assert!(takes_cache_key("https://api.openai.com/v1"));
        for other in [
            "http://api.openai.com/v1",
            "https://api.openai.com.evil.example/v1",
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "https://openrouter.ai/api/v1",
            "not a url",
        ] {
            assert!(!takes_cache_key(other), "{other}");
        }
    }

    #[test]
    fn the_cache_key_is_in_the_body_only_when_given() {
        let user = Message::user("hi");
        let req = ModelRequest {
            system: "sys",
            messages: &[&user],
            tools: &[],
            cache_key: Some("session-1"),
            reuse: None,
        };
        let with: Value = serde_json::from_slice(
            &request_body(
                "m",
                &crate::provider::Sampling::max_tokens(10),
                &req,
                Some("session-1"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(with["prompt_cache_key"], "session-1");
        let without: Value = serde_json::from_slice(
            &request_body("m", &crate::provider::Sampling::max_tokens(10), &req, None).unwrap(),
        )
        .unwrap();
        assert_eq!(without.get("prompt_cache_key"), None);
    }
}
