//! Tasks: the wire shapes tasklift answers with (`CreateTaskResult`, `DetailedTask`),
//! the clock, and the engine that turns slow calls into tasks (`engine.rs`) and the
//! sweeper that expires them (`sweeper.rs`).

pub mod answer;
mod api;
mod control;
mod core;
mod detach;
mod driver;
pub mod engine;
pub mod handles;
pub mod input;
mod intake;
pub mod limits;
mod listen;
mod patience;
mod phases;
mod race;
pub mod replicas;
mod streamed;
pub mod sweeper;
mod tool_wait;
mod upstream_tasks;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::store::{TaskOutcome, TaskRecord};

pub use answer::{Answer, Event, Failure, TaskError, WriteFailure, Written};
pub use api::Caller;
pub use engine::{Engine, EngineSettings};

/// Wall-clock milliseconds that advance with tokio's clock, so tests can pause and
/// advance time and see TTLs expire, while production gets monotonic progress.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Unix milliseconds at `base`.
    base_ms: u64,
    /// The tokio instant the clock started at.
    base: tokio::time::Instant,
}

impl Clock {
    /// Start a clock at the current wall time.
    pub fn new() -> Self {
        let base_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as u64;
        Self {
            base_ms,
            base: tokio::time::Instant::now(),
        }
    }

    /// Current unix milliseconds.
    pub fn now_ms(&self) -> u64 {
        self.base_ms + self.base.elapsed().as_millis() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// RFC 3339 UTC timestamp for unix milliseconds.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// The `Task` fields shared by every shape.
fn task_fields(rec: &TaskRecord) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("taskId".into(), json!(rec.id));
    o.insert("status".into(), json!(rec.status().as_str()));
    if let Some(m) = &rec.status_message {
        o.insert("statusMessage".into(), json!(m));
    }
    o.insert("createdAt".into(), json!(rfc3339(rec.created_at_ms)));
    o.insert("lastUpdatedAt".into(), json!(rfc3339(rec.updated_at_ms)));
    o.insert("ttlMs".into(), json!(rec.ttl_ms));
    o.insert("pollIntervalMs".into(), json!(rec.poll_interval_ms));
    o
}

/// The `CreateTaskResult` returned in place of a tool result.
pub fn create_task_result(rec: &TaskRecord) -> Value {
    let mut o = task_fields(rec);
    o.insert("resultType".into(), json!("task"));
    Value::Object(o)
}

/// The `DetailedTask` returned by `tasks/get`.
pub fn detailed_task(rec: &TaskRecord) -> Value {
    into_detailed_task(rec.clone())
}

/// [`detailed_task`], taking the record (its result is moved, not copied).
pub fn into_detailed_task(mut rec: TaskRecord) -> Value {
    let mut o = task_fields(&rec);
    o.insert("resultType".into(), json!("complete"));
    if !rec.input_requests.is_empty() {
        o.insert(
            "inputRequests".into(),
            Value::Object(std::mem::take(&mut rec.input_requests)),
        );
    }
    match rec.outcome.take() {
        Some(TaskOutcome::Result(r)) => {
            o.insert("result".into(), r);
        }
        Some(TaskOutcome::Error(e)) => {
            o.insert("error".into(), e);
        }
        None => {}
    }
    Value::Object(o)
}

/// A `statusMessage` from a progress notification's params: "3/10 – indexing".
pub fn progress_message(params: &Value) -> Option<String> {
    let num = |k: &str| {
        params.get(k).and_then(|v| {
            v.as_u64()
                .map(|n| n.to_string())
                .or_else(|| v.as_f64().map(|f| format!("{f}")))
        })
    };
    let count = match (num("progress"), num("total")) {
        (Some(p), Some(t)) => Some(format!("{p}/{t}")),
        (Some(p), None) => Some(p),
        _ => None,
    };
    let msg = params.get("message").and_then(Value::as_str);
    match (count, msg) {
        (Some(c), Some(m)) => Some(format!("{c} – {m}")),
        (Some(c), None) => Some(c),
        (None, Some(m)) => Some(m.to_string()),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_messages_read_well() {
        assert_eq!(
            progress_message(&json!({"progress": 3, "total": 10, "message": "indexing"})).unwrap(),
            "3/10 – indexing"
        );
        assert_eq!(progress_message(&json!({"progress": 0.5})).unwrap(), "0.5");
        assert_eq!(progress_message(&json!({})), None);
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    }
}
