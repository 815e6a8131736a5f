//! What the router says about the daemon's state: for `/healthz` (`health.rs`), the
//! heartbeat's load and `/metrics`.

use std::time::Duration;

use super::{lock, Router};
use crate::tracker::types::{Load, LoadStatus};

impl Router {
    /// Why results cannot be queued now, if they cannot.
    pub(crate) fn results_waiting(&self) -> Option<String> {
        self.shared.delivery.degraded()
    }

    /// Why runs wait for disk space, while some do.
    pub(crate) fn runs_waiting_for_room(&self) -> Option<String> {
        self.shared.room.degraded()
    }

    /// Why events cannot be journaled, while they cannot: the last one was refused,
    /// within the last minute (without events since, nothing is being refused).
    pub(crate) fn journal_refusing(&self) -> Option<String> {
        lock(&self.shared.journal_refusing)
            .as_ref()
            .filter(|(at, _)| at.elapsed() < Duration::from_secs(60))
            .map(|(_, why)| why.clone())
    }

    /// The link to Team Board (registration, a slug another process takes).
    pub(crate) fn link(&self) -> &crate::tracker::link::Link {
        &self.shared.link
    }

    /// Why the tracker is not taking reports, while it is not.
    pub(crate) fn tracker_failing(&self) -> Option<String> {
        self.shared.delivery.failing()
    }

    /// Why the tracker refuses reports, while it does.
    pub(crate) fn tracker_refusing(&self) -> Option<String> {
        self.shared.delivery.refusing()
    }

    /// Why commands are refused for now, when the sandbox's namespaces lately could not
    /// be made for the moment.
    pub(crate) fn sandbox_refusing(&self) -> Option<String> {
        self.shared.agent.sandbox().refusing_lately()
    }

    /// The sandbox asked for, and the level commands run at.
    pub(crate) fn sandbox(
        &self,
    ) -> (
        crate::config::SandboxMode,
        crate::sandbox::confine::LevelInForce,
    ) {
        (
            self.shared.agent.config().policy.sandbox,
            self.sandbox_level(),
        )
    }

    pub(crate) fn state_dir(&self) -> std::path::PathBuf {
        self.shared.agent.config().state_dir()
    }

    /// Reports the tracker refused for good (kept in the dead-letter file), and where.
    pub(crate) fn dead_letters(&self) -> (usize, std::path::PathBuf) {
        self.shared.delivery.dead_letters()
    }

    /// Reports not yet delivered to the tracker.
    pub(crate) fn backlog(&self) -> usize {
        self.shared.delivery.backlog()
    }

    /// Waits (off the runtime's threads) until the sandbox level is known.
    pub(crate) async fn settle_sandbox(&self) {
        self.shared.agent.sandbox().settle().await;
    }

    /// The sandbox level the agent's commands run at.
    pub(crate) fn sandbox_level(&self) -> crate::sandbox::confine::LevelInForce {
        self.shared.agent.sandbox().level_now()
    }

    /// Whether the daemon is shutting down (no new work is taken).
    pub(crate) fn draining(&self) -> bool {
        lock(&self.shared.state).draining
    }

    /// What the tracker is told the agent is doing: in a fleet, the whole fleet (its
    /// tasks under a lease, its tasks waiting), as last read from the store.
    pub(crate) fn reported_load(&self) -> Load {
        let Some(f) = self.fleet() else {
            return self.load();
        };
        let Some(status) = f.status else {
            return self.load();
        };
        Load {
            status: if status.active.is_empty() {
                LoadStatus::Idle
            } else {
                LoadStatus::Busy
            },
            queued: usize::try_from(status.queued_tasks).unwrap_or(0),
            active_tasks: status.active,
        }
    }

    pub(crate) fn load(&self) -> Load {
        let st = lock(&self.shared.state);
        let mut active: Vec<String> = st.running.keys().map(|t| t.to_string()).collect();
        active.sort();
        Load {
            status: if active.is_empty() {
                LoadStatus::Idle
            } else {
                LoadStatus::Busy
            },
            active_tasks: active,
            queued: st.queue.len(),
        }
    }
}
