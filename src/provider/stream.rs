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
pub const MAX_LINE: usize = 32 << 20;

/// A call ends after this many idle timeouts in all, however the stream goes on.
pub const DEADLINE_FACTOR: u32 = 20;

pub struct LineReader {
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
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Refuses a successful answer that is not a stream (an HTML page from a proxy, an
/// empty body), saying what it is, instead of reading it as a stream that ended early.
pub fn expect_stream(
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
    pub fn new(
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
            deadline: now + idle.saturating_mul(DEADLINE_FACTOR),
            cancel,
            provider,
            done: false,
        }
    }

    /// The next line (NDJSON): any non-empty line is content.
    pub async fn next_line(&mut self) -> Result<Option<String>, ProviderError> {
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
            let wait = self
                .idle
                .saturating_sub(now.duration_since(self.last_content))
                .min(self.deadline - now);
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
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, ProviderError> {
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

    pub fn broken(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Stream {
            provider: self.provider,
            message: message.into(),
        }
    }

    pub fn protocol(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Protocol {
            provider: self.provider,
            message: message.into(),
        }
    }
}
