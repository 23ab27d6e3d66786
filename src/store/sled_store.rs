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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{
    ReplayStore, SessionRecord, SessionStore, StoreError, StoreFuture, StoreStats, TaskOutcome,
    TaskRecord, TaskStatus, TaskStore,
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
    /// The data directory's free space, told of writes refused for lack of it.
    space: std::sync::OnceLock<Arc<super::space::DiskSpace>>,
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

/// How many finished records [`Inner::settled`] keeps.
const SETTLED_MAX: usize = 4096;

/// Group commit: concurrent durable writes share one flush (one fsync) instead of
/// paying one each.
///
/// One flush runs at a time, on a blocking thread. A writer that has inserted its
/// data calls [`GroupCommit::commit`], which needs a flush that *starts* after the
/// call: if none is running it starts one; if one is running (it may have begun
/// before the writer's insert) it waits for the next, which begins as soon as the
/// running one ends and covers every writer that arrived meanwhile. Flushes are
/// numbered; the watch holds the number of the last one finished and its result,
/// so a waiter never misses it.
struct GroupCommit {
    /// Makes everything written before the call durable (`db.flush()`).
    flush: Box<dyn Fn() -> sled::Result<()> + Send + Sync>,
    state: Mutex<CommitState>,
    /// The last finished flush: its number and result (the message `db_err`
    /// would give its error).
    done: tokio::sync::watch::Sender<(u64, Result<(), String>)>,
}

#[derive(Default)]
struct CommitState {
    /// Flushes started so far; the running one, if any, is number `started`.
    started: u64,
    /// A flush is running (its blocking task owns the loop in [`FlushRun::run`]).
    running: bool,
    /// Some writer waits for flush `started + 1`, to begin when the running one ends.
    next_wanted: bool,
}

impl GroupCommit {
    fn new(flush: Box<dyn Fn() -> sled::Result<()> + Send + Sync>) -> Arc<Self> {
        Arc::new(Self {
            flush,
            state: Mutex::new(CommitState::default()),
            done: tokio::sync::watch::Sender::new((0, Ok(()))),
        })
    }

    fn lock(&self) -> MutexGuard<'_, CommitState> {
        // Nothing panics while holding the lock; a poisoned state is still sound.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once a flush that started after this call has finished, with its
    /// result: everything the caller wrote before calling is then durable.
    async fn commit(self: &Arc<Self>) -> Result<(), StoreError> {
        let mut done = self.done.subscribe();
        let (wanted, start) = {
            let mut st = self.lock();
            if st.running {
                st.next_wanted = true;
                (st.started + 1, false)
            } else {
                st.running = true;
                st.started += 1;
                (st.started, true)
            }
        };
        if start {
            let run = FlushRun {
                gc: self.clone(),
                finished: false,
            };
            // Detached: the flushes go on (and report) if this writer is dropped.
            drop(tokio::task::spawn_blocking(move || run.run()));
        }
        // A later flush than `wanted` also began after this call: its result
        // covers this writer too.
        let result = done
            .wait_for(|(n, _)| *n >= wanted)
            .await
            .map(|r| r.1.clone());
        match result {
            Ok(r) => r.map_err(flush_err),
            // The sender lives in `self`, which outlives this call.
            Err(_) => Err(StoreError::Db("flush abandoned".into())),
        }
    }

    #[cfg(test)]
    fn flushes_started(&self) -> u64 {
        self.lock().started
    }
}

/// The loop running flushes while writers want them. If it ends any other way than
/// by returning from `run` (the flush panicked, or the runtime dropped the task
/// before it ran), `drop` fails the running flush and the one wanted next, so
/// their writers get an error instead of waiting forever.
struct FlushRun {
    gc: Arc<GroupCommit>,
    finished: bool,
}

impl FlushRun {
    fn run(mut self) {
        let done = self.gc.done.clone();
        let last = loop {
            let gc = &self.gc;
            let result = (gc.flush)().map_err(|e| e.to_string());
            let mut st = gc.lock();
            let n = st.started;
            if !st.next_wanted {
                st.running = false;
                break (n, result);
            }
            gc.done.send_modify(|last| *last = (n, result));
            // Writers arrived during that flush: the next one starts now, after
            // their inserts, and covers them all.
            st.next_wanted = false;
            st.started += 1;
        };
        // The last flush's writers are told only once this run holds the store
        // no more: a writer that then drops the store closes the database (and
        // its lock), so the same directory opens again at once. A flush started
        // meanwhile may have reported a later number first; the number only rises.
        self.finished = true;
        drop(self);
        done.send_if_modified(|seen| {
            let newer = last.0 > seen.0;
            if newer {
                *seen = last;
            }
            newer
        });
    }
}

impl Drop for FlushRun {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let gc = &self.gc;
        let mut st = gc.lock();
        st.started += u64::from(st.next_wanted);
        st.next_wanted = false;
        st.running = false;
        let failed = Err("flush task failed: it panicked or was cancelled".to_string());
        let n = st.started;
        gc.done.send_modify(|last| *last = (n, failed));
    }
}

/// A full disk, or a full quota: the same write may succeed once space is freed.
fn is_full(e: &std::io::Error) -> bool {
    // sled hands back copies of its first error that keep only the kind.
    matches!(
        e.raw_os_error(),
        Some(28 /* ENOSPC */) | Some(122 /* EDQUOT */)
    ) || matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

fn db_err(e: sled::Error) -> StoreError {
    match &e {
        sled::Error::Io(io) if is_full(io) => StoreError::Full(e.to_string()),
        _ => StoreError::Db(e.to_string()),
    }
}

/// A flush's error, as [`GroupCommit`] reports it (a message: sled's
/// `IO error: Os { code: 28, kind: StorageFull, .. }`, or an io error's own).
fn flush_err(message: String) -> StoreError {
    let full = [
        "os error 28",
        "os error 122",
        "code: 28,",
        "code: 122,",
        "StorageFull",
        "QuotaExceeded",
    ];
    if full.iter().any(|m| message.contains(m)) {
        StoreError::Full(message)
    } else {
        StoreError::Db(message)
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

fn expiry_key(expires_at_ms: u64, id: &str) -> Vec<u8> {
    let mut k = expires_at_ms.to_be_bytes().to_vec();
    k.extend_from_slice(id.as_bytes());
    k
}

/// Open sled in `data_dir/db`, giving back tasklift's reserve (space.rs) if the
/// disk is too full to open it: the stored tasks are served, and the free-space
/// watch keeps new tasks out.
fn open_db(data_dir: &Path) -> Result<Inner, StoreError> {
    let config = sled::Config::new()
        .path(data_dir.join("db"))
        .cache_capacity(64 * 1024 * 1024)
        .flush_every_ms(Some(200));
    let db = match config.open() {
        Err(sled::Error::Io(e)) if is_full(&e) && super::space::give_back_reserve(data_dir) => {
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
    /// Open (or create) the store in `data_dir`.
    pub fn open(data_dir: &Path, large_result_bytes: usize) -> Result<Self, StoreError> {
        let results_dir = data_dir.join("results");
        std::fs::create_dir_all(&results_dir).map_err(io_err(&results_dir))?;
        let inner = open_db(data_dir)?;
        let store = Self {
            cell: Arc::new(Cell {
                current: std::sync::RwLock::new(Some(Arc::new(inner))),
                data_dir: data_dir.to_path_buf(),
                results_dir,
                large_result_bytes,
                space: std::sync::OnceLock::new(),
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

    /// The open database, or why there is none (it is being reopened).
    fn inner(&self) -> Result<Arc<Inner>, StoreError> {
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
    fn noted<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Full(m)) = &r {
            if let Some(space) = self.cell.space.get() {
                let first = !space.store_refused();
                space.refused_write(false, m);
                if first && super::space::give_back_reserve(&self.cell.data_dir) {
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
    fn scan(&self, keep: impl Fn(&TaskRecord) -> bool) -> Result<Vec<TaskRecord>, StoreError> {
        let mut out = Vec::new();
        for kv in self.inner()?.tasks.iter() {
            let (k, v) = kv.map_err(db_err)?;
            let rec = self.decode(&String::from_utf8_lossy(&k), &v)?;
            if keep(&rec) {
                out.push(rec);
            }
        }
        Ok(out)
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

    async fn write_record(&self, rec: &TaskRecord, durable: bool) -> Result<(), StoreError> {
        let inner = self.inner()?;
        let inner = &*inner;
        inner.settled.remove(&rec.id);
        let mut stored = rec.clone();
        let outcome = stored.outcome.take();
        let mut json = serde_json::to_vec(&stored).expect("records serialize");
        if let Some(outcome) = outcome {
            let bytes = serde_json::to_vec(&outcome).expect("values serialize");
            // Inline, the outcome adds `,"outcome":` and its JSON to the record.
            let inline_len = json.len() + 11 + bytes.len();
            if bytes.len() > self.cell.large_result_bytes || inline_len > SLED_RECORD_MAX {
                let path = self.result_path(&rec.id);
                write_file_durably(path, bytes).await?;
            } else {
                stored.outcome = Some(outcome);
                json = serde_json::to_vec(&stored).expect("records serialize");
                debug_assert_eq!(json.len(), inline_len, "outcome is the last field");
            }
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
        let hidden = durable.then(|| {
            let n = Arc::new(tokio::sync::Notify::new());
            inner.flushing.insert(rec.id.clone(), n.clone());
            Unhide(inner, rec.id.clone(), n)
        });
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
        if durable {
            inner.commit.commit().await?;
        }
        drop(hidden);
        let inline = stored.outcome.is_some() || rec.outcome.is_none();
        if durable && rec.status().is_terminal() && inline {
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
        Box::pin(async move { self.noted(self.write_record(rec, true).await) })
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move {
            let inner = self.inner()?;
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
        })
    }

    fn put<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()> {
        Box::pin(
            async move { self.noted(self.write_record(rec, rec.status().is_terminal()).await) },
        )
    }

    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let inner = self.inner()?;
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
        Box::pin(async move { self.scan(|r| !r.status().is_terminal()) })
    }

    fn list<'a>(
        &'a self,
        owner: &'a str,
        upstream: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(async move {
            let mut out = self
                .scan(|r| r.owner == owner && r.upstream == upstream && r.expires_at_ms > now_ms)?;
            out.iter_mut().for_each(|r| r.outcome = None);
            out.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
            Ok(out)
        })
    }

    fn all(&self) -> StoreFuture<'_, Vec<TaskRecord>> {
        Box::pin(async move {
            let mut out = self.scan(|_| true)?;
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

impl ReplayStore for SledStore {
    fn remember_call<'a>(
        &'a self,
        key: &'a str,
        task_id: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    use super::*;

    fn finished(i: usize) -> TaskRecord {
        let mut rec = TaskRecord::new(crate::store::NewTask {
            id: format!("task-{i}"),
            owner: "o".into(),
            upstream: "u".into(),
            tool: "t".into(),
            created_at_ms: 1,
            ttl_ms: 60_000,
            poll_interval_ms: 100,
        });
        rec.settle(crate::store::Settle::Completed(serde_json::json!({"n": i})))
            .unwrap();
        rec.updated_at_ms = 2;
        rec
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_finished_records_than_the_cache_holds_stay_readable() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        let n = SETTLED_MAX + 64;
        for i in 0..n {
            s.put(&finished(i)).await.unwrap();
        }
        assert!(
            s.inner().unwrap().settled.len() <= SETTLED_MAX,
            "the cache is bounded"
        );
        // Reads of every record, cached or not, in two passes (the first refills
        // the cache past its bound, evicting as it goes).
        for _ in 0..2 {
            for i in 0..n {
                let got = s.get(&format!("task-{i}")).await.unwrap().unwrap();
                assert_eq!(got, finished(i));
            }
        }
        s.delete("task-0").await.unwrap();
        assert_eq!(s.get("task-0").await.unwrap(), None, "deleted means gone");
    }
    fn working(i: usize) -> TaskRecord {
        TaskRecord::new(crate::store::NewTask {
            id: format!("task-{i}"),
            owner: "o".into(),
            upstream: "u".into(),
            tool: "t".into(),
            created_at_ms: 1,
            ttl_ms: 60_000,
            poll_interval_ms: 100,
        })
    }

    /// Concurrent creates on real sled all land and are found, with no more
    /// flushes than writers. How many they share depends on the machine's
    /// scheduling (2-3 of 64 here, 45 once on a loaded CI machine), so sharing
    /// itself is shown step by step by `a_writer_during_a_flush_waits_for_the_next_one`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_creates_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        let n = 64;
        let start = Arc::new(tokio::sync::Barrier::new(n));
        let writers: Vec<_> = (0..n)
            .map(|i| {
                let (s, start) = (s.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    s.create(&working(i)).await
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap().unwrap();
        }
        for i in 0..n {
            let got = s.get(&format!("task-{i}")).await.unwrap();
            assert_eq!(got, Some(working(i)));
        }
        let flushes = s.inner().unwrap().commit.flushes_started();
        assert!(
            flushes > 0 && flushes <= n as u64,
            "{flushes} flushes for {n} creates"
        );
    }

    #[tokio::test]
    async fn a_replay_key_is_recalled_until_its_window_closes() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        let replays = s.replays().expect("sled keeps replays");
        let flushes = s.inner().unwrap().commit.flushes_started();
        replays.remember_call("k1", "task-1", 1_000).await.unwrap();
        assert_eq!(
            s.inner().unwrap().commit.flushes_started(),
            flushes + 1,
            "remembering a call flushes"
        );
        assert_eq!(
            replays.recall_call("k1", 999).await.unwrap().as_deref(),
            Some("task-1")
        );
        assert_eq!(replays.recall_call("k1", 1_000).await.unwrap(), None);
        assert_eq!(replays.recall_call("k1", 5_000).await.unwrap(), None);
        assert_eq!(replays.recall_call("unknown", 0).await.unwrap(), None);
    }

    #[tokio::test]
    async fn remembering_a_replay_key_again_replaces_its_task() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        s.remember_call("k", "task-1", 1_000).await.unwrap();
        s.remember_call("k", "task-2", 2_000).await.unwrap();
        assert_eq!(
            s.recall_call("k", 1_500).await.unwrap().as_deref(),
            Some("task-2")
        );
        // A shorter window replaces a longer one too: the latest call decides.
        s.remember_call("k", "task-3", 500).await.unwrap();
        assert_eq!(s.recall_call("k", 600).await.unwrap(), None);
    }

    #[tokio::test]
    async fn purging_replays_removes_only_closed_windows() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        s.remember_call("a", "task-a", 100).await.unwrap();
        s.remember_call("b", "task-b", 200).await.unwrap();
        s.remember_call("c", "task-c", 300).await.unwrap();
        // An entry that cannot be read goes as well.
        s.inner()
            .unwrap()
            .replays
            .insert("bad", &[1u8, 2][..])
            .unwrap();
        assert!(matches!(
            s.recall_call("bad", 0).await,
            Err(StoreError::Corrupt { .. })
        ));
        assert_eq!(
            s.purge_calls(200).await.unwrap(),
            3,
            "a, b (at 200) and bad"
        );
        assert_eq!(s.recall_call("a", 0).await.unwrap(), None);
        assert_eq!(s.recall_call("b", 0).await.unwrap(), None);
        assert_eq!(
            s.recall_call("c", 250).await.unwrap().as_deref(),
            Some("task-c")
        );
        assert_eq!(s.purge_calls(200).await.unwrap(), 0);
        assert_eq!(s.inner().unwrap().replays.len(), 1);
    }

    #[tokio::test]
    async fn a_replay_key_survives_reopening_and_task_deletion() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
            s.create(&working(1)).await.unwrap();
            s.remember_call("k", "task-1", 10_000).await.unwrap();
            // Deleting the task leaves the entry: whoever recalls it checks the task.
            s.delete("task-1").await.unwrap();
        }
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        assert_eq!(s.get("task-1").await.unwrap(), None);
        assert_eq!(
            s.recall_call("k", 5_000).await.unwrap().as_deref(),
            Some("task-1")
        );
    }

    #[tokio::test]
    async fn sequential_creates_flush_each() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        for i in 0..10 {
            s.create(&working(i)).await.unwrap();
            assert_eq!(s.inner().unwrap().commit.flushes_started(), i as u64 + 1);
        }
        s.flush().await.unwrap();
        assert_eq!(
            s.inner().unwrap().commit.flushes_started(),
            11,
            "flush() flushes too"
        );
    }

    /// A group commit whose flushes each wait for the test: `entered` reports the
    /// number of each flush as it begins; the value sent on the returned sender
    /// ends it (`None` makes it panic).
    fn gated() -> (
        Arc<GroupCommit>,
        tokio::sync::mpsc::UnboundedReceiver<u64>,
        std::sync::mpsc::Sender<Option<sled::Result<()>>>,
    ) {
        let (entered_tx, entered) = tokio::sync::mpsc::unbounded_channel();
        let (release, release_rx) = std::sync::mpsc::channel::<Option<sled::Result<()>>>();
        let release_rx = Mutex::new(release_rx);
        let calls = std::sync::atomic::AtomicU64::new(0);
        let gc = GroupCommit::new(Box::new(move || {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            entered_tx.send(n).unwrap();
            let end = release_rx.lock().unwrap().recv().unwrap();
            end.expect("the test makes this flush panic")
        }));
        (gc, entered, release)
    }

    /// Polls a commit once: whether it still waits. The first poll registers it
    /// (it starts a flush or asks for the next one).
    async fn waits(w: &mut Pin<Box<impl Future<Output = Result<(), StoreError>>>>) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(w.as_mut().poll(cx).is_pending())).await
    }

    fn enospc() -> sled::Error {
        sled::Error::Io(std::io::Error::from_raw_os_error(28))
    }

    /// When a durable write returns, the flush has let go of the store (the
    /// database it flushes), so a writer that drops the store is not racing the
    /// flush thread for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_returns_only_once_the_flush_has_let_go_of_the_store() {
        for _ in 0..500 {
            let gc = GroupCommit::new(Box::new(|| Ok(())));
            gc.commit().await.unwrap();
            assert_eq!(Arc::strong_count(&gc), 1, "the flush still holds the store");
        }
    }

    #[tokio::test]
    async fn a_writer_during_a_flush_waits_for_the_next_one() {
        let (gc, mut entered, release) = gated();
        let mut a = Box::pin(gc.commit());
        assert!(waits(&mut a).await);
        assert_eq!(entered.recv().await, Some(1));
        // Flush 1 runs (it may have begun before these writers' inserts).
        let mut b = Box::pin(gc.commit());
        let mut c = Box::pin(gc.commit());
        assert!(waits(&mut b).await && waits(&mut c).await);
        release.send(Some(Ok(()))).unwrap();
        a.await.unwrap();
        // Flush 1 has reported and flush 2 began, for both: they wait for it.
        assert_eq!(entered.recv().await, Some(2));
        assert!(waits(&mut b).await && waits(&mut c).await);
        let mut d = Box::pin(gc.commit());
        assert!(waits(&mut d).await);
        // Flush 2 fails: each of its writers gets the error.
        release.send(Some(Err(enospc()))).unwrap();
        for w in [b, c] {
            match w.await {
                Err(StoreError::Full(m)) => assert!(m.contains("os error 28"), "{m}"),
                other => panic!("expected the flush error, got {other:?}"),
            }
        }
        // Flush 3, for the writer that came during flush 2, succeeds.
        assert_eq!(entered.recv().await, Some(3));
        assert!(waits(&mut d).await);
        release.send(Some(Ok(()))).unwrap();
        d.await.unwrap();
        assert_eq!(gc.flushes_started(), 3);
        assert!(!gc.lock().running);
    }

    #[tokio::test]
    async fn a_panicking_flush_fails_its_writers_and_the_next() {
        let (gc, mut entered, release) = gated();
        let mut a = Box::pin(gc.commit());
        assert!(waits(&mut a).await);
        assert_eq!(entered.recv().await, Some(1));
        let mut b = Box::pin(gc.commit());
        assert!(waits(&mut b).await);
        release.send(None).unwrap();
        for w in [a, b] {
            match w.await {
                Err(StoreError::Db(m)) => assert!(m.contains("panicked"), "{m}"),
                other => panic!("expected an error, got {other:?}"),
            }
        }
        // Flush 2 never ran (it counts as failed); the next writer starts flush 3.
        assert_eq!(gc.flushes_started(), 2);
        let c = tokio::spawn({
            let gc = gc.clone();
            async move { gc.commit().await }
        });
        assert_eq!(
            entered.recv().await,
            Some(2),
            "the second call of the flush"
        );
        release.send(Some(Ok(()))).unwrap();
        c.await.unwrap().unwrap();
        assert_eq!(gc.flushes_started(), 3);
    }

    /// No writer returns before a flush that began after its write has ended.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_writer_is_covered_by_a_flush_begun_after_its_write() {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        let written = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let (w, d) = (written.clone(), durable.clone());
        let gc = GroupCommit::new(Box::new(move || {
            let covered = w.load(SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(2));
            d.fetch_max(covered, SeqCst);
            Ok(())
        }));
        let writers: Vec<_> = (0..64)
            .map(|i| {
                let (gc, written, durable) = (gc.clone(), written.clone(), durable.clone());
                tokio::spawn(async move {
                    // Spread over a few flushes, so writes land while one runs.
                    tokio::time::sleep(std::time::Duration::from_micros(300 * (i % 16))).await;
                    let mine = written.fetch_add(1, SeqCst) + 1;
                    gc.commit().await.unwrap();
                    assert!(
                        durable.load(SeqCst) >= mine,
                        "write {mine} returned undurable"
                    );
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap();
        }
        // How many flushes they shared depends on scheduling; the durability
        // check above is what this test is for.
        let flushes = gc.flushes_started();
        assert!(
            flushes > 0 && flushes <= 64,
            "{flushes} flushes for 64 writers"
        );
    }
}
