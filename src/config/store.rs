//! Where agent mode keeps what it must not lose (`store`, `PICOGENT_STORE_URL`): local
//! files under `state/` (the default: one machine, nothing to install), or a
//! PostgreSQL database that every worker of a fleet shares. With it, the fleet's
//! settings: how long a task's lease lasts (`lease_sec`) and how many tasks the whole
//! fleet works at once (`fleet_max_tasks`).
//!
//! The password comes from the URL, else the file `PICOGENT_STORE_PASSWORD_FILE`
//! names, else `PGPASSWORD`; it is never shown (`Debug` and the log print the URL
//! without it). TLS follows the URL's `sslmode`, with the CA file
//! `PICOGENT_STORE_CA_FILE` names (`store::pg::tls`).

use std::time::Duration;

use super::load::Sources;
use super::ConfigError;

/// A PostgreSQL database to connect to.
#[derive(Clone)]
pub struct Postgres {
    pub(crate) config: tokio_postgres::Config,
    /// CA certificates (PEM) the server's certificate may chain to, besides the web's
    /// (`PICOGENT_STORE_CA_FILE`).
    pub(crate) ca_file: Option<std::path::PathBuf>,
}

impl Postgres {
    /// `user@host:port/database`: what may be logged.
    pub fn shown(&self) -> String {
        let c = &self.config;
        let host = c
            .get_hosts()
            .first()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(h) => h.clone(),
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".into());
        let port = c.get_ports().first().copied().unwrap_or(5432);
        format!(
            "postgres://{}@{host}:{port}/{}",
            c.get_user().unwrap_or(""),
            c.get_dbname().unwrap_or("")
        )
    }
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// The store and the fleet's settings.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// `None`: local files.
    pub postgres: Option<Postgres>,
    /// How long a task stays a worker's without its renewing the lease.
    pub lease: Duration,
    /// The most tasks worked at once across the fleet (`None`: only each worker's
    /// `max_concurrent_tasks`).
    pub fleet_max_tasks: Option<usize>,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            postgres: None,
            lease: Duration::from_secs(30),
            fleet_max_tasks: None,
        }
    }
}

impl Sources<'_> {
    pub(super) fn store(&self) -> Result<StoreSettings, ConfigError> {
        let f = &self.file;
        let postgres = match self.env.get("PICOGENT_STORE_URL") {
            Some(url) => Some(self.postgres(url, "PICOGENT_STORE_URL", true)?),
            None => match &f.store {
                Some(url) => Some(self.postgres(url, "store", false)?),
                None => None,
            },
        };
        let lease_sec = f.lease_sec.unwrap_or(30);
        if !(2..=3600).contains(&lease_sec) {
            return Err(self.field_error("lease_sec", "must be between 2 and 3600".into()));
        }
        let fleet_max_tasks = match f.fleet_max_tasks {
            Some(0) => {
                return Err(self.field_error("fleet_max_tasks", "must be greater than 0".into()))
            }
            n => n,
        };
        if postgres.is_none() && fleet_max_tasks.is_some() {
            return Err(self.field_error(
                "fleet_max_tasks",
                "needs a shared store (`store`: a postgres:// URL)".into(),
            ));
        }
        Ok(StoreSettings {
            postgres,
            lease: Duration::from_secs(lease_sec),
            fleet_max_tasks,
        })
    }

    /// A `postgres://` URL, with the password from the URL, a file or `PGPASSWORD`.
    fn postgres(&self, url: &str, name: &str, from_env: bool) -> Result<Postgres, ConfigError> {
        let error = |message: String| {
            if from_env {
                ConfigError::Env {
                    var: name.into(),
                    message,
                }
            } else {
                self.field_error(name, message)
            }
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(error(
                "expected a postgres:// URL (leave it out to keep the state in local files)".into(),
            ));
        }
        // The parser's own message may quote the URL, password and all.
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|_| error("not a valid postgres:// URL".into()))?;
        if config.get_dbname().is_none() {
            return Err(error(
                "names no database (postgres://user@host/DATABASE)".into(),
            ));
        }
        // tokio-postgres's `prefer` lets anyone between here and another machine say
        // "no TLS" and read the password: another machine's database needs TLS unless
        // the URL says otherwise (`sslmode=disable` or `prefer`).
        let local = config.get_hosts().iter().all(|h| match h {
            tokio_postgres::config::Host::Unix(_) => true,
            tokio_postgres::config::Host::Tcp(h) => {
                h == "localhost"
                    || h.parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
        });
        if !local && !url.contains("sslmode=") {
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
        }
        if config.get_password().is_none() {
            if let Some(file) = self.env.get("PICOGENT_STORE_PASSWORD_FILE") {
                let pw = std::fs::read_to_string(file).map_err(|e| ConfigError::Env {
                    var: "PICOGENT_STORE_PASSWORD_FILE".into(),
                    message: format!("cannot read {file}: {e}"),
                })?;
                config.password(pw.trim_end_matches(['\n', '\r']));
            } else if let Some(pw) = self.env.get("PGPASSWORD") {
                config.password(pw);
            }
        }
        let ca_file = self
            .env
            .get("PICOGENT_STORE_CA_FILE")
            .map(std::path::PathBuf::from);
        Ok(Postgres { config, ca_file })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Env};

    fn ssl(url: &str) -> tokio_postgres::config::SslMode {
        let dir = tempfile::tempdir().unwrap();
        let env = Env::from_pairs([("PICOGENT_STORE_URL".to_string(), url.to_string())]);
        let c = Config::load(None, &env, dir.path()).unwrap();
        c.store.postgres.unwrap().config.get_ssl_mode()
    }

    /// Another machine's database needs TLS unless the URL says otherwise: nobody in
    /// between can say "no TLS" and read the password.
    #[test]
    fn another_machines_database_needs_tls_unless_the_url_says_otherwise() {
        use tokio_postgres::config::SslMode;
        assert_eq!(ssl("postgres://u:p@db.internal/x"), SslMode::Require);
        assert_eq!(
            ssl("postgres://u:p@db.internal/x?sslmode=disable"),
            SslMode::Disable
        );
        assert_eq!(
            ssl("postgres://u:p@db.internal/x?sslmode=prefer"),
            SslMode::Prefer
        );
        assert_eq!(ssl("postgres://u:p@127.0.0.1:5432/x"), SslMode::Prefer);
        assert_eq!(ssl("postgres://u:p@localhost/x"), SslMode::Prefer);
    }
}
