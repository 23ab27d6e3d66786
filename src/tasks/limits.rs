//! Limits that keep one caller or one slow upstream from taking everything: the size
//! of a stored result, concurrent calls per upstream (excess calls queue, for a
//! while), and running tasks per principal. Each refusal is a [`LimitError`] that
//! names the limit and its setting (the front door's error map gives it its code), and is counted in `tasklift_limit_hits_total{limit}`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::hashing::FastDashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use crate::config::Limits;

/// A refusal because a limit is reached. Each message names the setting.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LimitError {
    /// Every call slot of an upstream stayed taken for the whole queue timeout.
    #[error("upstream {upstream} is busy: {max} calls are running (limits.max_concurrent_calls) and this one waited {waited:?} (limits.queue_timeout); try again later")]
    Busy {
        /// The upstream.
        upstream: String,
        /// `limits.max_concurrent_calls`.
        max: usize,
        /// `limits.queue_timeout`.
        waited: Duration,
    },
    /// The caller already runs as many tasks as it may.
    #[error("this caller already has {running} tasks running (limits.max_active_tasks_per_principal = {max}); wait for one to finish or cancel one")]
    TooManyTasks {
        /// Tasks the caller runs.
        running: usize,
        /// `limits.max_active_tasks_per_principal`.
        max: usize,
    },
    /// A task polled again sooner than its `pollIntervalMs` allows.
    #[error("polling too fast: poll this task every {interval_ms} ms (its pollIntervalMs; limits.poll_rate_limit)")]
    PollTooFast {
        /// The task's `pollIntervalMs`.
        interval_ms: u64,
    },
    /// Free space under the data directory is below the watermark, and the tool
    /// runs only as a task.
    #[error("tasklift's task store is low on disk space ({free} bytes free, below store.min_free_bytes = {min}): no new task can be stored, and this tool runs only as a task; retry once space is freed (tasks already created stay readable)")]
    LowDisk {
        /// Bytes free.
        free: u64,
        /// `store.min_free_bytes`.
        min: u64,
    },
    /// The task store refuses writes for lack of space (a full disk or quota,
    /// or the database's `53100 disk_full`).
    #[error("tasklift's task store is out of space (it refused a write): no new task can be stored, and this tool runs only as a task; retry once space is freed (tasks already created stay readable)")]
    StoreFull,
    /// The task store's database cannot be reached.
    #[error("tasklift's task store cannot be reached: no new task can be stored, and this tool runs only as a task; retry shortly (tasklift checks the store every second)")]
    StoreUnreachable,
    /// A result too large to store.
    #[error("the tool's result is {size} bytes, over the limit of {max} bytes a task may store (limits.max_result_bytes)")]
    ResultTooLarge {
        /// The result's size.
        size: usize,
        /// `limits.max_result_bytes`.
        max: usize,
    },
}

impl LimitError {
    /// The `limit` label of `tasklift_limit_hits_total`.
    pub fn setting(&self) -> &'static str {
        match self {
            Self::Busy { .. } => "max_concurrent_calls",
            Self::TooManyTasks { .. } => "max_active_tasks_per_principal",
            Self::PollTooFast { .. } => "poll_rate_limit",
            Self::ResultTooLarge { .. } => "max_result_bytes",
            Self::LowDisk { .. } => "min_free_bytes",
            Self::StoreFull => "store_full",
            Self::StoreUnreachable => "store_unreachable",
        }
    }
}

/// The limits and what they count.
#[derive(Default)]
pub struct Gate {
    limits: Limits,
    slots: FastDashMap<String, Arc<Semaphore>>,
    active: FastDashMap<String, Arc<AtomicUsize>>,
    last_poll: FastDashMap<String, std::time::Instant>,
}

/// A running task counted against its principal until dropped.
pub struct ActiveTask(Arc<AtomicUsize>);

impl Drop for ActiveTask {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    /// A gate enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Wait for a call slot on `upstream`; `Ok(None)` when calls are not limited.
    pub async fn call_slot(
        &self,
        upstream: &str,
    ) -> Result<Option<OwnedSemaphorePermit>, LimitError> {
        let l = self.limits();
        if l.max_concurrent_calls == 0 {
            return Ok(None);
        }
        // A known upstream's semaphore under a read lock, with no key allocated.
        let known = self.slots.get(upstream).map(|s| s.clone());
        let sem = known.unwrap_or_else(|| {
            self.slots
                .entry(upstream.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(l.max_concurrent_calls)))
                .clone()
        });
        match tokio::time::timeout(l.queue_timeout, sem.acquire_owned()).await {
            Ok(Ok(p)) => Ok(Some(p)),
            _ => Err(LimitError::Busy {
                upstream: upstream.to_string(),
                max: l.max_concurrent_calls,
                waited: l.queue_timeout,
            }),
        }
    }

    /// Whether `owner` may start one more task.
    pub fn may_start_task(&self, owner: &str) -> Result<(), LimitError> {
        let max = self.limits().max_active_tasks_per_principal;
        if max == 0 {
            return Ok(());
        }
        let n = self
            .active
            .get(owner)
            .map_or(0, |c| c.load(Ordering::Relaxed));
        if n >= max {
            return Err(LimitError::TooManyTasks { running: n, max });
        }
        Ok(())
    }

    /// Count a task that starts running for `owner`.
    pub fn task_started(&self, owner: &str) -> ActiveTask {
        let c = self.active.entry(owner.to_string()).or_default().clone();
        c.fetch_add(1, Ordering::Relaxed);
        ActiveTask(c)
    }

    /// With `poll_rate_limit`: refuse a poll of `task` by `owner` sooner than half the
    /// task's `pollIntervalMs` after the last one (clients jitter; this catches loops).
    pub fn poll(&self, owner: &str, task: &str, interval_ms: u64) -> Result<(), LimitError> {
        if !self.limits().poll_rate_limit {
            return Ok(());
        }
        let key = format!("{owner}\0{task}");
        let min = Duration::from_millis(interval_ms / 2);
        let now = std::time::Instant::now();
        if let Some(prev) = self.last_poll.get(&key).map(|p| *p) {
            if now.duration_since(prev) < min {
                return Err(LimitError::PollTooFast { interval_ms });
            }
        }
        if self.last_poll.len() > 100_000 {
            self.last_poll
                .retain(|_, t| now.duration_since(*t) < Duration::from_secs(600));
        }
        self.last_poll.insert(key, now);
        Ok(())
    }

    /// The error for a result over the limit, if it is.
    pub fn check_result(&self, r: &serde_json::Value) -> Result<(), LimitError> {
        let max = self.limits().max_result_bytes;
        if max == 0 {
            return Ok(());
        }
        let size = serde_json::to_vec(r).map(|v| v.len()).unwrap_or(0);
        if size > max {
            return Err(LimitError::ResultTooLarge { size, max });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_queue_then_time_out_and_tasks_are_counted_per_principal() {
        let g = Gate::new(Limits {
            max_concurrent_calls: 1,
            queue_timeout: Duration::from_millis(50),
            max_active_tasks_per_principal: 1,
            max_result_bytes: 10,
            poll_rate_limit: true,
        });
        let first = g.call_slot("up").await.unwrap();
        let e = g.call_slot("up").await.unwrap_err();
        assert!(e.to_string().contains("max_concurrent_calls"), "{e}");
        drop(first);
        assert!(g.call_slot("up").await.unwrap().is_some());
        let t = g.task_started("alice");
        assert!(g.may_start_task("alice").is_err());
        assert!(g.may_start_task("bob").is_ok());
        drop(t);
        assert!(g.may_start_task("alice").is_ok());
        assert!(g.check_result(&serde_json::json!("short")).is_ok());
        assert!(g
            .check_result(&serde_json::json!("a much longer text"))
            .is_err());
        assert!(g.poll("alice", "t1", 1000).is_ok());
        assert!(g.poll("alice", "t1", 1000).is_err(), "too soon");
        assert!(g.poll("bob", "t1", 1000).is_ok(), "per caller");
        assert!(g.poll("alice", "t2", 1000).is_ok(), "per task");
    }
}
