//! Task ids an upstream created itself (its own `CreateTaskResult`, passed through
//! untouched): remembered so `tasks/*` for them go to that upstream, for the
//! caller they were returned to only. Kept in memory: after a restart, `tasks/*`
//! for them answer as unknown.

use dashmap::DashMap;
use serde_json::Value;

/// Longest time an upstream's own task id is remembered.
const UPSTREAM_TASK_MAX_MS: u64 = 24 * 3600 * 1000;

/// Where a `tasks/*` request should go.
pub enum TaskRoute {
    /// The task is tasklift's: answered here.
    Local,
    /// The upstream created this task itself: forward untouched.
    Upstream,
}

/// An upstream's own task handle that tasklift passes through.
struct UpstreamTask {
    /// The upstream that created it.
    upstream: String,
    /// The caller it was returned to.
    owner: String,
    /// When it is forgotten.
    expires_at_ms: u64,
}

/// The upstreams' own task ids, by id.
#[derive(Default)]
pub(super) struct UpstreamTasks {
    by_id: DashMap<String, UpstreamTask>,
}

impl UpstreamTasks {
    /// Remember a task id an upstream created itself, until the handle's `ttlMs`
    /// (at most a day) passes.
    pub(super) fn note(&self, result: &Value, upstream: &str, owner: &str, now_ms: u64) {
        if result.get("resultType").and_then(Value::as_str) != Some("task") {
            return;
        }
        if let Some(id) = result.get("taskId").and_then(Value::as_str) {
            let ttl = result
                .get("ttlMs")
                .and_then(Value::as_u64)
                .unwrap_or(UPSTREAM_TASK_MAX_MS)
                .min(UPSTREAM_TASK_MAX_MS);
            let route = UpstreamTask {
                upstream: upstream.to_string(),
                owner: owner.to_string(),
                expires_at_ms: now_ms + ttl,
            };
            self.by_id.insert(id.to_string(), route);
        }
    }

    /// Where a `tasks/*` request for `task_id` from `owner` on `upstream` goes.
    /// Another caller's upstream task is answered locally, that is, as unknown.
    pub(super) fn route(
        &self,
        task_id: &str,
        owner: &str,
        upstream: &str,
        now_ms: u64,
    ) -> TaskRoute {
        match self.by_id.get(task_id) {
            Some(r) if r.upstream == upstream && r.owner == owner && r.expires_at_ms > now_ms => {
                TaskRoute::Upstream
            }
            _ => TaskRoute::Local,
        }
    }

    /// Forget the ids whose time has passed.
    pub(super) fn forget_expired(&self, now_ms: u64) {
        self.by_id.retain(|_, r| r.expires_at_ms > now_ms);
    }
}
