//! A database of its own for each test, on the throwaway PostgreSQL server the test
//! script starts (scripts/pg.sh exports `PICOGENT_TEST_PG_URL`). Without that server
//! the test fails and says how to get one: a store test never passes untried.

use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh, empty database: its URL (with the password) and its name.
pub struct Database {
    pub url: String,
    pub name: String,
}

/// The server's superuser URL.
pub fn server_url() -> String {
    std::env::var("PICOGENT_TEST_PG_URL").unwrap_or_else(|_| {
        panic!(
            "PICOGENT_TEST_PG_URL is not set: the store's tests need the PostgreSQL server \
             scripts/test.sh starts (or `source scripts/pg.sh` in this shell first)"
        )
    })
}

/// Makes a database no other test uses.
pub async fn database() -> Database {
    database_on(&server_url()).await
}

async fn database_on(server: &str) -> Database {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    let (client, conn) = tokio_postgres::connect(server, tokio_postgres::NoTls)
        .await
        .expect("the test PostgreSQL server answers");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("a test database can be made");
    let url = match server.rfind('/') {
        Some(i) => format!("{}/{name}", &server[..i]),
        None => panic!("PICOGENT_TEST_PG_URL has no database name: {server}"),
    };
    Database { url, name }
}

/// A PostgreSQL server of a test's own (for the tests that stop it under a running
/// fleet), made with the programs scripts/pg.sh found; stopped and removed on drop.
pub struct Cluster {
    dir: std::path::PathBuf,
    port: u16,
    /// The superuser's URL, to its `postgres` database.
    pub url: String,
    /// With TLS: the CA certificate (PEM) the server's certificate is signed by.
    pub ca: Option<std::path::PathBuf>,
}

impl Cluster {
    #[allow(
        clippy::disallowed_methods,
        reason = "a test's own server, made before the test runs"
    )]
    pub fn start() -> Cluster {
        Cluster::make(false)
    }

    /// A server that speaks TLS too, with a certificate for 127.0.0.1 and localhost
    /// signed by a CA of its own (`ca`).
    pub fn start_tls() -> Cluster {
        Cluster::make(true)
    }

    fn make(tls: bool) -> Cluster {
        let bin = std::env::var("PICOGENT_TEST_PG_BIN").unwrap_or_else(|_| {
            panic!("PICOGENT_TEST_PG_BIN is not set: run the tests through scripts/test.sh")
        });
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "picogent-pgc-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pw"), "cluster-pw\n").unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let cluster = Cluster {
            url: format!("postgres://picogent:cluster-pw@127.0.0.1:{port}/postgres"),
            ca: tls.then(|| dir.join("ca.crt")),
            dir,
            port,
        };
        let d = cluster.dir.display();
        cluster.sh(&format!(
            "chmod 755 {d} && if [ $(id -u) -eq 0 ]; then chown -R postgres {d}; fi && \
             $AS {bin}/initdb -D {d}/data -U picogent --pwfile={d}/pw --auth=scram-sha-256 \
             --encoding=UTF8 --locale=C.UTF-8 >{d}/initdb.log 2>&1"
        ));
        if tls {
            cluster.sh(&format!(
                "cd {d} && \
                 openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=picogent-test-ca \
                   -keyout ca.key -out ca.crt 2>/dev/null && \
                 openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
                   -keyout data/server.key -out server.csr 2>/dev/null && \
                 printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext && \
                 openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
                   -days 2 -extfile ext -out data/server.crt 2>/dev/null && \
                 chmod 600 data/server.key && chmod 644 ca.crt && \
                 if [ $(id -u) -eq 0 ]; then chown postgres data/server.key data/server.crt; fi && \
                 echo 'ssl = on' >> data/postgresql.conf"
            ));
        }
        cluster.ctl("start");
        cluster
    }

    /// A database of its own on this server.
    pub async fn database(&self) -> Database {
        database_on(&self.url).await
    }

    /// Stops the server (its clients' connections end, new ones are refused).
    pub fn stop(&self) {
        self.ctl("stop -m fast");
    }

    /// Starts it again.
    pub fn resume(&self) {
        self.ctl("start");
    }

    fn ctl(&self, what: &str) {
        let bin = std::env::var("PICOGENT_TEST_PG_BIN").unwrap_or_default();
        let d = self.dir.display();
        self.sh(&format!(
            "$AS {bin}/pg_ctl -D {d}/data -l {d}/server.log -w -o '-p {} -c listen_addresses=127.0.0.1 -k {d}' {what} >/dev/null",
            self.port
        ));
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "a test's own server, stopped or started at the test's command"
    )]
    fn sh(&self, script: &str) {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "if [ $(id -u) -eq 0 ]; then AS='runuser -u postgres --'; else AS=''; fi; {script}"
            ))
            .status()
            .expect("sh runs");
        assert!(status.success(), "{script} failed");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let bin = std::env::var("PICOGENT_TEST_PG_BIN").unwrap_or_default();
        let d = self.dir.display();
        #[allow(
            clippy::disallowed_methods,
            reason = "the test's own server goes with it"
        )]
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "if [ $(id -u) -eq 0 ]; then AS='runuser -u postgres --'; else AS=''; fi; \
                 $AS {bin}/pg_ctl -D {d}/data stop -m immediate >/dev/null 2>&1; rm -rf {d}"
            ))
            .status();
    }
}
