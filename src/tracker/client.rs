//! The tracker's REST API as the agent calls it: registration, heartbeats, task status
//! and comments, each with the bearer token and a classified error.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::types::{AgentDescription, Load, Registered, Report, TaskId};

#[derive(Debug, thiserror::Error)]
pub enum TrackerError {
    /// 401 or 403: the token is wrong; retrying will not help.
    #[error("the tracker refused the credentials (HTTP {status} from {url}): {message}. {hint}")]
    Unauthorized {
        status: u16,
        url: String,
        message: String,
        /// What to check: the setting that holds the credentials.
        hint: &'static str,
    },
    /// 404: the tracker does not know the agent or the task.
    #[error("HTTP 404 from {url}: {message}")]
    NotFound { url: String, message: String },
    /// Another 4xx other than 429: the request itself is wrong; not retried.
    #[error("HTTP {status} from {url}: {message}")]
    Rejected {
        status: u16,
        url: String,
        message: String,
    },
    /// Connection errors, timeouts, 5xx, 429: worth another try.
    #[error("{message} ({url})")]
    Transient { url: String, message: String },
    /// A report this tracker has no place for (a pull request on Team Board): kept
    /// in the dead-letter file, never dropped in silence.
    #[error("{0}")]
    Unsupported(String),
}

impl TrackerError {
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, TrackerError::Transient { .. })
    }

    /// A token the tracker refuses: reports wait for it to be fixed (a rotated token,
    /// a restart with the right one) rather than being given up.
    pub(crate) fn is_unauthorized(&self) -> bool {
        matches!(self, TrackerError::Unauthorized { .. })
    }

    /// A refusal that may pass (a tracker that lost the task for a while, a proxy's
    /// 404 during a deploy): retried for a bounded time. A bad token or a request the
    /// tracker calls invalid (400, 422) will not pass by waiting.
    pub(crate) fn may_pass(&self) -> bool {
        match self {
            TrackerError::NotFound { .. } => true,
            TrackerError::Rejected { status, .. } => !matches!(status, 400 | 422),
            _ => false,
        }
    }
}

#[derive(Clone)]
pub(crate) struct TrackerClient {
    http: reqwest::Client,
    base: String,
    token: String,
    /// How long one report may take to be answered. Long on purpose: a report that
    /// timed out may still be taken by a slow tracker, and its retry would be a repeat.
    report_timeout: Duration,
}

/// The message of a tracker error body `{"error": {"code", "message"}}`, else the body.
fn tracker_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            let e = &v["error"];
            e["message"].as_str().or(e.as_str()).map(str::to_string)
        })
        .unwrap_or_else(|| crate::util::one_line(body, 300))
}

impl TrackerClient {
    pub(crate) fn new(base: &str, token: &str) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            // A connection the network swallows (no answer, no reset) is given up
            // after seconds, not after the report's timeout: sent data unacknowledged
            // for 20 s, or an idle connection that stops answering its probes.
            .tcp_user_timeout(Duration::from_secs(20))
            .tcp_keepalive(Duration::from_secs(15))
            .tcp_keepalive_interval(Duration::from_secs(5))
            .tcp_keepalive_retries(3u32)
            .user_agent(concat!("picogent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(TrackerClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            report_timeout: Duration::from_secs(30),
        })
    }

    /// Sets how long one report may take to be answered (`Timing::report_timeout`).
    pub(crate) fn with_report_timeout(mut self, timeout: Duration) -> Self {
        self.report_timeout = timeout;
        self
    }

    async fn send<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &B,
        idempotency_key: Option<&str>,
    ) -> Result<Value, TrackerError> {
        // Only a report's answer is checked: registration and heartbeats take any 2xx.
        let strict = idempotency_key.is_some();
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method, &url)
            .bearer_auth(&self.token)
            .json(body);
        if let Some(k) = idempotency_key {
            req = req
                .header("Idempotency-Key", k)
                .timeout(self.report_timeout);
        }
        let resp = req.send().await.map_err(|e| TrackerError::Transient {
            url: url.clone(),
            // The URL is said once, by the error's own field.
            message: format!("cannot reach the tracker: {}", e.without_url()),
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        match status {
            204 => Ok(Value::Null),
            // A 2xx from a proxy or an error page is not the tracker's answer: the report
            // was not delivered, whatever the status says.
            200..=299 => match serde_json::from_str::<Value>(&text) {
                Ok(v) if v.is_object() => Ok(v),
                _ if !strict => Ok(Value::Null),
                _ => Err(TrackerError::Transient {
                    url,
                    message: format!(
                        "HTTP {status} with a body that is not the tracker's JSON: {}",
                        crate::util::one_line(&text, 120)
                    ),
                }),
            },
            401 | 403 => Err(TrackerError::Unauthorized {
                status,
                url,
                message: tracker_message(&text),
                hint: "Check AGENT_TOKEN / `token`",
            }),
            404 => Err(TrackerError::NotFound {
                url,
                message: tracker_message(&text),
            }),
            429 | 500..=599 | 408 => Err(TrackerError::Transient {
                url,
                message: format!("HTTP {status}: {}", tracker_message(&text)),
            }),
            _ => Err(TrackerError::Rejected {
                status,
                url,
                message: tracker_message(&text),
            }),
        }
    }

    pub(crate) async fn register(
        &self,
        desc: &AgentDescription,
    ) -> Result<Registered, TrackerError> {
        let v = self
            .send(reqwest::Method::POST, "/api/v1/agents/register", desc, None)
            .await?;
        Ok(serde_json::from_value(v).unwrap_or(Registered {
            agent_id: None,
            heartbeat_interval_sec: None,
        }))
    }

    pub(crate) async fn heartbeat(&self, slug: &str, load: &Load) -> Result<(), TrackerError> {
        #[derive(serde::Serialize)]
        struct Heartbeat<'a> {
            slug: &'a str,
            #[serde(flatten)]
            load: &'a Load,
        }
        let body = serde_json::to_value(Heartbeat { slug, load }).unwrap_or_default();
        self.send(
            reqwest::Method::POST,
            "/api/v1/agents/heartbeat",
            &body,
            None,
        )
        .await
        .map(|_| ())
    }

    /// Delivers one report. `key` lets a tracker that supports it drop a repeat.
    pub(crate) async fn report(
        &self,
        task_id: &TaskId,
        report: &Report,
        key: &str,
    ) -> Result<(), TrackerError> {
        let task = urlencode(task_id.as_str());
        match report {
            Report::Status { status } => self
                .send(
                    reqwest::Method::PATCH,
                    &format!("/api/v1/tasks/{task}"),
                    &json!({"status": status}),
                    Some(key),
                )
                .await
                .map(|_| ()),
            // Team Board never proposes one (`Tracker::proposes`); one that reaches it
            // anyway (an outbox GitHub mode left) is kept, not lost.
            Report::PullRequest { branch, .. } => Err(TrackerError::Unsupported(format!(
                "Team Board takes no pull requests (branch {branch})"
            ))),
            Report::Comment { content, reply_to } => {
                let mut body = json!({"content": content});
                if let Some(r) = reply_to {
                    body["reply_to"] = json!(r);
                }
                self.send(
                    reqwest::Method::POST,
                    &format!("/api/v1/tasks/{task}/comments"),
                    &body,
                    Some(key),
                )
                .await
                .map(|_| ())
            }
        }
    }
}

/// Team Board: reports go to its REST API; no hook adds anything to a task's life.
impl super::seam::Tracker for TrackerClient {
    fn report<'a>(
        &'a self,
        task: &'a TaskId,
        report: &'a Report,
        key: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), TrackerError>> {
        Box::pin(TrackerClient::report(self, task, report, key))
    }
}

/// Percent-encodes an opaque id for use as one path segment (or a query value).
pub(crate) fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Team Board has no pull requests: one that reaches it is an error the outbox
    /// keeps in the dead letters (never retried, never dropped), sent nowhere.
    #[tokio::test]
    async fn a_pull_request_is_refused_for_good_not_dropped() {
        let client = TrackerClient::new("http://127.0.0.1:9", "t").unwrap();
        let pr = Report::PullRequest {
            branch: "picogent/t1".into(),
            summary: "s".into(),
        };
        let task = TaskId::new("t1").unwrap();
        let e = client.report(&task, &pr, "k").await.unwrap_err();
        assert!(matches!(e, TrackerError::Unsupported(_)), "{e}");
        assert!(!e.is_transient() && !e.may_pass() && !e.is_unauthorized());
        assert!(e.to_string().contains("picogent/t1"), "{e}");
    }

    #[test]
    fn ids_are_encoded_as_one_segment() {
        assert_eq!(super::urlencode("t_12"), "t_12");
        assert_eq!(super::urlencode("a/b c"), "a%2Fb%20c");
    }
}
