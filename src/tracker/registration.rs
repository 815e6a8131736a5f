//! Registration and heartbeats over HTTP: register (retrying transient failures every
//! few seconds, stopping on a refused token or an invalid description), then beat on
//! the interval the tracker asked for, registering again when it forgot the agent.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::types::{AgentDescription, Load, Registered};
use super::{TrackerClient, TrackerError};

#[derive(Debug, thiserror::Error)]
pub enum FatalError {
    #[error("{0}")]
    Tracker(TrackerError),
    #[error("the tracker rejected the agent description: {0}")]
    Invalid(String),
}

/// Registers, retrying every `retry` on connection errors, 5xx and 429. `None` when
/// `stop` was cancelled first.
pub(crate) async fn register(
    client: &TrackerClient,
    desc: &AgentDescription,
    retry: Duration,
    link: &super::link::Link,
    stop: &CancellationToken,
) -> Result<Option<Registered>, FatalError> {
    let mut failed: u32 = 0;
    link.expect();
    loop {
        match client.register(desc).await {
            Ok(r) => {
                link.registered();
                tracing::info!(
                    agent_id = r.agent_id.as_deref().unwrap_or("-"),
                    "registered with the tracker"
                );
                return Ok(Some(r));
            }
            Err(e @ TrackerError::Unauthorized { .. }) => return Err(FatalError::Tracker(e)),
            Err(TrackerError::Rejected {
                status, message, ..
            }) if status == 400 || status == 422 => return Err(FatalError::Invalid(message)),
            Err(e) => {
                link.failed(&e.to_string());
                failed = failed.saturating_add(1);
                // Said at once, then about once a minute: not every few seconds for
                // as long as the tracker is away.
                let every = (60_000 / retry.as_millis().max(1)).max(1);
                if failed == 1 || u128::from(failed) % every == 0 {
                    tracing::warn!(
                        attempts = failed,
                        "registration failed, retrying every {retry:?}: {e}"
                    );
                } else {
                    tracing::debug!(attempts = failed, "registration failed: {e}");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stop.cancelled() => return Ok(None),
        }
    }
}

/// Beats every `interval` until `stop`; a 404 means the tracker forgot the agent, so it
/// registers again at once. Other failures are logged and the next beat goes on time.
pub(crate) async fn heartbeats(
    client: &TrackerClient,
    desc: &AgentDescription,
    mut interval: Duration,
    retry: Duration,
    load: impl Fn() -> Load,
    link: &super::link::Link,
    stop: &CancellationToken,
) -> Result<(), FatalError> {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return Ok(()),
        }
        match client.heartbeat(&desc.slug, &load()).await {
            Ok(()) => {}
            Err(TrackerError::NotFound { .. }) => {
                tracing::warn!("the tracker no longer knows this agent; registering again");
                match register(client, desc, retry, link, stop).await? {
                    Some(r) => {
                        if let Some(d) = heartbeat_from_tracker(r.heartbeat_interval_sec) {
                            interval = d;
                        }
                    }
                    None => return Ok(()),
                }
            }
            Err(e @ TrackerError::Unauthorized { .. }) => return Err(FatalError::Tracker(e)),
            Err(e) => tracing::warn!("heartbeat failed: {e}"),
        }
    }
}

/// The heartbeat interval a tracker asks for, kept to 1 s – 1 h: the tracker's number
/// must not make picogent spin or overflow its timers.
pub(crate) fn heartbeat_from_tracker(secs: Option<u64>) -> Option<Duration> {
    secs.filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s.min(3600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracker_heartbeat_interval_is_kept_within_bounds() {
        assert_eq!(
            heartbeat_from_tracker(Some(u64::MAX)),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(heartbeat_from_tracker(Some(0)), None);
        assert_eq!(
            heartbeat_from_tracker(Some(15)),
            Some(Duration::from_secs(15))
        );
    }
}
