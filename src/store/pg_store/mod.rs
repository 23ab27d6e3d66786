//! The shared store: PostgreSQL, for several tasklift replicas behind one load
//! balancer. Selected with `--store postgres://…` (or `[store] url`).
//!
//! Every replica reads and writes the same tables:
//! - `tasklift_tasks`: one row per task. Besides the record it carries the replica
//!   running the upstream call (`replica`), that replica's lease
//!   (`lease_expires_at`, in database time) and a fencing number (`lease_epoch`).
//! - `tasklift_inputs`: `tasks/update` answers received by a replica that does not
//!   run the task, waiting for the one that does.
//! - `tasklift_meta`: the principal hash key shared by every replica.
//! - `tasklift_sessions`: legacy client sessions, so that any replica (and a
//!   restarted one) serves a 2025-era client's `Mcp-Session-Id`.
//! - `tasklift_replays`: replay key to the task a synchronous call became, until
//!   its replay window closes, so that a retried call joins that task on any
//!   replica. Not tied to `tasklift_tasks`: a row may name a deleted task (the
//!   engine checks), and goes when its window closes.
//! - `tasklift_outbox`: webhook events waiting for delivery, inserted in the
//!   transaction of the status change they report, each leased to one replica at
//!   a time while it is sent.
//!
//! Writes are conditional. The replica that created a task writes it only while the
//! row is unfinished and still carries the epoch it created it with; any other
//! writer (a `tasks/cancel` landing elsewhere, the reaper failing a lost replica's
//! tasks) raises the epoch, so a paused or partitioned owner that comes back
//! cannot overwrite the newer state: its write finds no row and it stops the call.
//!
//! Every change is announced with `NOTIFY tasklift_tasks, '<replica> <task id>'`
//! in the same statement, so the owning replica hears of answers and cancellations
//! at once and other replicas can wake `subscriptions/listen` streams and blocked
//! 2025-11-25 `tasks/result` calls. A short poll (at each lease renewal) covers
//! notifications lost while a listening connection was down.
//!
//! This module connects and holds the pool; `schema` has the migrations, `rows`
//! turns rows into records, `task_store` and `shared` implement the two traits,
//! `sessions` and `replays` the session and replay indexes, `outbox` the webhook
//! outbox, `listen` hears the other replicas.

use std::str::FromStr;
use std::time::Duration;

use dashmap::DashMap;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::mpsc;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::redact_url_credentials as redact_url;
use crate::observe::error_chain as chain;

use super::StoreError;

mod listen;
mod outbox;
mod replays;
mod rows;
mod schema;
mod sessions;
mod shared;
mod task_store;

use listen::listen;
pub use listen::Change;

/// The notification channel.
const CHANNEL: &str = "tasklift_tasks";

/// PostgreSQL-backed `TaskStore`, shared by replicas.
pub struct PgStore {
    pool: Pool,
    /// This process's replica id (a fresh UUID per start).
    replica: String,
    /// How long a lease lasts without renewal.
    lease: Duration,
    /// Tasks this replica runs, with the epoch it holds for each.
    owned: DashMap<String, i64>,
    /// Where the listener sends what it hears; taken once by the engine.
    changes: std::sync::Mutex<Option<mpsc::Receiver<Change>>>,
    /// The listener task.
    listener: tokio::task::JoinHandle<()>,
    /// Whether the database refused a write for lack of space.
    space: std::sync::Arc<crate::store::space::DiskSpace>,
    /// The webhook destinations events are derived for (`with_outbox`).
    outbox: std::sync::OnceLock<std::sync::Arc<super::Outbox>>,
}

fn db(e: impl std::error::Error + 'static) -> StoreError {
    let dyn_e: &(dyn std::error::Error + 'static) = &e;
    if let Some(pg) = dyn_e.downcast_ref::<tokio_postgres::Error>() {
        if pg.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL) {
            return StoreError::Full(chain(&e));
        }
        // Class 08 (connection exceptions) and 57P01–57P03 (the server shutting
        // down, crashed, or starting up): the same write may work in a moment.
        let going = pg.code().is_some_and(|c| {
            let c = c.code();
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
        });
        let io = std::error::Error::source(pg).is_some_and(|s| s.is::<std::io::Error>());
        if going || io || pg.is_closed() {
            return StoreError::Unavailable(chain(&e));
        }
    }
    StoreError::Db(chain(&e))
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable(format!("no database connection: {}", chain(&e)))
}

impl PgStore {
    /// Connect, apply migrations, and start listening for other replicas' changes.
    ///
    /// TLS is used when the URL asks for it (`?sslmode=require`, or `prefer`), and
    /// the server's certificate is checked against the system's roots plus
    /// `ca_file`; a URL without `sslmode` connects in plain TCP.
    pub async fn connect(
        url: &str,
        pool_size: usize,
        lease: Duration,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, StoreError> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| StoreError::Db(format!("invalid store URL {}: {e}", redact_url(url))))?;
        if !url.contains("sslmode=") {
            config.ssl_mode(SslMode::Disable);
        }
        let tls = MakeRustlsConnect::new(
            crate::tls::client_config(true, ca_file).map_err(StoreError::Db)?,
        );
        let replica = uuid::Uuid::new_v4().simple().to_string();
        config.application_name(format!("tasklift {replica}"));
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        let mgr = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(pool_size.max(2))
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(5)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(db)?;
        let (tx, rx) = mpsc::channel(4096);
        let store = Self {
            pool,
            listener: tokio::spawn(listen(config, tls, replica.clone(), tx)),
            replica,
            lease,
            owned: DashMap::new(),
            changes: std::sync::Mutex::new(Some(rx)),
            space: crate::store::space::DiskSpace::database(),
            outbox: std::sync::OnceLock::new(),
        };
        store.migrate().await.map_err(|e| match e {
            StoreError::Db(m) => StoreError::Db(format!("{} ({})", m, redact_url(url))),
            StoreError::Unavailable(m) => {
                StoreError::Unavailable(format!("{} ({})", m, redact_url(url)))
            }
            e => e,
        })?;
        Ok(store)
    }

    /// Derive webhook events for these destinations from each status change,
    /// and keep them with it (see `store/outbox.rs`).
    pub fn with_outbox(self, outbox: std::sync::Arc<super::Outbox>) -> Self {
        let _ = self.outbox.set(outbox);
        self
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_err)
    }

    /// The database's space as tasklift sees it: low while it refuses writes for
    /// lack of space (`53100 disk_full`).
    pub fn space(&self) -> std::sync::Arc<crate::store::space::DiskSpace> {
        self.space.clone()
    }

    /// A write that needs fresh space in the database (64 KiB, deleted at once);
    /// `Err(Full)` while the database has none.
    pub async fn probe_space(&self) -> Result<(), StoreError> {
        let c = self.client().await?;
        let key = format!("space probe {}", self.replica);
        c.execute(
            "INSERT INTO tasklift_meta (key, value)
             SELECT $1, string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 2048) g
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&key],
        )
        .await
        .map_err(db)?;
        c.execute("DELETE FROM tasklift_meta WHERE key = $1", &[&key])
            .await
            .map_err(db)?;
        Ok(())
    }

    /// While the database refuses writes for lack of space, probe it every
    /// `every`; new tasks resume once a probe succeeds. Until `shutdown`.
    pub async fn watch_space(
        self: std::sync::Arc<Self>,
        every: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            if !self.space.store_refused() {
                continue;
            }
            match self.probe_space().await {
                Ok(()) => self.space.writes_again(),
                Err(e) => {
                    tracing::debug!(error = %e, "the task store's database still refuses writes")
                }
            }
        }
    }

    /// This replica's id (in `application_name` and in `tasklift_tasks.replica`).
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The principal hash key every replica shares, created by the first one.
    pub async fn hash_key(&self) -> Result<Vec<u8>, StoreError> {
        let fresh = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let c = self.client().await?;
        c.execute(
            "INSERT INTO tasklift_meta (key, value) VALUES ('principal_hash_key', $1)
             ON CONFLICT (key) DO NOTHING",
            &[&fresh],
        )
        .await
        .map_err(db)?;
        let row = c
            .query_one(
                "SELECT value FROM tasklift_meta WHERE key = 'principal_hash_key'",
                &[],
            )
            .await
            .map_err(db)?;
        Ok(row.get::<_, String>(0).into_bytes())
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}
