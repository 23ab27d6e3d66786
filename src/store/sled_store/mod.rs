//! The embedded store: sled for records and the expiry index, plain files for
//! large results.
//!
//! Layout under the data directory:
//! - `db/`: sled. Tree `tasks` maps task id to the JSON record; tree `expiry` maps
//!   `expires_at_ms (big endian) ++ task id` to nothing, so the sweeper reads expired
//!   ids in order without scanning every record.
//!   Tree `sessions` maps a legacy client session id to its JSON `SessionRecord`.
//!   Tree `replays` maps a replay key (`ReplayStore`) to `until_ms (big endian) ++
//!   task id`: the task a call became and when its replay window closes. `delete`
//!   leaves it alone; an entry naming a deleted task goes when its window closes
//!   (`purge_calls`), and whoever recalls it checks that the task still exists.
//! - `results/<id>.json`: outcomes larger than `large_result_bytes`, and every
//!   outcome that would make the stored record larger than [`SLED_RECORD_MAX`]. The
//!   record of such a task is stored without its outcome, and `get` reads the file;
//!   `delete` removes the file, which gives its space back at once.
//!
//! Why records in sled stay small: sled 0.34 writes a tree node larger than a
//! quarter of its 512 KiB segment as a separate blob file, and it does not reliably
//! delete those blobs once the node is rewritten (spacejam/sled#786). A leaf holds
//! up to 17 records, so churning records of 8–60 KB grew `db/blobs/` without bound
//! (about 9% of everything written: 114 MiB on disk for 1.3 MiB live after 1,000
//! rounds of 50 tasks, see `examples/store_churn.rs`). With records of at most
//! 6 KiB a leaf stays near 100 KiB, no blob is written, and sled's own log recycles
//! its segments: 2.5 MiB however long the churn. `tests/it/disk.rs` measures it.
//!
//! Files a crash can leave behind (`*.tmp` from an interrupted write, a result whose
//! record never became durable or was deleted just before) are removed at open.
//!
//! Every write is durable when it returns (a final state is not shown before),
//! so opening sled again loses nothing acknowledged.
//!
//! This file holds the records; `commit.rs` the group commit that makes writes
//! durable, `reopen.rs` opening sled (and opening it again at once when it met a
//! full disk), `held.rs` the task changes kept in memory while the disk is full,
//! `sessions.rs` and `replays.rs` the other two trees.

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod commit;
mod held;
mod reopen;
mod replays;
mod sessions;

use commit::GroupCommit;
use reopen::open_db;

use super::{
    ReplayStore, SessionStore, StoreError, StoreFuture, StoreStats, TaskOutcome, TaskRecord,
    TaskStatus, TaskStore,
};

/// sled-backed `TaskStore`.
#[derive(Clone)]
pub struct SledStore {
    cell: Arc<Cell>,
}

/// The open database, replaced in the running process when sled has hit an I/O
/// error (a full disk): sled keeps its first write error for good, so a handle
/// that met one takes no write again (see [`SledStore::recover`]).
struct Cell {
    /// The open database; `None` only while it is being reopened.
    current: std::sync::RwLock<Option<Arc<Inner>>>,
    /// The data directory.
    data_dir: PathBuf,
    /// Directory of large result files.
    results_dir: PathBuf,
    /// Outcomes above this many bytes go to files.
    large_result_bytes: usize,
    /// sled's page cache.
    cache_bytes: u64,
    /// The data directory's free space, told of writes refused for lack of it.
    space: std::sync::OnceLock<Arc<super::space::DiskSpace>>,
    /// Task changes held in memory while the disk is full (see `held.rs`).
    held: dashmap::DashMap<String, held::Held>,
    /// A check of the database after a refused write (and maybe a reopen) runs.
    healing: std::sync::atomic::AtomicBool,
    /// Counts the checks finished, for readers waiting through one.
    healed: tokio::sync::watch::Sender<u64>,
}

struct Inner {
    /// The database (probed by `recover`).
    db: sled::Db,
    /// Makes writes durable, one `db.flush()` for every writer waiting meanwhile.
    commit: Arc<GroupCommit>,
    /// id -> record JSON.
    tasks: sled::Tree,
    /// expires_at ++ id -> ().
    expiry: sled::Tree,
    /// Legacy client session id -> its JSON [`SessionRecord`].
    sessions: sled::Tree,
    /// Replay key -> `until_ms` (big endian) ++ task id (see [`replay_value`]).
    replays: sled::Tree,
    /// Records written but not flushed yet that must not be read before they are
    /// durable (terminal states): a reader waits for the flush.
    flushing: dashmap::DashMap<String, Arc<tokio::sync::Notify>>,
    /// Finished records with their outcome inline, as last written or read: they
    /// never change again, so polling them needs no decoding. Bounded by
    /// [`SETTLED_MAX`] entries of at most [`SLED_RECORD_MAX`] bytes each; filled
    /// only after a record is on disk.
    settled: dashmap::DashMap<String, TaskRecord>,
}

/// sled's page cache, by default.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// How many finished records [`Inner::settled`] keeps.
const SETTLED_MAX: usize = 4096;

/// A full disk, or a full quota: the same write may succeed once space is freed.
pub(super) fn is_full(e: &std::io::Error) -> bool {
    // sled hands back copies of its first error that keep only the kind.
    matches!(
        e.raw_os_error(),
        Some(28 /* ENOSPC */) | Some(122 /* EDQUOT */)
    ) || matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

pub(super) fn db_err(e: sled::Error) -> StoreError {
    match &e {
        sled::Error::Io(io) if is_full(io) => StoreError::Full(e.to_string()),
        _ => StoreError::Db(e.to_string()),
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| {
        if is_full(&source) {
            StoreError::Full(format!("task store file {}: {source}", path.display()))
        } else {
            StoreError::Io {
                path: path.display().to_string(),
                source,
            }
        }
    }
}

/// The largest record kept in sled with its outcome inline (see the module docs).
/// `large_result_bytes` above this has no further effect.
const SLED_RECORD_MAX: usize = 6 * 1024;

fn expiry_key(expires_at_ms: u64, id: &str) -> Vec<u8> {
    let mut k = expires_at_ms.to_be_bytes().to_vec();
    k.extend_from_slice(id.as_bytes());
    k
}

impl SledStore {
    /// Open (or create) the store in `data_dir`.
    pub fn open(data_dir: &Path, large_result_bytes: usize) -> Result<Self, StoreError> {
        Self::open_with_cache(data_dir, large_result_bytes, CACHE_BYTES)
    }

    /// [`SledStore::open`] with a page cache of `cache_bytes` (sled splits it in
    /// 256 shards, and writes out a shard's pages past its share).
    pub fn open_with_cache(
        data_dir: &Path,
        large_result_bytes: usize,
        cache_bytes: u64,
    ) -> Result<Self, StoreError> {
        let results_dir = data_dir.join("results");
        std::fs::create_dir_all(&results_dir).map_err(io_err(&results_dir))?;
        let inner = open_db(data_dir, cache_bytes)?;
        let store = Self {
            cell: Arc::new(Cell {
                current: std::sync::RwLock::new(Some(Arc::new(inner))),
                data_dir: data_dir.to_path_buf(),
                results_dir,
                large_result_bytes,
                cache_bytes,
                space: std::sync::OnceLock::new(),
                held: dashmap::DashMap::new(),
                healing: std::sync::atomic::AtomicBool::new(false),
                healed: tokio::sync::watch::Sender::new(0),
            }),
        };
        store.remove_orphan_files()?;
        // Whatever the watermark: a disk that fills up later must give back
        // enough for the store to open again (see space.rs).
        super::space::keep_reserve_if_room(data_dir);
        Ok(store)
    }

    /// Report writes refused for lack of space to `space` (no new tasks until
    /// the store takes writes again), which `space::watch` then probes.
    pub fn watched(self, space: Arc<super::space::DiskSpace>) -> Self {
        let _ = self.cell.space.set(space);
        self
    }

    /// Delete result files no record refers to, and temporary files: what a crash
    /// between writing a result file and its record (or between deleting a record
    /// and its file) leaves behind. Runs at open, before anything else writes.
    fn remove_orphan_files(&self) -> Result<(), StoreError> {
        let dir = &self.cell.results_dir;
        let entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
        let mut known = std::collections::HashSet::new();
        for key in self.inner()?.tasks.iter().keys() {
            let key = key.map_err(db_err)?;
            known.insert(self.result_path(&String::from_utf8_lossy(&key)));
        }
        let mut removed = 0usize;
        for entry in entries.flatten() {
            let path = entry.path();
            let orphan = match path.extension().and_then(|e| e.to_str()) {
                Some("tmp") => true,
                Some("json") => !known.contains(&path),
                _ => false,
            };
            if orphan && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, dir = %dir.display(), "removed orphaned result files");
        }
        Ok(())
    }

    fn result_path(&self, id: &str) -> PathBuf {
        result_file(&self.cell.results_dir, id)
    }

    /// Every record `keep` accepts (with inline outcomes), in key order.
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

    fn decode(&self, id: &str, bytes: &[u8]) -> Result<TaskRecord, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
            id: id.to_string(),
            message: e.to_string(),
        })
    }

    /// Remember a finished record whose outcome is inline (small by construction).
    fn settle(inner: &Inner, rec: &TaskRecord) {
        let settled = &inner.settled;
        if settled.len() >= SETTLED_MAX {
            // The iterator's shard guard must be gone before `remove` locks the
            // shard: in an `if let` scrutinee it would live through the block.
            let victim = settled.iter().next().map(|e| e.key().clone());
            if let Some(k) = victim {
                settled.remove(&k);
            }
        }
        settled.insert(rec.id.clone(), rec.clone());
    }

    /// Write `rec` and make it durable; `hide` (a final state) keeps readers
    /// waiting until it is on disk, and shows them the state before it if it
    /// cannot be kept (see `held.rs`).
    async fn write_record(&self, rec: &TaskRecord, hide: bool) -> Result<(), StoreError> {
        let inner = self.inner()?;
        let inner = &*inner;
        inner.settled.remove(&rec.id);
        let mut stored = rec.clone();
        let outcome = stored.outcome.take();
        let mut json = serde_json::to_vec(&stored).expect("records serialize");
        let mut file = None;
        if let Some(outcome) = outcome {
            let bytes = serde_json::to_vec(&outcome).expect("values serialize");
            // Inline, the outcome adds `,"outcome":` and its JSON to the record.
            let inline_len = json.len() + 11 + bytes.len();
            if bytes.len() > self.cell.large_result_bytes || inline_len > SLED_RECORD_MAX {
                file = Some(bytes);
            } else {
                stored.outcome = Some(outcome);
                json = serde_json::to_vec(&stored).expect("records serialize");
                debug_assert_eq!(json.len(), inline_len, "outcome is the last field");
            }
        }
        self.room_for(json.len() + file.as_ref().map_or(0, Vec::len))?;
        if let Some(bytes) = file {
            write_file_durably(self.result_path(&rec.id), bytes).await?;
        }
        let old = match inner.tasks.get(rec.id.as_bytes()).map_err(db_err)? {
            Some(b) => Some(self.decode(&rec.id, &b)?),
            None => None,
        };
        let old_expiry = old.as_ref().map(|o| o.expires_at_ms);
        // The outcome is inline now: a file from an earlier, larger outcome (or
        // one written just before a crash, for a record then failed at restart)
        // goes.
        let stale_file = stored.outcome.is_some() && old.is_some();
        let hidden = hide.then(|| {
            let n = Arc::new(tokio::sync::Notify::new());
            inner.flushing.insert(rec.id.clone(), n.clone());
            Unhide(inner, rec.id.clone(), n)
        });
        let written = async {
            inner
                .tasks
                .insert(rec.id.as_bytes(), json)
                .map_err(db_err)?;
            if old_expiry != Some(rec.expires_at_ms) {
                if let Some(e) = old_expiry {
                    inner
                        .expiry
                        .remove(expiry_key(e, &rec.id))
                        .map_err(db_err)?;
                }
                inner
                    .expiry
                    .insert(expiry_key(rec.expires_at_ms, &rec.id), &[])
                    .map_err(db_err)?;
            }
            inner.commit.commit().await
        }
        .await;
        if let Err(e) = written {
            if let (Some(before), true) = (old, hide) {
                // Before the record shows again (`hidden` goes with this return).
                self.mask(before);
            }
            return Err(e);
        }
        drop(hidden);
        self.release(&rec.id);
        let inline = stored.outcome.is_some() || rec.outcome.is_none();
        if hide && rec.status().is_terminal() && inline {
            Self::settle(inner, rec);
        }
        if stale_file {
            let path = self.result_path(&rec.id);
            match tokio::fs::remove_file(&path).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_err(&path)(e));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// While the store refuses writes for lack of space, a write of `bytes` is
    /// made only with room for it and a sled segment to spare: enough is always
    /// left to open sled again should it meet the full disk (see `heal`).
    fn room_for(&self, bytes: usize) -> Result<(), StoreError> {
        let Some(space) = self.cell.space.get() else {
            return Ok(());
        };
        if !space.store_refused() {
            return Ok(());
        }
        let need = super::space::PROBE_ROOM + bytes as u64;
        match space.measure() {
            Ok(free) if free < need => Err(StoreError::Full(format!(
                "the disk is full ({free} bytes free): kept in memory until space is freed"
            ))),
            _ => Ok(()),
        }
    }
}

/// Shows a record again (and wakes its readers) when dropped, flushed or not.
struct Unhide<'a>(&'a Inner, String, Arc<tokio::sync::Notify>);

impl Drop for Unhide<'_> {
    fn drop(&mut self) {
        self.0.flushing.remove(&self.1);
        self.2.notify_waiters();
    }
}

async fn write_file_durably(path: PathBuf, bytes: Vec<u8>) -> Result<(), StoreError> {
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let tmp = path.with_extension("tmp");
        let res = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res.map_err(io_err(&path))
    })
    .await
    .map_err(|e| StoreError::Db(format!("result write task failed: {e}")))?
}

/// The file holding a task's large outcome, in `results_dir`.
pub fn result_file(results_dir: &Path, id: &str) -> PathBuf {
    // Ids are generated by tasklift (UUIDs), but never trust them as paths.
    let safe: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    results_dir.join(format!("{safe}.json"))
}

/// Bytes used by the files below `path`.
pub fn dir_size(path: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(path) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
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
            match tokio::fs::remove_file(self.result_path(id)).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io_err(&self.result_path(id))(e)),
            }
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
}

#[cfg(test)]
mod tests;
