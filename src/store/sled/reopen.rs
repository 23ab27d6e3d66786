//! The embedded store opened, and opened again in the running process: sled
//! keeps its first I/O error for good (a write buffer that met a full disk fails
//! every later write, and every read of a page it had not written), so as soon as
//! a write is refused for lack of space `SledStore::heal` checks the database and,
//! if sled met the error, swaps in a freshly opened one: reads go on from what is
//! on disk. The room it needs is kept: the reserve (space.rs), and while writes
//! are refused none is made without a segment's room to spare (`room_for`). Once
//! there is room again `SledStore::recover` probes the database and writes what
//! was held in memory meanwhile (held.rs).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::commit::GroupCommit;
use super::{db_err, is_full, Inner, SledStore};
use crate::store::StoreError;

/// How long a reader waits for the database to be opened again.
const REOPEN_WAIT: Duration = Duration::from_secs(10);

/// Open sled in `data_dir/db`, giving back tasklift's reserve (space.rs) if the
/// disk is too full to open it: the stored tasks are served, and the free-space
/// watch keeps new tasks out.
pub(super) fn open_db(data_dir: &Path, cache_bytes: u64) -> Result<Inner, StoreError> {
    let config = sled::Config::new()
        .path(data_dir.join("db"))
        .cache_capacity(cache_bytes)
        .flush_every_ms(Some(200));
    let db = match config.open() {
        Err(sled::Error::Io(e)) if is_full(&e) && crate::store::space::give_back_reserve(data_dir) => {
            tracing::warn!(dir = %data_dir.display(), "the disk is full: gave back the data directory's space reserve to open the task store");
            config.open()
        }
        other => other,
    }
    .map_err(|e| match e {
        sled::Error::Io(io)
            if io.kind() == std::io::ErrorKind::WouldBlock || io.to_string().contains("lock") =>
        {
            StoreError::InUse {
                dir: data_dir.display().to_string(),
                detail: io.to_string(),
            }
        }
        other => db_err(other),
    })?;
    let flushed = db.clone();
    Ok(Inner {
        commit: GroupCommit::new(Box::new(move || flushed.flush().map(|_| ()))),
        tasks: db.open_tree("tasks").map_err(db_err)?,
        expiry: db.open_tree("expiry").map_err(db_err)?,
        sessions: db.open_tree("sessions").map_err(db_err)?,
        replays: db.open_tree("replays").map_err(db_err)?,
        outbox: db.open_tree("outbox").map_err(db_err)?,
        db,
        flushing: dashmap::DashMap::new(),
        settled: dashmap::DashMap::new(),
    })
}

impl SledStore {
    /// The open database, or why there is none (it is being reopened).
    pub(super) fn inner(&self) -> Result<Arc<Inner>, StoreError> {
        self.cell
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                StoreError::Full(
                    "the task store could not be opened again after it met a full disk; it opens once space is freed"
                        .into(),
                )
            })
    }

    /// The open database for a reader, waiting through a reopen under way.
    pub(super) async fn reading(&self) -> Result<Arc<Inner>, StoreError> {
        let mut healed = self.cell.healed.subscribe();
        if let Ok(inner) = self.inner() {
            return Ok(inner);
        }
        if self.cell.healing.load(Ordering::Acquire) {
            let _ = tokio::time::timeout(REOPEN_WAIT, healed.changed()).await;
        }
        self.inner()
    }

    /// Check the database after a refused write or a failed read: if sled met an
    /// I/O error (its flush then fails), or `force`, open it again. One check runs
    /// at a time; a caller arriving meanwhile waits for it.
    pub(super) async fn heal(&self, force: bool) {
        let mut healed = self.cell.healed.subscribe();
        if self.cell.healing.swap(true, Ordering::AcqRel) {
            let _ = tokio::time::timeout(REOPEN_WAIT, healed.changed()).await;
            return;
        }
        let broken = force
            || match self.inner() {
                Ok(inner) => !matches!(
                    tokio::task::spawn_blocking(move || inner.db.flush()).await,
                    Ok(Ok(_))
                ),
                Err(_) => true,
            };
        if broken {
            if let Err(e) = self.reopen().await {
                tracing::warn!(error = %e, "cannot open the task store again yet; stored tasks are unreadable until space is freed");
            }
        }
        self.cell.healing.store(false, Ordering::Release);
        self.cell.healed.send_modify(|n| *n += 1);
    }

    /// A write's result, noting a full disk: the reserve goes to the outcomes of
    /// running tasks, and no new task is created until the store takes writes
    /// again (`recover`, from `space::watch`).
    pub(super) fn noted<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Full(m)) = &r {
            if let Some(space) = self.cell.space.get() {
                let first = !space.store_refused();
                space.refused_write(false, m);
                if first && crate::store::space::give_back_reserve(&self.cell.data_dir) {
                    tracing::warn!(dir = %self.cell.data_dir.display(), "the disk is full: gave back the data directory's space reserve for the outcomes of running tasks");
                }
            }
            if !self.cell.healing.load(Ordering::Acquire) {
                let store = self.clone();
                tokio::spawn(async move { store.heal(false).await });
            }
        }
        r
    }

    /// Whether the store takes writes again after refusing one for lack of space:
    /// a small write and a flush on the open database (opened again if it still
    /// refuses: that loses nothing acknowledged, every write having been flushed
    /// or held), then the changes held in memory meanwhile are written.
    pub async fn recover(&self) -> Result<(), StoreError> {
        if !self.probe().await? {
            self.heal(true).await;
            if !self.probe().await? {
                return Err(StoreError::Full(
                    "the task store still refuses writes".into(),
                ));
            }
        }
        self.write_held().await
    }

    /// A small write and a flush: false if sled refuses it (or is not open).
    async fn probe(&self) -> Result<bool, StoreError> {
        let Ok(inner) = self.inner() else {
            return Ok(false);
        };
        let probe = tokio::task::spawn_blocking(move || -> sled::Result<()> {
            let t = inner.db.open_tree("space-probe")?;
            t.insert("probe", vec![0u8; 4096])?;
            t.remove("probe")?;
            inner.db.flush().map(drop)
        })
        .await;
        match probe {
            Ok(Ok(())) => Ok(true),
            Ok(Err(e)) => {
                tracing::info!(error = %e, "the task store still refuses writes");
                Ok(false)
            }
            Err(e) => Err(StoreError::Db(format!("probe task failed: {e}"))),
        }
    }

    /// Close the database and open it again on the same directory.
    async fn reopen(&self) -> Result<(), StoreError> {
        tracing::warn!(dir = %self.cell.data_dir.display(), "the task store met a write error: closing it to open it again (reads wait meanwhile)");
        let old = self
            .cell
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(old) = old {
            // Calls still holding the old handle end at once (it refuses writes);
            // sled's file lock goes with its last handle.
            let gone = Arc::downgrade(&old);
            drop(old);
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            while gone.strong_count() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
        let dir = self.cell.data_dir.clone();
        let cache = self.cell.cache_bytes;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let opened = loop {
            let d = dir.clone();
            let r = tokio::task::spawn_blocking(move || open_db(&d, cache))
                .await
                .map_err(|e| StoreError::Db(format!("reopen task failed: {e}")))
                .and_then(|r| r);
            match r {
                // sled's background thread lets go of the lock a moment later.
                Err(StoreError::InUse { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                other => break other,
            }
        };
        let inner = opened?;
        // What was masked is what sled now holds from disk.
        self.forget_masks();
        *self
            .cell
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(inner));
        tracing::info!(dir = %dir.display(), "reopened the task store after a write error");
        Ok(())
    }
}
