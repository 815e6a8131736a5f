//! Accepted events, committed in groups: every accept waiting when the writer takes
//! its batch goes into one statement and one commit (one WAL flush for all of them),
//! as the file journal's group commit does. The statement is sent typed, in one round
//! trip (no prepare first). An id twice in one batch is new once.

use std::collections::HashSet;

use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::Type;

use super::{Pg, Result, StoreError};

/// Accepts waiting for the writer, at most (a sender waits beyond it).
const WAITING: usize = 4096;
/// The most accepts one statement commits.
const BATCH: usize = 512;

pub(super) struct Accept {
    id: String,
    task: String,
    arrival: String,
    answer: oneshot::Sender<Result<bool>>,
}

pub(super) type Queue = mpsc::Sender<Accept>;

/// The writer's queue; its task is the store's, ended when the queue closes.
pub(super) fn start(pg: std::sync::Weak<Pg>, tasks: &tokio_util::task::TaskTracker) -> Queue {
    let (tx, mut rx) = mpsc::channel::<Accept>(WAITING);
    tasks.spawn(async move {
        let mut batch = Vec::with_capacity(BATCH);
        while rx.recv_many(&mut batch, BATCH).await > 0 {
            let Some(pg) = pg.upgrade() else { return };
            let taken = std::mem::take(&mut batch);
            write(&pg, taken).await;
        }
    });
    tx
}

/// Writes a batch; a batch the database refuses (one event it cannot store) is written
/// again one event at a time, so only that event is refused.
async fn write(pg: &Pg, batch: Vec<Accept>) {
    if batch.len() == 1 {
        return write_batch(pg, batch).await;
    }
    let Some(refused) = write_batch_or_return(pg, batch).await else {
        return;
    };
    for one in refused {
        write_batch(pg, vec![one]).await;
    }
}

async fn write_batch(pg: &Pg, batch: Vec<Accept>) {
    if let Some(refused) = write_batch_or_return(pg, batch).await {
        answer_all(refused, StoreError::Refused, "refused");
    }
}

fn answer_all(batch: Vec<Accept>, kind: fn(String) -> StoreError, why: &str) {
    for a in batch {
        let _ = a.answer.send(Err(kind(why.to_string())));
    }
}

/// Commits the batch and answers it; a batch the database refused comes back
/// unanswered (`Some`).
async fn write_batch_or_return(pg: &Pg, batch: Vec<Accept>) -> Option<Vec<Accept>> {
    let ids: Vec<&str> = batch.iter().map(|a| a.id.as_str()).collect();
    let tasks: Vec<&str> = batch.iter().map(|a| a.task.as_str()).collect();
    let arrivals: Vec<&str> = batch.iter().map(|a| a.arrival.as_str()).collect();
    let inserted = pg
        .run_on(super::Slot::Accept, |c| async move {
            c.query_typed(
                "WITH e AS (
                    INSERT INTO events (id, task_id, arrival)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
                    ON CONFLICT (id) DO NOTHING RETURNING id, task_id),
                 t AS (
                    INSERT INTO tasks (task_id) SELECT DISTINCT task_id FROM e
                    ON CONFLICT (task_id) DO NOTHING)
                 SELECT id FROM e",
                &[
                    (&ids, Type::TEXT_ARRAY),
                    (&tasks, Type::TEXT_ARRAY),
                    (&arrivals, Type::TEXT_ARRAY),
                ],
            )
            .await
        })
        .await;
    match inserted {
        Ok(rows) => {
            let mut new: HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
            for a in batch {
                // The first of one id in the batch is the new one.
                let _ = a.answer.send(Ok(new.remove(&a.id)));
            }
            None
        }
        Err(e) if e.is_transient() => {
            answer_all(batch, StoreError::Unreachable, &e.to_string());
            None
        }
        Err(e) => {
            tracing::warn!(
                events = batch.len(),
                "the store refused a batch of accepted events: {e}"
            );
            Some(batch)
        }
    }
}

impl Pg {
    /// Journals an accepted event: `Ok(true)` once committed, `Ok(false)` when its id
    /// was accepted before (by any worker).
    pub(crate) async fn accept(
        &self,
        arrival: &picogent_protocol::tracker::Arrival,
    ) -> Result<bool> {
        let body = serde_json::to_string(arrival).map_err(|e| StoreError::Corrupt {
            what: "event",
            message: e.to_string(),
        })?;
        let (answer, answered) = oneshot::channel();
        let accept = Accept {
            id: arrival.id.clone(),
            task: arrival.task_id().as_str().to_string(),
            arrival: body,
            answer,
        };
        let queue = crate::util::lock(&self.accepts).clone();
        let Some(queue) = queue else {
            return Err(StoreError::Unreachable("the store is closed".into()));
        };
        queue
            .send(accept)
            .await
            .map_err(|_| StoreError::Unreachable("the store is closed".into()))?;
        answered
            .await
            .map_err(|_| StoreError::Unreachable("the store is closed".into()))?
    }
}
