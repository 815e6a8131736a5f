//! What `/healthz` knows of the link to Team Board: whether the agent ever registered
//! (a daemon that never did takes no tasks, however well it answers), and whether
//! the tracker keeps ending this agent's connections right after it registers — what
//! a tracker does when two processes register one slug, each taking the slug from the
//! other. The second is a guess from the outside, said as one: a warning, never a
//! reason to stop.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A registered connection that ended within this long was taken from us.
const SHORT: Duration = Duration::from_secs(10);
/// This many such ends within `WINDOW` are another process with the same slug.
const TIMES: usize = 3;
const WINDOW: Duration = Duration::from_secs(300);
/// How long the warning stays after the last such end.
const KEEP: Duration = Duration::from_secs(600);

#[derive(Default)]
struct State {
    /// The transport registers with the tracker (Team Board): GitHub mode does not.
    expected: bool,
    ever: bool,
    since: Option<Instant>,
    last_error: Option<String>,
    short_ends: VecDeque<Instant>,
    contended: Option<(Instant, String)>,
}

#[derive(Default)]
pub(crate) struct Link {
    state: Mutex<State>,
}

impl Link {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The daemon is about to register with its tracker.
    pub(crate) fn expect(&self) {
        self.state().expected = true;
    }

    pub(crate) fn registered(&self) {
        let mut s = self.state();
        s.ever = true;
        s.since = Some(Instant::now());
        s.last_error = None;
    }

    /// An attempt to connect or register failed (before it registered).
    pub(crate) fn failed(&self, why: &str) {
        self.state().last_error = Some(why.to_string());
    }

    /// The connection ended; `slug` names the agent for the warning.
    pub(crate) fn lost(&self, why: &str, slug: &str) {
        let mut s = self.state();
        let now = Instant::now();
        s.last_error = Some(why.to_string());
        let Some(since) = s.since.take() else {
            return;
        };
        if now.duration_since(since) > SHORT {
            return;
        }
        s.short_ends.push_back(now);
        while s
            .short_ends
            .front()
            .is_some_and(|t| now.duration_since(*t) > WINDOW)
        {
            s.short_ends.pop_front();
        }
        if s.short_ends.len() >= TIMES {
            let message = format!(
                "the tracker ended this agent's connection {} times within {} s of registering (last: {why}): \
                 another process may be registered as `{slug}` with this tracker; run one picogent per agent identity",
                s.short_ends.len(),
                SHORT.as_secs()
            );
            if s.contended
                .as_ref()
                .is_none_or(|(at, _)| now.duration_since(*at) > KEEP)
            {
                tracing::warn!(slug, "{message}");
            }
            s.contended = Some((now, message));
        }
    }

    /// Why the daemon takes no tasks: it never registered.
    pub(crate) fn not_registered(&self) -> Option<String> {
        let s = self.state();
        (s.expected && !s.ever).then(|| match &s.last_error {
            Some(why) => format!("not registered with the tracker yet ({why})"),
            None => "not registered with the tracker yet".to_string(),
        })
    }

    /// The warning about another process with the same slug, while it stands.
    pub(crate) fn contended(&self) -> Option<String> {
        let s = self.state();
        s.contended
            .as_ref()
            .filter(|(at, _)| at.elapsed() < KEEP)
            .map(|(_, m)| m.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_ends_after_registering_are_contention_and_slow_ones_are_not() {
        let link = Link::default();
        link.expect();
        assert!(link.not_registered().is_some());
        link.failed("connection refused");
        assert!(link
            .not_registered()
            .unwrap()
            .contains("connection refused"));
        for _ in 0..2 {
            link.registered();
            link.lost("closed by the tracker", "coder");
        }
        assert!(link.contended().is_none());
        link.registered();
        assert!(link.not_registered().is_none());
        link.lost("closed by the tracker", "coder");
        let w = link.contended().unwrap();
        assert!(w.contains("`coder`") && w.contains("3 times"), "{w}");
        // A loss without a registration in between counts nothing more.
        let other = Link::default();
        other.lost("refused", "coder");
        other.lost("refused", "coder");
        other.lost("refused", "coder");
        assert!(other.contended().is_none());
        assert!(
            other.not_registered().is_none(),
            "not expected: GitHub mode"
        );
    }
}
