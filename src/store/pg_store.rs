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

use std::str::FromStr;
use std::time::Duration;

use dashmap::DashMap;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_postgres::config::SslMode;
use tokio_postgres::{AsyncMessage, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::redact_url_credentials as redact_url;

use super::{
    NewTask, SharedStore, StoreError, StoreFuture, StoreStats, TaskOutcome, TaskRecord, TaskStatus,
    TaskStore,
};

/// The notification channel.
const CHANNEL: &str = "tasklift_tasks";

/// Schema versions, applied in order, each once, under an advisory lock so replicas
/// starting together do not race.
const MIGRATIONS: &[(i32, &str)] = &[(
    1,
    r#"
CREATE TABLE tasklift_tasks (
    id               text PRIMARY KEY,
    owner            text NOT NULL,
    upstream         text NOT NULL,
    tool             text NOT NULL,
    status           text NOT NULL,
    status_message   text,
    created_at_ms    bigint NOT NULL,
    updated_at_ms    bigint NOT NULL,
    ttl_ms           bigint NOT NULL,
    poll_interval_ms bigint NOT NULL,
    expires_at_ms    bigint NOT NULL,
    input_requests   jsonb NOT NULL DEFAULT '{}',
    -- The result or error as JSON bytes: stored as written, compressed by TOAST
    -- when large, and never read by listings.
    outcome          bytea,
    replica          text,
    lease_epoch      bigint NOT NULL DEFAULT 1,
    lease_expires_at timestamptz
);
CREATE INDEX tasklift_tasks_expiry ON tasklift_tasks (expires_at_ms);
CREATE INDEX tasklift_tasks_owner ON tasklift_tasks (owner, upstream, created_at_ms);
CREATE INDEX tasklift_tasks_leases ON tasklift_tasks (lease_expires_at)
    WHERE status IN ('working', 'input_required');
CREATE INDEX tasklift_tasks_replica ON tasklift_tasks (replica)
    WHERE status IN ('working', 'input_required');
CREATE TABLE tasklift_inputs (
    seq        bigserial PRIMARY KEY,
    task_id    text NOT NULL REFERENCES tasklift_tasks (id) ON DELETE CASCADE,
    answers    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasklift_inputs_task ON tasklift_inputs (task_id);
CREATE TABLE tasklift_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
"#,
)];

/// Columns read into a [`TaskRecord`], in [`record`]'s order.
const COLUMNS: &str = "id, owner, upstream, tool, status, status_message, created_at_ms, \
     updated_at_ms, ttl_ms, poll_interval_ms, expires_at_ms, input_requests";

/// What a replica hears from the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Another replica changed this task (or left answers for it).
    Task(String),
    /// The listening connection was (re)established: notifications may have been
    /// missed, so everything running here should be checked.
    Resync,
}

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
}

/// An error with its causes ("error performing TLS handshake: invalid peer
/// certificate: …"): the driver's own message often leaves the cause out.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        next = s.source();
    }
    out
}

fn db(e: impl std::error::Error + 'static) -> StoreError {
    StoreError::Db(chain(&e))
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Db(format!("no database connection: {}", chain(&e)))
}

fn status_of(s: &str) -> TaskStatus {
    match s {
        "working" => TaskStatus::Working,
        "input_required" => TaskStatus::InputRequired,
        "completed" => TaskStatus::Completed,
        "cancelled" => TaskStatus::Cancelled,
        _ => TaskStatus::Failed,
    }
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A row (in [`COLUMNS`] order, optionally followed by `outcome`) as a record.
fn record(row: &Row, with_outcome: bool) -> Result<TaskRecord, StoreError> {
    let id: String = row.get(0);
    let input_requests = match row.get::<_, Value>(11) {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let outcome = if with_outcome {
        match row.get::<_, Option<Vec<u8>>>(12) {
            Some(bytes) => Some(serde_json::from_slice::<TaskOutcome>(&bytes).map_err(|e| {
                StoreError::Corrupt {
                    id: id.clone(),
                    message: format!("outcome: {e}"),
                }
            })?),
            None => None,
        }
    } else {
        None
    };
    let mut rec = TaskRecord::new(NewTask {
        id,
        owner: row.get(1),
        upstream: row.get(2),
        tool: row.get(3),
        created_at_ms: u(row.get(6)),
        ttl_ms: u(row.get(8)),
        poll_interval_ms: u(row.get(9)),
    })
    .restored(status_of(row.get(4)));
    rec.status_message = row.get(5);
    rec.updated_at_ms = u(row.get(7));
    rec.expires_at_ms = u(row.get(10));
    rec.input_requests = input_requests;
    rec.outcome = outcome;
    Ok(rec)
}

fn outcome_bytes(rec: &TaskRecord) -> Result<Option<Vec<u8>>, StoreError> {
    rec.outcome
        .as_ref()
        .map(|o| serde_json::to_vec(o).map_err(db))
        .transpose()
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
        };
        store.migrate().await.map_err(|e| match e {
            StoreError::Db(m) => StoreError::Db(format!("{} ({})", m, redact_url(url))),
            e => e,
        })?;
        Ok(store)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_err)
    }

    /// Apply pending migrations (idempotent; safe with replicas starting together).
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(db)?;
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(7263011);
             CREATE TABLE IF NOT EXISTS tasklift_migrations (
                 version int PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(db)?;
        let done: Option<i32> = tx
            .query_one("SELECT max(version) FROM tasklift_migrations", &[])
            .await
            .map_err(db)?
            .get(0);
        let done = done.unwrap_or(0);
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > done) {
            tx.batch_execute(sql).await.map_err(db)?;
            tx.execute(
                "INSERT INTO tasklift_migrations (version) VALUES ($1)",
                &[version],
            )
            .await
            .map_err(db)?;
            tracing::info!(version, "applied a task store migration");
        }
        tx.commit().await.map_err(db)
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

    /// What other replicas changed (once; `None` after the first call).
    pub fn take_changes(&self) -> Option<mpsc::Receiver<Change>> {
        self.changes.lock().ok().and_then(|mut c| c.take())
    }

    /// Leave answers for a task another replica runs, and wake it.
    pub async fn send_answers(
        &self,
        task_id: &str,
        answers: &Map<String, Value>,
    ) -> Result<(), StoreError> {
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "WITH ins AS (INSERT INTO tasklift_inputs (task_id, answers) VALUES ($1, $2) RETURNING task_id)
                 SELECT pg_notify($3, $4 || ' ' || task_id) FROM ins",
            )
            .await
            .map_err(db)?;
        let answers = Value::Object(answers.clone());
        c.query(&st, &[&task_id, &answers, &CHANNEL, &self.replica])
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Take the answers waiting for these tasks (they are deleted as they are read).
    pub async fn take_answers(
        &self,
        ids: &[String],
    ) -> Result<Vec<(String, Map<String, Value>)>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "DELETE FROM tasklift_inputs WHERE task_id = ANY($1) RETURNING seq, task_id, answers",
            )
            .await
            .map_err(db)?;
        let mut rows = c.query(&st, &[&ids]).await.map_err(db)?;
        rows.sort_by_key(|r| r.get::<_, i64>(0));
        Ok(rows
            .into_iter()
            .filter_map(|r| match r.get::<_, Value>(2) {
                Value::Object(m) => Some((r.get(1), m)),
                _ => None,
            })
            .collect())
    }

    /// Renew this replica's leases (one statement for all its tasks). Returns the
    /// tasks it believed it ran that are no longer its own: settled by another
    /// replica, or failed after its lease lapsed. Their calls must stop.
    pub async fn renew_leases(&self) -> Result<Vec<String>, StoreError> {
        let before: Vec<String> = self.owned.iter().map(|e| e.key().clone()).collect();
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "UPDATE tasklift_tasks SET lease_expires_at = now() + $2::bigint * interval '1 millisecond'
                 WHERE replica = $1 AND status IN ('working', 'input_required')
                 RETURNING id, lease_epoch",
            )
            .await
            .map_err(db)?;
        let lease_ms = self.lease.as_millis() as i64;
        let rows = c
            .query(&st, &[&self.replica, &lease_ms])
            .await
            .map_err(db)?;
        let held: std::collections::HashMap<String, i64> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let mut lost = Vec::new();
        for id in before {
            let gone = match held.get(&id) {
                Some(epoch) => self.owned.get(&id).is_some_and(|e| *e != *epoch),
                None => true,
            };
            if gone && self.owned.remove(&id).is_some() {
                lost.push(id);
            }
        }
        Ok(lost)
    }

    /// Fail the unfinished tasks of replicas whose lease lapsed (a batch at a time).
    /// Returns the failed tasks' ids.
    pub async fn reap_lost(
        &self,
        now_ms: u64,
        error: &Value,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("lost")
            .to_string();
        let outcome = serde_json::to_vec(&TaskOutcome::Error(error.clone())).map_err(db)?;
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "WITH lost AS (
                     SELECT id FROM tasklift_tasks
                     WHERE status IN ('working', 'input_required') AND lease_expires_at < now()
                     ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED),
                 u AS (
                     UPDATE tasklift_tasks t SET status = 'failed', status_message = $2, outcome = $3,
                         input_requests = '{}', replica = NULL, lease_expires_at = NULL,
                         lease_epoch = t.lease_epoch + 1, updated_at_ms = $4
                     FROM lost WHERE t.id = lost.id RETURNING t.id)
                 SELECT id, pg_notify($5, $6 || ' ' || id) FROM u",
            )
            .await
            .map_err(db)?;
        let rows = c
            .query(
                &st,
                &[
                    &(limit as i64),
                    &message,
                    &outcome,
                    &i(now_ms),
                    &CHANNEL,
                    &self.replica,
                ],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Delete expired finished tasks in one statement; returns how many went.
    pub async fn purge_expired(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "DELETE FROM tasklift_tasks WHERE id IN (
                     SELECT id FROM tasklift_tasks
                     WHERE expires_at_ms <= $1 AND status NOT IN ('working', 'input_required')
                     ORDER BY expires_at_ms LIMIT $2)",
            )
            .await
            .map_err(db)?;
        let n = c
            .execute(&st, &[&i(now_ms), &(limit as i64)])
            .await
            .map_err(db)?;
        Ok(n as usize)
    }

    /// Records (without outcomes) selected by `tail`: a WHERE and/or ORDER BY clause.
    async fn records(
        &self,
        tail: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let c = self.client().await?;
        let sql = format!("SELECT {COLUMNS} FROM tasklift_tasks {tail}");
        let rows = c.query(&sql, params).await.map_err(db)?;
        rows.iter().map(|r| record(r, false)).collect()
    }

    async fn put_record(&self, rec: &TaskRecord) -> Result<(), StoreError> {
        let outcome = outcome_bytes(rec)?;
        let inputs = Value::Object(rec.input_requests.clone());
        let terminal = rec.status().is_terminal();
        let c = self.client().await?;
        let held = self.owned.get(&rec.id).map(|e| *e);
        // The owner writes only while the row is unfinished and the epoch is still
        // its own. Anyone else (a cancellation that landed here) writes only an
        // unfinished row, and moves the epoch on so the owner's later writes are
        // refused.
        let st = c
            .prepare_cached(
                "WITH u AS (
                     UPDATE tasklift_tasks SET status = $3, status_message = $4,
                         updated_at_ms = $5, expires_at_ms = $6, input_requests = $7,
                         outcome = $8,
                         lease_epoch = CASE WHEN $2::bigint IS NULL THEN lease_epoch + 1 ELSE lease_epoch END,
                         replica = CASE WHEN $9 THEN NULL ELSE replica END,
                         lease_expires_at = CASE WHEN $9 THEN NULL ELSE lease_expires_at END
                     WHERE id = $1 AND ($2::bigint IS NULL OR lease_epoch = $2)
                         AND status IN ('working', 'input_required')
                     RETURNING id)
                 SELECT pg_notify($10, $11 || ' ' || id) FROM u",
            )
            .await
            .map_err(db)?;
        let n = c
            .query(
                &st,
                &[
                    &rec.id,
                    &held,
                    &rec.status().as_str(),
                    &rec.status_message,
                    &i(rec.updated_at_ms),
                    &i(rec.expires_at_ms),
                    &inputs,
                    &outcome,
                    &terminal,
                    &CHANNEL,
                    &self.replica,
                ],
            )
            .await
            .map_err(db)?
            .len();
        if n == 0 {
            self.owned.remove(&rec.id);
            return Err(StoreError::Conflict { id: rec.id.clone() });
        }
        if terminal {
            self.owned.remove(&rec.id);
        }
        Ok(())
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Listen for other replicas' changes on a connection of its own, reconnecting
/// after a second when it drops (and asking for a resync each time it is up).
async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    me: String,
    tx: mpsc::Sender<Change>,
) {
    let mut warned = false;
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut conn)) => {
                let sql = format!("LISTEN {CHANNEL}");
                let listen = client.batch_execute(&sql);
                tokio::pin!(listen);
                let mut listening = false;
                loop {
                    tokio::select! {
                        r = &mut listen, if !listening => {
                            if let Err(e) = r {
                                tracing::warn!(error = %chain(&e), "could not LISTEN for other replicas' changes");
                                break;
                            }
                            listening = true;
                            if warned {
                                tracing::info!("listening for other replicas' changes again");
                            }
                            warned = false;
                            if tx.send(Change::Resync).await.is_err() {
                                return;
                            }
                        }
                        m = std::future::poll_fn(|cx| conn.poll_message(cx)) => match m {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                let Some((from, id)) = n.payload().split_once(' ') else { continue };
                                if from != me && tx.send(Change::Task(id.to_string())).await.is_err() {
                                    return;
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::warn!(error = %chain(&e), "the listening connection to the task store failed");
                                break;
                            }
                            None => break,
                        }
                    }
                }
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(error = %chain(&e), "cannot reach the task store to listen for other replicas' changes; retrying");
                    warned = true;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl TaskStore for PgStore {
    fn create<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let outcome = outcome_bytes(rec)?;
            let inputs = Value::Object(rec.input_requests.clone());
            let running = !rec.status().is_terminal();
            let c = self.client().await?;
            let st = c
                .prepare_cached(
                    "WITH ins AS (
                         INSERT INTO tasklift_tasks (id, owner, upstream, tool, status, status_message,
                             created_at_ms, updated_at_ms, ttl_ms, poll_interval_ms, expires_at_ms,
                             input_requests, outcome, replica, lease_epoch, lease_expires_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                             CASE WHEN $14 THEN $15 END, 1,
                             CASE WHEN $14 THEN now() + $16::bigint * interval '1 millisecond' END)
                         RETURNING id)
                     SELECT pg_notify($17, $15 || ' ' || id) FROM ins",
                )
                .await
                .map_err(db)?;
            if running {
                self.owned.insert(rec.id.clone(), 1);
            }
            let r = c
                .query(
                    &st,
                    &[
                        &rec.id,
                        &rec.owner,
                        &rec.upstream,
                        &rec.tool,
                        &rec.status().as_str(),
                        &rec.status_message,
                        &i(rec.created_at_ms),
                        &i(rec.updated_at_ms),
                        &i(rec.ttl_ms),
                        &i(rec.poll_interval_ms),
                        &i(rec.expires_at_ms),
                        &inputs,
                        &outcome,
                        &running,
                        &self.replica,
                        &(self.lease.as_millis() as i64),
                        &CHANNEL,
                    ],
                )
                .await;
            if let Err(e) = r {
                self.owned.remove(&rec.id);
                return Err(db(e));
            }
            Ok(())
        })
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move {
            let c = self.client().await?;
            let st = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS}, outcome FROM tasklift_tasks WHERE id = $1"
                ))
                .await
                .map_err(db)?;
            match c.query_opt(&st, &[&id]).await.map_err(db)? {
                Some(row) => Ok(Some(record(&row, true)?)),
                None => Ok(None),
            }
        })
    }

    fn put<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()> {
        Box::pin(self.put_record(rec))
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let c = self.client().await?;
            c.execute("DELETE FROM tasklift_tasks WHERE id = $1", &[&id])
                .await
                .map_err(db)?;
            self.owned.remove(id);
            Ok(())
        })
    }

    /// Only the expired tasks this replica runs: finished ones go in
    /// [`PgStore::purge_expired`]'s batches, other replicas stop their own.
    fn expired(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, Vec<String>> {
        Box::pin(async move {
            let c = self.client().await?;
            let rows = c
                .query(
                    "SELECT id FROM tasklift_tasks
                     WHERE expires_at_ms <= $1 AND replica = $2
                         AND status IN ('working', 'input_required')
                     ORDER BY expires_at_ms LIMIT $3",
                    &[&i(now_ms), &self.replica, &(limit as i64)],
                )
                .await
                .map_err(db)?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn unfinished(&self) -> StoreFuture<'_, Vec<TaskRecord>> {
        Box::pin(self.records("WHERE status IN ('working', 'input_required')", &[]))
    }

    fn list<'a>(
        &'a self,
        owner: &'a str,
        upstream: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(async move {
            let now = i(now_ms);
            self.records(
                "WHERE owner = $1 AND upstream = $2 AND expires_at_ms > $3 ORDER BY created_at_ms, id",
                &[&owner, &upstream, &now],
            )
            .await
        })
    }

    fn all(&self) -> StoreFuture<'_, Vec<TaskRecord>> {
        Box::pin(self.records("ORDER BY created_at_ms DESC, id DESC", &[]))
    }

    fn stats(&self) -> StoreFuture<'_, StoreStats> {
        Box::pin(async move {
            let c = self.client().await?;
            let row = c
                .query_one(
                    "SELECT (SELECT count(*) FROM tasklift_tasks),
                            pg_total_relation_size('tasklift_tasks') + pg_total_relation_size('tasklift_inputs')",
                    &[],
                )
                .await
                .map_err(db)?;
            Ok(StoreStats {
                tasks: u(row.get(0)),
                disk_bytes: u(row.get(1)),
            })
        })
    }

    fn counts(&self) -> StoreFuture<'_, Vec<(TaskStatus, u64)>> {
        Box::pin(async move {
            let c = self.client().await?;
            let rows = c
                .query(
                    "SELECT status, count(*) FROM tasklift_tasks GROUP BY status",
                    &[],
                )
                .await
                .map_err(db)?;
            Ok(rows
                .iter()
                .map(|r| (status_of(r.get(0)), u(r.get(1))))
                .collect())
        })
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        // Every write is committed before it returns.
        Box::pin(async { Ok(()) })
    }

    fn shared(&self) -> Option<&dyn SharedStore> {
        Some(self)
    }
}

impl SharedStore for PgStore {
    fn lease(&self) -> Duration {
        self.lease
    }

    fn send_answers<'a>(
        &'a self,
        task_id: &'a str,
        answers: &'a Map<String, Value>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(PgStore::send_answers(self, task_id, answers))
    }

    fn take_answers<'a>(
        &'a self,
        ids: &'a [String],
    ) -> StoreFuture<'a, Vec<(String, Map<String, Value>)>> {
        Box::pin(PgStore::take_answers(self, ids))
    }

    fn renew_leases(&self) -> StoreFuture<'_, Vec<String>> {
        Box::pin(PgStore::renew_leases(self))
    }

    fn reap_lost<'a>(
        &'a self,
        now_ms: u64,
        error: &'a Value,
        limit: usize,
    ) -> StoreFuture<'a, Vec<String>> {
        Box::pin(PgStore::reap_lost(self, now_ms, error, limit))
    }

    fn purge_expired(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, usize> {
        Box::pin(PgStore::purge_expired(self, now_ms, limit))
    }
}
