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
//!   Tree `outbox` holds the webhook events waiting for delivery (`outbox.rs`),
//!   inserted in one transaction with the record whose status change they report;
//!   `outbox/<webhook-id>.json` the bodies too large for it.
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
//! its segments: 2.5 MiB however long the churn. `tests/it/store/disk.rs` measures it.
//!
//! Files a crash can leave behind (`*.tmp` from an interrupted write, a result whose
//! record never became durable or was deleted just before) are removed at open.
//!
//! Every write is durable when it returns (a final state is not shown before),
//! so opening sled again loses nothing acknowledged.
//!
//! Shaped as `pg_store/`, one file per store trait: this file holds the store
//! and its open database; `task_store.rs` the task records (`TaskStore`),
//! `sessions.rs` (`SessionStore`), `replays.rs` (`ReplayStore`) and `outbox.rs`
//! (`OutboxStore`) the other trees; `files.rs` the result files; `commit.rs` the group commit that makes
//! writes durable; `reopen.rs` opening sled (and opening it again at once when it
//! met a full disk); `held.rs` the task changes kept in memory while the disk is
//! full.

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod commit;
mod files;
mod held;
mod outbox;
mod reopen;
mod replays;
mod sessions;
mod task_store;

use commit::GroupCommit;
pub use files::{dir_size, result_file};
use reopen::open_db;

use super::{StoreError, TaskRecord};

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
    /// The webhook destinations events are derived for (`with_outbox`); none: no events.
    outbox: std::sync::OnceLock<Arc<super::Outbox>>,
    /// Events waiting per destination, counted once from the tree, then kept.
    outbox_counts: dashmap::DashMap<String, u64>,
    /// Webhook id -> until when (unix ms) the worker holds it (sent or being sent).
    outbox_leases: dashmap::DashMap<String, u64>,
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
    /// Webhook events waiting: see `outbox.rs`.
    outbox: sled::Tree,
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
                outbox: std::sync::OnceLock::new(),
                outbox_counts: dashmap::DashMap::new(),
                outbox_leases: dashmap::DashMap::new(),
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

    fn result_path(&self, id: &str) -> PathBuf {
        result_file(&self.cell.results_dir, id)
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

#[cfg(test)]
mod tests;
