//! Roles one worker of the fleet holds at a time (`leaders`): the connection to Team
//! Board's WebSocket, which the tracker keeps one of per agent. A role is a lease like
//! a task's: taken when free or run out, renewed by its holder, let go at a stop.

use std::time::Duration;

use super::{Pg, Result};

impl Pg {
    /// Holds `role` for this worker (taken when free or run out, renewed when its
    /// own); whether this worker holds it now.
    pub(crate) async fn lead(&self, role: &str, lease: Duration) -> Result<bool> {
        let (role, me) = (role.to_string(), self.worker.clone());
        let row = self
            .run_on(super::Slot::Lease, |c| async move {
                c.query_opt(
                    "INSERT INTO leaders (role, owner, lease_until)
                     VALUES ($1, $2, now() + make_interval(secs => $3))
                     ON CONFLICT (role) DO UPDATE SET owner = EXCLUDED.owner,
                        lease_until = EXCLUDED.lease_until,
                        fence = leaders.fence + (leaders.owner <> EXCLUDED.owner)::int
                     WHERE leaders.owner = EXCLUDED.owner OR leaders.lease_until <= now()
                     RETURNING fence",
                    &[&role, &me, &lease.as_secs_f64()],
                )
                .await
            })
            .await?;
        Ok(row.is_some())
    }

    /// Lets `role` go at once, if this worker holds it.
    pub(crate) async fn resign(&self, role: &str) -> Result<()> {
        let (role, me) = (role.to_string(), self.worker.clone());
        self.run(|c| async move {
            c.execute(
                "DELETE FROM leaders WHERE role = $1 AND owner = $2",
                &[&role, &me],
            )
            .await
        })
        .await?;
        Ok(())
    }
}
