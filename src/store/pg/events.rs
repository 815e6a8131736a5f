//! The fleet's journal and the tasks' leases. An accepted event is one row of `events`
//! (its id unique: a repeat anywhere in the fleet is a duplicate), committed before it
//! is acknowledged. A task is worked by the one worker holding its lease: claimed when
//! it has events not done and no live lease, renewed while the worker works it, let go
//! when the worker is idle on it, and free for any worker once the database's clock
//! passes `lease_until`. Every claim raises the task's fence; an event is marked done,
//! and a report queued, only under the fence the worker claimed with.

use std::time::Duration;

use picogent_protocol::tracker::{Arrival, TaskId};

use super::{Pg, Result, Slot, StoreError};

/// How long accepted ids are remembered once their work is done.
const REMEMBER: &str = "7 days";
/// The lock that serialises claims, so `fleet_max_tasks` holds across the fleet.
const CLAIM_LOCK: i64 = 0x7069_636f_636c_6169;

/// What the fleet is doing, as `/healthz` and `/metrics` show it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FleetStatus {
    /// Tasks with events not done that no worker holds.
    pub(crate) queued_tasks: i64,
    /// How long the oldest event no worker holds has waited.
    pub(crate) oldest_queued: Option<Duration>,
    /// Live leases across the fleet.
    pub(crate) leases: i64,
    /// Leases that ran out before their worker let them go, ever.
    pub(crate) lease_expiries: i64,
    /// The tasks under a live lease (the first `ACTIVE_SHOWN`), for the tracker's
    /// heartbeats: what the fleet is working on.
    pub(crate) active: Vec<String>,
}

/// The most active tasks a status lists.
const ACTIVE_SHOWN: i64 = 1000;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Pg {
    /// Whether the id was accepted (and committed) by any worker.
    pub(crate) async fn is_seen(&self, id: &str) -> Result<bool> {
        let id = id.to_string();
        let row = self
            .run(|c| async move {
                c.query_opt("SELECT 1 FROM events WHERE id = $1", &[&id])
                    .await
            })
            .await?;
        Ok(row.is_some())
    }

    /// Counts a start of the event's work; which start this is, fleet-wide.
    pub(crate) async fn started(&self, id: &str) -> Result<u32> {
        let id = id.to_string();
        let row = self
            .run(|c| async move {
                c.query_opt(
                    "UPDATE events SET attempts = attempts + 1 WHERE id = $1 RETURNING attempts",
                    &[&id],
                )
                .await
            })
            .await?;
        Ok(row.map(|r| r.get::<_, i32>(0).max(1) as u32).unwrap_or(1))
    }

    /// Marks the event done, under this worker's lease on its task (a worker that
    /// lost the lease changes nothing: the task's new holder decides).
    pub(crate) async fn done(&self, id: &str, task: &TaskId) -> Result<()> {
        let fence = self
            .fence(task.as_str())
            .ok_or_else(|| StoreError::LeaseLost(task.to_string()))?;
        let (id, me) = (id.to_string(), self.worker.clone());
        let task = task.as_str().to_string();
        self.transaction(move |tx| {
            Box::pin(async move {
                // The task's row locked under this worker's live lease: a claim by
                // another worker waits for this, or this finds it gone.
                if !super::reports::ours(tx, &task, &me, fence).await? {
                    return Err(StoreError::LeaseLost(task));
                }
                tx.execute(
                    "UPDATE events SET done_at = now()
                     WHERE id = $1 AND task_id = $2 AND done_at IS NULL",
                    &[&id, &task],
                )
                .await
                .map_err(StoreError::from_pg)?;
                Ok(())
            })
        })
        .await
    }

    /// Claims up to `n` tasks that have events not done and no live lease, oldest
    /// event first, keeping the fleet under `fleet_max` live leases. Claims take turns
    /// on a lock of the database's, so two workers never both see room for one more.
    pub(crate) async fn claim(
        &self,
        n: usize,
        lease: Duration,
        fleet_max: Option<usize>,
    ) -> Result<Vec<TaskId>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let me = self.worker.clone();
        let limit = n as i64;
        let fleet_max = fleet_max.map(|m| m as i64).unwrap_or(i64::MAX);
        let rows = self
            .transaction(move |tx| {
                Box::pin(async move {
                    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CLAIM_LOCK])
                        .await
                        .map_err(StoreError::from_pg)?;
                    tx.query(
                        "WITH room AS (
                            SELECT least($2::bigint, greatest(0, $3::bigint - count(*))) AS n
                            FROM tasks WHERE owner IS NOT NULL AND lease_until > now()),
                         cand AS (
                            SELECT t.task_id FROM tasks t
                            JOIN (SELECT task_id, min(seq) AS first FROM events
                                  WHERE done_at IS NULL GROUP BY task_id) p USING (task_id)
                            WHERE t.owner IS NULL OR t.lease_until <= now()
                            ORDER BY p.first
                            LIMIT (SELECT n FROM room)
                            FOR UPDATE OF t SKIP LOCKED)
                         UPDATE tasks SET owner = $1, fence = tasks.fence + 1,
                            lease_until = now() + make_interval(secs => $4),
                            expiries = tasks.expiries + (tasks.owner IS NOT NULL)::int
                         FROM cand WHERE tasks.task_id = cand.task_id
                         RETURNING tasks.task_id, tasks.fence",
                        &[&me, &limit, &fleet_max, &secs(lease)],
                    )
                    .await
                    .map_err(StoreError::from_pg)
                })
            })
            .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        let mut held = crate::util::lock(&self.held);
        for row in rows {
            let (task, fence): (String, i64) = (row.get(0), row.get(1));
            held.insert(task.clone(), fence);
            match TaskId::new(task) {
                Ok(t) => claimed.push(t),
                Err(e) => tracing::error!("a claimed task has no usable id: {e}"),
            }
        }
        Ok(claimed)
    }

    /// Renews every lease this worker holds; the tasks whose leases it lost (another
    /// worker took them after they ran out), which it forgets.
    pub(crate) async fn renew(&self, lease: Duration) -> Result<Vec<String>> {
        let (tasks, fences): (Vec<String>, Vec<i64>) = crate::util::lock(&self.held)
            .iter()
            .map(|(t, f)| (t.clone(), *f))
            .unzip();
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let me = self.worker.clone();
        let (t, f) = (tasks.clone(), fences.clone());
        let rows = self
            .run_on(Slot::Lease, |c| async move {
                c.query(
                    "UPDATE tasks SET lease_until = now() + make_interval(secs => $4)
                     FROM unnest($2::text[], $3::bigint[]) AS h(task_id, fence)
                     WHERE tasks.task_id = h.task_id AND tasks.fence = h.fence
                       AND tasks.owner = $1
                     RETURNING tasks.task_id",
                    &[&me, &t, &f, &secs(lease)],
                )
                .await
            })
            .await?;
        let kept: std::collections::HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
        // Lost: a lease not renewed that is still held under the fence asked about
        // (one let go, or claimed anew, while the renewal was on its way is not).
        let mut held = crate::util::lock(&self.held);
        let mut lost = Vec::new();
        for (t, f) in tasks.into_iter().zip(fences) {
            if !kept.contains(&t) && held.get(&t) == Some(&f) {
                held.remove(&t);
                lost.push(t);
            }
        }
        Ok(lost)
    }

    /// Forgets every lease without telling the store (it could not be renewed in
    /// time: another worker may have the tasks by now).
    pub(crate) fn forget_leases(&self) -> Vec<String> {
        crate::util::lock(&self.held)
            .drain()
            .map(|(t, _)| t)
            .collect()
    }

    /// Lets a task go: free at once for any worker (when it has events not done).
    pub(crate) async fn release(&self, task: &TaskId) -> Result<()> {
        let Some(fence) = crate::util::lock(&self.held).remove(task.as_str()) else {
            return Ok(());
        };
        let (task, me) = (task.as_str().to_string(), self.worker.clone());
        self.run(|c| async move {
            c.execute(
                "UPDATE tasks SET owner = NULL, lease_until = NULL
                 WHERE task_id = $1 AND owner = $2 AND fence = $3",
                &[&task, &me, &fence],
            )
            .await
        })
        .await?;
        Ok(())
    }

    /// The events not done of the tasks this worker holds, oldest first.
    pub(crate) async fn pending_of_held(&self) -> Result<Vec<Arrival>> {
        let tasks = self.held();
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .run(|c| async move {
                c.query(
                    "SELECT arrival FROM events
                     WHERE done_at IS NULL AND task_id = ANY($1) ORDER BY seq",
                    &[&tasks],
                )
                .await
            })
            .await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| StoreError::Corrupt {
                    what: "event",
                    message: e.to_string(),
                })
            })
            .collect()
    }

    /// What the fleet is doing.
    pub(crate) async fn fleet_status(&self) -> Result<FleetStatus> {
        let row = self
            .run(|c| async move {
                c.query_one(
                    "SELECT
                       (SELECT count(DISTINCT e.task_id) FROM events e JOIN tasks t USING (task_id)
                        WHERE e.done_at IS NULL AND (t.owner IS NULL OR t.lease_until <= now())),
                       (SELECT extract(epoch FROM now() - min(e.accepted_at))::float8
                        FROM events e JOIN tasks t USING (task_id)
                        WHERE e.done_at IS NULL AND (t.owner IS NULL OR t.lease_until <= now())),
                       (SELECT count(*) FROM tasks WHERE owner IS NOT NULL AND lease_until > now()),
                       (SELECT coalesce(sum(expiries), 0)::bigint FROM tasks),
                       ARRAY(SELECT task_id FROM tasks WHERE owner IS NOT NULL
                             AND lease_until > now() ORDER BY task_id LIMIT $1)",
                    &[&ACTIVE_SHOWN],
                )
                .await
            })
            .await?;
        Ok(FleetStatus {
            queued_tasks: row.get(0),
            oldest_queued: row
                .get::<_, Option<f64>>(1)
                .map(|s| Duration::from_secs_f64(s.max(0.0))),
            leases: row.get(2),
            lease_expiries: row.get(3),
            active: row.get(4),
        })
    }

    /// Forgets the ids of events done long ago (a repeat after that is new again).
    pub(crate) async fn forget_old(&self) -> Result<u64> {
        self.run(|c| async move {
            let events = c
                .execute(
                    &format!("DELETE FROM events WHERE done_at < now() - interval '{REMEMBER}'"),
                    &[],
                )
                .await?;
            c.execute(
                &format!("DELETE FROM reports WHERE sent_at < now() - interval '{REMEMBER}'"),
                &[],
            )
            .await?;
            // A task nobody holds and no event names is nobody's business any more.
            c.execute(
                "DELETE FROM tasks t WHERE t.owner IS NULL
                 AND NOT EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.task_id)",
                &[],
            )
            .await?;
            Ok(events)
        })
        .await
    }
}
