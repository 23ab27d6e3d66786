//! Calls that may be replayed ("detach and replay"): a synchronous tool call whose
//! client went away keeps running as a task, and a retry of the identical call
//! within the replay window joins that task instead of running the tool again.
//! The engine computes the replay key (an opaque string); the store only maps it
//! to the task id the call became, with the time the window closes.
//!
//! Entries are not removed with their task: one may outlive it (deleted at expiry,
//! or by an operator), so whoever recalls a key checks that the task still exists.

use super::StoreFuture;

/// Where the calls that may be replayed are indexed: a replay key (a digest of
/// who called which tool with which arguments, or the client's idempotency key)
/// to the task that call became, until the replay window closes.
pub trait ReplayStore: Send + Sync {
    /// Remember that the call with this key became this task, replayable until
    /// `until_ms` (Unix ms). A later call for the same key replaces it (the earlier
    /// task failed or was cancelled, and the call ran again). Durable before it returns.
    fn remember_call<'a>(
        &'a self,
        key: &'a str,
        task_id: &'a str,
        until_ms: u64,
    ) -> StoreFuture<'a, ()>;
    /// The task the call with this key became, if it is remembered and `now_ms` is
    /// before its `until_ms`.
    fn recall_call<'a>(&'a self, key: &'a str, now_ms: u64) -> StoreFuture<'a, Option<String>>;
    /// Forget every key whose window closed at or before `now_ms`; how many went.
    fn purge_calls(&self, now_ms: u64) -> StoreFuture<'_, usize>;
}
