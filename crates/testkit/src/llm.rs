//! A scripted LLM server that speaks the three wire formats byte-faithfully: Anthropic
//! SSE (`message_start` … `message_stop`, `input_json_delta` fragments), OpenAI Chat
//! Completions SSE (tool-call deltas, usage chunk, `[DONE]`) and Ollama NDJSON. It
//! serves scripted turns in order, injects faults, and records every request. It
//! caches prompts by the APIs' rules (`llm_cache.rs`) and reports the cached tokens in
//! its usage as the real APIs do.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};

pub use super::llm_cache::{CacheUse, PromptCache, LIFETIME, MIN_CACHEABLE_TOKENS};
use super::llm_wire::{encode, sse};

pub const API_KEY: &str = "test-key";
pub const SUMMARY: &str = "SUMMARY: the user asked for file reads; a.txt and b.txt were read.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
    Ollama,
    /// The OpenAI Responses API (what Codex speaks); benchmarks only.
    Responses,
}

impl Wire {
    pub fn provider(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenAi => "openai",
            Wire::Ollama => "ollama",
            Wire::Responses => "openai-responses",
        }
    }

    pub const ALL: [Wire; 3] = [Wire::Anthropic, Wire::OpenAi, Wire::Ollama];
}

/// One scripted response.
#[derive(Debug, Clone)]
pub enum Turn {
    /// A final answer.
    Text(String),
    /// Optional text, then tool calls `(name, arguments)`.
    Tools(String, Vec<(String, Value)>),
    /// An HTTP error status with a JSON error body and optional `retry-after-ms`.
    Status(u16, Option<u64>),
    /// An HTTP error with this message, as the API words it (a model it does not know).
    Refuse(u16, String),
    /// The stream starts, then the connection is cut.
    Drop,
    /// The stream starts, then stalls for this long before finishing the answer.
    Stall(Duration, String),
    /// Tool calls whose stream stalls this long after its first chunk.
    StallTools(Duration, Vec<(String, Value)>),
    /// Anthropic only: an `error` event (overloaded) mid-stream.
    ErrorEvent,
    /// The stream starts, then waits until the test opens the gate, then finishes the
    /// answer: a model call under way for exactly as long as a test needs.
    Held(ModelGate, String),
    /// Tool calls whose stream waits after its first chunk until the test opens the
    /// gate: the next step starts exactly when a test has made it ready.
    HeldTools(ModelGate, Vec<(String, Value)>),
}

/// A gate a `Turn::Held` answer waits at.
#[derive(Debug, Clone, Default)]
pub struct ModelGate(Arc<(std::sync::atomic::AtomicBool, tokio::sync::Notify)>);

impl ModelGate {
    pub fn new() -> ModelGate {
        ModelGate::default()
    }

    pub fn open(&self) {
        self.0 .0.store(true, std::sync::atomic::Ordering::SeqCst);
        self.0 .1.notify_waiters();
    }

    async fn passed(&self) {
        loop {
            let notified = self.0 .1.notified();
            if self.0 .0.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

pub fn text(s: &str) -> Turn {
    Turn::Text(s.to_string())
}

/// An Anthropic request's system prompt, sent as a string or as text blocks (with a
/// cache breakpoint).
pub fn system_text(body: &Value) -> String {
    match &body["system"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

pub fn tool(name: &str, args: Value) -> Turn {
    Turn::Tools(String::new(), vec![(name.to_string(), args)])
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// How the request's input tokens split between fresh, cache write and cache read.
    pub cache: CacheUse,
}

#[derive(Default)]
struct Script {
    turns: VecDeque<Turn>,
    /// When set, an exhausted script starts over (benchmarks serve many runs).
    cycle: Option<Vec<Turn>>,
    /// Benchmarks: neither parse nor keep request bodies, so the server's own cost
    /// does not grow with the conversation and blur what picogent costs.
    light: bool,
    /// Benchmarks with many conversations at once: answer each request with the
    /// script's turn number N, where N is how many assistant turns the request holds.
    per_conversation: Option<Vec<Turn>>,
    /// Size of each conversation's first request (benchmarks: prompt overhead).
    first_request_bytes: Vec<usize>,
    requests: Vec<Recorded>,
    call_seq: usize,
    cache: PromptCache,
    /// Light mode parses bodies for the cache only when asked (benchmarks of cost).
    cache_in_light: bool,
    /// Input tokens of every request so far, by how they were billed.
    totals: CacheUse,
    /// Answers being streamed now, and the most there ever were at once.
    in_flight: usize,
    max_in_flight: usize,
    /// How long every answer waits before it starts (benchmarks: a model's think time).
    latency: Duration,
}

/// Counts an answer as in flight until its stream is dropped (sent or cut).
struct InFlight(Arc<Mutex<Script>>);

impl InFlight {
    fn new(state: &Arc<Mutex<Script>>) -> InFlight {
        let mut s = state.lock().unwrap();
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        InFlight(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.lock() {
            s.in_flight -= 1;
        }
    }
}

#[derive(Clone)]
pub struct ScriptedLlm {
    pub addr: SocketAddr,
    state: Arc<Mutex<Script>>,
}

impl ScriptedLlm {
    pub async fn start(turns: Vec<Turn>) -> ScriptedLlm {
        let state = Arc::new(Mutex::new(Script {
            turns: turns.into(),
            ..Default::default()
        }));
        let app = Router::new()
            .route("/v1/messages", post(anthropic))
            .route("/v1/chat/completions", post(openai))
            .route("/api/chat", post(ollama))
            .route("/v1/responses", post(responses))
            .route("/_stats", axum::routing::get(stats))
            .layer(axum::middleware::from_fn_with_state(state.clone(), think))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        ScriptedLlm { addr, state }
    }

    /// The `base_url` picogent is configured with for this wire format.
    pub fn base_url(&self, wire: Wire) -> String {
        match wire {
            Wire::OpenAi => format!("http://{}/v1", self.addr),
            _ => format!("http://{}", self.addr),
        }
    }

    /// Every answer waits `d` before it starts, as a real model thinks.
    pub fn latency(&self, d: Duration) {
        self.state.lock().unwrap().latency = d;
    }

    pub fn light(&self) {
        self.state.lock().unwrap().light = true;
    }

    /// Light mode: still parse Anthropic and OpenAI requests to simulate prompt caching.
    pub fn cache_in_light_mode(&self) {
        self.state.lock().unwrap().cache_in_light = true;
    }

    /// Moves the prompt cache's clock forward (its entries live `LIFETIME`).
    pub fn advance_clock(&self, by: Duration) {
        self.state.lock().unwrap().cache.advance(by);
    }

    /// Input tokens of every request so far, by how they were billed.
    pub fn cache_totals(&self) -> CacheUse {
        self.state.lock().unwrap().totals
    }

    /// Serves every conversation the same script, by its position in the conversation.
    pub fn per_conversation(&self, turns: Vec<Turn>) {
        self.state.lock().unwrap().per_conversation = Some(turns);
    }

    /// Serves the script again from the start each time it runs out.
    pub fn cycle(&self, turns: Vec<Turn>) {
        let mut s = self.state.lock().unwrap();
        s.turns = turns.clone().into();
        s.cycle = Some(turns);
    }

    pub fn push(&self, turn: Turn) {
        self.state.lock().unwrap().turns.push_back(turn);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn request_count(&self) -> usize {
        self.state.lock().unwrap().requests.len()
    }

    /// Waits until at least `n` requests arrived (panics after 30 s).
    pub async fn wait_requests(&self, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.request_count() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "fewer than {n} model requests after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The most answers that were ever streaming at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.state.lock().unwrap().max_in_flight
    }

    pub fn remaining(&self) -> usize {
        self.state.lock().unwrap().turns.len()
    }

    /// Records the request and picks its answer. A request without tools is a
    /// compaction summary request: it gets a fixed summary and consumes no turn, so
    /// tests need not predict when compaction happens.
    fn next(
        state: &Arc<Mutex<Script>>,
        path: &str,
        headers: HeaderMap,
        body: Value,
        cache: CacheUse,
    ) -> (Option<Turn>, usize) {
        let mut s = state.lock().unwrap();
        // No tools (or an empty list): a side request, such as picogent's compaction
        // summary or Claude Code's session title. It gets a fixed answer and consumes
        // no scripted turn.
        let is_summary = body
            .get("tools")
            .and_then(Value::as_array)
            .is_none_or(|t| t.is_empty());
        let assistant_turns = match body["_assistant_turns"].as_u64() {
            Some(n) => n as usize,
            // Parsed (not light): count the conversation's assistant messages.
            None => body["messages"]
                .as_array()
                .map_or(0, |m| m.iter().filter(|x| x["role"] == "assistant").count()),
        };
        if !is_summary && assistant_turns == 0 {
            if let Some(n) = body["_bytes"].as_u64() {
                s.first_request_bytes.push(n as usize);
            }
        }
        if !s.light {
            s.requests.push(Recorded {
                path: path.into(),
                headers,
                body,
                cache,
            });
        }
        s.call_seq += 1;
        if is_summary {
            return (Some(Turn::Text(SUMMARY.into())), s.call_seq);
        }
        if let Some(script) = &s.per_conversation {
            return (
                script.get(assistant_turns % script.len().max(1)).cloned(),
                s.call_seq,
            );
        }
        if s.turns.is_empty() {
            if let Some(again) = s.cycle.clone() {
                s.turns = again.into();
            }
        }
        (s.turns.pop_front(), s.call_seq)
    }
}

type Shared = State<Arc<Mutex<Script>>>;

fn authorized(headers: &HeaderMap) -> bool {
    let key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    key == Some(API_KEY) || bearer == Some(API_KEY)
}

fn error_response(status: u16, retry_ms: Option<u64>, message: &str) -> Response {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("request-id", "req_scripted_error");
    if let Some(ms) = retry_ms {
        b = b.header("retry-after-ms", ms.to_string());
    }
    b.body(Body::from(
        json!({"type": "error", "error": {"type": "scripted_error", "message": message}})
            .to_string(),
    ))
    .unwrap()
}

/// The request as JSON and its size in tokens (4 bytes each, reported back as input
/// usage); in light mode only the size, whether it carries tools, and how many
/// assistant turns it holds (as `_assistant_turns`).
fn parse_body(s: &Arc<Mutex<Script>>, body: &Bytes) -> (Value, usize) {
    let tokens = body.len() / 4;
    if s.lock().unwrap().light {
        let has_tools = body.windows(8).any(|w| w == b"\"tools\":")
            && !body.windows(10).any(|w| w == b"\"tools\":[]");
        // A turn is an assistant message, or (Responses API) a function call item.
        let count = |needle: &[u8]| body.windows(needle.len()).filter(|w| *w == needle).count();
        let turns = count(b"\"role\":\"assistant\"") + count(b"\"type\":\"function_call\"");
        let mut v = if has_tools {
            json!({"tools": ["light mode: not parsed"]})
        } else {
            json!({})
        };
        v["_assistant_turns"] = json!(turns);
        v["_bytes"] = json!(body.len());
        return (v, tokens);
    }
    (serde_json::from_slice(body).unwrap_or(Value::Null), tokens)
}

/// Benchmarks: how many requests came, and each conversation's first request size.
async fn stats(State(s): Shared) -> axum::Json<Value> {
    let st = s.lock().unwrap();
    let t = st.totals;
    axum::Json(
        json!({"requests": st.call_seq, "first_request_bytes": st.first_request_bytes,
        "input": {"fresh": t.fresh, "cache_write": t.write, "cache_read": t.read}}),
    )
}

/// How the request's input splits under prompt caching (Anthropic and OpenAI; others
/// have no cache here); an error is the API's refusal (HTTP 400).
fn cache_use(
    s: &Arc<Mutex<Script>>,
    wire: Wire,
    raw: &Bytes,
    body: &Value,
    total: usize,
) -> Result<CacheUse, String> {
    let mut st = s.lock().unwrap();
    let uncached = CacheUse {
        fresh: total,
        ..Default::default()
    };
    let parsed;
    let body = match (st.light, st.cache_in_light, wire) {
        (_, _, Wire::Ollama | Wire::Responses) | (true, false, _) => {
            st.totals.fresh += total;
            return Ok(uncached);
        }
        (true, true, _) => {
            parsed = serde_json::from_slice(raw).unwrap_or(Value::Null);
            &parsed
        }
        (false, _, _) => body,
    };
    let u = match wire {
        Wire::Anthropic => st.cache.anthropic(body, total)?,
        _ => {
            let read = st.cache.openai(body, total);
            CacheUse {
                fresh: total - read,
                write: 0,
                read,
            }
        }
    };
    st.totals.fresh += u.fresh;
    st.totals.write += u.write;
    st.totals.read += u.read;
    Ok(u)
}

async fn anthropic(State(s): Shared, headers: HeaderMap, raw: Bytes) -> Response {
    let (body, tokens) = parse_body(&s, &raw);
    if !authorized(&headers) {
        return error_response(401, None, "invalid x-api-key");
    }
    if headers.get("anthropic-version").is_none() {
        return error_response(400, None, "anthropic-version header is required");
    }
    let usage = match cache_use(&s, Wire::Anthropic, &raw, &body, tokens) {
        Ok(u) => u,
        Err(m) => return error_response(400, None, &m),
    };
    let (turn, seq) = ScriptedLlm::next(&s, "/v1/messages", headers, body, usage);
    respond(&s, Wire::Anthropic, turn, seq, usage)
}

async fn openai(State(s): Shared, headers: HeaderMap, raw: Bytes) -> Response {
    let (body, tokens) = parse_body(&s, &raw);
    if !authorized(&headers) {
        return error_response(401, None, "Incorrect API key provided");
    }
    // As OpenAI does for its reasoning models: `max_tokens` is refused (the scripted
    // server's stand-ins are named `reasoner-*`).
    let model = body["model"].as_str().unwrap_or_default();
    if model.starts_with("reasoner") && body.get("max_tokens").is_some() {
        return error_response(
            400,
            None,
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
        );
    }
    let usage = match cache_use(&s, Wire::OpenAi, &raw, &body, tokens) {
        Ok(u) => u,
        Err(m) => return error_response(400, None, &m),
    };
    let (turn, seq) = ScriptedLlm::next(&s, "/v1/chat/completions", headers, body, usage);
    respond(&s, Wire::OpenAi, turn, seq, usage)
}

async fn responses(State(s): Shared, headers: HeaderMap, raw: Bytes) -> Response {
    let (body, tokens) = parse_body(&s, &raw);
    let usage = cache_use(&s, Wire::Responses, &raw, &body, tokens).unwrap_or_default();
    let (turn, seq) = ScriptedLlm::next(&s, "/v1/responses", headers, body, usage);
    respond(&s, Wire::Responses, turn, seq, usage)
}

async fn ollama(State(s): Shared, headers: HeaderMap, raw: Bytes) -> Response {
    let (body, tokens) = parse_body(&s, &raw);
    let usage = cache_use(&s, Wire::Ollama, &raw, &body, tokens).unwrap_or_default();
    let (turn, seq) = ScriptedLlm::next(&s, "/api/chat", headers, body, usage);
    respond(&s, Wire::Ollama, turn, seq, usage)
}

/// The model's think time, before any answer.
async fn think(
    State(s): Shared,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let wait = s.lock().unwrap().latency;
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    next.run(req).await
}

/// `tokens` is how the request's size in tokens (4 bytes each) splits under prompt
/// caching, reported back as input usage.
fn respond(
    state: &Arc<Mutex<Script>>,
    wire: Wire,
    turn: Option<Turn>,
    seq: usize,
    tokens: CacheUse,
) -> Response {
    let Some(turn) = turn else {
        return error_response(400, None, "the scripted server has no more turns");
    };
    let content_type = match wire {
        Wire::Ollama => "application/x-ndjson",
        _ => "text/event-stream",
    };
    let (chunks, tail): (Vec<String>, Tail) = match turn {
        Turn::Status(code, retry) => return error_response(code, retry, "scripted failure"),
        Turn::Refuse(code, message) => return error_response(code, None, &message),
        Turn::Text(t) => (encode(wire, &t, &[], seq, tokens), Tail::None),
        Turn::Tools(t, calls) => (encode(wire, &t, &calls, seq, tokens), Tail::None),
        Turn::Drop => {
            let full = encode(
                wire,
                "this answer is cut off mid-way and must not count",
                &[],
                seq,
                tokens,
            );
            (full[..full.len() / 2].to_vec(), Tail::Cut)
        }
        Turn::Stall(d, t) => {
            let full = encode(wire, &t, &[], seq, tokens);
            (full, Tail::StallAfterFirst(d))
        }
        Turn::StallTools(d, calls) => {
            let full = encode(wire, "", &calls, seq, tokens);
            (full, Tail::StallAfterFirst(d))
        }
        Turn::Held(gate, t) => {
            let full = encode(wire, &t, &[], seq, tokens);
            (full, Tail::HeldAfterFirst(gate))
        }
        Turn::HeldTools(gate, calls) => {
            let full = encode(wire, "", &calls, seq, tokens);
            (full, Tail::HeldAfterFirst(gate))
        }
        Turn::ErrorEvent => {
            let mut full = encode(wire, "partial", &[], seq, tokens);
            full.truncate(3);
            full.push(sse("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})));
            (full, Tail::None)
        }
    };
    let tail_kind = tail.clone();
    let in_flight = InFlight::new(state);
    let stream = futures_util::stream::iter(chunks.into_iter().enumerate()).then(move |(i, c)| {
        let _counted = &in_flight;
        let tail = tail.clone();
        async move {
            match (i, &tail) {
                (1, Tail::StallAfterFirst(d)) => tokio::time::sleep(*d).await,
                (1, Tail::HeldAfterFirst(gate)) => gate.passed().await,
                _ => {}
            }
            Ok::<Bytes, std::io::Error>(Bytes::from(c))
        }
    });
    let body = match tail_kind {
        Tail::Cut => Body::from_stream(stream.chain(futures_util::stream::once(async {
            Err(std::io::Error::other("scripted connection cut"))
        }))),
        _ => Body::from_stream(stream),
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", content_type)
        .header("request-id", format!("req_scripted_{seq}"))
        .body(body)
        .unwrap()
}

#[derive(Clone)]
enum Tail {
    None,
    Cut,
    StallAfterFirst(Duration),
    HeldAfterFirst(ModelGate),
}
