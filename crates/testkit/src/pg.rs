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
    let server = server_url();
    let (client, conn) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
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

/// Runs `pg_ctl` on the test server (`"stop -m fast"`, `"start"`): the tests that
/// stop the database under a running fleet.
#[allow(clippy::disallowed_methods, reason = "a test's own pause while the database stops or starts")]
pub fn pg_ctl(args: &str) {
    let ctl = std::env::var("PICOGENT_TEST_PG_CTL").expect("PICOGENT_TEST_PG_CTL is set with the URL");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{ctl} {args}"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("pg_ctl runs");
    assert!(status.success(), "pg_ctl {args} failed");
}
