//! Task storage: the `TaskStore` trait and the record it keeps. The sled
//! implementation lives in `sled/` and is the only place sled appears; the
//! PostgreSQL store several replicas share (`pg_store/`) implements the same trait.

mod outbox;
mod pg_store;
mod record;
mod replays;
mod sessions;
mod sled;
pub mod space;

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

pub use outbox::{rfc3339, Delivery, Outbox, OutboxDepth, OutboxStore};
pub use pg_store::{Change, PgStore};
pub use record::{NewTask, Settle, Settled, TaskOutcome, TaskRecord, TaskStatus};
pub use replays::ReplayStore;
pub use sessions::{SessionRecord, SessionStore};
pub use sled::{dir_size, result_file, SledStore};

/// A boxed future returned by store methods (keeps the trait object-safe).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Store failures. They surface to clients as `-32603` and are logged.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The embedded database failed.
    #[error("task store: {0}")]
    Db(String),
    /// Reading or writing a result file failed (e.g. the disk is full).
    #[error("task store file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The database refused a write for lack of space (PostgreSQL `53100
    /// disk_full`). Reads still work; writes may again once space is freed.
    #[error("task store: the database is out of space: {0}")]
    Full(String),
    /// The database cannot be reached (connection lost, server down).
    #[error("task store unavailable: {0}")]
    Unavailable(String),
    /// Another process (a running tasklift) holds the database's lock.
    #[error("the data directory {dir} is in use by another tasklift process ({detail})")]
    InUse {
        /// The data directory.
        dir: String,
        /// sled's message.
        detail: String,
    },
    /// A conditional write found the task already changed by someone else (another
    /// replica settled it, or this replica's lease on it lapsed).
    #[error("task {id} was changed by another tasklift replica")]
    Conflict {
        /// Task id.
        id: String,
    },
    /// A record could not be decoded.
    #[error("task store: corrupt record {id}: {message}")]
    Corrupt {
        /// Task id.
        id: String,
        /// Decoder message.
        message: String,
    },
}

impl StoreError {
    /// Whether the same write may succeed later without anything changing in it:
    /// the database ran out of space or could not be reached.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Full(_) | Self::Unavailable(_))
    }
}

/// Figures for operators and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    /// Records in the store.
    pub tasks: u64,
    /// Bytes used on disk by the database and result files.
    pub disk_bytes: u64,
}

/// Where tasks live. Implementations must make `create` durable before returning.
pub trait TaskStore: Send + Sync + 'static {
    /// Insert a new record and make it durable: after this returns, `get` finds it,
    /// also after a crash.
    fn create<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()>;
    /// Read a record with its outcome.
    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>>;
    /// Replace a record (status change, progress, outcome). Terminal states are
    /// made durable before returning. A shared store refuses (`Conflict`) a write to
    /// a task that another replica has settled or taken over meanwhile.
    fn put<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()>;
    /// Delete a record and its result.
    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()>;
    /// Ids of records whose `expires_at_ms` is at or before `now_ms`, oldest first.
    fn expired(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, Vec<String>>;
    /// Every record still `working` or `input_required` (used once at start).
    fn unfinished(&self) -> StoreFuture<'_, Vec<TaskRecord>>;
    /// The records of one owner on one upstream, oldest first, without outcomes
    /// (for listings). Records past their expiry are left out.
    fn list<'a>(
        &'a self,
        owner: &'a str,
        upstream: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Vec<TaskRecord>>;
    /// Every record, newest first, without outcomes (operator tools, the status page).
    fn all(&self) -> StoreFuture<'_, Vec<TaskRecord>>;
    /// Size figures.
    fn stats(&self) -> StoreFuture<'_, StoreStats>;
    /// How many records are in each status (for `/metrics`).
    fn counts(&self) -> StoreFuture<'_, Vec<(TaskStatus, u64)>> {
        Box::pin(async move {
            let mut n = [0u64; 5];
            for r in self.all().await? {
                n[TaskStatus::ALL
                    .iter()
                    .position(|s| *s == r.status())
                    .unwrap_or(0)] += 1;
            }
            Ok(TaskStatus::ALL.iter().copied().zip(n).collect())
        })
    }
    /// Flush everything to disk (at shutdown).
    fn flush(&self) -> StoreFuture<'_, ()>;
    /// What only a store shared by replicas does, when this is one.
    fn shared(&self) -> Option<&dyn SharedStore> {
        None
    }
    /// Where legacy client sessions are kept across restarts, when this store
    /// keeps them.
    fn sessions(&self) -> Option<&dyn SessionStore> {
        None
    }
    /// Where the calls that may be replayed (detached synchronous calls a retry
    /// can join) are indexed, when this store keeps them.
    fn replays(&self) -> Option<&dyn ReplayStore> {
        None
    }
    /// Where webhook events wait for delivery, when this store keeps them.
    fn outbox(&self) -> Option<&dyn OutboxStore> {
        None
    }
}

/// What only a store shared by several replicas does: leases on running tasks,
/// reaping the tasks of a lost replica, answers left for the replica running a
/// call, and expiry across replicas. (Changes heard from other replicas arrive
/// on the channel the store hands to `tasks::replicas::run`.)
pub trait SharedStore: Send + Sync {
    /// How long a lease lasts.
    fn lease(&self) -> std::time::Duration;
    /// Leave `tasks/update` answers for the replica running the task, and wake it.
    fn send_answers<'a>(
        &'a self,
        task_id: &'a str,
        answers: &'a Map<String, Value>,
    ) -> StoreFuture<'a, ()>;
    /// Take the answers left for these tasks (run here).
    fn take_answers<'a>(
        &'a self,
        ids: &'a [String],
    ) -> StoreFuture<'a, Vec<(String, Map<String, Value>)>>;
    /// Renew the leases of this replica's running tasks; the ids it no longer holds.
    fn renew_leases(&self) -> StoreFuture<'_, Vec<String>>;
    /// Fail up to `limit` tasks whose lease lapsed with `error`; their ids.
    fn reap_lost<'a>(
        &'a self,
        now_ms: u64,
        error: &'a Value,
        limit: usize,
    ) -> StoreFuture<'a, Vec<String>>;
    /// Delete up to `limit` finished tasks past their expiry, of every replica.
    fn purge_expired(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, usize>;
}
