//! The token's rate limit as a budget: what GitHub's `X-RateLimit-*` headers last said
//! the token has left in its window and when the window resets. Every request waits
//! while the budget says it would be refused (nothing left before the reset), and
//! progress-comment edits slow down well before that (`pace`), so the calls that
//! deliver work keep the last of it.
//!
//! In a fleet the budget is the store's (`github_budgets`, one row per token, keyed by
//! a hash of it, never the token): each worker writes what its answers said and reads
//! the row before each request, so a worker that has not asked GitHub for a while
//! still knows the token another worker spent. `rate_wait` reads a refusal's own
//! wait (a secondary limit's `retry-after`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderMap;

use super::api::ApiError;
use crate::store::pg::{Pg, RateWindow};
use crate::util::lock;

/// Step edits are made at most this often while a quarter of the window is left...
const PACE: Duration = Duration::from_secs(3);
/// ...this often below a quarter...
const PACE_LOW: Duration = Duration::from_secs(30);
/// ...and not at all below this share (the start and the outcome still are).
const STOP_EDITS: f64 = 0.05;
/// The longest picogent waits for a rate limit before it tries again anyway: GitHub's
/// windows last an hour, and a reset further off is not believed.
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// The store is asked (and told) within this, or the worker goes on with what it knows.
const STORE_WITHIN: Duration = Duration::from_secs(1);

pub(crate) struct Budget {
    local: Mutex<Option<RateWindow>>,
    /// The fleet's store and this token's key there.
    shared: Mutex<Option<(Arc<Pg>, String)>>,
}

fn header(h: &HeaderMap, name: &str) -> Option<i64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The window an answer's headers describe (the core resource's only).
fn window_of(h: &HeaderMap) -> Option<RateWindow> {
    let resource = h.get("x-ratelimit-resource").and_then(|v| v.to_str().ok());
    if resource.is_some_and(|r| r != "core") {
        return None;
    }
    Some(RateWindow {
        limit: header(h, "x-ratelimit-limit")?,
        remaining: header(h, "x-ratelimit-remaining")?,
        reset: header(h, "x-ratelimit-reset")?,
    })
}

impl Budget {
    pub(crate) fn new() -> Budget {
        Budget {
            local: Mutex::new(None),
            shared: Mutex::new(None),
        }
    }

    /// Shares the budget through a fleet's store, as `key`'s.
    pub(crate) fn share(&self, pg: Arc<Pg>, key: String) {
        *lock(&self.shared) = Some((pg, key));
    }

    fn store(&self) -> Option<(Arc<Pg>, String)> {
        lock(&self.shared).clone()
    }

    /// What an answer said; in a fleet written to the store before the caller goes
    /// on (another worker's next request reads it). The latest answer is the truth
    /// here: a refusal says the window is spent whatever earlier answers said.
    pub(crate) async fn learn(&self, headers: &HeaderMap) {
        let Some(w) = window_of(headers) else {
            return;
        };
        *lock(&self.local) = Some(w);
        if let Some((pg, key)) = self.store() {
            match tokio::time::timeout(STORE_WITHIN, pg.rate_note(&key, w)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!("cannot share the token's rate limit with the fleet: {e}")
                }
                Err(_) => tracing::debug!("the store did not take the token's rate limit in time"),
            }
        }
        if w.remaining == 0 {
            tracing::warn!(
                reset = w.reset,
                "the token's rate limit is spent until its reset: no request goes out before it"
            );
        }
    }

    /// The window as known now: this worker's, or the fleet's when the fleet's says
    /// it is spent (a worker that has not asked GitHub since does not know).
    async fn now(&self) -> Option<RateWindow> {
        let local = *lock(&self.local);
        let Some((pg, key)) = self.store() else {
            return local;
        };
        match tokio::time::timeout(STORE_WITHIN, pg.rate_read(&key)).await {
            Ok(Ok(Some(shared))) if shared.remaining == 0 => Some(match local {
                Some(l) if l.remaining == 0 && l.reset > shared.reset => l,
                _ => shared,
            }),
            Ok(Ok(_)) => local,
            Ok(Err(e)) => {
                tracing::debug!("cannot read the fleet's rate limit: {e}");
                local
            }
            Err(_) => local,
        }
    }

    /// Waits while a request would be refused: nothing left before the window's reset
    /// (`epoch`: GitHub's clock now, in seconds). Ends early, as an error, at `stop`.
    pub(crate) async fn before(
        &self,
        what: &str,
        epoch: impl Fn() -> i64,
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<(), ApiError> {
        loop {
            let Some(w) = self.now().await else {
                return Ok(());
            };
            let left = w.reset - epoch();
            if w.remaining > 0 || !(0..=MAX_WAIT.as_secs() as i64).contains(&left) {
                return Ok(());
            }
            // A second past the reset: GitHub's `Date` is cut to the second.
            let wait = Duration::from_secs(left.unsigned_abs() + 1);
            tracing::info!(
                "{what}: the token's rate limit is spent; waiting {wait:?} for its reset"
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return Err(ApiError::Transient {
                    what: what.to_string(),
                    message: "picogent is stopping (the rate limit was spent)".into(),
                }),
            }
        }
    }

    /// How often step edits may go out now; `None`: not until the window resets.
    pub(crate) fn pace(&self) -> Option<Duration> {
        let Some(w) = *lock(&self.local) else {
            return Some(PACE);
        };
        let share = w.remaining as f64 / w.limit.max(1) as f64;
        if share < STOP_EDITS {
            None
        } else if share < 0.25 {
            Some(PACE_LOW)
        } else {
            Some(PACE)
        }
    }
}

fn header_u64(h: &HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// How long a rate-limited answer says to wait, if it is one: `retry-after` (a
/// secondary limit, or 429), else a spent primary limit until `x-ratelimit-reset`, an
/// epoch time on GitHub's clock (`now`, GitHub's time in seconds).
pub(super) fn rate_wait(status: u16, h: &HeaderMap, message: &str, now: u64) -> Option<Duration> {
    if !matches!(status, 403 | 429) {
        return None;
    }
    if let Some(secs) = header_u64(h, "retry-after") {
        return Some(Duration::from_secs(secs.min(MAX_WAIT.as_secs())));
    }
    if header_u64(h, "x-ratelimit-remaining") == Some(0) {
        let reset = header_u64(h, "x-ratelimit-reset").unwrap_or(now + 60);
        return Some(Duration::from_secs(
            reset.saturating_sub(now).clamp(1, MAX_WAIT.as_secs()),
        ));
    }
    // A secondary limit without a header: GitHub says to wait at least a minute.
    (status == 429
        || message
            .to_ascii_lowercase()
            .contains("secondary rate limit"))
    .then_some(Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(remaining: &str, reset: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-limit", HeaderValue::from_static("5000"));
        h.insert(
            "x-ratelimit-remaining",
            HeaderValue::from_str(remaining).unwrap(),
        );
        h.insert("x-ratelimit-reset", HeaderValue::from_str(reset).unwrap());
        h
    }

    #[test]
    fn rate_limits_are_read_from_the_headers() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(rate_wait(403, &h, "", 1000), Some(Duration::from_secs(7)));
        assert_eq!(rate_wait(500, &h, "", 1000), None);
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        h.insert("x-ratelimit-reset", HeaderValue::from_static("99999999999"));
        assert_eq!(rate_wait(403, &h, "", 1000), Some(MAX_WAIT));
        let h = HeaderMap::new();
        assert_eq!(rate_wait(403, &h, "Bad credentials", 1000), None);
        assert_eq!(
            rate_wait(403, &h, "You have exceeded a secondary rate limit", 1000),
            Some(Duration::from_secs(60))
        );
    }

    #[tokio::test]
    async fn edits_slow_down_before_the_budget_is_spent() {
        let b = Budget::new();
        assert_eq!(b.pace(), Some(PACE));
        b.learn(&headers("4000", "100")).await;
        assert_eq!(b.pace(), Some(PACE));
        b.learn(&headers("1000", "100")).await;
        assert_eq!(b.pace(), Some(PACE_LOW));
        b.learn(&headers("100", "100")).await;
        assert_eq!(b.pace(), None);
        // The latest answer is the truth: a new window.
        b.learn(&headers("4999", "200")).await;
        assert_eq!(b.pace(), Some(PACE));
        // Another resource's headers are not the core's.
        let mut search = headers("0", "300");
        search.insert("x-ratelimit-resource", HeaderValue::from_static("search"));
        b.learn(&search).await;
        assert_eq!(b.pace(), Some(PACE));
    }

    #[tokio::test]
    async fn a_spent_budget_waits_for_its_reset() {
        let b = Budget::new();
        let stop = tokio_util::sync::CancellationToken::new();
        b.learn(&headers("0", "1000")).await;
        // Past the reset: no wait.
        b.before("GET /x", || 1001, &stop).await.unwrap();
        // Before it: a wait that the stop ends.
        stop.cancel();
        let e = b.before("GET /x", || 990, &stop).await.unwrap_err();
        assert!(e.to_string().contains("rate limit"), "{e}");
    }
}
