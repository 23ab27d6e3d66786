//! Calls that may be replayed, in the embedded store (tree `replays`).

use super::{db_err, SledStore};
use crate::store::{ReplayStore, StoreError, StoreFuture};

/// A `replays` value: when the window closes (big endian) and the task id.
fn replay_value(task_id: &str, until_ms: u64) -> Vec<u8> {
    let mut v = until_ms.to_be_bytes().to_vec();
    v.extend_from_slice(task_id.as_bytes());
    v
}

/// A `replays` value read back: `(until_ms, task id)`, or why it cannot be.
fn replay_entry(key: &[u8], value: &[u8]) -> Result<(u64, String), StoreError> {
    let corrupt = |message: &str| StoreError::Corrupt {
        id: format!("replay {}", String::from_utf8_lossy(key)),
        message: message.to_string(),
    };
    let (until, id) = value
        .split_first_chunk::<8>()
        .ok_or_else(|| corrupt("shorter than its window's end"))?;
    let id = std::str::from_utf8(id).map_err(|_| corrupt("the task id is not UTF-8"))?;
    Ok((u64::from_be_bytes(*until), id.to_string()))
}

impl ReplayStore for SledStore {
    fn remember_call<'a>(
        &'a self,
        key: &'a str,
        task_id: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.room_for(key.len() + task_id.len() + 8)?;
            let inner = self.inner()?;
            let r = match inner
                .replays
                .insert(key.as_bytes(), replay_value(task_id, until_ms))
            {
                Ok(_) => inner.commit.commit().await,
                Err(e) => Err(db_err(e)),
            };
            self.noted(r)
        })
    }

    fn recall_call<'a>(&'a self, key: &'a str, now_ms: u64) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let Some(v) = self.inner()?.replays.get(key.as_bytes()).map_err(db_err)? else {
                return Ok(None);
            };
            let (until_ms, task_id) = replay_entry(key.as_bytes(), &v)?;
            Ok((now_ms < until_ms).then_some(task_id))
        })
    }

    fn purge_calls(&self, now_ms: u64) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let mut gone = 0;
            let inner = self.inner()?;
            for kv in inner.replays.iter() {
                let (k, v) = kv.map_err(db_err)?;
                // An entry that cannot be read is of no use to anyone: it goes too.
                let closed = replay_entry(&k, &v).map_or(true, |(until, _)| until <= now_ms);
                // Only if nobody remembered the key again meanwhile.
                if closed
                    && inner
                        .replays
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
