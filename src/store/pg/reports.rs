//! The fleet's outbox. Reports are queued under the task's lease, in the same
//! transaction that marks the events they conclude done: a worker whose lease another
//! worker has since taken queues nothing. Any worker delivers them: each task's first
//! unsent report is claimed for a while (`claimed_until`, renewed while it is being
//! delivered), so one worker at a time sends it and a task's reports go out in order;
//! a deliverer that dies leaves its claim to run out, and the report's idempotency key
//! covers the one repeat that can follow.

use std::time::Duration;

use picogent_protocol::tracker::{Report, TaskId};

use super::{Pg, Result, StoreError};

/// A report to deliver, claimed by this worker.
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub(crate) seq: i64,
    pub(crate) key: String,
    pub(crate) task_id: TaskId,
    pub(crate) report: Report,
}

fn corrupt(e: serde_json::Error) -> StoreError {
    StoreError::Corrupt {
        what: "report",
        message: e.to_string(),
    }
}

/// Whether the task's lease is `me`'s under `fence` and live; its row stays locked
/// until the transaction ends.
pub(super) async fn ours(
    tx: &tokio_postgres::Transaction<'_>,
    task: &str,
    me: &str,
    fence: i64,
) -> Result<bool> {
    let row = tx
        .query_opt(
            "SELECT 1 FROM tasks WHERE task_id = $1 AND owner = $2 AND fence = $3
               AND lease_until > now() FOR UPDATE",
            &[&task, &me, &fence],
        )
        .await
        .map_err(StoreError::from_pg)?;
    Ok(row.is_some())
}

impl Pg {
    /// Queues reports for a task, in order, as the conclusion of the events
    /// `concludes` (marked done in the same transaction); refused with `LeaseLost`
    /// unless this worker's lease on the task is the live one.
    pub(crate) async fn push(
        &self,
        task: &TaskId,
        reports: &[Report],
        concludes: &[String],
    ) -> Result<()> {
        let fence = self
            .fence(task.as_str())
            .ok_or_else(|| StoreError::LeaseLost(task.to_string()))?;
        let mut keys = Vec::with_capacity(reports.len());
        let mut bodies = Vec::with_capacity(reports.len());
        for r in reports {
            keys.push(format!(
                "picogent-{}-{}",
                crate::util::now_millis(),
                crate::util::random_hex(8)
            ));
            bodies.push(serde_json::to_string(r).map_err(corrupt)?);
        }
        let (task_s, me, concludes) = (
            task.as_str().to_string(),
            self.worker.clone(),
            concludes.to_vec(),
        );
        self.transaction(move |tx| {
            Box::pin(async move {
                if !ours(tx, &task_s, &me, fence).await? {
                    return Err(StoreError::LeaseLost(task_s));
                }
                tx.execute(
                    "INSERT INTO reports (key, task_id, report)
                     SELECT k, $1, r FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS x(k, r, n)
                     ORDER BY n",
                    &[&task_s, &keys, &bodies],
                )
                .await
                .map_err(StoreError::from_pg)?;
                tx.execute(
                    "UPDATE events SET done_at = now()
                     WHERE id = ANY($1) AND task_id = $2 AND done_at IS NULL",
                    &[&concludes, &task_s],
                )
                .await
                .map_err(StoreError::from_pg)?;
                Ok(())
            })
        })
        .await
        .inspect_err(|e| {
            if matches!(e, StoreError::LeaseLost(_)) {
                crate::util::lock(&self.held).remove(task.as_str());
            }
        })
    }

    /// Claims, for `hold`, the first unsent report of up to `n` tasks that no other
    /// worker is delivering and that are not in `busy` (this worker's own lanes: a
    /// claim of its own outside them is stale, and taken again).
    pub(crate) async fn claim_reports(
        &self,
        n: usize,
        busy: &[String],
        hold: Duration,
    ) -> Result<Vec<Queued>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let (me, busy, limit) = (self.worker.clone(), busy.to_vec(), n as i64);
        let rows = self
            .run(|c| async move {
                c.query(
                    "UPDATE reports r SET claimed_by = $1,
                        claimed_until = now() + make_interval(secs => $4)
                     WHERE r.seq IN (
                        SELECT q.seq FROM reports q
                        WHERE q.seq IN (SELECT DISTINCT ON (task_id) seq FROM reports
                                        WHERE sent_at IS NULL ORDER BY task_id, seq)
                          AND NOT (q.task_id = ANY($2))
                          AND (q.claimed_until IS NULL OR q.claimed_until <= now()
                               OR q.claimed_by = $1)
                        ORDER BY q.seq LIMIT $3 FOR UPDATE SKIP LOCKED)
                       AND r.sent_at IS NULL
                       AND (r.claimed_until IS NULL OR r.claimed_until <= now()
                            OR r.claimed_by = $1)
                     RETURNING r.seq, r.key, r.task_id, r.report",
                    &[&me, &busy, &limit, &hold.as_secs_f64()],
                )
                .await
            })
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let report: Report = serde_json::from_str(r.get::<_, &str>(3)).map_err(corrupt)?;
            let task: String = r.get(2);
            let Ok(task_id) = TaskId::new(task.clone()) else {
                tracing::error!(task, "a queued report has no usable task id");
                continue;
            };
            out.push(Queued {
                seq: r.get(0),
                key: r.get(1),
                task_id,
                report,
            });
        }
        Ok(out)
    }

    /// Extends this worker's claim on a report; false when it is no longer its own.
    pub(crate) async fn hold_report(&self, seq: i64, hold: Duration) -> Result<bool> {
        let me = self.worker.clone();
        let n = self
            .run(|c| async move {
                c.execute(
                    "UPDATE reports SET claimed_until = now() + make_interval(secs => $3)
                     WHERE seq = $1 AND claimed_by = $2 AND sent_at IS NULL",
                    &[&seq, &me, &hold.as_secs_f64()],
                )
                .await
            })
            .await?;
        Ok(n == 1)
    }

    /// Records a delivered report.
    pub(crate) async fn sent(&self, seq: i64) -> Result<()> {
        self.run(|c| async move {
            c.execute(
                "UPDATE reports SET sent_at = now() WHERE seq = $1 AND sent_at IS NULL",
                &[&seq],
            )
            .await
        })
        .await?;
        Ok(())
    }

    /// Keeps a report the tracker refused for good among the dead letters, and takes
    /// it off the queue, in one statement.
    pub(crate) async fn bury(&self, item: &Queued, error: &str) -> Result<()> {
        let report = serde_json::to_string(&item.report).map_err(corrupt)?;
        let me = self.worker.clone();
        let (seq, task, key, error) = (
            item.seq,
            item.task_id.as_str().to_string(),
            item.key.clone(),
            error.to_string(),
        );
        self.run(|c| async move {
            c.execute(
                "WITH s AS (UPDATE reports SET sent_at = now()
                            WHERE seq = $1 AND sent_at IS NULL AND claimed_by = $6
                            RETURNING 1)
                 INSERT INTO dead_letters (task_id, key, report, error)
                 SELECT $2, $3, $4, $5 FROM s",
                &[&seq, &task, &key, &report, &error, &me],
            )
            .await
        })
        .await?;
        Ok(())
    }

    /// Reports not yet delivered, fleet-wide, and the dead letters.
    pub(crate) async fn report_counts(&self) -> Result<(i64, i64)> {
        let row = self
            .run(|c| async move {
                c.query_one(
                    "SELECT (SELECT count(*) FROM reports WHERE sent_at IS NULL),
                            (SELECT count(*) FROM dead_letters)",
                    &[],
                )
                .await
            })
            .await?;
        Ok((row.get(0), row.get(1)))
    }
}
