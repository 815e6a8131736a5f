//! Team Board's WebSocket in a fleet: the tracker keeps one connection per agent, so
//! exactly one worker holds it at a time, elected through the store (the `tracker-ws`
//! role, a lease its holder renews). The others work from the store: an event the
//! holder receives is committed there before it is acknowledged, and any worker claims
//! its task. A holder that cannot renew in time closes the connection before another
//! worker may open one; a worker that stops lets the role go at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::store::pg::Pg;
use crate::tracker::base::DaemonError;
use crate::tracker::router::Router;
use crate::tracker::types::AgentDescription;
use crate::tracker::ws::{self, WsOptions};

const ROLE: &str = "tracker-ws";

/// Holds the tracker's connection whenever this worker is elected, until `stop`.
pub(crate) async fn run(
    opts: WsOptions,
    desc: AgentDescription,
    router: Router,
    pg: Arc<Pg>,
    lease: Duration,
    stop: CancellationToken,
) -> Result<(), DaemonError> {
    loop {
        let Some(won) = elected(&pg, lease, &stop).await else {
            return Ok(());
        };
        tracing::info!("this worker holds the tracker's connection for the fleet");
        let held = stop.child_token();
        let keeper = tokio::spawn(keep(pg.clone(), lease, won, held.clone()));
        let ended = ws::run(opts.clone(), desc.clone(), router.clone(), held.clone()).await;
        held.cancel();
        let _ = keeper.await;
        if stop.is_cancelled() || ended.is_err() {
            if let Err(e) = pg.resign(ROLE).await {
                tracing::warn!("cannot let the tracker's connection go for another worker: {e}");
            }
            return ended.map_err(DaemonError::from);
        }
        tracing::warn!(
            "this worker no longer holds the tracker's connection; another worker takes it"
        );
    }
}

/// Waits until this worker holds the role: when the winning statement was sent;
/// `None` when stopped first.
async fn elected(pg: &Pg, lease: Duration, stop: &CancellationToken) -> Option<Instant> {
    let mut said = false;
    loop {
        let sent = Instant::now();
        match pg.lead(ROLE, lease).await {
            Ok(true) => return Some(sent),
            Ok(false) if !said => {
                tracing::info!(
                    "another worker holds the tracker's connection: this one works from the store"
                );
                said = true;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("cannot ask the store who holds the tracker's connection: {e}")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(lease / 3) => {}
            _ = stop.cancelled() => return None,
        }
    }
}

/// Renews the role every third of the lease; ends `held` once it is another worker's
/// or could not be renewed for five sixths of the lease.
async fn keep(pg: Arc<Pg>, lease: Duration, won: Instant, held: CancellationToken) {
    let deadline = lease * 5 / 6;
    let mut renewed = won;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(lease / 3) => {}
            _ = held.cancelled() => return,
        }
        let left = deadline
            .saturating_sub(renewed.elapsed())
            .max(Duration::from_millis(100));
        // Counted from the sending, as the database counts it from the statement.
        let sent = Instant::now();
        match tokio::time::timeout(left, pg.lead(ROLE, lease)).await {
            Ok(Ok(true)) => renewed = sent,
            Ok(Ok(false)) => break,
            Ok(Err(e)) => tracing::warn!("cannot renew the tracker's connection's lease: {e}"),
            Err(_) => {}
        }
        if renewed.elapsed() >= deadline {
            break;
        }
    }
    held.cancel();
}
