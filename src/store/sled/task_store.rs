//! The embedded store's [`TaskStore`]: task records in sled's `tasks` tree and
//! the `expiry` index (with the webhook events a status change reports, in the
//! same transaction), large outcomes in result files (files.rs), every write
//! flushed before it returns (commit.rs), and what the disk could not take held
//! in memory (held.rs).

use std::sync::Arc;

use super::files::{dir_size, write_file_durably};
use super::outbox::{outbox_key, outbox_value};
use super::{db_err, expiry_key, io_err, Inner, SledStore, Unhide, SLED_RECORD_MAX};
use crate::store::{
    Delivery, OutboxStore, ReplayStore, SessionStore, StoreError, StoreFuture, StoreStats,
    TaskOutcome, TaskRecord, TaskStatus, TaskStore,
};

impl SledStore {
    /// Every record `keep` accepts (with inline outcomes), in key order; held
    /// changes (`held.rs`) in place of what sled shows.
    async fn scan(
        &self,
        keep: impl Fn(&TaskRecord) -> bool,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let once = || -> Result<Vec<TaskRecord>, StoreError> {
            let mut out = Vec::new();
            for kv in self.inner()?.tasks.iter() {
                let (k, v) = kv.map_err(db_err)?;
                let id = String::from_utf8_lossy(&k);
                let rec = match self.held_record(&id) {
                    Some(rec) => rec,
                    None => self.decode(&id, &v)?,
                };
                if keep(&rec) {
                    out.push(rec);
                }
            }
            Ok(out)
        };
        match once() {
            Err(StoreError::Full(_) | StoreError::Db(_)) => {
                self.heal(false).await;
                once()
            }
            r => r,
        }
    }

    /// A record as sled holds it (with its outcome), waiting through a reopen
    /// and for a final state until it is on disk.
    async fn read(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let inner = self.reading().await?;
        if let Some(r) = inner.settled.get(id) {
            return Ok(Some(r.clone()));
        }
        let bytes = loop {
            let bytes = inner.tasks.get(id.as_bytes()).map_err(db_err)?;
            // A terminal state being flushed is not shown until it is on disk.
            let Some(n) = inner.flushing.get(id).map(|e| e.value().clone()) else {
                break bytes;
            };
            let done = n.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if inner.flushing.contains_key(id) {
                done.await;
            }
        };
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let mut rec = self.decode(id, &bytes)?;
        if rec.outcome.is_none()
            && matches!(rec.status(), TaskStatus::Completed | TaskStatus::Failed)
        {
            let path = self.result_path(id);
            let bytes = tokio::fs::read(&path).await.map_err(io_err(&path))?;
            let outcome: TaskOutcome =
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                    id: id.to_string(),
                    message: format!("result file: {e}"),
                })?;
            rec.outcome = Some(outcome);
        } else if rec.status().is_terminal() {
            Self::settle(&inner, &rec);
        }
        Ok(Some(rec))
    }

    /// Write `rec` and make it durable; `hide` (a final state) keeps readers
    /// waiting until it is on disk, and shows them the state before it if it
    /// cannot be kept (see `held.rs`).
    async fn write_record(&self, rec: &TaskRecord, hide: bool) -> Result<(), StoreError> {
        let inner = self.inner()?;
        let inner = &*inner;
        inner.settled.remove(&rec.id);
        let (json, file) = self.encode(rec);
        self.room_for(json.len() + file.as_ref().map_or(0, Vec::len))?;
        let inline = file.is_none() && rec.outcome.is_some();
        if let Some(bytes) = file {
            write_file_durably(self.result_path(&rec.id), bytes).await?;
        }
        let old = match inner.tasks.get(rec.id.as_bytes()).map_err(db_err)? {
            Some(b) => Some(self.decode(&rec.id, &b)?),
            None => None,
        };
        let old_expiry = old.as_ref().map(|o| o.expires_at_ms);
        let events = self.events_for(old.as_ref(), rec)?;
        self.stage_bodies(&events).await?;
        let hidden = hide.then(|| {
            let n = Arc::new(tokio::sync::Notify::new());
            inner.flushing.insert(rec.id.clone(), n.clone());
            Unhide(inner, rec.id.clone(), n)
        });
        if let Err(e) = Self::insert_durably(inner, rec, json, old_expiry, &events).await {
            if let (Some(before), true) = (old, hide) {
                // Before the record shows again (`hidden` goes with this return).
                self.mask(before);
            }
            return Err(e);
        }
        drop(hidden);
        self.counted(&events);
        self.release(&rec.id);
        if hide && rec.status().is_terminal() && (inline || rec.outcome.is_none()) {
            Self::settle(inner, rec);
        }
        // The outcome is inline now: a file from an earlier, larger outcome (or
        // one written just before a crash, for a record then failed at restart)
        // goes.
        if inline && old.is_some() {
            self.remove_result_file(&rec.id).await?;
        }
        Ok(())
    }

    /// The record's JSON, with its outcome inline when it is small, and the
    /// outcome for a result file otherwise (see the module docs).
    fn encode(&self, rec: &TaskRecord) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut stored = rec.clone();
        let outcome = stored.outcome.take();
        let json = serde_json::to_vec(&stored).expect("records serialize");
        let Some(outcome) = outcome else {
            return (json, None);
        };
        let bytes = serde_json::to_vec(&outcome).expect("values serialize");
        // Inline, the outcome adds `,"outcome":` and its JSON to the record.
        let inline_len = json.len() + 11 + bytes.len();
        if bytes.len() > self.cell.large_result_bytes || inline_len > SLED_RECORD_MAX {
            return (json, Some(bytes));
        }
        stored.outcome = Some(outcome);
        let json = serde_json::to_vec(&stored).expect("records serialize");
        debug_assert_eq!(json.len(), inline_len, "outcome is the last field");
        (json, None)
    }

    /// Insert the record, its expiry entry and the webhook events it reports (in
    /// one transaction, so a crash keeps all or none), and flush.
    async fn insert_durably(
        inner: &Inner,
        rec: &TaskRecord,
        json: Vec<u8>,
        old_expiry: Option<u64>,
        events: &[Delivery],
    ) -> Result<(), StoreError> {
        use sled::transaction::{ConflictableTransactionError, TransactionError};
        use sled::Transactional;
        let new_expiry = (old_expiry != Some(rec.expires_at_ms)).then_some(rec.expires_at_ms);
        if events.is_empty() {
            // The common case, without a transaction's cost.
            inner
                .tasks
                .insert(rec.id.as_bytes(), json)
                .map_err(db_err)?;
            if let Some(at) = new_expiry {
                if let Some(old) = old_expiry {
                    inner
                        .expiry
                        .remove(expiry_key(old, &rec.id))
                        .map_err(db_err)?;
                }
                inner
                    .expiry
                    .insert(expiry_key(at, &rec.id), &[])
                    .map_err(db_err)?;
            }
            return inner.commit.commit().await;
        }
        let r = (&inner.tasks, &inner.expiry, &inner.outbox).transaction(|(t, e, o)| {
            t.insert(rec.id.as_bytes(), json.as_slice())?;
            if let Some(at) = new_expiry {
                if let Some(old) = old_expiry {
                    e.remove(expiry_key(old, &rec.id))?;
                }
                e.insert(expiry_key(at, &rec.id), &[])?;
            }
            for d in events {
                o.insert(outbox_key(d), outbox_value(d))?;
            }
            Ok::<_, ConflictableTransactionError<()>>(())
        });
        match r {
            Ok(()) => {}
            Err(TransactionError::Storage(e)) => return Err(db_err(e)),
            Err(TransactionError::Abort(())) => unreachable!("the transaction never aborts"),
        }
        inner.commit.commit().await
    }

    /// The webhook events `rec` reports against the record it replaces, less
    /// those past their destination's `max_pending` (dropped, counted, logged).
    pub(super) fn events_for(
        &self,
        old: Option<&TaskRecord>,
        rec: &TaskRecord,
    ) -> Result<Vec<Delivery>, StoreError> {
        let Some(outbox) = self.cell.outbox.get() else {
            return Ok(Vec::new());
        };
        let mut kept: Vec<Delivery> = Vec::new();
        for d in outbox.events(old.map(TaskRecord::status), rec) {
            let waiting = self.outbox_count(&d.destination)?;
            if waiting >= outbox.cap(&d.destination) as u64 {
                outbox.drop_one(&d);
            } else {
                kept.push(d);
            }
        }
        Ok(kept)
    }

    /// Events written: counted, and the worker woken.
    pub(super) fn counted(&self, events: &[Delivery]) {
        for d in events {
            *self
                .cell
                .outbox_counts
                .entry(d.destination.clone())
                .or_insert(0) += 1;
        }
        if let (Some(outbox), false) = (self.cell.outbox.get(), events.is_empty()) {
            outbox.wake();
        }
    }

    /// Remove a task's result file, if it has one.
    async fn remove_result_file(&self, id: &str) -> Result<(), StoreError> {
        let path = self.result_path(id);
        match tokio::fs::remove_file(&path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(&path)(e)),
            _ => Ok(()),
        }
    }
}

impl TaskStore for SledStore {
    fn create<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.noted(self.write_record(rec, false).await) })
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move {
            if let Some(rec) = self.held_record(id) {
                return Ok(Some(rec));
            }
            match self.read(id).await {
                // sled met an I/O error (a full disk) and reads through it fail:
                // open it again, and read what it holds on disk.
                Err(StoreError::Full(_) | StoreError::Db(_)) => {
                    self.heal(false).await;
                    match self.held_record(id) {
                        Some(rec) => Ok(Some(rec)),
                        None => self.read(id).await,
                    }
                }
                r => r,
            }
        })
    }

    fn put<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let terminal = rec.status().is_terminal();
            match self.noted(self.write_record(rec, terminal).await) {
                // A running task's change is kept and shown until it can be
                // written; a final state is kept by the driver that made it.
                Err(StoreError::Full(_)) if !terminal => {
                    self.hold(rec);
                    Ok(())
                }
                r => r,
            }
        })
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let inner = self.inner()?;
            self.release(id);
            inner.settled.remove(id);
            let removed = inner.tasks.remove(id.as_bytes()).map_err(db_err);
            inner.settled.remove(id);
            if let Some(old) = removed? {
                if let Ok(rec) = self.decode(id, &old) {
                    inner
                        .expiry
                        .remove(expiry_key(rec.expires_at_ms, id))
                        .map_err(db_err)?;
                }
            }
            self.remove_result_file(id).await
        })
    }

    fn expired(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, Vec<String>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for kv in self
                .inner()?
                .expiry
                .range(..expiry_key(now_ms.saturating_add(1), ""))
            {
                let (k, _) = kv.map_err(db_err)?;
                if k.len() > 8 {
                    out.push(String::from_utf8_lossy(&k[8..]).into_owned());
                }
                if out.len() >= limit {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn unfinished(&self) -> StoreFuture<'_, Vec<TaskRecord>> {
        Box::pin(async move { self.scan(|r| !r.status().is_terminal()).await })
    }

    fn list<'a>(
        &'a self,
        owner: &'a str,
        upstream: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(async move {
            let mut out = self
                .scan(|r| r.owner == owner && r.upstream == upstream && r.expires_at_ms > now_ms)
                .await?;
            out.iter_mut().for_each(|r| r.outcome = None);
            out.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
            Ok(out)
        })
    }

    fn all(&self) -> StoreFuture<'_, Vec<TaskRecord>> {
        Box::pin(async move {
            let mut out = self.scan(|_| true).await?;
            out.iter_mut().for_each(|r| r.outcome = None);
            out.sort_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
            Ok(out)
        })
    }

    fn stats(&self) -> StoreFuture<'_, StoreStats> {
        Box::pin(async move {
            let dir = self.cell.data_dir.clone();
            let disk_bytes = tokio::task::spawn_blocking(move || dir_size(&dir))
                .await
                .unwrap_or(0);
            Ok(StoreStats {
                tasks: self.inner()?.tasks.len() as u64,
                disk_bytes,
            })
        })
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move { self.inner()?.commit.commit().await })
    }

    fn sessions(&self) -> Option<&dyn SessionStore> {
        Some(self)
    }

    fn replays(&self) -> Option<&dyn ReplayStore> {
        Some(self)
    }

    fn outbox(&self) -> Option<&dyn OutboxStore> {
        Some(self)
    }
}
