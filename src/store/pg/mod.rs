//! PostgreSQL, the store a fleet of workers shares (`store: "postgres://…"`).
//!
//! Each worker keeps two connections: one for single statements, which tokio-postgres
//! pipelines (accepts from many requests at once share it), and one for the few
//! transactions (a claim, a conclusion), taken one at a time. Both are made again when
//! they break; every statement is bounded in time, so a store that stops answering
//! (a partition) is an error after `STATEMENT_TIMEOUT`, never a hang. The schema's
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
mod leaders;
mod migrate;
mod reports;
#[cfg(test)]
mod tests;
mod tls;

pub(crate) use events::FleetStatus;
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
            // Connection exceptions, and a server shutting down or starting.
            Some(code) if code.starts_with("08") || code.starts_with("57P") => {
                StoreError::Unreachable(e.to_string())
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
    serial: tokio::sync::Mutex<Option<Client>>,
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
            serial: Default::default(),
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

    /// The shared connection (made again when it broke).
    async fn client(&self) -> Result<Arc<Client>> {
        let mut slot = self.shared.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = Arc::new(self.note(self.connect().await)?);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs one statement-level operation on the shared connection, bounded in time.
    async fn run<T, F>(&self, op: impl FnOnce(Arc<Client>) -> F) -> Result<T>
    where
        F: std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    {
        let client = self.client().await?;
        let started = Instant::now();
        let answer = match tokio::time::timeout(STATEMENT_TIMEOUT, op(client)).await {
            Ok(r) => r.map_err(StoreError::from_pg),
            Err(_) => {
                // A connection that stopped answering is not used again.
                *self.shared.lock().await = None;
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
        *self.serial.lock().await = None;
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.tasks.wait()).await;
    }
}
