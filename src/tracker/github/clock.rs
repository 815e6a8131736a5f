//! GitHub's clock as picogent knows it: the offset between the `Date` header of
//! GitHub's last answer and the local clock. Every time compared with GitHub's times
//! (a poll's first `since`, a rate limit's reset, where to look for a report's copy,
//! an App's JWT) is read from it; waits are monotonic (`tokio::time::Instant`), so a
//! local clock that is wrong or stepped changes neither.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

type Time = chrono::DateTime<chrono::Utc>;

/// How far GitHub's clock is from the local one, in milliseconds (0 until an answer
/// says otherwise).
#[derive(Debug, Default)]
pub(crate) struct Clock {
    ahead_ms: AtomicI64,
}

impl Clock {
    /// Learns the offset from an answer's `Date` (RFC 7231, whole seconds: the offset
    /// is known to a second, which every comparison here allows for).
    pub(crate) fn learn(&self, date: Option<&str>) {
        let Some(server) = date.and_then(|d| chrono::DateTime::parse_from_rfc2822(d).ok()) else {
            return;
        };
        let local = chrono::Utc::now();
        // `Date` is cut to the second: half a second is its likely part.
        let ahead = server.timestamp_millis() + 500 - local.timestamp_millis();
        let before = self.ahead_ms.swap(ahead, Ordering::Relaxed);
        if (ahead - before).abs() > 30_000 {
            tracing::info!(
                seconds = ahead / 1000,
                "GitHub's clock is this far ahead of the local one; GitHub's times are read with it"
            );
        }
    }

    /// GitHub's time now.
    pub(crate) fn now(&self) -> Time {
        self.at_local(chrono::Utc::now())
    }

    /// GitHub's time at a local time.
    pub(crate) fn at_local(&self, local: Time) -> Time {
        local + chrono::Duration::milliseconds(self.ahead_ms.load(Ordering::Relaxed))
    }

    /// GitHub's time now, in seconds since the epoch.
    pub(crate) fn epoch(&self) -> u64 {
        u64::try_from(self.now().timestamp()).unwrap_or(0)
    }

    /// How long until GitHub's clock reads `at` (zero when it is past).
    pub(crate) fn until(&self, at: Time) -> Duration {
        (at - self.now()).to_std().unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_offset_comes_from_the_date_header() {
        let c = super::Clock::default();
        let ahead = chrono::Utc::now() + chrono::Duration::seconds(600);
        c.learn(Some(&ahead.format("%a, %d %b %Y %H:%M:%S GMT").to_string()));
        let off = (c.now() - chrono::Utc::now()).num_seconds();
        assert!((598..=601).contains(&off), "{off}");
        c.learn(Some("not a date"));
        let off = (c.now() - chrono::Utc::now()).num_seconds();
        assert!((598..=601).contains(&off), "{off}");
        let soon = c.now() + chrono::Duration::seconds(5);
        assert!(c.until(soon) <= std::time::Duration::from_secs(5));
        assert_eq!(
            c.until(c.now() - chrono::Duration::seconds(5)),
            std::time::Duration::ZERO
        );
    }
}
