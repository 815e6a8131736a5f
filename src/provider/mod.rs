//! LLM providers. Each wire format lives in its own file and owns its JSON shapes and
//! stream parser; this module owns what they share: the request the loop hands over,
//! the deltas streamed back, errors, retries and call logging.

mod anthropic;
mod fragments;
pub mod local;
mod ollama;
mod openai;
mod price;
mod retry;
mod stream;

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ProviderKind};
use crate::message::{AssistantMessage, Message};
pub(crate) use fragments::{Fragments, Reuse};
pub use retry::RetryPolicy;

/// A tool as the model sees it.
#[derive(Debug, Clone)]
pub(crate) struct ToolSpec {
    /// Built-in tools' names are static; an MCP server's tools are its own.
    pub(crate) name: std::borrow::Cow<'static, str>,
    pub(crate) description: std::borrow::Cow<'static, str>,
    pub(crate) parameters: Value,
}

/// One model call.
pub(crate) struct ModelRequest<'a> {
    pub(crate) system: &'a str,
    pub(crate) messages: &'a [&'a Message],
    pub(crate) tools: &'a [ToolSpec],
    /// Set for a conversation that will be continued (the session id): the provider may
    /// cache its prefix (Anthropic breakpoints, OpenAI's `prompt_cache_key`). `None` for
    /// one-off calls such as a compaction summary, whose prefix is never sent again.
    pub(crate) cache_key: Option<&'a str>,
    /// The run's cached message fragments, to encode only the messages not sent
    /// before; `None` encodes every message (one-off calls).
    pub(crate) reuse: Option<Reuse<'a>>,
}

/// What a provider streams while a call is under way.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Delta {
    Text(String),
    Thinking(String),
    /// A failed attempt is being retried; text already streamed for it is void.
    Retry {
        attempt: u32,
        /// Attempts allowed in all (the first and its retries).
        of: u32,
        delay: Duration,
        reason: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{provider} answered HTTP {status} from {url}: {message}")]
    Http {
        provider: &'static str,
        url: String,
        status: u16,
        message: String,
        retry_after: Option<Duration>,
        should_retry: Option<bool>,
    },
    #[error("cannot reach {url}: {message}")]
    Connect { url: String, message: String },
    #[error("the {provider} stream broke off: {message}")]
    Stream {
        provider: &'static str,
        message: String,
    },
    #[error("{provider} reported an error mid-stream: {message}")]
    Api {
        provider: &'static str,
        message: String,
        retryable: bool,
    },
    #[error("the model sent nothing for {0:?} (step_timeout_sec)")]
    Timeout(Duration),
    #[error("the {provider} response could not be understood: {message}")]
    Protocol {
        provider: &'static str,
        message: String,
    },
    #[error("the request was cancelled")]
    Cancelled,
    #[error("{0}")]
    Config(String),
}

impl ProviderError {
    /// The setting a person chose that this error points at, if one does: an address
    /// nothing answers at, a refused key, a model the server does not know.
    pub(crate) fn setting(&self) -> Option<crate::config::ModelSetting> {
        use crate::config::ModelSetting as S;
        match self {
            ProviderError::Connect { .. } => Some(S::BaseUrl),
            ProviderError::Http {
                status: 401 | 403, ..
            } => Some(S::ApiKey),
            ProviderError::Http {
                status: 400 | 404,
                message,
                ..
            } if message.to_lowercase().contains("model") => Some(S::Model),
            ProviderError::Http { status: 404, .. } => Some(S::BaseUrl),
            _ => None,
        }
    }

    /// Whether another attempt of the same call may succeed.
    fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http {
                status,
                should_retry,
                ..
            } => {
                if let Some(s) = should_retry {
                    return *s;
                }
                *status == 429 || *status == 408 || *status == 529 || *status >= 500
            }
            ProviderError::Connect { .. } | ProviderError::Stream { .. } => true,
            ProviderError::Timeout(_) => true,
            ProviderError::Api { retryable, .. } => *retryable,
            ProviderError::Protocol { .. }
            | ProviderError::Cancelled
            | ProviderError::Config(_) => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What every request of a provider carries besides the conversation.
#[derive(Debug, Clone)]
pub(crate) struct Sampling {
    pub(crate) max_tokens: u32,
    pub(crate) temperature: Option<f64>,
    /// Ollama: `keep_alive` as configured.
    pub(crate) keep_alive: Option<serde_json::Value>,
    /// Ollama: `options.num_ctx`, the context window picogent plans with.
    pub(crate) num_ctx: u64,
    /// OpenAI: the output limit goes in `max_completion_tokens` (reasoning models
    /// refuse `max_tokens`).
    pub(crate) completion_tokens: bool,
}

#[cfg(test)]
impl Sampling {
    /// Only an output limit, as unit tests of the request bodies need.
    pub(crate) fn max_tokens(n: u32) -> Sampling {
        Sampling {
            max_tokens: n,
            temperature: None,
            keep_alive: None,
            num_ctx: 0,
            completion_tokens: false,
        }
    }
}

/// OpenAI models that take `max_completion_tokens` instead of `max_tokens`.
fn wants_completion_tokens(model: &str) -> bool {
    let m = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| m.starts_with(p))
}

/// A configured model endpoint.
pub struct Provider {
    kind: ProviderKind,
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    auth_token: Option<String>,
    /// OpenAI: the organization and project headers, as the OpenAI SDK sends them.
    openai_account: crate::config::OpenaiAccount,
    model: String,
    sampling: Sampling,
    /// Set once an OpenAI-compatible server refused `max_tokens` for this model.
    completion_tokens: std::sync::atomic::AtomicBool,
    /// How long a call may go without a byte from the server.
    idle_timeout: Duration,
    retry: RetryPolicy,
}

impl Provider {
    pub fn from_config(config: &Config) -> Result<Self, ProviderError> {
        // The Claude Code engine may use the CLI's own login instead of a key.
        if config.llm.provider == ProviderKind::Anthropic
            && config.llm.engine == crate::config::Engine::Native
            && config.llm.api_key.is_none()
            && config.llm.auth_token.is_none()
        {
            return Err(ProviderError::Config(
                "no API key for anthropic: set ANTHROPIC_API_KEY (or PICOGENT_API_KEY, `api_key` in agent.json, or ANTHROPIC_AUTH_TOKEN for a bearer token)".into(),
            ));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A burst of runs opens a connection each; only a few stay open for reuse
            // afterwards (each idle one holds its buffers, 200 held ~8 MB).
            .pool_max_idle_per_host(8)
            .user_agent(concat!("picogent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Provider {
            kind: config.llm.provider,
            http,
            base_url: config.llm.base_url.clone(),
            api_key: config.llm.api_key.clone(),
            auth_token: config.llm.auth_token.clone(),
            openai_account: config.llm.openai_account.clone(),
            model: config.llm.model.clone(),
            sampling: Sampling {
                max_tokens: config.limits.max_tokens,
                temperature: config.llm.temperature,
                keep_alive: config.llm.keep_alive.clone(),
                num_ctx: config.limits.context_window,
                completion_tokens: false,
            },
            completion_tokens: std::sync::atomic::AtomicBool::new(wants_completion_tokens(
                &config.llm.model,
            )),
            idle_timeout: config.limits.step_timeout,
            retry: RetryPolicy::default(),
        })
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub(crate) fn kind(&self) -> ProviderKind {
        self.kind
    }

    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// Streams one model call, retrying transient failures as whole calls.
    pub(crate) async fn complete(
        &self,
        req: &ModelRequest<'_>,
        cancel: &CancellationToken,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<AssistantMessage, ProviderError> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let err = match self.attempt(req, cancel, on_delta).await {
                Ok(msg) => return Ok(msg),
                Err(e) => e,
            };
            crate::metrics::model_call(self.kind.as_str(), false, Duration::ZERO, None, None);
            if self.switch_token_field(&err) {
                continue;
            }
            if cancel.is_cancelled() {
                return Err(ProviderError::Cancelled);
            }
            if !err.is_retryable() || attempt > self.retry.max_retries {
                return Err(err);
            }
            let delay = self.retry.delay(attempt, err.retry_after());
            // Also an event (`Delta::Retry`): `picogent run` shows it itself and mutes this target.
            tracing::warn!(
                target: crate::util::REPORTED,
                provider = self.kind.as_str(),
                attempt,
                delay_ms = delay.as_millis() as u64,
                "model call failed, retrying: {err}"
            );
            on_delta(Delta::Retry {
                attempt,
                of: self.retry.max_retries + 1,
                delay,
                reason: err.to_string(),
            });
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            }
        }
    }

    /// An OpenAI-compatible 400 saying `max_tokens` is not supported for this model:
    /// true (once) when the call should be made again with `max_completion_tokens`.
    fn switch_token_field(&self, err: &ProviderError) -> bool {
        use std::sync::atomic::Ordering;
        let refused = matches!(err, ProviderError::Http { status: 400, message, .. }
            if message.contains("max_tokens") && message.contains("max_completion_tokens"));
        self.kind == ProviderKind::Openai
            && refused
            && !self.completion_tokens.swap(true, Ordering::Relaxed)
    }

    fn sampling(&self) -> Sampling {
        let mut s = self.sampling.clone();
        s.completion_tokens = self
            .completion_tokens
            .load(std::sync::atomic::Ordering::Relaxed);
        s
    }

    /// One call: the request, the answer's status, then its stream.
    async fn attempt(
        &self,
        req: &ModelRequest<'_>,
        cancel: &CancellationToken,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<AssistantMessage, ProviderError> {
        let started = Instant::now();
        let (url, builder) = self.request(req)?;
        let resp = self.send(url, builder, cancel).await?;
        let request_id = ["request-id", "x-request-id"]
            .iter()
            .find_map(|h| resp.headers().get(*h))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string();
        let provider = self.kind.as_str();
        stream::expect_stream(&resp, provider)?;
        let mut reader = stream::LineReader::new(resp, self.idle_timeout, cancel.clone(), provider);
        let mut first_token: Option<Duration> = None;
        let mut timed = |d: Delta| {
            if first_token.is_none() {
                first_token = Some(started.elapsed());
            }
            on_delta(d)
        };
        let mut msg = match self.kind {
            ProviderKind::Anthropic => anthropic::read_stream(&mut reader, &mut timed).await?,
            ProviderKind::Openai => openai::read_stream(&mut reader, &mut timed).await?,
            ProviderKind::Ollama => ollama::read_stream(&mut reader, &mut timed).await?,
        };
        msg.provider = provider.to_string();
        if msg.model.is_empty() {
            msg.model = self.model.clone();
        }
        msg.timestamp = crate::util::now_millis();
        msg.usage.cost = price::cost(&[&msg.model, &self.model], &msg.usage);
        tracing::info!(
            provider,
            model = %self.model,
            request_id = %request_id,
            ttft_ms = first_token.map(|d| d.as_millis() as u64),
            total_ms = started.elapsed().as_millis() as u64,
            input_tokens = msg.usage.input,
            cache_read_tokens = msg.usage.cache_read,
            cache_write_tokens = msg.usage.cache_write,
            output_tokens = msg.usage.output,
            "model call"
        );
        crate::metrics::model_call(
            provider,
            true,
            started.elapsed(),
            first_token,
            Some(&msg.usage),
        );
        Ok(msg)
    }

    /// The endpoint and the ready request for this provider's API.
    fn request(
        &self,
        req: &ModelRequest<'_>,
    ) -> Result<(String, reqwest::RequestBuilder), ProviderError> {
        let (url, body) = match self.kind {
            ProviderKind::Anthropic => (
                format!("{}/v1/messages", self.base_url),
                anthropic::request_body(&self.model, &self.sampling(), req),
            ),
            ProviderKind::Openai => (
                format!("{}/chat/completions", self.base_url),
                openai::request_body(
                    &self.model,
                    &self.sampling(),
                    req,
                    req.cache_key
                        .filter(|_| openai::takes_cache_key(&self.base_url)),
                ),
            ),
            ProviderKind::Ollama => (
                format!("{}/api/chat", self.base_url),
                ollama::request_body(&self.model, &self.sampling(), req),
            ),
        };
        let body = body.map_err(|e| ProviderError::Protocol {
            provider: self.kind.as_str(),
            message: format!("cannot encode the request: {e}"),
        })?;
        let mut builder = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        match (self.kind, &self.api_key) {
            (ProviderKind::Anthropic, key) => {
                builder = builder.header("anthropic-version", "2023-06-01");
                if let Some(key) = key {
                    builder = builder.header("x-api-key", key);
                }
                if let Some(token) = &self.auth_token {
                    builder = builder.bearer_auth(token);
                }
            }
            (ProviderKind::Openai, key) => {
                if let Some(key) = key {
                    builder = builder.bearer_auth(key);
                }
                if let Some(org) = &self.openai_account.organization {
                    builder = builder.header("OpenAI-Organization", org);
                }
                if let Some(project) = &self.openai_account.project {
                    builder = builder.header("OpenAI-Project", project);
                }
            }
            _ => {}
        }
        Ok((url, builder))
    }

    /// Sends the request, waiting at most the idle timeout for the answer's head; an
    /// answer that is not a success becomes its error.
    async fn send(
        &self,
        url: String,
        builder: reqwest::RequestBuilder,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, ProviderError> {
        let send = async {
            builder.send().await.map_err(|e| ProviderError::Connect {
                url: url.clone(),
                message: error_chain(&e),
            })
        };
        let resp = tokio::select! {
            r = tokio::time::timeout(self.idle_timeout, send) => match r {
                Ok(r) => r?,
                Err(_) => return Err(ProviderError::Timeout(self.idle_timeout)),
            },
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
        };
        let status = resp.status();
        if !status.is_success() {
            let headers = resp.headers().clone();
            let body = resp.text().await.unwrap_or_default();
            return Err(ProviderError::Http {
                provider: self.kind.as_str(),
                url,
                status: status.as_u16(),
                message: error_message(&body),
                retry_after: retry::retry_after(&headers),
                should_retry: retry::should_retry(&headers),
            });
        }
        Ok(resp)
    }
}

/// The message inside a provider's JSON error body, else the body itself (bounded).
fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let e = &v["error"];
        if let Some(m) = e["message"]
            .as_str()
            .or(e.as_str())
            .or(v["message"].as_str())
        {
            return m.to_string();
        }
    }
    crate::util::one_line(body, 500)
}

/// reqwest hides the useful part ("connection refused") in the source chain.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// A tool in the OpenAI function-calling shape, which Ollama's native API shares.
#[derive(serde::Serialize)]
struct FunctionTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionSpec<'a>,
}

#[derive(serde::Serialize)]
struct FunctionSpec<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

fn function_tools(tools: &[ToolSpec]) -> Vec<FunctionTool<'_>> {
    tools
        .iter()
        .map(|t| FunctionTool {
            kind: "function",
            function: FunctionSpec {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        })
        .collect()
}

/// Parses a tool call's JSON arguments; a model that wrote broken JSON gets its text
/// back under `_raw` so the tool can answer with a useful error.
fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::json!({ "_raw": raw }))
}

/// A tool-call id as every API accepts it (`^[a-zA-Z0-9_-]{1,64}$`), as pi rewrites
/// ids from another provider (OpenAI Responses' `call_x|fc_y`): other characters become
/// `_`. The same function on the call and its result keeps the two paired.
pub(crate) fn wire_call_id(id: &str) -> std::borrow::Cow<'_, str> {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !id.is_empty() && id.len() <= 64 && id.chars().all(ok) {
        return std::borrow::Cow::Borrowed(id);
    }
    let mut out: String = id
        .chars()
        .map(|c| if ok(c) { c } else { '_' })
        .take(64)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    std::borrow::Cow::Owned(out)
}
