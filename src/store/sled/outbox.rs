//! The webhook outbox in the embedded store (tree `outbox`): key `destination
//! NUL occurred_at_ms (big endian) webhook-id`, value `next_at_ms` (big endian),
//! a byte saying where the body is, and the JSON [`Delivery`], so looking for
//! due events decodes only those. A body larger than [`BODY_INLINE_MAX`] (an
//! event with `include_result`) is kept in `outbox/<id>.json`, written before
//! its entry, so sled's values stay small (see `mod.rs` on sled and large
//! values); the file goes with the entry, and at start a file no entry names
//! (a crash between the two) is removed.
//! Events are inserted by `task_store.rs` (and `held.rs`) in the same write as
//! the record whose change they report; here they are read, leased (in memory:
//! one process owns a sled directory), retried and removed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::files::{result_file, write_file_durably};
use super::{db_err, io_err, SledStore};
use crate::store::{Delivery, Outbox, OutboxDepth, OutboxStore, StoreError, StoreFuture};

/// The largest body kept in the entry itself.
const BODY_INLINE_MAX: usize = 4 * 1024;
/// The entry holds its body.
const INLINE: u8 = 0;
/// The body is in `outbox/<id>.json`.
const IN_FILE: u8 = 1;

/// Where a delivery lives in the `outbox` tree.
pub(super) fn outbox_key(d: &Delivery) -> Vec<u8> {
    let mut k = prefix(&d.destination);
    k.extend_from_slice(&d.occurred_at_ms.to_be_bytes());
    k.extend_from_slice(d.id.as_bytes());
    k
}

fn prefix(destination: &str) -> Vec<u8> {
    let mut k = destination.as_bytes().to_vec();
    k.push(0);
    k
}

/// A delivery as the `outbox` tree keeps it (a large body left out: its file
/// is written by [`SledStore::stage_bodies`] first).
pub(super) fn outbox_value(d: &Delivery) -> Vec<u8> {
    let mut v = d.next_at_ms.to_be_bytes().to_vec();
    if d.body.len() > BODY_INLINE_MAX {
        v.push(IN_FILE);
        let light = Delivery {
            body: String::new(),
            ..d.clone()
        };
        serde_json::to_writer(&mut v, &light).expect("deliveries serialize");
    } else {
        v.push(INLINE);
        serde_json::to_writer(&mut v, d).expect("deliveries serialize");
    }
    v
}

/// When a stored delivery is due, read without decoding it.
fn next_at(v: &[u8]) -> u64 {
    v.first_chunk::<8>().map_or(0, |b| u64::from_be_bytes(*b))
}

/// Whether the entry's body is in a file.
fn in_file(v: &[u8]) -> bool {
    v.get(8) == Some(&IN_FILE)
}

impl SledStore {
    fn bodies_dir(&self) -> PathBuf {
        self.cell.data_dir.join("outbox")
    }

    fn body_path(&self, id: &str) -> PathBuf {
        result_file(&self.bodies_dir(), id)
    }

    /// Write the large bodies of `events` to their files, before their entries.
    pub(super) async fn stage_bodies(&self, events: &[Delivery]) -> Result<(), StoreError> {
        for d in events.iter().filter(|d| d.body.len() > BODY_INLINE_MAX) {
            write_file_durably(self.body_path(&d.id), d.body.clone().into_bytes()).await?;
        }
        Ok(())
    }

    /// An entry read back, with its body when `body` (from its file if there).
    fn decode_delivery(&self, v: &[u8], body: bool) -> Result<Delivery, StoreError> {
        let corrupt = |message: String| StoreError::Corrupt {
            id: "outbox entry".into(),
            message,
        };
        let json = v.get(9..).ok_or_else(|| corrupt("too short".into()))?;
        let mut d: Delivery = serde_json::from_slice(json).map_err(|e| corrupt(e.to_string()))?;
        if body && in_file(v) {
            let path = self.body_path(&d.id);
            d.body = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        }
        Ok(d)
    }

    /// Every delivery of one destination (`None`: all), in key order, without
    /// the bodies kept in files.
    fn deliveries(&self, destination: Option<&str>) -> Result<Vec<Delivery>, StoreError> {
        let inner = self.inner()?;
        let iter = match destination {
            Some(d) => inner.outbox.scan_prefix(prefix(d)),
            None => inner.outbox.iter(),
        };
        let mut out = Vec::new();
        for kv in iter {
            let (_, v) = kv.map_err(db_err)?;
            out.push(self.decode_delivery(&v, false)?);
        }
        Ok(out)
    }

    /// How many events wait for `destination` (counted once, then kept).
    pub(super) fn outbox_count(&self, destination: &str) -> Result<u64, StoreError> {
        if let Some(n) = self.cell.outbox_counts.get(destination) {
            return Ok(*n);
        }
        let n = self
            .inner()?
            .outbox
            .scan_prefix(prefix(destination))
            .count() as u64;
        Ok(*self
            .cell
            .outbox_counts
            .entry(destination.to_string())
            .or_insert(n))
    }

    /// Derive webhook events for these destinations from each status change,
    /// and keep them with it (see `store/outbox.rs`); body files no entry names
    /// (a crash between the two writes) are removed.
    pub fn with_outbox(self, outbox: Arc<Outbox>) -> Result<Self, StoreError> {
        let dir = self.bodies_dir();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut named = std::collections::HashSet::new();
        for kv in self.inner()?.outbox.iter() {
            let (_, v) = kv.map_err(db_err)?;
            if in_file(&v) {
                named.insert(self.body_path(&self.decode_delivery(&v, false)?.id));
            }
        }
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))?.flatten() {
            if !named.contains(&entry.path()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let _ = self.cell.outbox.set(outbox);
        Ok(self)
    }
}

impl OutboxStore for SledStore {
    fn due<'a>(
        &'a self,
        destination: &'a str,
        now_ms: u64,
        lease: Duration,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Delivery>> {
        Box::pin(async move {
            let leases = &self.cell.outbox_leases;
            let until = now_ms + lease.as_millis() as u64;
            let mut out = Vec::new();
            for kv in self.inner()?.outbox.scan_prefix(prefix(destination)) {
                if out.len() >= limit {
                    break;
                }
                let (_, v) = kv.map_err(db_err)?;
                if next_at(&v) > now_ms {
                    continue;
                }
                let d = self.decode_delivery(&v, true)?;
                if leases.get(&d.id).is_none_or(|u| *u <= now_ms) {
                    leases.insert(d.id.clone(), until);
                    out.push(d);
                }
            }
            out.sort_by_key(|d| d.next_at_ms);
            Ok(out)
        })
    }

    fn done<'a>(&'a self, d: &'a Delivery) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let inner = self.inner()?;
            let removed = inner.outbox.remove(outbox_key(d)).map_err(db_err)?;
            self.cell.outbox_leases.remove(&d.id);
            if let Some(v) = removed {
                if let Some(mut n) = self.cell.outbox_counts.get_mut(&d.destination) {
                    *n = n.saturating_sub(1);
                }
                if in_file(&v) {
                    let _ = std::fs::remove_file(self.body_path(&d.id));
                }
            }
            self.noted(inner.commit.commit().await)
        })
    }

    fn retry<'a>(&'a self, d: &'a Delivery) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let inner = self.inner()?;
            inner
                .outbox
                .insert(outbox_key(d), outbox_value(d))
                .map_err(db_err)?;
            self.cell.outbox_leases.remove(&d.id);
            self.noted(inner.commit.commit().await)
        })
    }

    fn pending(&self, limit: usize) -> StoreFuture<'_, Vec<Delivery>> {
        Box::pin(async move {
            let mut all = self.deliveries(None)?;
            all.sort_by_key(|d| (d.occurred_at_ms, d.id.clone()));
            all.truncate(limit);
            Ok(all)
        })
    }

    fn depth(&self) -> StoreFuture<'_, Vec<OutboxDepth>> {
        Box::pin(async move {
            let mut out: Vec<OutboxDepth> = Vec::new();
            for d in self.deliveries(None)? {
                match out.iter_mut().find(|o| o.destination == d.destination) {
                    Some(o) => {
                        o.pending += 1;
                        o.oldest_ms = o.oldest_ms.min(Some(d.occurred_at_ms));
                    }
                    None => out.push(OutboxDepth {
                        destination: d.destination.clone(),
                        pending: 1,
                        oldest_ms: Some(d.occurred_at_ms),
                    }),
                }
            }
            Ok(out)
        })
    }
}
