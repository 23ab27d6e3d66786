//! The schema: its versions, applied in order under an advisory lock.

use super::{db, PgStore};
use crate::store::StoreError;

/// Schema versions, applied in order, each once, under an advisory lock so replicas
/// starting together do not race.
const MIGRATIONS: &[(i32, &str)] = &[
    (
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
    ),
    (
        2,
        r#"
CREATE TABLE tasklift_sessions (
    id            text PRIMARY KEY,
    record        jsonb NOT NULL,
    last_seen_ms  bigint NOT NULL
);
CREATE INDEX tasklift_sessions_seen ON tasklift_sessions (last_seen_ms);
"#,
    ),
    (
        3,
        r#"
CREATE TABLE tasklift_replays (
    key       text PRIMARY KEY,
    task_id   text NOT NULL,
    until_ms  bigint NOT NULL
);
CREATE INDEX tasklift_replays_until ON tasklift_replays (until_ms);
"#,
    ),
    (
        4,
        r#"
CREATE TABLE tasklift_outbox (
    id             text PRIMARY KEY,
    destination    text NOT NULL,
    kind           text NOT NULL,
    task_id        text NOT NULL,
    occurred_at_ms bigint NOT NULL,
    body           text NOT NULL,
    attempts       int NOT NULL DEFAULT 0,
    next_at_ms     bigint NOT NULL,
    leased_by      text,
    lease_until    timestamptz
);
CREATE INDEX tasklift_outbox_due ON tasklift_outbox (destination, next_at_ms);
"#,
    ),
];

impl PgStore {
    /// Apply pending migrations (idempotent; safe with replicas starting together).
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
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
}
