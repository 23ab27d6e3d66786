//! [`TaskStore`] for PostgreSQL: conditional writes fenced by the lease epoch, each
//! announced with `NOTIFY`, and reads of records.

use serde_json::Value;

use super::rows::{i, outcome_bytes, record, status_of, u, COLUMNS};
use super::{db, PgStore, CHANNEL};
use crate::store::{
    SharedStore, StoreError, StoreFuture, StoreStats, TaskRecord, TaskStatus, TaskStore,
};

impl PgStore {
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

    /// A write's result, noting a database out of space or out of reach (no new
    /// tasks until a probe write succeeds, see `PgStore::watch_space`).
    fn watched<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        match &r {
            Err(StoreError::Full(m)) => self.space.refused_write(false, m),
            Err(StoreError::Unavailable(m)) => self.space.refused_write(true, m),
            _ => {}
        }
        r
    }

    /// Write a record, once: a task's end that the database cannot take for now
    /// (out of space, out of reach: `is_transient`) is kept and written again by
    /// its driver (`settle_later`), and those errors mark the low mode at once.
    async fn put_record(&self, rec: &TaskRecord) -> Result<(), StoreError> {
        let terminal = rec.status().is_terminal();
        let r = self.write_record(rec).await;
        if r.as_ref().is_err_and(|e| !e.is_transient()) && terminal {
            // The end was not written (or not known to be): this replica stops
            // renewing the task's lease, so the task is failed as lost once the
            // lease lapses instead of staying `working` for as long as this
            // replica lives. After a transient failure the driver keeps the
            // outcome and writes it again (`settle_later`), so the task stays this
            // replica's meanwhile; should the driver give up, the task's expiry
            // ends its row.
            self.owned.remove(&rec.id);
        }
        self.watched(r)
    }

    async fn write_record(&self, rec: &TaskRecord) -> Result<(), StoreError> {
        let outcome = outcome_bytes(rec)?;
        let inputs = Value::Object(rec.input_requests.clone());
        let terminal = rec.status().is_terminal();
        let mut c = self.client().await?;
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
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
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
        ];
        let n = if self.has_outbox() {
            // The events this change reports, in its transaction (store/outbox.rs).
            let tx = c.transaction().await.map_err(db)?;
            let before: Option<String> = tx
                .query_opt(
                    "SELECT status FROM tasklift_tasks WHERE id = $1 FOR UPDATE",
                    &[&rec.id],
                )
                .await
                .map_err(db)?
                .map(|r| r.get(0));
            let n = tx.query(&st, &params).await.map_err(db)?.len();
            let before = before.as_deref().map(status_of);
            let events = n > 0 && self.insert_events(&tx, before, rec).await?;
            tx.commit().await.map_err(db)?;
            if events {
                self.woke();
            }
            n
        } else {
            c.query(&st, &params).await.map_err(db)?.len()
        };
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
                return self.watched(Err(db(e)));
            }
            // Owned once the row is committed: a lease renewal that ran before
            // the commit would not have found the row and taken the task as lost,
            // stopping its call and leaving the row `working` behind.
            if running {
                self.owned.insert(rec.id.clone(), 1);
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

    fn sessions(&self) -> Option<&dyn crate::store::SessionStore> {
        Some(self)
    }

    fn replays(&self) -> Option<&dyn crate::store::ReplayStore> {
        Some(self)
    }

    fn outbox(&self) -> Option<&dyn crate::store::OutboxStore> {
        Some(self)
    }
}
