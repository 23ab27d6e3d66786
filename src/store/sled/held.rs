//! Task changes the embedded store holds in memory while the disk is full, so
//! `tasks/get` shows what the store acknowledged and nothing it could not keep.
//!
//! Two kinds, both only while a write is refused for lack of space:
//! - **unwritten**: a running task's change (`input_required`, progress, an
//!   answered request) that did not fit. `put` accepts it; readers see it; it is
//!   written once the store takes writes again (`write_held`, from `recover`),
//!   with the webhook events it reports (inserted beside it, made durable by the
//!   same flush).
//! - **masks**: the state a task had before a final state that did not fit. sled
//!   may hold the refused state in memory, and a reopen drops it; readers see the
//!   mask instead, so a state shown is never taken back. The driver keeps the
//!   outcome and writes it later (`settle_later`); a mask goes when a write for
//!   its task succeeds, or when sled is reopened (it then holds the same state).

use super::outbox::{outbox_key, outbox_value};
use super::{db_err, expiry_key, SledStore};
use crate::store::{StoreError, TaskRecord};

pub(super) struct Held {
    rec: TaskRecord,
    /// Not in sled yet: written by [`SledStore::write_held`].
    unwritten: bool,
}

impl SledStore {
    /// The record held for `id`, if any: newer than what sled shows.
    pub(super) fn held_record(&self, id: &str) -> Option<TaskRecord> {
        self.cell.held.get(id).map(|h| h.rec.clone())
    }

    /// Keep a running task's change that did not fit, to show and to write later.
    pub(super) fn hold(&self, rec: &TaskRecord) {
        tracing::debug!(task.id = %rec.id, "kept a task change in memory until the disk has room");
        self.cell.held.insert(
            rec.id.clone(),
            Held {
                rec: rec.clone(),
                unwritten: true,
            },
        );
    }

    /// Show `before` for a task whose final state was refused, unless a newer
    /// change is held already.
    pub(super) fn mask(&self, before: TaskRecord) {
        self.cell.held.entry(before.id.clone()).or_insert(Held {
            rec: before,
            unwritten: false,
        });
    }

    /// A write for `id` is durable: what was held for it is out of date.
    pub(super) fn release(&self, id: &str) {
        if !self.cell.held.is_empty() {
            self.cell.held.remove(id);
        }
    }

    /// sled was opened again: it holds every masked state itself.
    pub(super) fn forget_masks(&self) {
        self.cell.held.retain(|_, h| h.unwritten);
    }

    /// Write the held changes, each unless a newer state was written meanwhile
    /// (the driver's final state, retried as soon as there is room): compared and
    /// swapped, so neither write is lost to the other.
    pub(super) async fn write_held(&self) -> Result<(), StoreError> {
        let waiting: Vec<TaskRecord> = self
            .cell
            .held
            .iter()
            .filter(|h| h.unwritten)
            .map(|h| h.rec.clone())
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        let inner = self.inner()?;
        let mut written = Vec::new();
        let mut events = Vec::new();
        for rec in waiting {
            let json = serde_json::to_vec(&rec).expect("records serialize");
            loop {
                let current = inner.tasks.get(rec.id.as_bytes()).map_err(db_err)?;
                let newer = match &current {
                    None => true, // deleted meanwhile
                    Some(b) => {
                        let now = self.decode(&rec.id, b)?;
                        now.status().is_terminal() || now.updated_at_ms > rec.updated_at_ms
                    }
                };
                if newer {
                    break;
                }
                let old = current
                    .as_ref()
                    .map(|b| self.decode(&rec.id, b))
                    .transpose()?;
                // The events this change reports, their large bodies on disk first.
                let due = self.events_for(old.as_ref(), &rec)?;
                self.stage_bodies(&due).await?;
                match inner
                    .tasks
                    .compare_and_swap(rec.id.as_bytes(), current, Some(json.clone()))
                    .map_err(db_err)?
                {
                    Ok(()) => {
                        for d in due {
                            let v = outbox_value(&d);
                            inner.outbox.insert(outbox_key(&d), v).map_err(db_err)?;
                            events.push(d);
                        }
                        if let Some(old) = old.filter(|o| o.expires_at_ms != rec.expires_at_ms) {
                            inner
                                .expiry
                                .remove(expiry_key(old.expires_at_ms, &rec.id))
                                .map_err(db_err)?;
                            inner
                                .expiry
                                .insert(expiry_key(rec.expires_at_ms, &rec.id), &[])
                                .map_err(db_err)?;
                        }
                        break;
                    }
                    Err(_) => continue, // changed under us: look again
                }
            }
            written.push(rec);
        }
        inner.commit.commit().await?;
        self.counted(&events);
        for rec in &written {
            self.cell
                .held
                .remove_if(&rec.id, |_, h| h.rec.updated_at_ms == rec.updated_at_ms);
        }
        tracing::info!(
            tasks = written.len(),
            "wrote the task changes kept in memory while the disk was full (or found newer ones)"
        );
        Ok(())
    }
}
