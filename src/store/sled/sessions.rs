//! Legacy client sessions in the embedded store (tree `sessions`).

use super::{db_err, SledStore};
use crate::store::{SessionRecord, SessionStore, StoreError, StoreFuture};

impl SledStore {
    fn session_record(&self, id: &str, bytes: &[u8]) -> Result<SessionRecord, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
            id: format!("session {id}"),
            message: e.to_string(),
        })
    }
}

impl SessionStore for SledStore {
    fn save_session<'a>(&'a self, rec: &'a SessionRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let json = serde_json::to_vec(rec).expect("records serialize");
            self.room_for(json.len())?;
            let inner = self.inner()?;
            let r = match inner.sessions.insert(rec.id.as_bytes(), json) {
                Ok(_) => inner.commit.commit().await,
                Err(e) => Err(db_err(e)),
            };
            self.noted(r)
        })
    }

    fn load_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            match self.inner()?.sessions.get(id.as_bytes()).map_err(db_err)? {
                Some(b) => self.session_record(id, &b).map(Some),
                None => Ok(None),
            }
        })
    }

    fn touch_sessions<'a>(&'a self, seen: &'a [(String, u64)]) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            let mut gone = Vec::new();
            for (id, at) in seen {
                let Some(b) = self.inner()?.sessions.get(id.as_bytes()).map_err(db_err)? else {
                    gone.push(id.clone());
                    continue;
                };
                let mut rec = self.session_record(id, &b)?;
                if rec.last_seen_ms >= *at {
                    continue;
                }
                rec.last_seen_ms = *at;
                let json = serde_json::to_vec(&rec).expect("records serialize");
                // Only if nobody dropped or replaced it meanwhile.
                let _ = self
                    .inner()?
                    .sessions
                    .compare_and_swap(id.as_bytes(), Some(b), Some(json))
                    .map_err(db_err)?;
            }
            Ok(gone)
        })
    }

    fn drop_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.inner()?
                .sessions
                .remove(id.as_bytes())
                .map_err(db_err)
                .map(drop)
        })
    }

    fn purge_sessions(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let mut gone = 0;
            let inner = self.inner()?;
            for kv in inner.sessions.iter() {
                let (k, v) = kv.map_err(db_err)?;
                let id = String::from_utf8_lossy(&k).into_owned();
                // A record that cannot be read is of no use to anyone: it goes too.
                let stale = self
                    .session_record(&id, &v)
                    .map_or(true, |r| r.last_seen_ms < before_ms);
                if stale
                    && inner
                        .sessions
                        .compare_and_swap(&k, Some(v), None as Option<&[u8]>)
                        .map_err(db_err)?
                        .is_ok()
                {
                    gone += 1;
                }
            }
            Ok(gone)
        })
    }
}
