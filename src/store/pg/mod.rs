//! PostgreSQL, the store a fleet of workers shares (`store: "postgres://…"`).
//!
//! Each worker keeps four connections: one for single statements, which
//! tokio-postgres pipelines (reads, marks), one for the group commits of accepted
//! events and one for the renewal of leases (neither queued behind other work), and
//! one for the few transactions (a claim, a conclusion), taken one at a time. All are made again when they break; every
//! statement is bounded in time here, so a store that stops answering (a partition) is
//! an error after `STATEMENT_TIMEOUT`, never a hang, and on the server too (statement,
//! lock and idle-in-transaction timeouts, TCP's own timeout): a worker cut off in the
//! middle of a transaction never holds its locks for longer than a few seconds. The schema's
//! versions are in `migrate.rs`, the journal and the tasks' leases in `events.rs`, the
//! outbox and the dead letters in `reports.rs`.
//!
//! Leases are rows (`tasks.owner`, `tasks.lease_until`, `tasks.fence`), not advisory
//! locks: an advisory lock lives as long as its connection, and a worker cut off from
//! the store keeps its connection open on the server until TCP gives up, which may be
//! far longer than `lease_sec`. A row's lease ends when the database's own clock says
//! so, one clock for the whole fleet, and its fence (raised at every claim) lets the
//! database refuse the reports of a worker whose lease another worker has since taken.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::task::TaskTracker;

mod accepts;
mod events;
mod github;
mod leaders;
mod migrate;
mod reports;
#[cfg(test)]
mod tests;
mod tls;

pub(crate) use events::FleetStatus;
pub(crate) use github::{Locked, RateWindow, Which};
pub(crate) use migrate::SCHEMA_VERSION;
pub(crate) use reports::Queued;

/// The longest one statement may take before the store counts as unreachable.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What went wrong in the store, by kind: whether to wait and try again, or not.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The database cannot be reached or stopped answering: try again later.
    #[error("the store is unreachable: {0}")]
    Unreachable(String),
    /// The database refused a statement.
    #[error("the store refused: {0}")]
    Refused(String),
    /// The task's lease is no longer this worker's: another worker may have the task.
    #[error("this worker no longer holds task {0}'s lease")]
    LeaseLost(String),
    /// The database was migrated by a newer picogent.
    #[error("the store's schema is version {found}, newer than this picogent's {known}: upgrade picogent (workers are upgraded one at a time, the newest migrates)")]
    TooNew { found: i32, known: i32 },
    /// A stored record that cannot be read back.
    #[error("a stored {what} cannot be read: {message}")]
    Corrupt { what: &'static str, message: String },
}

impl StoreError {
    /// Whether waiting may cure it (the database is away or restarting).
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unreachable(_))
    }

    fn from_pg(e: tokio_postgres::Error) -> StoreError {
        match e.code().map(|c| c.code()) {
            // Connection exceptions, a server shutting down or starting, one out of
            // connections or memory (53), and the server-side bounds (a lock or a
            // statement timed out: 55P03, 57014; an idle transaction ended: 25P03).
            Some(code)
                if code.starts_with("08")
                    || code.starts_with("57P")
                    || code.starts_with("53")
                    || matches!(code, "55P03" | "57014" | "25P03") =>
            {
                StoreError::Unreachable(describe(&e))
            }
            Some(_) => StoreError::Refused(describe(&e)),
            None => StoreError::Unreachable(describe(&e)),
        }
    }
}

/// tokio-postgres's own text ("db error") hides the server's message.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let source = std::error::Error::source(e).map(|s| format!(": {s}"));
            format!("{e}{}", source.unwrap_or_default())
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, StoreError>;

/// Which pipelined connection a statement goes on.
#[derive(Clone, Copy)]
pub(super) enum Slot {
    /// Everything but the leases' renewal.
    Shared,
    /// The renewal of task leases and roles alone.
    Lease,
    /// The accepts' group commits alone: an event's answer never waits behind the
    /// worker's own reads.
    Accept,
}

/// Which worker this is, unique to this process's life: a worker that restarts is a
/// new one, whose predecessor's leases run out by themselves.
pub(crate) fn worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect();
    format!(
        "{}-{}-{}",
        if host.is_empty() { "worker" } else { &host },
        std::process::id(),
        crate::util::random_hex(4)
    )
}

/// The leases this worker holds: task → fence.
type Held = Mutex<HashMap<String, i64>>;

pub(crate) struct Pg {
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    pub(crate) worker: String,
    shared: tokio::sync::Mutex<Option<Arc<Client>>>,
    lease: tokio::sync::Mutex<Option<Arc<Client>>>,
    accept: tokio::sync::Mutex<Option<Arc<Client>>>,
    serial: tokio::sync::Mutex<Option<Client>>,
    /// GitHub's decisions, each a transaction under its repository's lock.
    book: tokio::sync::Mutex<Option<Client>>,
    held: Held,
    /// Accepts waiting for their group commit (`accepts.rs`); `None` once closed.
    accepts: Mutex<Option<accepts::Queue>>,
    /// The connections' tasks, and the accepts' writer.
    tasks: TaskTracker,
    /// The last statement's round trip, and when the store last answered.
    pub(crate) health: Mutex<Health>,
}

#[derive(Default, Clone)]
pub(crate) struct Health {
    pub(crate) round_trip: Option<Duration>,
    pub(crate) failing: Option<String>,
    pub(crate) last_ok: Option<Instant>,
}

impl Pg {
    /// Connects and brings the schema up to this binary's version (one worker at a
    /// time: the migration holds a lock of the database's).
    pub(crate) async fn open(target: &crate::config::Postgres, worker: String) -> Result<Arc<Pg>> {
        let pg = Pg {
            config: target.config.clone(),
            tls: tls::connector(target.ca_file.as_deref())?,
            worker,
            shared: Default::default(),
            lease: Default::default(),
            accept: Default::default(),
            serial: Default::default(),
            book: Default::default(),
            held: Default::default(),
            accepts: Mutex::new(None),
            tasks: TaskTracker::new(),
            health: Default::default(),
        };
        let mut serial = pg.connect().await?;
        migrate::run(&mut serial).await?;
        *pg.serial.lock().await = Some(serial);
        let pg = Arc::new(pg);
        let queue = accepts::start(Arc::downgrade(&pg), &pg.tasks);
        *crate::util::lock(&pg.accepts) = Some(queue);
        Ok(pg)
    }

    async fn connect(&self) -> Result<Client> {
        let mut config = self.config.clone();
        config
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .application_name("picogent");
        // The server's side of the bounds: what a worker gone silent mid-transaction
        // holds is let go within seconds (a connection of the user's own `options`
        // keeps them, after these).
        let ours = "-c statement_timeout=10000 -c lock_timeout=5000 \
                    -c idle_in_transaction_session_timeout=5000 -c tcp_user_timeout=10000";
        let options = match config.get_options() {
            Some(theirs) => format!("{ours} {theirs}"),
            None => ours.to_string(),
        };
        config.options(&options);
        let connecting = config.connect(self.tls.clone());
        let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| StoreError::Unreachable("connecting timed out".into()))?
            .map_err(StoreError::from_pg)?;
        self.tasks.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("a store connection ended: {e}");
            }
        });
        Ok(client)
    }

    /// A pipelined connection (made again when it broke).
    async fn client(&self, which: Slot) -> Result<Arc<Client>> {
        let mut slot = self.slot(which).lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = Arc::new(self.note(self.connect().await)?);
        *slot = Some(c.clone());
        Ok(c)
    }

    fn slot(&self, which: Slot) -> &tokio::sync::Mutex<Option<Arc<Client>>> {
        match which {
            Slot::Shared => &self.shared,
            Slot::Lease => &self.lease,
            Slot::Accept => &self.accept,
        }
    }

    /// Runs one statement-level operation on the shared connection, bounded in time.
    async fn run<T, F>(&self, op: impl FnOnce(Arc<Client>) -> F) -> Result<T>
    where
        F: std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    {
        self.run_on(Slot::Shared, op).await
    }

    /// Runs one statement-level operation on a pipelined connection, bounded in time.
    async fn run_on<T, F>(&self, which: Slot, op: impl FnOnce(Arc<Client>) -> F) -> Result<T>
    where
        F: std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    {
        let client = self.client(which).await?;
        let started = Instant::now();
        let answer = match tokio::time::timeout(STATEMENT_TIMEOUT, op(client)).await {
            Ok(r) => r.map_err(StoreError::from_pg),
            Err(_) => {
                // A connection that stopped answering is not used again.
                *self.slot(which).lock().await = None;
                Err(StoreError::Unreachable(
                    "the store did not answer in time".into(),
                ))
            }
        };
        self.timed(started, self.note(answer))
    }

    /// Runs a transaction on the serial connection, one at a time, bounded in time.
    async fn transaction<T, F>(&self, op: F) -> Result<T>
    where
        F: for<'c> FnOnce(
            &'c mut tokio_postgres::Transaction<'_>,
        ) -> futures_util::future::BoxFuture<'c, Result<T>>,
    {
        let mut slot = self.serial.lock().await;
        if slot.as_ref().is_none_or(|c| c.is_closed()) {
            *slot = Some(self.note(self.connect().await)?);
        }
        let Some(client) = slot.as_mut() else {
            return Err(StoreError::Unreachable("no connection".into()));
        };
        let started = Instant::now();
        let work = async {
            let mut tx = client.transaction().await.map_err(StoreError::from_pg)?;
            let out = op(&mut tx).await?;
            tx.commit().await.map_err(StoreError::from_pg)?;
            Ok(out)
        };
        let answer = match tokio::time::timeout(STATEMENT_TIMEOUT, work).await {
            Ok(r) => r,
            Err(_) => {
                *slot = None;
                Err(StoreError::Unreachable(
                    "the store did not answer in time".into(),
                ))
            }
        };
        self.timed(started, self.note(answer))
    }

    fn timed<T>(&self, started: Instant, r: Result<T>) -> Result<T> {
        if r.is_ok() {
            let mut h = crate::util::lock(&self.health);
            h.round_trip = Some(started.elapsed());
        }
        r
    }

    /// Keeps what `/healthz` says about the store up to date.
    fn note<T>(&self, r: Result<T>) -> Result<T> {
        let mut h = crate::util::lock(&self.health);
        match &r {
            Err(e) if e.is_transient() => h.failing = Some(e.to_string()),
            _ => {
                h.failing = None;
                h.last_ok = Some(Instant::now());
            }
        }
        r
    }

    /// Notes that the store stopped answering (a wait given up before its own bound).
    pub(crate) fn note_unreachable(&self, why: &str) {
        crate::util::lock(&self.health).failing = Some(format!("the store is unreachable: {why}"));
    }

    /// The fence of this worker's lease on `task`, if it holds one.
    pub(crate) fn fence(&self, task: &str) -> Option<i64> {
        crate::util::lock(&self.held).get(task).copied()
    }

    /// The tasks whose leases this worker holds.
    pub(crate) fn held(&self) -> Vec<String> {
        crate::util::lock(&self.held).keys().cloned().collect()
    }

    /// Ends the connections (at the daemon's end).
    pub(crate) async fn close(&self) {
        // The accepts' writer ends once the queue is gone and its last batch written.
        crate::util::lock(&self.accepts).take();
        *self.shared.lock().await = None;
        *self.lease.lock().await = None;
        *self.accept.lock().await = None;
        *self.serial.lock().await = None;
        *self.book.lock().await = None;
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.tasks.wait()).await;
    }
}
