//! The stdio server's messages on their way to the MCP client, one line at a time and
//! none longer than `MAX_LINE`. rmcp drops a longer line and carries on, so the call it
//! answers would wait for its timeout; here a response too long to take is replaced
//! with a JSON-RPC error for the same request id, and the call ends at once with a
//! reason the model can act on.

use std::collections::VecDeque;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream};

/// The longest message taken from a server (rmcp's own limit, which it then never hits).
pub(super) const MAX_LINE: usize = 16 << 20;
/// How much of an oversized line's start and end is kept to find its request id.
const EDGE: usize = 4096;

/// A line that grew past `MAX_LINE`: its first and last bytes, and its length.
struct Oversized {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    len: usize,
}

impl Oversized {
    fn new(start: &[u8]) -> Oversized {
        let mut o = Oversized {
            head: Vec::with_capacity(EDGE),
            tail: VecDeque::with_capacity(EDGE),
            len: 0,
        };
        o.push(start);
        o
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = EDGE.saturating_sub(self.head.len());
        self.head
            .extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
        let keep = bytes.len().min(EDGE);
        let from = bytes.len() - keep;
        for b in bytes.get(from..).unwrap_or_default() {
            if self.tail.len() == EDGE {
                self.tail.pop_front();
            }
            self.tail.push_back(*b);
        }
        self.len = self.len.saturating_add(bytes.len());
    }

    /// The request id the message answers: given before any nested object (as most
    /// servers write it) or last (as JavaScript servers do).
    fn id(&self) -> Option<String> {
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        let first =
            regex::Regex::new(r#"^\s*\{[^{\[]*?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")"#).ok()?;
        let last = regex::Regex::new(r#""id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$"#).ok()?;
        // A request from the server (it names a method) answers none of ours.
        let method = regex::Regex::new(r#"^\s*\{[^{\[]*?"method"\s*:"#).ok()?;
        if method.is_match(&head) {
            return None;
        }
        let text = first
            .captures(&head)
            .or_else(|| last.captures(&tail))
            .and_then(|c| c.get(1))?
            .as_str()
            .to_string();
        // Only what is valid JSON, an integer or a string, written out again.
        match serde_json::from_str::<serde_json::Value>(&text).ok()? {
            v @ serde_json::Value::String(_) => serde_json::to_string(&v).ok(),
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
            _ => None,
        }
    }

    /// The error that stands for it, when the request it answers is known.
    fn replacement(&self, server: &str) -> Option<Vec<u8>> {
        let id = self.id()?;
        let message = format!(
            "MCP server {server} answered with a message of {} MB, over the {} MB picogent takes; ask it for less (a smaller range, a filter, a page)",
            self.len >> 20,
            MAX_LINE >> 20
        );
        let error = serde_json::json!({"code": -32603, "message": message});
        let mut line = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":"#).into_bytes();
        line.extend_from_slice(serde_json::to_string(&error).ok()?.as_bytes());
        line.extend_from_slice(b"}\n");
        Some(line)
    }
}

/// Copies `from` to `to` line by line, replacing lines over `MAX_LINE`; ends when
/// either side closes.
pub(super) async fn pump(server: String, from: impl AsyncRead + Unpin, mut to: DuplexStream) {
    let mut from = BufReader::with_capacity(64 << 10, from);
    let mut line: Vec<u8> = Vec::new();
    let mut over: Option<Oversized> = None;
    loop {
        let (n, ends) = match from.fill_buf().await {
            Ok([]) | Err(_) => return,
            Ok(buf) => {
                let (n, ends) = match buf.iter().position(|b| *b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (buf.len(), false),
                };
                let part = buf.get(..n).unwrap_or_default();
                match &mut over {
                    Some(o) => o.push(part),
                    None if line.len().saturating_add(n) > MAX_LINE => {
                        let mut o = Oversized::new(&line);
                        o.push(part);
                        over = Some(o);
                        line = Vec::new();
                    }
                    None => line.extend_from_slice(part),
                }
                (n, ends)
            }
        };
        from.consume(n);
        if !ends {
            continue;
        }
        let out = match over.take() {
            None => std::mem::take(&mut line),
            Some(o) => match o.replacement(&server) {
                Some(error) => {
                    tracing::warn!(server = %server, bytes = o.len, "an MCP message over {} MB was replaced by an error for its call", MAX_LINE >> 20);
                    error
                }
                None => {
                    tracing::warn!(server = %server, bytes = o.len, "an MCP message over {} MB without a request id was dropped", MAX_LINE >> 20);
                    continue;
                }
            },
        };
        if to.write_all(&out).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(text: &str) -> Option<String> {
        Oversized::new(text.as_bytes()).id()
    }

    #[test]
    fn the_id_is_found_first_or_last_but_never_inside_the_result() {
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#).as_deref(),
            Some("7")
        );
        assert_eq!(
            id_of(r#"{"result":{"content":[{"id":99}]},"jsonrpc":"2.0","id":"a\"b"}"#).as_deref(),
            Some(r#""a\"b""#)
        );
        assert_eq!(id_of(r#"{"result":{"id":5,"x":"#), None);
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","method":"sampling/createMessage","id":3,"params":{}}"#),
            None
        );
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","id":"bad\x","result":{}}"#), None);
    }
}
