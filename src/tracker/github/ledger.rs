//! Where the intake's decisions land. On one machine: the router's journal, with the
//! book written after (and mended from the journal at start). In a fleet: the store,
//! in one transaction under the repository's lock with the book's entries the decision
//! read and changed (`store::pg::github`), so two workers hearing of one assignment
//! make one task and a worker killed halfway leaves nothing half done.

use crate::store::pg::{Locked, Pg, StoreError, Which};
use crate::tracker::router::{AcceptError, Accepted, Router};
use crate::tracker::types::{Arrival, TaskId};

use super::intake::Intake;
use super::payload::{CommentKind, Incoming};

/// The router, and in a fleet the decision's transaction.
#[derive(Clone, Copy)]
pub(crate) enum Ledger<'a, 'l> {
    Journal(&'a Router),
    Store(&'a Router, &'a Locked<'l>),
}

fn refused(e: StoreError) -> AcceptError {
    AcceptError::Journal(e.to_string())
}

impl Ledger<'_, '_> {
    pub(super) fn router(&self) -> &Router {
        match self {
            Ledger::Journal(r) | Ledger::Store(r, _) => r,
        }
    }

    /// Journals the event: new, or a repeat of one accepted before.
    pub(super) async fn accept(&self, arrival: Arrival) -> Result<Accepted, AcceptError> {
        match self {
            Ledger::Journal(router) => router.accept(arrival, ()).await,
            Ledger::Store(router, locked) => {
                if router.draining() {
                    return Err(AcceptError::ShuttingDown);
                }
                if !locked.accept(&arrival).await.map_err(refused)? {
                    return Ok(Accepted::Duplicate);
                }
                tracing::info!(id = %arrival.id, kind = arrival.event.kind(), task = %arrival.task_id(), "event accepted");
                Ok(Accepted::New)
            }
        }
    }

    /// Whether the task's work is going or waiting: on this machine, or anywhere in
    /// the fleet (when the store cannot say, it is, so the cancellation is sent).
    pub(super) async fn has_work(&self, task: &TaskId) -> bool {
        match self {
            Ledger::Journal(router) => router.has_work(task),
            Ledger::Store(router, locked) => {
                router.has_work(task) || locked.has_work(task.as_str()).await.unwrap_or(true)
            }
        }
    }
}

/// The issues a decision about `incoming` reads: its own, the one a review comment's
/// branch names, and (a pull request's comment) the one whose branch it is.
fn asked(incoming: &Incoming) -> (Vec<u64>, Option<u64>) {
    match incoming {
        Incoming::Issue { issue, .. } => (vec![issue.number], None),
        Incoming::Comment {
            issue,
            comment,
            head,
        } => {
            let mut ns = vec![issue.number];
            ns.extend(head.as_deref().and_then(super::payload::issue_of_branch));
            let pull = match (&comment.kind, issue.is_pull) {
                (CommentKind::Review { pull }, _) => Some(*pull),
                (CommentKind::Issue, true) => Some(issue.number),
                (CommentKind::Issue, false) => None,
            };
            (ns, pull)
        }
    }
}

impl Intake {
    /// A fleet's decision: the repository's lock, the entries read afresh, the event
    /// and the entries written in one transaction; the worker loop told after it.
    pub(super) async fn handle_in_store(
        &self,
        pg: &Pg,
        repo: &str,
        router: &Router,
        incoming: &Incoming,
        delivery: Option<&str>,
    ) -> Result<Accepted, AcceptError> {
        let _turn = self.book.turn().await;
        let locked = pg.github_lock(repo).await.map_err(refused)?;
        self.book.begin();
        let (issues, pull) = asked(incoming);
        self.book
            .load(&locked, Which::Issues(&issues))
            .await
            .map_err(refused)?;
        if let Some(p) = pull {
            self.book
                .load(&locked, Which::Pull(p))
                .await
                .map_err(refused)?;
        }
        let decision = self.decide(incoming);
        let ledger = Ledger::Store(router, &locked);
        let accepted = self.act(ledger, decision, delivery).await?;
        self.book.write(&locked).await.map_err(refused)?;
        locked.commit().await.map_err(refused)?;
        self.book.committed();
        if accepted == Accepted::New {
            router.wake_fleet();
        }
        Ok(accepted)
    }

    /// Runs `f` in the issue's turn: a fleet's under the repository's lock, with the
    /// issue's entry read afresh before and what `f` changed written after.
    pub(super) async fn section<T>(&self, n: u64, f: impl FnOnce() -> T) -> Result<T, StoreError> {
        let Some((pg, repo)) = self.book.fleet() else {
            let _one = self.gate.lock().await;
            return Ok(f());
        };
        let _turn = self.book.turn().await;
        let locked = pg.github_lock(repo).await?;
        self.book.begin();
        self.book.load(&locked, Which::Issues(&[n])).await?;
        let out = f();
        self.book.write(&locked).await?;
        locked.commit().await?;
        self.book.committed();
        Ok(out)
    }
}
