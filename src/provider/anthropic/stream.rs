//! The Anthropic stream parser: SSE events assembled into one assistant message.

use serde_json::Value;

use super::super::stream::LineReader;
use super::super::{parse_arguments, Delta, ProviderError};
use crate::message::{AssistantMessage, Content, StopReason, Usage};

/// A content block being assembled from deltas.
enum Building {
    Text(String),
    Thinking(String, Option<String>),
    Redacted(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

pub(crate) async fn read_stream(
    reader: &mut LineReader,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<AssistantMessage, ProviderError> {
    let mut msg = Assembly::default();
    while let Some(ev) = reader.next_event().await? {
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| reader.protocol(format!("bad event data {:?}: {e}", ev.data)))?;
        let kind = v["type"].as_str().or(ev.event.as_deref()).unwrap_or("");
        match kind {
            "message_start" => msg.start(&v["message"]),
            "content_block_start" => msg.start_block(&v, on_delta),
            "content_block_delta" => msg
                .block_delta(&v, on_delta)
                .map_err(|m| reader.protocol(m))?,
            "content_block_stop" => msg.stop_block(&v),
            "message_delta" => msg.message_delta(&v),
            "message_stop" => return Ok(msg.finish()),
            "error" => return Err(stream_error(&v["error"])),
            _ => {} // ping and future event types
        }
    }
    Err(reader.broken("the stream ended before message_stop"))
}

/// A message being assembled from stream events, one method per event kind.
#[derive(Default)]
struct Assembly {
    /// Blocks started and not yet stopped, by index.
    blocks: Vec<(usize, Building)>,
    /// Finished blocks, by index.
    content: Vec<(usize, Content)>,
    usage: Usage,
    model: String,
    response_id: Option<String>,
    stop: StopReason,
}

fn block_index(v: &Value) -> usize {
    v["index"].as_u64().unwrap_or(0) as usize
}

impl Assembly {
    /// `message_start`: the model and the usage so far.
    fn start(&mut self, m: &Value) {
        self.model = m["model"].as_str().unwrap_or_default().to_string();
        self.response_id = m["id"].as_str().map(str::to_string);
        let u = &m["usage"];
        self.usage.input = u["input_tokens"].as_u64().unwrap_or(0);
        self.usage.cache_read = u["cache_read_input_tokens"].as_u64().unwrap_or(0);
        self.usage.cache_write = u["cache_creation_input_tokens"].as_u64().unwrap_or(0);
        self.usage.output = u["output_tokens"].as_u64().unwrap_or(0);
    }

    fn start_block(&mut self, v: &Value, on_delta: &mut (dyn FnMut(Delta) + Send)) {
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
            Some("redacted_thinking") => {
                Building::Redacted(b["data"].as_str().unwrap_or_default().to_string())
            }
            Some("tool_use") => Building::Tool {
                id: b["id"].as_str().unwrap_or_default().to_string(),
                name: b["name"].as_str().unwrap_or_default().to_string(),
                json: String::new(),
            },
            _ => Building::Other,
        };
        self.blocks.push((block_index(v), building));
    }

    /// A delta for a started block; the error names a block never started.
    fn block_delta(
        &mut self,
        v: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), String> {
        let index = block_index(v);
        let d = &v["delta"];
        let Some((_, b)) = self.blocks.iter_mut().find(|(i, _)| *i == index) else {
            return Err(format!("delta for unknown block {index}"));
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
        Ok(())
    }

    fn stop_block(&mut self, v: &Value) {
        let index = block_index(v);
        if let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) {
            let (i, b) = self.blocks.remove(pos);
            if let Some(c) = finish_block(b) {
                self.content.push((i, c));
            }
        }
    }

    /// `message_delta`: the stop reason and the final usage.
    fn message_delta(&mut self, v: &Value) {
        if let Some(r) = v["delta"]["stop_reason"].as_str() {
            self.stop = match r {
                "tool_use" => StopReason::ToolUse,
                "max_tokens" => StopReason::Length,
                _ => StopReason::Stop,
            };
        }
        if let Some(o) = v["usage"]["output_tokens"].as_u64() {
            self.usage.output = o;
        }
        // The final usage repeats the input counts; newer servers send them only here.
        let u = &v["usage"];
        if let Some(i) = u["input_tokens"].as_u64() {
            self.usage.input = i;
        }
        if let Some(r) = u["cache_read_input_tokens"].as_u64() {
            self.usage.cache_read = r;
        }
        if let Some(w) = u["cache_creation_input_tokens"].as_u64() {
            self.usage.cache_write = w;
        }
    }

    /// `message_stop`: the message, its blocks in index order.
    fn finish(mut self) -> AssistantMessage {
        // Blocks never closed are kept: the message was complete.
        for (i, b) in self.blocks {
            if let Some(c) = finish_block(b) {
                self.content.push((i, c));
            }
        }
        self.content.sort_by_key(|(i, _)| *i);
        let mut usage = self.usage;
        usage.total_tokens = usage.input + usage.output + usage.cache_read + usage.cache_write;
        AssistantMessage {
            content: self.content.into_iter().map(|(_, c)| c).collect(),
            api: "anthropic-messages".into(),
            provider: String::new(),
            model: self.model,
            usage,
            stop_reason: self.stop,
            error_message: None,
            response_id: self.response_id,
            timestamp: 0,
        }
    }
}

/// An `error` event; overloads, rate limits and timeouts are worth retrying.
fn stream_error(e: &Value) -> ProviderError {
    let etype = e["type"].as_str().unwrap_or("error");
    ProviderError::Api {
        provider: "anthropic",
        message: format!("{etype}: {}", e["message"].as_str().unwrap_or_default()),
        retryable: matches!(
            etype,
            "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error"
        ),
    }
}

fn finish_block(b: Building) -> Option<Content> {
    match b {
        Building::Text(text) => Some(Content::Text { text }),
        Building::Thinking(thinking, signature) => Some(Content::Thinking {
            thinking,
            signature,
            redacted: false,
        }),
        Building::Redacted(data) => Some(Content::Thinking {
            thinking: String::new(),
            signature: Some(data),
            redacted: true,
        }),
        Building::Tool { id, name, json } => Some(Content::ToolCall {
            id,
            name,
            arguments: parse_arguments(&json),
        }),
        Building::Other => None,
    }
}
