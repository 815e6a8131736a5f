//! Reading a streamed HTTP body line by line (NDJSON) or event by event (SSE), with
//! cancellation checked between chunks and two clocks: the idle timeout counts time
//! without content (keep-alive comments and `ping` events do not reset it), and the
//! whole call has a deadline of `DEADLINE_FACTOR` idle timeouts. Lines are found in
//! linear time and bounded by `MAX_LINE`.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::ProviderError;

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// The longest line a stream may send (a whole tool call's arguments fit easily).
const MAX_LINE: usize = 32 << 20;

/// A call ends after this many idle timeouts in all, however the stream goes on.
const DEADLINE_FACTOR: u32 = 20;

/// The start of an assembled answer: its thinking (unsigned) and text, each only
/// when there is some. OpenAI-compatible and Ollama streams build it the same way.
pub(crate) fn thinking_and_text(thinking: String, text: String) -> Vec<crate::message::Content> {
    use crate::message::Content;
    let mut content = Vec::new();
    if !thinking.is_empty() {
        content.push(Content::Thinking {
            thinking,
            signature: None,
            redacted: false,
        });
    }
    if !text.is_empty() {
        content.push(Content::Text { text });
    }
    content
}

pub(crate) struct LineReader {
    body: ByteStream,
    buf: Vec<u8>,
    /// How far `buf` is known to hold no newline (so each byte is scanned once).
    scanned: usize,
    idle: Duration,
    /// When the stream last carried content (not a keep-alive).
    last_content: Instant,
    deadline: Instant,
    cancel: CancellationToken,
    provider: &'static str,
    done: bool,
}

/// One server-sent event: its `event:` name (if any) and its joined `data:` lines.
#[derive(Debug, Default)]
pub(crate) struct SseEvent {
    pub(crate) event: Option<String>,
    pub(crate) data: String,
}

/// Refuses a successful answer that is not a stream (an HTML page from a proxy, an
/// empty body), saying what it is, instead of reading it as a stream that ended early.
pub(crate) fn expect_stream(
    resp: &reqwest::Response,
    provider: &'static str,
) -> Result<(), ProviderError> {
    let ct = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let streamy = [
        "event-stream",
        "ndjson",
        "json",
        "octet-stream",
        "text/plain",
    ];
    if ct.is_empty() && resp.content_length() == Some(0) {
        return Err(ProviderError::Protocol {
            provider,
            message: "the server answered 200 with an empty body instead of a stream".into(),
        });
    }
    if !ct.is_empty() && !streamy.iter().any(|s| ct.contains(s)) {
        return Err(ProviderError::Protocol {
            provider,
            message: format!(
                "the server answered 200 with {ct} instead of a stream (is base_url pointing at the model API, not a web page or proxy login?)"
            ),
        });
    }
    Ok(())
}

impl LineReader {
    pub(crate) fn new(
        resp: reqwest::Response,
        idle: Duration,
        cancel: CancellationToken,
        provider: &'static str,
    ) -> Self {
        let now = Instant::now();
        LineReader {
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
            scanned: 0,
            idle,
            last_content: now,
            // A configured timeout may be absurd: never past what an Instant can hold.
            deadline: now
                .checked_add(idle.saturating_mul(DEADLINE_FACTOR))
                .unwrap_or(now + Duration::from_secs(365 * 24 * 3600)),
            cancel,
            provider,
            done: false,
        }
    }

    /// The next line (NDJSON): any non-empty line is content.
    pub(crate) async fn next_line(&mut self) -> Result<Option<String>, ProviderError> {
        let line = self.read_line().await?;
        if line.as_ref().is_some_and(|l| !l.trim().is_empty()) {
            self.last_content = Instant::now();
        }
        Ok(line)
    }

    /// The next line without its terminator; `None` at the end of the body.
    async fn read_line(&mut self) -> Result<Option<String>, ProviderError> {
        loop {
            let found = self
                .buf
                .get(self.scanned..)
                .and_then(|rest| rest.iter().position(|b| *b == b'\n'))
                .map(|p| p + self.scanned);
            self.scanned = self.buf.len();
            if let Some(pos) = found {
                self.scanned = 0;
                let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            if self.done {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let rest = std::mem::take(&mut self.buf);
                return Ok(Some(String::from_utf8_lossy(&rest).into_owned()));
            }
            if self.buf.len() > MAX_LINE {
                return Err(self.broken(format!(
                    "a line of the stream is longer than {} MiB",
                    MAX_LINE >> 20
                )));
            }
            let now = Instant::now();
            if now >= self.deadline {
                return Err(ProviderError::Timeout(
                    self.idle.saturating_mul(DEADLINE_FACTOR),
                ));
            }
            // Time without content counts, whatever keep-alives arrive meanwhile.
            let quiet = now.duration_since(self.last_content);
            if quiet >= self.idle {
                return Err(ProviderError::Timeout(self.idle));
            }
            let wait = (self.idle - quiet).min(self.deadline - now);
            let chunk = tokio::select! {
                c = tokio::time::timeout(wait, self.body.next()) => match c {
                    Ok(c) => c,
                    Err(_) => return Err(ProviderError::Timeout(self.idle)),
                },
                _ = self.cancel.cancelled() => return Err(ProviderError::Cancelled),
            };
            match chunk {
                Some(Ok(bytes)) => self.buf.extend_from_slice(&bytes),
                Some(Err(e)) => {
                    return Err(ProviderError::Stream {
                        provider: self.provider,
                        message: super::error_chain(&e),
                    })
                }
                None => self.done = true,
            }
        }
    }

    /// The next server-sent event; `None` at the end of the body. Comments (`:`) and
    /// blank keep-alives are skipped.
    pub(crate) async fn next_event(&mut self) -> Result<Option<SseEvent>, ProviderError> {
        let mut ev = SseEvent::default();
        let mut has_data = false;
        loop {
            let Some(line) = self.read_line().await? else {
                return Ok(has_data.then_some(ev));
            };
            if line.is_empty() {
                if has_data {
                    if ev.event.as_deref() != Some("ping") {
                        self.last_content = Instant::now();
                    }
                    return Ok(Some(ev));
                }
                ev.event = None;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_str(), ""),
            };
            match field {
                "event" => ev.event = Some(value.to_string()),
                "data" => {
                    if ev.data.len() + value.len() > MAX_LINE {
                        return Err(self.broken(format!(
                            "an event of the stream is longer than {} MiB",
                            MAX_LINE >> 20
                        )));
                    }
                    if has_data {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(value);
                    has_data = true;
                }
                _ => {}
            }
        }
    }

    pub(crate) fn broken(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Stream {
            provider: self.provider,
            message: message.into(),
        }
    }

    pub(crate) fn protocol(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Protocol {
            provider: self.provider,
            message: message.into(),
        }
    }
}

#[cfg(test)]
impl LineReader {
    /// A reader over these chunks, as if they had arrived one by one.
    pub(crate) fn from_chunks(chunks: Vec<Vec<u8>>) -> LineReader {
        let stream = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, reqwest::Error>(bytes::Bytes::from(c))),
        );
        let now = Instant::now();
        LineReader {
            body: Box::pin(stream),
            buf: Vec::new(),
            scanned: 0,
            idle: Duration::from_secs(5),
            last_content: now,
            deadline: now + Duration::from_secs(100),
            cancel: CancellationToken::new(),
            provider: "test",
            done: false,
        }
    }
}

/// The stream parsers give the same message however the body is cut into chunks: at
/// every byte boundary (inside a multi-byte character, a `\r\n`, a JSON string).
#[cfg(test)]
mod split_tests {
    use super::LineReader;
    use crate::message::AssistantMessage;
    use crate::provider::{anthropic, ollama, openai, Delta};

    type Parse = for<'a> fn(
        &'a mut LineReader,
        &'a mut (dyn FnMut(Delta) + Send),
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<AssistantMessage, crate::provider::ProviderError>,
                > + Send
                + 'a,
        >,
    >;

    async fn parse(body: &[u8], cut: Option<usize>, f: Parse) -> (AssistantMessage, String) {
        let chunks = match cut {
            Some(c) => vec![body[..c].to_vec(), body[c..].to_vec()],
            None => vec![body.to_vec()],
        };
        let mut reader = LineReader::from_chunks(chunks);
        let mut text = String::new();
        let mut on = |d: Delta| {
            if let Delta::Text(t) = d {
                text.push_str(&t);
            }
        };
        let msg = f(&mut reader, &mut on).await.expect("the stream parses");
        (msg, text)
    }

    /// The message with generated tool-call ids (Ollama sends none) blanked.
    fn comparable(m: &(AssistantMessage, String)) -> (serde_json::Value, String) {
        let mut v = serde_json::to_value(&m.0).unwrap_or_default();
        if let Some(items) = v["content"].as_array_mut() {
            for item in items {
                if item
                    .get("id")
                    .and_then(|i| i.as_str())
                    .is_some_and(|i| i.starts_with("call_"))
                {
                    item["id"] = serde_json::Value::Null;
                }
            }
        }
        (v, m.1.clone())
    }

    async fn same_at_every_cut(body: &str, f: Parse) {
        let body = body.as_bytes();
        let whole = parse(body, None, f).await;
        for cut in 0..=body.len() {
            let split = parse(body, Some(cut), f).await;
            assert_eq!(comparable(&split), comparable(&whole), "cut at byte {cut}");
        }
    }

    #[tokio::test]
    async fn anthropic_sse() {
        let body = concat!(
            "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"x\",\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\r\n\r\n",
            ": keep-alive\n\n",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Grüße 🌍 \\\"ok\\\"\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"read\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \\\"ü.txt\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":9}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        same_at_every_cut(body, |r, d| Box::pin(anthropic::read_stream(r, d))).await;
    }

    #[tokio::test]
    async fn openai_sse() {
        let body = concat!(
            "data: {\"id\":\"c1\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Grüße 🌍\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\"}}]}}]}\r\n\r\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"ü.txt\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}\n\n",
            "data: [DONE]\n\n",
        );
        same_at_every_cut(body, |r, d| Box::pin(openai::read_stream(r, d))).await;
    }

    #[tokio::test]
    async fn ollama_ndjson() {
        let body = concat!(
            "{\"model\":\"x\",\"message\":{\"role\":\"assistant\",\"content\":\"Grüße 🌍\"},\"done\":false}\n",
            "{\"model\":\"x\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"read\",\"arguments\":{\"path\":\"ü.txt\"}}}]},\"done\":false}\r\n",
            "{\"model\":\"x\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":5,\"eval_count\":9}\n",
        );
        same_at_every_cut(body, |r, d| Box::pin(ollama::read_stream(r, d))).await;
    }
}
