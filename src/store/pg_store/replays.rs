//! [`ReplayStore`] for PostgreSQL: one row per replay key, so that a retried call
//! reaching any replica joins the task the first attempt became.

use super::rows::i;
use super::{db, PgStore};
use crate::store::{ReplayStore, StoreFuture};

impl ReplayStore for PgStore {
    fn remember_call<'a>(
        &'a self,
        key: &'a str,
        task_id: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let c = self.client().await?;
            c.execute(
                "INSERT INTO tasklift_replays (key, task_id, until_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET task_id = excluded.task_id,
                     until_ms = excluded.until_ms",
                &[&key, &task_id, &i(until_ms)],
            )
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn recall_call<'a>(&'a self, key: &'a str, now_ms: u64) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let c = self.client().await?;
            let row = c
                .query_opt(
                    "SELECT task_id FROM tasklift_replays WHERE key = $1 AND until_ms > $2",
                    &[&key, &i(now_ms)],
                )
                .await
                .map_err(db)?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn purge_calls(&self, now_ms: u64) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let c = self.client().await?;
            let n = c
                .execute(
                    "DELETE FROM tasklift_replays WHERE until_ms <= $1",
                    &[&i(now_ms)],
                )
                .await
                .map_err(db)?;
            Ok(n as usize)
        })
    }
}
