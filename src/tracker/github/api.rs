//! GitHub's REST API as picogent calls it: every request with the token, a
//! `User-Agent`, `Accept: application/vnd.github+json` and the API version; answers
//! classified into errors with a kind (a 2xx that is not the JSON GitHub's API promises,
//! such as a proxy's HTML page, is one too, never a success); rate limits obeyed (a
//! primary limit waits for `x-ratelimit-reset` by GitHub's clock, a secondary one for
//! `retry-after`, and no request is sent before then); GitHub's clock learnt from every
//! answer's `Date`; and conditional GETs (`If-None-Match` with the last `ETag`), whose
//! 304 answers GitHub does not count against the limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::auth::Auth;
use super::clock::Clock;
use crate::util::lock;

/// Conditional GETs remembered (their ETag and body), at most.
const MAX_CACHED: usize = 64;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// 401, or a 403 that is no rate limit: the token or the App's permissions.
    #[error("GitHub refused the credentials (HTTP {status} {what}): {message}")]
    Unauthorized {
        status: u16,
        what: String,
        message: String,
    },
    #[error("HTTP 404 {what}: {message}")]
    NotFound { what: String, message: String },
    /// 422: GitHub validated the request and refused it.
    #[error("HTTP 422 {what}: {message}")]
    Invalid { what: String, message: String },
    /// A primary or secondary rate limit: no request before `wait` has passed.
    #[error("rate limited ({what}): {message}; waiting {wait:?}")]
    RateLimited {
        what: String,
        message: String,
        wait: Duration,
    },
    #[error("HTTP {status} {what}: {message}")]
    Rejected {
        status: u16,
        what: String,
        message: String,
    },
    /// Connection errors, timeouts, 5xx.
    #[error("{message} ({what})")]
    Transient { what: String, message: String },
    /// A 2xx answer that is not what GitHub's API promises: not JSON (a proxy's or a
    /// captive portal's HTML page), or without the fields picogent reads. Retried for
    /// a bounded time, like a refusal that may pass, then given up with this message.
    #[error("HTTP {status} {what}: the answer is not the JSON GitHub's API promises ({message})")]
    Malformed {
        status: u16,
        what: String,
        message: String,
    },
}

impl ApiError {
    /// As the outbox classifies a tracker's errors.
    pub(crate) fn into_tracker(self) -> crate::tracker::TrackerError {
        use crate::tracker::TrackerError as T;
        let url = String::new();
        match self {
            ApiError::Unauthorized {
                status,
                what,
                message,
            } => T::Unauthorized {
                status,
                url: what,
                message,
                hint: "Check GITHUB_TOKEN (its scopes) or the GitHub App's key, permissions and installation",
            },
            ApiError::NotFound { what, message } => T::NotFound { url: what, message },
            ApiError::Invalid { what, message } => T::Rejected {
                status: 422,
                url: what,
                message,
            },
            e @ ApiError::RateLimited { .. } | e @ ApiError::Transient { .. } => T::Transient {
                url,
                message: e.to_string(),
            },
            ApiError::Rejected {
                status,
                what,
                message,
            } => T::Rejected {
                status,
                url: what,
                message,
            },
            // As a refusal that may pass: tried again for a bounded time, then kept in
            // the dead-letter file with what GitHub sent.
            e @ ApiError::Malformed { status, .. } => T::Rejected {
                status,
                url,
                message: e.to_string(),
            },
        }
    }

    /// An answer that lacks a field picogent needs.
    pub(crate) fn lacking(what: String, field: &str) -> ApiError {
        ApiError::Malformed {
            status: 200,
            what,
            message: format!("it has no `{field}`"),
        }
    }
}

/// One answer: its status and JSON body (`Null` when it had none), and the next
/// page's URL when the `Link` header names one.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) body: Value,
    pub(crate) next: Option<String>,
    /// 304: the body is the one remembered from the last answer.
    pub(crate) unchanged: bool,
}

pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    /// `/repos/{owner}/{name}`.
    repo_path: String,
    auth: Arc<Auth>,
    /// URL → (ETag, body) of conditional GETs.
    etags: Arc<Mutex<HashMap<String, (String, Value)>>>,
    /// No request before this (a rate limit said so): one for every repository the
    /// token serves.
    not_before: Arc<Mutex<Option<Instant>>>,
    /// The daemon's stop: a wait for a rate limit ends with it.
    stop: tokio_util::sync::CancellationToken,
    /// GitHub's clock, from its answers' `Date`.
    clock: Arc<Clock>,
    /// The token's rate-limit window (the fleet's, when it has a store).
    budget: Arc<super::budget::Budget>,
}

fn message_of(body: &Value, text: &str) -> String {
    let mut m = body["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| crate::util::one_line(text, 300));
    // 422's details are in `errors`: "A pull request already exists...".
    if let Some(errors) = body["errors"].as_array() {
        for e in errors {
            if let Some(s) = e["message"].as_str().or(e["code"].as_str()) {
                m.push_str(&format!("; {s}"));
            }
        }
    }
    m
}

fn header_u64(h: &reqwest::header::HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The most of one answer read: GitHub's pages of 100 items are far smaller.
const MAX_ANSWER: usize = 16 << 20;

/// An answer's body as text, at most `MAX_ANSWER` bytes of it.
async fn read_capped(mut resp: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        if bytes.len() + chunk.len() > MAX_ANSWER {
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Why a 2xx answer with this body is not GitHub's JSON, if it is not: a body that is
/// no JSON, or a content type other than JSON's. An empty body (204) is fine.
fn not_json(h: &reqwest::header::HeaderMap, text: &str) -> Option<String> {
    if text.trim().is_empty() {
        return None;
    }
    let kind = h
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    let seen = || crate::util::one_line(text, 120);
    if !kind.to_ascii_lowercase().contains("json") {
        return Some(format!("Content-Type {kind}: {}", seen()));
    }
    serde_json::from_str::<Value>(text)
        .err()
        .map(|e| format!("not JSON ({e}): {}", seen()))
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(h: &reqwest::header::HeaderMap) -> Option<String> {
    let link = h.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, rel) = part.split_once(';')?;
        rel.contains("rel=\"next\"").then(|| {
            url.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
    })
}

impl Api {
    pub(crate) fn new(
        base: &str,
        repo: &str,
        auth: Arc<Auth>,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<Api, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            // As the tracker client: a connection the network swallows is given up in
            // seconds, not at the request's timeout.
            .tcp_user_timeout(Duration::from_secs(20))
            .tcp_keepalive(Duration::from_secs(15))
            .tcp_keepalive_interval(Duration::from_secs(5))
            .tcp_keepalive_retries(3u32)
            .user_agent(concat!("picogent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            repo_path: format!("/repos/{repo}"),
            auth,
            etags: Default::default(),
            not_before: Default::default(),
            stop,
            clock: Default::default(),
            budget: Arc::new(super::budget::Budget::new()),
        })
    }

    /// The token's rate-limit budget.
    pub(crate) fn budget(&self) -> &Arc<super::budget::Budget> {
        &self.budget
    }

    /// The same client, token, rate limit and clock, for another repository.
    pub(crate) fn for_repo(&self, repo: &str) -> Api {
        Api {
            http: self.http.clone(),
            base: self.base.clone(),
            repo_path: format!("/repos/{repo}"),
            auth: self.auth.clone(),
            etags: self.etags.clone(),
            not_before: self.not_before.clone(),
            stop: self.stop.clone(),
            clock: self.clock.clone(),
            budget: self.budget.clone(),
        }
    }

    /// GitHub's clock, as its answers' `Date` says.
    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// `/repos/{owner}/{name}` followed by `rest`.
    pub(crate) fn repo(&self, rest: &str) -> String {
        format!("{}{rest}", self.repo_path)
    }

    pub(crate) fn auth(&self) -> &Arc<Auth> {
        &self.auth
    }

    /// The token for the next request: an App's installation token is minted when
    /// there is none or it is about to expire.
    pub(crate) async fn token(&self) -> Result<String, ApiError> {
        if let Some(t) = self.auth.current() {
            return Ok(t);
        }
        let Auth::App(app) = &*self.auth else {
            return Err(ApiError::Unauthorized {
                status: 0,
                what: "token".into(),
                message: "no token".into(),
            });
        };
        let jwt = app
            .jwt(self.clock.epoch())
            .map_err(|e| ApiError::Unauthorized {
                status: 0,
                what: "GitHub App JWT".into(),
                message: e.to_string(),
            })?;
        let path = format!("/app/installations/{}/access_tokens", app.installation_id);
        let answer = self
            .request_as(Method::POST, &path, Some(&json!({})), &jwt, None)
            .await?;
        let token = answer.body["token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if token.is_empty() {
            return Err(ApiError::Transient {
                what: format!("POST {path}"),
                message: "GitHub answered without a token".into(),
            });
        }
        app.keep(
            token.clone(),
            answer.body["expires_at"].as_str().unwrap_or_default(),
            &self.clock,
        );
        tracing::info!(
            installation = app.installation_id,
            "minted a GitHub App installation token"
        );
        Ok(token)
    }

    /// A request with the current token.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ApiError> {
        let token = self.token().await?;
        self.request_as(method, path, body, &token, None).await
    }

    /// A request with another token (a GitHub App's JWT).
    pub(crate) async fn call_as(
        &self,
        method: Method,
        path: &str,
        token: &str,
    ) -> Result<Answer, ApiError> {
        self.request_as(method, path, None, token, None).await
    }

    /// A GET that sends the ETag of the last answer to the same URL: a 304 returns
    /// that answer again, marked unchanged.
    pub(crate) async fn get_cached(&self, path: &str) -> Result<Answer, ApiError> {
        let token = self.token().await?;
        let cached = lock(&self.etags).get(path).cloned();
        // `Some("")`: remember this answer's ETag, though there is none to send yet.
        let answer = self
            .request_as(
                Method::GET,
                path,
                None,
                &token,
                Some(cached.as_ref().map_or("", |(e, _)| e.as_str())),
            )
            .await?;
        if answer.unchanged {
            return Ok(Answer {
                body: cached.map(|(_, b)| b).unwrap_or(Value::Null),
                next: None,
                unchanged: true,
            });
        }
        Ok(answer)
    }

    /// Waits out a rate limit that is still in force (not past a shutdown).
    async fn wait_turn(&self, what: &str) -> Result<(), ApiError> {
        let until = *lock(&self.not_before);
        if let Some(t) = until.filter(|t| *t > Instant::now()) {
            tracing::info!("waiting {:?} for GitHub's rate limit", t - Instant::now());
            tokio::select! {
                _ = tokio::time::sleep_until(t) => {}
                _ = self.stop.cancelled() => return Err(ApiError::Transient {
                    what: what.to_string(),
                    message: "picogent is stopping (a rate limit was still in force)".into(),
                }),
            }
        }
        Ok(())
    }

    async fn request_as(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: &str,
        etag: Option<&str>,
    ) -> Result<Answer, ApiError> {
        let what = format!("{method} {path}");
        self.wait_turn(&what).await?;
        let clock = self.clock.clone();
        self.budget
            .before(&what, move || clock.epoch() as i64, &self.stop)
            .await?;
        let url = if path.starts_with("http") {
            // A `Link` header's next page: followed only on the API itself, since the
            // token goes with it.
            if !path.starts_with(&format!("{}/", self.base)) {
                return Err(ApiError::Rejected {
                    status: 0,
                    what,
                    message: "a next page outside the API's URL is not followed".into(),
                });
            }
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        };
        let mut req = self
            .http
            .request(method, &url)
            .bearer_auth(token)
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28");
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(e) = etag.filter(|e| !e.is_empty()) {
            req = req.header("If-None-Match", e);
        }
        let resp = req.send().await.map_err(|e| ApiError::Transient {
            what: what.clone(),
            message: format!("cannot reach GitHub: {}", e.without_url()),
        })?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        self.clock
            .learn(headers.get("date").and_then(|v| v.to_str().ok()));
        self.budget.learn(&headers).await;
        if let Some(r) = header_u64(&headers, "x-ratelimit-remaining").filter(|r| *r < 50) {
            tracing::warn!(
                remaining = r,
                "few GitHub API requests left before the rate limit resets"
            );
        }
        if status == 304 {
            return Ok(Answer {
                body: Value::Null,
                next: None,
                unchanged: true,
            });
        }
        let text = read_capped(resp).await;
        let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            if let Some(why) = not_json(&headers, &text) {
                return Err(ApiError::Malformed {
                    status,
                    what,
                    message: why,
                });
            }
            self.remember(path, &headers, etag.is_some(), &parsed);
            return Ok(Answer {
                body: parsed,
                next: next_link(&headers),
                unchanged: false,
            });
        }
        Err(self.refusal(status, &headers, what, message_of(&parsed, &text)))
    }

    /// Keeps a conditional GET's answer with its ETag, for the next request to `path`.
    fn remember(
        &self,
        path: &str,
        headers: &reqwest::header::HeaderMap,
        asked: bool,
        body: &Value,
    ) {
        let tag = headers.get("etag").and_then(|v| v.to_str().ok());
        if let Some(tag) = tag.filter(|_| asked) {
            let mut etags = lock(&self.etags);
            if etags.len() >= MAX_CACHED && !etags.contains_key(path) {
                etags.clear();
            }
            etags.insert(path.to_string(), (tag.to_string(), body.clone()));
        }
    }

    /// What an answer other than 2xx and 304 means; a rate limit also stops every
    /// request until the time it names.
    fn refusal(
        &self,
        status: u16,
        headers: &reqwest::header::HeaderMap,
        what: String,
        message: String,
    ) -> ApiError {
        if let Some(wait) = super::budget::rate_wait(status, headers, &message, self.clock.epoch())
        {
            *lock(&self.not_before) = Some(Instant::now() + wait);
            tracing::warn!("GitHub rate limit ({what}): {message}; no request for {wait:?}");
            return ApiError::RateLimited {
                what,
                message,
                wait,
            };
        }
        match status {
            // A 403 that is no rate limit (a locked issue, a permission the token
            // lacks) is a refusal, kept in the dead-letter file if it does not pass.
            401 => ApiError::Unauthorized {
                status,
                what,
                message,
            },
            404 => ApiError::NotFound { what, message },
            422 => ApiError::Invalid { what, message },
            408 | 500..=599 => ApiError::Transient {
                what,
                message: format!("HTTP {status}: {message}"),
            },
            _ => ApiError::Rejected {
                status,
                what,
                message,
            },
        }
    }

    /// Every page of a list (at most `max_pages`), items in order.
    pub(crate) async fn list(&self, path: &str, max_pages: usize) -> Result<Vec<Value>, ApiError> {
        self.list_in(path, None, max_pages).await
    }

    /// `list` for pages that are objects holding the list in `field` (an App's
    /// `/installation/repositories`), or arrays when `field` is `None`.
    pub(crate) async fn list_in(
        &self,
        path: &str,
        field: Option<&str>,
        max_pages: usize,
    ) -> Result<Vec<Value>, ApiError> {
        let mut out = Vec::new();
        let mut next = Some(path.to_string());
        let mut pages = 0;
        while let Some(p) = next.take() {
            let mut answer = self.call(Method::GET, &p, None).await?;
            let page = match field {
                Some(f) => answer.body[f].take(),
                None => answer.body,
            };
            match page {
                Value::Array(items) => out.extend(items),
                _ => {
                    return Err(ApiError::lacking(
                        format!("GET {p}"),
                        field.unwrap_or("list"),
                    ))
                }
            }
            pages += 1;
            if pages < max_pages {
                next = answer.next;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn the_next_page_is_read_from_the_link_header() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static(
                "<https://x/a?page=2>; rel=\"next\", <https://x/a?page=5>; rel=\"last\"",
            ),
        );
        assert_eq!(next_link(&h).as_deref(), Some("https://x/a?page=2"));
    }
}
