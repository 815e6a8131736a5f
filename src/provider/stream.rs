//! Reading a streamed HTTP body line by line (NDJSON) or event by event (SSE), with an
//! idle timeout and cancellation checked between chunks.

use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::ProviderError;

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

pub struct LineReader {
    body: ByteStream,
    buf: Vec<u8>,
    idle: Duration,
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

impl LineReader {
    pub fn new(
        resp: reqwest::Response,
        idle: Duration,
        cancel: CancellationToken,
        provider: &'static str,
    ) -> Self {
        LineReader {
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
            idle,
            cancel,
            provider,
            done: false,
        }
    }

    /// The next line without its terminator; `None` at the end of the body.
    pub async fn next_line(&mut self) -> Result<Option<String>, ProviderError> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
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
            let chunk = tokio::select! {
                c = tokio::time::timeout(self.idle, self.body.next()) => match c {
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
            let Some(line) = self.next_line().await? else {
                return Ok(has_data.then_some(ev));
            };
            if line.is_empty() {
                if has_data {
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
