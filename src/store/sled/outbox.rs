//! The webhook outbox in the embedded store (tree `outbox`): key `destination
//! NUL occurred_at_ms (big endian) webhook-id`, value `next_at_ms` (big endian)
//! and the JSON [`Delivery`], so looking for due events decodes only those.
//! Events are inserted by `task_store.rs` in the same transaction as the record
//! whose change they report; here they are read, leased (in memory: one process
//! owns a sled directory), retried and removed.

use std::time::Duration;

use super::{db_err, SledStore};
use crate::store::{Delivery, OutboxDepth, OutboxStore, StoreError, StoreFuture};

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

/// A delivery as the `outbox` tree keeps it.
pub(super) fn outbox_value(d: &Delivery) -> Vec<u8> {
    let mut v = d.next_at_ms.to_be_bytes().to_vec();
    serde_json::to_writer(&mut v, d).expect("deliveries serialize");
    v
}

/// When a stored delivery is due, read without decoding it.
fn next_at(v: &[u8]) -> u64 {
    v.first_chunk::<8>().map_or(0, |b| u64::from_be_bytes(*b))
}

fn decode(v: &[u8]) -> Result<Delivery, StoreError> {
    serde_json::from_slice(v.get(8..).unwrap_or_default()).map_err(|e| StoreError::Corrupt {
        id: "outbox entry".into(),
        message: e.to_string(),
    })
}

impl SledStore {
    /// Every delivery of one destination (`None`: all), in key order.
    fn deliveries(&self, destination: Option<&str>) -> Result<Vec<Delivery>, StoreError> {
        let inner = self.inner()?;
        let iter = match destination {
            Some(d) => inner.outbox.scan_prefix(prefix(d)),
            None => inner.outbox.iter(),
        };
        let mut out = Vec::new();
        for kv in iter {
            let (_, v) = kv.map_err(db_err)?;
            out.push(decode(&v)?);
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
                let d = decode(&v)?;
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
            if removed.is_some() {
                if let Some(mut n) = self.cell.outbox_counts.get_mut(&d.destination) {
                    *n = n.saturating_sub(1);
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
