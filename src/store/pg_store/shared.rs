//! What only a store shared by replicas does ([`SharedStore`]): answers left for
//! another replica, lease renewal, reaping lost replicas' tasks, batch purges.

use std::time::Duration;

use serde_json::{Map, Value};

use super::rows::{i, record, status_of, COLUMNS};
use super::{db, PgStore, CHANNEL};
use crate::store::{SharedStore, StoreError, StoreFuture, TaskOutcome};

impl PgStore {
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
    ///
    /// Only the tasks this replica still runs are renewed, not every unfinished row
    /// naming it: a row whose call stopped here without its end being written (the
    /// database was unreachable then) must lapse, so that a replica fails it,
    /// rather than stay `working` for as long as this replica lives.
    pub async fn renew_leases(&self) -> Result<Vec<String>, StoreError> {
        let before: Vec<String> = self.owned.iter().map(|e| e.key().clone()).collect();
        let c = self.client().await?;
        let st = c
            .prepare_cached(
                "UPDATE tasklift_tasks SET lease_expires_at = now() + $2::bigint * interval '1 millisecond'
                 WHERE replica = $1 AND id = ANY($3) AND status IN ('working', 'input_required')
                 RETURNING id, lease_epoch",
            )
            .await
            .map_err(db)?;
        let lease_ms = self.lease.as_millis() as i64;
        let rows = c
            .query(&st, &[&self.replica, &lease_ms, &before])
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
        let mut c = self.client().await?;
        let st = c
            .prepare_cached(
                "WITH lost AS (
                     SELECT id, status FROM tasklift_tasks
                     WHERE status IN ('working', 'input_required') AND lease_expires_at < now()
                     ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED),
                 u AS (
                     UPDATE tasklift_tasks t SET status = 'failed', status_message = $2, outcome = $3,
                         input_requests = '{}', replica = NULL, lease_expires_at = NULL,
                         lease_epoch = t.lease_epoch + 1, updated_at_ms = $4
                     FROM lost WHERE t.id = lost.id RETURNING t.id, lost.status)
                 SELECT id, pg_notify($5, $6 || ' ' || id), status FROM u",
            )
            .await
            .map_err(db)?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &(limit as i64),
            &message,
            &outcome,
            &i(now_ms),
            &CHANNEL,
            &self.replica,
        ];
        if !self.has_outbox() {
            let rows = c.query(&st, &params).await.map_err(db)?;
            return Ok(rows.iter().map(|r| r.get(0)).collect());
        }
        // The task.failed events of the reaped tasks, in the same transaction.
        let tx = c.transaction().await.map_err(db)?;
        let rows = tx.query(&st, &params).await.map_err(db)?;
        let mut events = false;
        for r in &rows {
            let id: String = r.get(0);
            let before = status_of(r.get(2));
            let sql = format!("SELECT {COLUMNS}, outcome FROM tasklift_tasks WHERE id = $1");
            if let Some(row) = tx.query_opt(&sql, &[&id]).await.map_err(db)? {
                let rec = record(&row, true)?;
                events |= self.insert_events(&tx, Some(before), &rec).await?;
            }
        }
        tx.commit().await.map_err(db)?;
        if events {
            self.woke();
        }
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
