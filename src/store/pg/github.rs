//! GitHub mode's book of issues and its polling marks, shared by a fleet: one row per
//! issue a repository's tasks came from, one per polled list.
//!
//! What an event means depends on the book (an issue already a task makes a later
//! assignment nothing; a comment on it is chat), so every decision is taken under a
//! lock of the repository's (`pg_advisory_xact_lock`), on a connection of its own, in
//! one transaction with the event it accepts and the entry it changes (`Locked`): two
//! workers that hear of one assignment (a webhook here, a poll there) make one task,
//! and a worker killed between the two writes leaves neither. Outside decisions the
//! entry's other fields (the pull request, the progress comment's state) change under
//! the same lock, so no write undoes another's.

use picogent_protocol::tracker::{Arrival, By};
use tokio_postgres::{Client, Row};

use super::{Pg, Result, StoreError, STATEMENT_TIMEOUT};
use crate::store::issues::Entry;

/// Which entries to read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which<'a> {
    /// These issues' (the ones without a row are left out).
    Issues(&'a [u64]),
    /// The one whose branch became pull request `n`.
    Pull(u64),
    /// Those that are tasks, or whose progress comment still says work goes on.
    Open,
}

const COLUMNS: &str = "issue, active, generation, pull, by_mention, working, unproposed";

fn entry_of(row: &Row) -> (u64, Entry) {
    let n: i64 = row.get(0);
    let generation: i32 = row.get(2);
    let pull: Option<i64> = row.get(3);
    let entry = Entry {
        active: row.get(1),
        generation: u32::try_from(generation).unwrap_or(0),
        pull: pull.and_then(|p| u64::try_from(p).ok()),
        by: if row.get::<_, bool>(4) {
            By::Mention
        } else {
            By::Trigger
        },
        working: row.get(5),
        unproposed: row.get(6),
    };
    (u64::try_from(n).unwrap_or(0), entry)
}

/// The key of a repository's decisions' lock: FNV-1a of its name in lower case,
/// beside the other locks' fixed keys.
fn lock_key(repo: &str) -> i64 {
    let hash = format!("picogent-github:{}", repo.to_ascii_lowercase())
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    hash as i64
}

fn number(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

async fn select(
    client: &Client,
    repo: &str,
    which: &Owned,
) -> std::result::Result<Vec<(u64, Entry)>, tokio_postgres::Error> {
    let rows = match which {
        Owned::Issues(ns) => {
            let sql =
                format!("SELECT {COLUMNS} FROM github_issues WHERE repo = $1 AND issue = ANY($2)");
            client.query(&sql, &[&repo, ns]).await
        }
        Owned::Pull(p) => {
            let sql = format!("SELECT {COLUMNS} FROM github_issues WHERE repo = $1 AND pull = $2");
            client.query(&sql, &[&repo, p]).await
        }
        Owned::Open => {
            let sql = format!(
                "SELECT {COLUMNS} FROM github_issues WHERE repo = $1 AND (active OR working)"
            );
            client.query(&sql, &[&repo]).await
        }
    }?;
    Ok(rows.iter().map(entry_of).collect())
}

async fn upsert(client: &Client, repo: &str, n: u64, e: &Entry) -> Result<()> {
    client
        .execute(
            "INSERT INTO github_issues (repo, issue, active, generation, pull, by_mention, working, unproposed)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (repo, issue) DO UPDATE SET active = excluded.active,
                generation = excluded.generation, pull = excluded.pull,
                by_mention = excluded.by_mention, working = excluded.working,
                unproposed = excluded.unproposed",
            &[
                &repo,
                &number(n),
                &e.active,
                &i32::try_from(e.generation).unwrap_or(i32::MAX),
                &e.pull.map(number),
                &(e.by == By::Mention),
                &e.working,
                &e.unproposed,
            ],
        )
        .await
        .map_err(StoreError::from_pg)?;
    Ok(())
}

/// A decision's transaction, holding the repository's lock until `commit`; dropped
/// unfinished (an error, a cancelled future), its connection is closed, which rolls
/// it back and lets the lock go.
pub(crate) struct Locked<'a> {
    pg: &'a Pg,
    repo: String,
    client: tokio::sync::MutexGuard<'a, Option<Client>>,
    finished: bool,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if !self.finished {
            *self.client = None;
        }
    }
}

/// Bounds one statement of a decision in time.
async fn bounded<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(STATEMENT_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unreachable(
                "the store did not answer in time".into(),
            ))
        })
}

impl Locked<'_> {
    fn client(&self) -> Result<&Client> {
        self.client
            .as_ref()
            .ok_or_else(|| StoreError::Unreachable("no connection".into()))
    }

    pub(crate) async fn entries(&self, which: Which<'_>) -> Result<Vec<(u64, Entry)>> {
        let which = which_owned(which);
        let r = bounded(async {
            select(self.client()?, &self.repo, &which)
                .await
                .map_err(StoreError::from_pg)
        })
        .await;
        self.pg.note(r)
    }

    pub(crate) async fn put(&self, n: u64, entry: &Entry) -> Result<()> {
        let r = bounded(upsert(self.client()?, &self.repo, n, entry)).await;
        self.pg.note(r)
    }

    /// Journals the event in this transaction: true when its id is new to the fleet.
    pub(crate) async fn accept(&self, arrival: &Arrival) -> Result<bool> {
        let body = serde_json::to_string(arrival).map_err(|e| StoreError::Corrupt {
            what: "event",
            message: e.to_string(),
        })?;
        let client = self.client()?;
        let task = arrival.task_id().as_str();
        let r = bounded(async {
            // One statement, one round trip: the event, and its task's row when new.
            let rows = client
                .query(
                    "WITH e AS (
                        INSERT INTO events (id, task_id, arrival) VALUES ($1, $2, $3)
                        ON CONFLICT (id) DO NOTHING RETURNING task_id),
                     t AS (
                        INSERT INTO tasks (task_id) SELECT task_id FROM e
                        ON CONFLICT (task_id) DO NOTHING)
                     SELECT 1 FROM e",
                    &[&arrival.id, &task, &body],
                )
                .await
                .map_err(StoreError::from_pg)?;
            Ok(rows.len() == 1)
        })
        .await;
        self.pg.note(r)
    }

    /// Whether any worker has the task's work going or waiting: an unfinished event,
    /// or a live lease.
    pub(crate) async fn has_work(&self, task: &str) -> Result<bool> {
        let client = self.client()?;
        let r = bounded(async {
            let row = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM events WHERE task_id = $1 AND done_at IS NULL)
                         OR EXISTS (SELECT 1 FROM tasks WHERE task_id = $1
                                    AND owner IS NOT NULL AND lease_until > now())",
                    &[&task],
                )
                .await
                .map_err(StoreError::from_pg)?;
            Ok(row.get::<_, bool>(0))
        })
        .await;
        self.pg.note(r)
    }

    pub(crate) async fn commit(mut self) -> Result<()> {
        let client = self.client()?;
        let r = bounded(async {
            client
                .batch_execute("COMMIT")
                .await
                .map_err(StoreError::from_pg)
        })
        .await;
        let r = self.pg.note(r);
        self.finished = r.is_ok();
        r
    }
}

impl Pg {
    /// Opens a decision about `repo`'s issues: its lock, taken in a new transaction,
    /// held until `commit` (waiting for another worker's decision first).
    pub(crate) async fn github_lock(&self, repo: &str) -> Result<Locked<'_>> {
        let mut slot = self.book.lock().await;
        if slot.as_ref().is_none_or(|c| c.is_closed()) {
            *slot = Some(self.note(self.connect().await)?);
        }
        let locked = Locked {
            pg: self,
            repo: repo.to_string(),
            client: slot,
            finished: false,
        };
        let client = locked.client()?;
        // One round trip: the transaction and the lock, whose key is a number made
        // here (nothing of the name reaches the statement's text).
        let begin = format!("BEGIN; SELECT pg_advisory_xact_lock({})", lock_key(repo));
        let r = bounded(async {
            client
                .batch_execute(&begin)
                .await
                .map_err(StoreError::from_pg)
        })
        .await;
        self.note(r)?;
        Ok(locked)
    }

    /// The entries asked for, read outside any decision.
    pub(crate) async fn github_entries(
        &self,
        repo: &str,
        which: Which<'_>,
    ) -> Result<Vec<(u64, Entry)>> {
        let (repo, which) = (repo.to_string(), which_owned(which));
        self.run(|c| async move { select(&c, &repo, &which).await })
            .await
    }

    /// Every polled list's mark.
    pub(crate) async fn github_marks(&self, repo: &str) -> Result<Vec<(String, String)>> {
        let repo = repo.to_string();
        self.run(|c| async move {
            let rows = c
                .query(
                    "SELECT list, since FROM github_marks WHERE repo = $1",
                    &[&repo],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
        .await
    }

    /// Moves a list's mark forward (never back: another worker may be further on).
    pub(crate) async fn github_set_mark(&self, repo: &str, list: &str, since: &str) -> Result<()> {
        let (repo, list, since) = (repo.to_string(), list.to_string(), since.to_string());
        self.run(|c| async move {
            c.execute(
                "INSERT INTO github_marks (repo, list, since) VALUES ($1, $2, $3)
                 ON CONFLICT (repo, list) DO UPDATE
                 SET since = GREATEST(github_marks.since, excluded.since)",
                &[&repo, &list, &since],
            )
            .await
            .map(|_| ())
        })
        .await
    }
}

enum Owned {
    Issues(Vec<i64>),
    Pull(i64),
    Open,
}

fn which_owned(which: Which<'_>) -> Owned {
    match which {
        Which::Issues(ns) => Owned::Issues(ns.iter().map(|n| number(*n)).collect()),
        Which::Pull(p) => Owned::Pull(number(p)),
        Which::Open => Owned::Open,
    }
}

/// A token's rate-limit window: the most it may send, what is left, when the window
/// resets (seconds since the epoch, GitHub's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateWindow {
    pub(crate) limit: i64,
    pub(crate) remaining: i64,
    pub(crate) reset: i64,
}

impl Pg {
    /// Merges what an answer said of a token's window into the fleet's.
    pub(crate) async fn rate_note(&self, key: &str, w: RateWindow) -> Result<()> {
        let key = key.to_string();
        self.run(|c| async move {
            c.execute(
                "INSERT INTO github_budgets (key, lim, remaining, reset_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (key) DO UPDATE SET
                    lim = excluded.lim,
                    remaining = CASE
                        WHEN excluded.remaining = 0 THEN 0
                        WHEN excluded.reset_at > github_budgets.reset_at THEN excluded.remaining
                        WHEN excluded.reset_at = github_budgets.reset_at
                            THEN LEAST(github_budgets.remaining, excluded.remaining)
                        ELSE github_budgets.remaining END,
                    reset_at = CASE WHEN excluded.remaining = 0 THEN excluded.reset_at
                        ELSE GREATEST(github_budgets.reset_at, excluded.reset_at) END,
                    updated_at = now()",
                &[&key, &w.limit, &w.remaining, &w.reset],
            )
            .await
            .map(|_| ())
        })
        .await
    }

    /// The fleet's view of a token's window.
    pub(crate) async fn rate_read(&self, key: &str) -> Result<Option<RateWindow>> {
        let key = key.to_string();
        self.run(|c| async move {
            let row = c
                .query_opt(
                    "SELECT lim, remaining, reset_at FROM github_budgets WHERE key = $1",
                    &[&key],
                )
                .await?;
            Ok(row.map(|r| RateWindow {
                limit: r.get(0),
                remaining: r.get(1),
                reset: r.get(2),
            }))
        })
        .await
    }
}
