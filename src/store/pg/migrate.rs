//! The schema's versions. Each migration is applied once, in order, in one transaction
//! with the version it brings; workers starting together take turns on a lock of the
//! database's, so one migrates and the others find the work done. A database whose
//! version is newer than this binary knows is refused with a clear error: an old
//! worker must not write to a schema it does not understand.

use tokio_postgres::Client;

use super::{Result, StoreError};

/// Every migration, in order: `MIGRATIONS[n]` brings the schema to version `n + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: the journal, the tasks' leases, the outbox, the dead letters, the workers.
    r#"
    CREATE TABLE events (
        seq          bigserial PRIMARY KEY,
        id           text NOT NULL UNIQUE,
        task_id      text NOT NULL,
        arrival      text NOT NULL,
        accepted_at  timestamptz NOT NULL DEFAULT now(),
        attempts     integer NOT NULL DEFAULT 0,
        done_at      timestamptz
    );
    CREATE INDEX events_pending ON events (task_id, seq) WHERE done_at IS NULL;
    CREATE INDEX events_done ON events (done_at) WHERE done_at IS NOT NULL;

    CREATE TABLE tasks (
        task_id      text PRIMARY KEY,
        owner        text,
        lease_until  timestamptz,
        fence        bigint NOT NULL DEFAULT 0,
        expiries     bigint NOT NULL DEFAULT 0
    );

    CREATE TABLE reports (
        seq            bigserial PRIMARY KEY,
        key            text NOT NULL UNIQUE,
        task_id        text NOT NULL,
        report         text NOT NULL,
        queued_at      timestamptz NOT NULL DEFAULT now(),
        claimed_by     text,
        claimed_until  timestamptz,
        sent_at        timestamptz
    );
    CREATE INDEX reports_unsent ON reports (task_id, seq) WHERE sent_at IS NULL;

    CREATE TABLE dead_letters (
        seq      bigserial PRIMARY KEY,
        task_id  text NOT NULL,
        key      text NOT NULL,
        report   text NOT NULL,
        error    text NOT NULL,
        at       timestamptz NOT NULL DEFAULT now()
    );
    "#,
    // 2: roles one worker of the fleet holds at a time (the tracker's WebSocket).
    r#"
    CREATE TABLE leaders (
        role         text PRIMARY KEY,
        owner        text NOT NULL,
        lease_until  timestamptz NOT NULL,
        fence        bigint NOT NULL DEFAULT 1
    );
    CREATE INDEX tasks_leased ON tasks (lease_until) WHERE owner IS NOT NULL;
    "#,
    // 3: GitHub mode's book of issues and its polling marks, per repository.
    r#"
    CREATE TABLE github_issues (
        repo        text NOT NULL,
        issue       bigint NOT NULL,
        active      boolean NOT NULL DEFAULT false,
        generation  integer NOT NULL DEFAULT 0,
        pull        bigint,
        by_mention  boolean NOT NULL DEFAULT false,
        working     boolean NOT NULL DEFAULT false,
        unproposed  text,
        PRIMARY KEY (repo, issue)
    );
    CREATE INDEX github_issues_pull ON github_issues (repo, pull) WHERE pull IS NOT NULL;
    CREATE INDEX github_issues_open ON github_issues (repo) WHERE active OR working;

    CREATE TABLE github_marks (
        repo   text NOT NULL,
        list   text NOT NULL,
        since  text NOT NULL,
        PRIMARY KEY (repo, list)
    );
    "#,
    // 4: each GitHub token's rate-limit window, as its answers last said it.
    r#"
    CREATE TABLE github_budgets (
        key         text PRIMARY KEY,
        lim         bigint NOT NULL,
        remaining   bigint NOT NULL,
        reset_at    bigint NOT NULL,
        updated_at  timestamptz NOT NULL DEFAULT now()
    );
    "#,
];

/// The version this binary brings a database to.
pub(crate) const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The key of the lock that serialises migrations (any fixed number: "picogent").
const MIGRATION_LOCK: i64 = 0x7069_636f_6765_6e74;

/// Brings the schema to `SCHEMA_VERSION`; refuses a newer one.
pub(super) async fn run(client: &mut Client) -> Result<()> {
    let tx = client.transaction().await.map_err(StoreError::from_pg)?;
    // Workers starting together wait for the one migrating, however long it takes.
    tx.batch_execute("SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0")
        .await
        .map_err(StoreError::from_pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(StoreError::from_pg)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS picogent_schema (version integer NOT NULL)")
        .await
        .map_err(StoreError::from_pg)?;
    let found: i32 = tx
        .query_opt("SELECT max(version) FROM picogent_schema", &[])
        .await
        .map_err(StoreError::from_pg)?
        .and_then(|row| row.get::<_, Option<i32>>(0))
        .unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (n, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = n as i32 + 1;
        tracing::info!(version, "migrating the store's schema");
        tx.batch_execute(sql).await.map_err(StoreError::from_pg)?;
        tx.execute("DELETE FROM picogent_schema", &[])
            .await
            .map_err(StoreError::from_pg)?;
        tx.execute(
            "INSERT INTO picogent_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(StoreError::from_pg)?;
    }
    tx.commit().await.map_err(StoreError::from_pg)
}
