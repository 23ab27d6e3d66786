//! The embedded store opened, and opened again in the running process: sled
//! keeps its first I/O error for good (a write buffer that met a full disk fails
//! every later write), so once there is room `SledStore::recover` probes the open
//! database and, if it still refuses, swaps in a freshly opened one.

use std::path::Path;
use std::sync::{Arc, PoisonError};

use super::commit::GroupCommit;
use super::{db_err, is_full, Inner, SledStore};
use crate::store::StoreError;

/// Open sled in `data_dir/db`, giving back tasklift's reserve (space.rs) if the
/// disk is too full to open it: the stored tasks are served, and the free-space
/// watch keeps new tasks out.
pub(super) fn open_db(data_dir: &Path) -> Result<Inner, StoreError> {
    let config = sled::Config::new()
        .path(data_dir.join("db"))
        .cache_capacity(64 * 1024 * 1024)
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
                    "the task store is being reopened after a write error; try again in a moment"
                        .into(),
                )
            })
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
        }
        r
    }

    /// Whether the store takes writes again after refusing one for lack of space:
    /// a small write and a flush on the open database; if sled itself met the
    /// error (it then refuses every write for good), the database is closed and
    /// opened again, which loses nothing that was acknowledged (every durable
    /// write was flushed). Reads go on until the reopen, which takes a moment.
    pub async fn recover(&self) -> Result<(), StoreError> {
        if let Ok(inner) = self.inner() {
            let probe = tokio::task::spawn_blocking(move || -> sled::Result<()> {
                let t = inner.db.open_tree("space-probe")?;
                t.insert("probe", vec![0u8; 4096])?;
                t.remove("probe")?;
                inner.db.flush().map(drop)
            })
            .await;
            match probe {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => {
                    tracing::info!(error = %e, "the task store still refuses writes; reopening it")
                }
                Err(e) => return Err(StoreError::Db(format!("probe task failed: {e}"))),
            }
        }
        self.reopen().await
    }

    /// Close the database and open it again on the same directory.
    async fn reopen(&self) -> Result<(), StoreError> {
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
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let opened = loop {
            let d = dir.clone();
            let r = tokio::task::spawn_blocking(move || open_db(&d))
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
        *self
            .cell
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(inner));
        tracing::info!(dir = %dir.display(), "reopened the task store after a write error");
        Ok(())
    }
}
