//! [`SessionStore`] for PostgreSQL: one row per legacy client session, read by any
//! replica the client's requests reach.

use super::rows::{i, u};
use super::{db, PgStore};
use crate::store::{SessionRecord, SessionStore, StoreError, StoreFuture};

impl SessionStore for PgStore {
    fn save_session<'a>(&'a self, rec: &'a SessionRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let json = serde_json::to_value(rec).expect("records serialize");
            let c = self.client().await?;
            c.execute(
                "INSERT INTO tasklift_sessions (id, record, last_seen_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (id) DO UPDATE SET record = excluded.record,
                     last_seen_ms = GREATEST(tasklift_sessions.last_seen_ms, excluded.last_seen_ms)",
                &[&rec.id, &json, &i(rec.last_seen_ms)],
            )
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn load_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let c = self.client().await?;
            let row = c
                .query_opt(
                    "SELECT record, last_seen_ms FROM tasklift_sessions WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(db)?;
            let Some(row) = row else { return Ok(None) };
            let mut rec: SessionRecord =
                serde_json::from_value(row.get(0)).map_err(|e| StoreError::Corrupt {
                    id: format!("session {id}"),
                    message: e.to_string(),
                })?;
            rec.last_seen_ms = rec.last_seen_ms.max(u(row.get(1)));
            Ok(Some(rec))
        })
    }

    fn touch_sessions<'a>(&'a self, seen: &'a [(String, u64)]) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            if seen.is_empty() {
                return Ok(Vec::new());
            }
            let ids: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
            let at: Vec<i64> = seen.iter().map(|(_, t)| i(*t)).collect();
            let c = self.client().await?;
            let kept = c
                .query(
                    "UPDATE tasklift_sessions s SET last_seen_ms = GREATEST(s.last_seen_ms, v.seen)
                     FROM unnest($1::text[], $2::bigint[]) AS v(id, seen)
                     WHERE s.id = v.id RETURNING s.id",
                    &[&ids, &at],
                )
                .await
                .map_err(db)?;
            let kept: std::collections::HashSet<String> =
                kept.iter().map(|r| r.get::<_, String>(0)).collect();
            Ok(seen
                .iter()
                .filter(|(id, _)| !kept.contains(id))
                .map(|(id, _)| id.clone())
                .collect())
        })
    }

    fn drop_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let c = self.client().await?;
            c.execute("DELETE FROM tasklift_sessions WHERE id = $1", &[&id])
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    fn purge_sessions(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let c = self.client().await?;
            let n = c
                .execute(
                    "DELETE FROM tasklift_sessions WHERE last_seen_ms < $1",
                    &[&i(before_ms)],
                )
                .await
                .map_err(db)?;
            Ok(n as usize)
        })
    }
}
