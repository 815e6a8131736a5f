//! Retry timing: exponential backoff with jitter, overridden by the server's own hints.

use std::time::Duration;

use reqwest::header::HeaderMap;

#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `attempt` (1-based). A server hint wins, bounded by a
    /// minute so a bogus header cannot park a run for hours.
    pub(crate) fn delay(&self, attempt: u32, hint: Option<Duration>) -> Duration {
        if let Some(h) = hint {
            return h.min(Duration::from_secs(60));
        }
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.cap);
        // Up to 25% jitter so many daemons do not retry in lockstep.
        let jitter = exp.mul_f64(fastrand::f64() * 0.25);
        exp + jitter
    }
}

/// `retry-after-ms` (milliseconds) takes precedence over `retry-after` (seconds).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // A server's number, so never trusted to fit a Duration (`inf`, `1e30`, `NaN`).
    let secs = |s: f64| Duration::try_from_secs_f64(s).ok();
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        if let Some(d) = secs(ms / 1000.0) {
            return Some(d);
        }
    }
    get("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(secs)
}

/// `x-should-retry: true|false` overrides the status-code rule.
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry").and_then(|v| v.to_str().ok()) {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_header_wins_over_seconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
    }

    #[test]
    fn absurd_retry_headers_are_ignored_not_a_panic() {
        for v in ["inf", "1e30", "NaN", "-1", "1e400"] {
            let mut h = HeaderMap::new();
            h.insert("retry-after", v.parse().unwrap());
            assert_eq!(retry_after(&h), None, "{v}");
            let mut h = HeaderMap::new();
            h.insert("retry-after-ms", v.parse().unwrap());
            assert_eq!(retry_after(&h), None, "{v}");
        }
    }

    #[test]
    fn backoff_grows_and_caps() {
        let p = RetryPolicy {
            max_retries: 10,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(400),
        };
        let d1 = p.delay(1, None);
        let d3 = p.delay(3, None);
        let d9 = p.delay(9, None);
        assert!(d1 >= Duration::from_millis(100) && d1 <= Duration::from_millis(125));
        assert!(d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(500));
        assert!(d9 <= Duration::from_millis(500));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(500))),
            Duration::from_secs(60)
        );
    }
}
