//! A PostgreSQL database of a test's own, for the tests of the shared store
//! (`TASKLIFT_TEST_POSTGRES` makes them required; without it they skip, saying so,
//! when the default server does not answer), and clean-up that survives a runtime
//! shutting down.

use std::time::Duration;

use tokio_postgres::NoTls;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A fresh database for one test, dropped when the test ends.
pub(crate) struct Db {
    admin: String,
    name: String,
    /// The URL of the test database.
    pub(crate) url: String,
}

impl Db {
    /// Create one, or `None` (with a message) when no server is reachable and none
    /// is required.
    pub(crate) async fn create() -> Option<Db> {
        let required = std::env::var("TASKLIFT_TEST_POSTGRES").ok();
        let admin = match required.as_deref() {
            Some(u) if u.starts_with("postgres") => u.to_string(),
            _ => DEFAULT_URL.to_string(),
        };
        let name = format!("tasklift_test_{}", uuid::Uuid::new_v4().simple());
        let created = async {
            let (client, conn) = tokio_postgres::connect(&admin, NoTls).await?;
            tokio::spawn(conn);
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
        };
        match tokio::time::timeout(Duration::from_secs(10), created).await {
            Ok(Ok(())) => {}
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".into(),
                };
                if required.is_some() {
                    panic!("TASKLIFT_TEST_POSTGRES is set but PostgreSQL at {admin} is not usable: {why}");
                }
                eprintln!("SKIPPED: no PostgreSQL at {admin} ({why}); set TASKLIFT_TEST_POSTGRES to require it");
                return None;
            }
        }
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        let url = format!("{base}/{name}");
        Some(Db { admin, name, url })
    }

    /// A connection to the test database, for looking at rows.
    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url, NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let drop_db = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        run_at_drop(&self.admin, &[&drop_db]);
    }
}

/// Run these statements on `admin` (each on its own, errors ignored) from a
/// thread and a runtime of their own, for `Drop`s: the test's runtime may be
/// shutting down.
pub(crate) fn run_at_drop(admin: &str, statements: &[&str]) {
    let admin = admin.to_string();
    let statements: Vec<String> = statements.iter().map(|s| s.to_string()).collect();
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Tried a few times: with the whole suite running, the server may refuse
        // one more connection for a moment, and the database stayed behind.
        rt.block_on(async {
            let mut left: Vec<&String> = statements.iter().collect();
            for _ in 0..10 {
                if let Ok((c, conn)) = tokio_postgres::connect(&admin, NoTls).await {
                    tokio::spawn(conn);
                    let mut failed = Vec::new();
                    for st in left {
                        if c.batch_execute(st).await.is_err() {
                            failed.push(st);
                        }
                    }
                    left = failed;
                }
                if left.is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            eprintln!("could not clean up after the test: {left:?}");
        })
    })
    .join();
}
