//! [`OutboxStore`] for PostgreSQL (table `tasklift_outbox`): webhook events
//! inserted in the transaction that writes the status change they report
//! ([`PgStore::insert_events`], from `task_store.rs` and the reaper in
//! `shared.rs`), and leased to one replica at a time for delivery (`FOR UPDATE
//! SKIP LOCKED`, a lease in database time that lapses when the replica dies).

use std::time::Duration;

use tokio_postgres::{Row, Transaction};

use super::rows::{i, u};
use super::{db, PgStore};
use crate::store::{
    Delivery, OutboxDepth, OutboxStore, StoreError, StoreFuture, TaskRecord, TaskStatus,
};

/// The columns a [`Delivery`] is read from, in [`delivery`]'s order.
const COLUMNS: &str = "id, destination, kind, task_id, occurred_at_ms, body, attempts, next_at_ms";

fn delivery(r: &Row) -> Delivery {
    Delivery {
        id: r.get(0),
        destination: r.get(1),
        kind: r.get(2),
        task_id: r.get(3),
        occurred_at_ms: u(r.get(4)),
        body: r.get(5),
        attempts: u32::try_from(r.get::<_, i32>(6)).unwrap_or(0),
        next_at_ms: u(r.get(7)),
    }
}

impl PgStore {
    /// Insert the events `rec` reports against `before`, in the caller's
    /// transaction `tx`, less those past their destination's `max_pending`
    /// (dropped, counted, logged). Whether any were inserted.
    pub(super) async fn insert_events(
        &self,
        tx: &Transaction<'_>,
        before: Option<TaskStatus>,
        rec: &TaskRecord,
    ) -> Result<bool, StoreError> {
        let Some(outbox) = self.outbox.get() else {
            return Ok(false);
        };
        let mut any = false;
        for d in outbox.events(before, rec) {
            let waiting: i64 = tx
                .query_one(
                    "SELECT count(*) FROM tasklift_outbox WHERE destination = $1",
                    &[&d.destination],
                )
                .await
                .map_err(db)?
                .get(0);
            if u(waiting) >= outbox.cap(&d.destination) as u64 {
                outbox.drop_one(&d);
                continue;
            }
            tx.execute(
                "INSERT INTO tasklift_outbox (id, destination, kind, task_id, occurred_at_ms, body, attempts, next_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, 0, $7)",
                &[&d.id, &d.destination, &d.kind, &d.task_id, &i(d.occurred_at_ms), &d.body, &i(d.next_at_ms)],
            )
            .await
            .map_err(db)?;
            any = true;
        }
        Ok(any)
    }

    /// Whether events are derived from status changes (webhooks are configured).
    pub(super) fn has_outbox(&self) -> bool {
        self.outbox.get().is_some()
    }

    /// Events were committed: wake this replica's worker.
    pub(super) fn woke(&self) {
        if let Some(o) = self.outbox.get() {
            o.wake();
        }
    }
}

impl OutboxStore for PgStore {
    fn due<'a>(
        &'a self,
        destination: &'a str,
        now_ms: u64,
        lease: Duration,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Delivery>> {
        Box::pin(async move {
            let c = self.client().await?;
            let st = c
                .prepare_cached(&format!(
                    "WITH due AS (
                         SELECT id FROM tasklift_outbox
                         WHERE destination = $1 AND next_at_ms <= $2
                             AND (lease_until IS NULL OR lease_until < now())
                         ORDER BY next_at_ms LIMIT $3 FOR UPDATE SKIP LOCKED)
                     UPDATE tasklift_outbox o SET leased_by = $4,
                         lease_until = now() + $5::bigint * interval '1 millisecond'
                     FROM due WHERE o.id = due.id
                     RETURNING {}",
                    COLUMNS
                        .split(", ")
                        .map(|c| format!("o.{c}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .await
                .map_err(db)?;
            let rows = c
                .query(
                    &st,
                    &[
                        &destination,
                        &i(now_ms),
                        &(limit as i64),
                        &self.replica,
                        &(lease.as_millis() as i64),
                    ],
                )
                .await
                .map_err(db)?;
            let mut out: Vec<Delivery> = rows.iter().map(delivery).collect();
            out.sort_by_key(|d| d.next_at_ms);
            Ok(out)
        })
    }

    fn done<'a>(&'a self, d: &'a Delivery) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let c = self.client().await?;
            c.execute("DELETE FROM tasklift_outbox WHERE id = $1", &[&d.id])
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    /// Only while this replica still holds it: after its lease lapsed another
    /// replica may have taken (and delivered) it.
    fn retry<'a>(&'a self, d: &'a Delivery) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let c = self.client().await?;
            c.execute(
                "UPDATE tasklift_outbox SET attempts = $2, next_at_ms = $3, leased_by = NULL,
                     lease_until = NULL
                 WHERE id = $1 AND leased_by = $4",
                &[&d.id, &(d.attempts as i32), &i(d.next_at_ms), &self.replica],
            )
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn pending(&self, limit: usize) -> StoreFuture<'_, Vec<Delivery>> {
        Box::pin(async move {
            let c = self.client().await?;
            let rows = c
                .query(
                    &format!("SELECT {COLUMNS} FROM tasklift_outbox ORDER BY occurred_at_ms, id LIMIT $1"),
                    &[&(limit as i64)],
                )
                .await
                .map_err(db)?;
            Ok(rows.iter().map(delivery).collect())
        })
    }

    fn depth(&self) -> StoreFuture<'_, Vec<OutboxDepth>> {
        Box::pin(async move {
            let c = self.client().await?;
            let rows = c
                .query(
                    "SELECT destination, count(*), min(occurred_at_ms) FROM tasklift_outbox
                     GROUP BY destination ORDER BY destination",
                    &[],
                )
                .await
                .map_err(db)?;
            Ok(rows
                .iter()
                .map(|r| OutboxDepth {
                    destination: r.get(0),
                    pending: u(r.get(1)),
                    oldest_ms: r.get::<_, Option<i64>>(2).map(u),
                })
                .collect())
        })
    }
}
