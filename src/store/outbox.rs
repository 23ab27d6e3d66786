//! The webhook outbox: an event for each `[[webhooks]]` destination that wants
//! it, derived here from a task record whose status moved to `completed`,
//! `failed`, `cancelled` or `input_required`, and written by the store in the same
//! sled batch (or PostgreSQL statement) as that record: a crash keeps both or
//! neither, so no event is lost or invented. The delivery worker (`webhooks/`)
//! reads what is due through [`OutboxStore`] and deletes what was delivered or
//! given up.
//!
//! The body is built once, here, when the event happens: every retry sends the
//! same bytes under the same `webhook-id`, even after the task itself is gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{StoreFuture, TaskOutcome, TaskRecord, TaskStatus};
use crate::config::{WebhookConfig, WebhookEvent};

/// One event waiting for one destination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The `webhook-id`: the same for every attempt.
    pub id: String,
    /// The destination's name (`[[webhooks]] name`).
    pub destination: String,
    /// The event's type, e.g. `task.completed`.
    pub kind: String,
    /// The task it reports.
    pub task_id: String,
    /// When it happened, unix milliseconds.
    pub occurred_at_ms: u64,
    /// The JSON body, as sent.
    pub body: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// Not sent again before this, unix milliseconds.
    pub next_at_ms: u64,
}

/// One destination's backlog, for `/metrics`, the status page and `tasklift store`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutboxDepth {
    /// The destination's name.
    pub destination: String,
    /// Events waiting.
    pub pending: u64,
    /// When the oldest of them happened, unix milliseconds.
    pub oldest_ms: Option<u64>,
}

/// Where webhook events wait until they are delivered or given up.
pub trait OutboxStore: Send + Sync {
    /// Up to `limit` events for `destination` due at `now_ms`, oldest first. A
    /// shared store leases them to this replica for `lease` (`FOR UPDATE SKIP
    /// LOCKED`): no other replica takes them until the lease lapses.
    fn due<'a>(
        &'a self,
        destination: &'a str,
        now_ms: u64,
        lease: Duration,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Delivery>>;
    /// The event was delivered, or given up: it goes.
    fn done<'a>(&'a self, d: &'a Delivery) -> StoreFuture<'a, ()>;
    /// The attempt failed: try again at `d.next_at_ms` (with `d.attempts` counted).
    fn retry<'a>(&'a self, d: &'a Delivery) -> StoreFuture<'a, ()>;
    /// Every waiting event, oldest first, up to `limit` (operators).
    fn pending(&self, limit: usize) -> StoreFuture<'_, Vec<Delivery>>;
    /// Each destination's backlog.
    fn depth(&self) -> StoreFuture<'_, Vec<OutboxDepth>>;
}

/// The destinations events are derived for, what was dropped past their
/// `max_pending`, and a wake-up for the worker when new events are written.
#[derive(Debug)]
pub struct Outbox {
    hooks: Vec<WebhookConfig>,
    dropped: Vec<AtomicU64>,
    /// Counts the writes that added events, so the worker sends them at once.
    written: tokio::sync::watch::Sender<u64>,
}

impl Outbox {
    /// The outbox of these destinations.
    pub fn new(hooks: Vec<WebhookConfig>) -> Self {
        let dropped = hooks.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            hooks,
            dropped,
            written: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Changes after each write that added events.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// Events were written: wake the worker.
    pub fn wake(&self) {
        self.written.send_modify(|n| *n += 1);
    }

    /// The destinations.
    pub fn hooks(&self) -> &[WebhookConfig] {
        &self.hooks
    }

    /// The events `rec` reports, written with it, when its status differs from
    /// `before` (`None`: a new record) and reports one.
    pub fn events(&self, before: Option<TaskStatus>, rec: &TaskRecord) -> Vec<Delivery> {
        let status = rec.status();
        if before == Some(status) {
            return Vec::new();
        }
        let Some(event) = WebhookEvent::of_status(status.as_str()) else {
            return Vec::new();
        };
        let now = now_ms();
        self.hooks
            .iter()
            .filter(|h| h.wants(event, &rec.upstream, &rec.tool))
            .map(|h| Delivery {
                id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
                destination: h.name.clone(),
                kind: event.as_str().to_string(),
                task_id: rec.id.clone(),
                occurred_at_ms: now,
                body: body(event, rec, h, now),
                attempts: 0,
                next_at_ms: now,
            })
            .collect()
    }

    /// `d` was not written: its destination already has `max_pending` waiting.
    /// Counted, and logged (every drop while they are few, then every 100th).
    pub fn drop_one(&self, d: &Delivery) {
        let Some(i) = self.hooks.iter().position(|h| h.name == d.destination) else {
            return;
        };
        let n = self.dropped[i].fetch_add(1, Ordering::Relaxed) + 1;
        if n <= 10 || n.is_multiple_of(100) {
            tracing::warn!(destination = %d.destination, task.id = %d.task_id, event = %d.kind, dropped = n, max_pending = self.hooks[i].max_pending, "webhook event dropped: the destination's outbox is full");
        }
    }

    /// Events dropped so far, per destination.
    pub fn dropped(&self) -> Vec<(String, u64)> {
        self.hooks
            .iter()
            .zip(&self.dropped)
            .map(|(h, n)| (h.name.clone(), n.load(Ordering::Relaxed)))
            .collect()
    }

    /// The `max_pending` of a destination.
    pub fn cap(&self, destination: &str) -> usize {
        self.hooks
            .iter()
            .find(|h| h.name == destination)
            .map_or(usize::MAX, |h| h.max_pending)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// The event as sent: `{"type", "timestamp", "data": {...}}`.
fn body(event: WebhookEvent, rec: &TaskRecord, hook: &WebhookConfig, now: u64) -> String {
    let mut data = Map::new();
    data.insert("taskId".into(), json!(rec.id));
    data.insert("status".into(), json!(rec.status().as_str()));
    data.insert("upstream".into(), json!(rec.upstream));
    data.insert("tool".into(), json!(rec.tool));
    data.insert("createdAt".into(), json!(rfc3339(rec.created_at_ms)));
    data.insert("lastUpdatedAt".into(), json!(rfc3339(rec.updated_at_ms)));
    if let Some(m) = &rec.status_message {
        data.insert("statusMessage".into(), json!(m));
    }
    if !rec.input_requests.is_empty() {
        let keys: Vec<&String> = rec.input_requests.keys().collect();
        data.insert("inputRequests".into(), json!(keys));
    }
    if hook.include_result {
        let (key, value) = match &rec.outcome {
            Some(TaskOutcome::Result(v)) => ("result", v),
            Some(TaskOutcome::Error(e)) => ("error", e),
            None => ("", &Value::Null),
        };
        if !key.is_empty() {
            let size = serde_json::to_vec(value).map_or(usize::MAX, |b| b.len());
            if size <= hook.max_result_bytes {
                data.insert(key.into(), value.clone());
            } else {
                data.insert(
                    "resultOmitted".into(),
                    json!({"bytes": size, "maxResultBytes": hook.max_result_bytes}),
                );
            }
        }
    }
    json!({"type": event.as_str(), "timestamp": rfc3339(now), "data": data}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;
    use crate::store::{NewTask, Settle};

    fn hooks(extra: &str) -> Vec<WebhookConfig> {
        let text = format!("[[upstreams]]\nname = \"u\"\nurl = \"http://127.0.0.1:9/mcp\"\n[[webhooks]]\nurl = \"http://127.0.0.1:1/h\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n{extra}\n");
        RawConfig::from_toml(&text)
            .unwrap()
            .validate()
            .unwrap()
            .webhooks
    }

    fn task() -> TaskRecord {
        TaskRecord::new(NewTask {
            id: "t1".into(),
            owner: "o".into(),
            upstream: "u".into(),
            tool: "report".into(),
            created_at_ms: 1_700_000_000_000,
            ttl_ms: 60_000,
            poll_interval_ms: 1000,
        })
    }

    #[test]
    fn a_status_change_is_an_event_for_each_destination_that_wants_it() {
        let outbox = Outbox::new(hooks("include_result = true"));
        let mut rec = task();
        assert!(outbox.events(None, &rec).is_empty(), "working is no event");
        rec.input_requests
            .insert("confirm".into(), json!({"method": "elicitation/create"}));
        rec.ask().unwrap();
        let asked = outbox.events(Some(TaskStatus::Working), &rec);
        assert_eq!(asked.len(), 1);
        let body: Value = serde_json::from_str(&asked[0].body).unwrap();
        assert_eq!(body["type"], "task.input_required");
        assert_eq!(body["data"]["inputRequests"], json!(["confirm"]));
        assert_eq!(body["data"]["createdAt"], "2023-11-14T22:13:20.000Z");
        assert!(
            outbox
                .events(Some(TaskStatus::InputRequired), &rec)
                .is_empty(),
            "no change, no event"
        );
        rec.input_requests.clear();
        rec.resume().unwrap();
        rec.settle(Settle::Completed(
            json!({"content": [{"type": "text", "text": "ok"}]}),
        ))
        .unwrap();
        let done = outbox.events(Some(TaskStatus::Working), &rec);
        let body: Value = serde_json::from_str(&done[0].body).unwrap();
        assert_eq!(body["data"]["status"], "completed");
        assert_eq!(body["data"]["result"]["content"][0]["text"], "ok");
        assert!(done[0].id.starts_with("msg_") && done[0].id != asked[0].id);
    }

    #[test]
    fn filters_and_the_result_cap_apply() {
        let mut rec = task();
        rec.settle(Settle::Completed(json!({"content": "x".repeat(100)})))
            .unwrap();
        let only_failed = Outbox::new(hooks("events = [\"task.failed\"]"));
        assert!(only_failed
            .events(Some(TaskStatus::Working), &rec)
            .is_empty());
        let other_tool = Outbox::new(hooks("tools = [\"quick\"]"));
        assert!(other_tool
            .events(Some(TaskStatus::Working), &rec)
            .is_empty());
        let capped = Outbox::new(hooks("include_result = true\nmax_result_bytes = 50"));
        let d = capped.events(Some(TaskStatus::Working), &rec);
        let body: Value = serde_json::from_str(&d[0].body).unwrap();
        assert!(body["data"].get("result").is_none(), "{body}");
        assert_eq!(body["data"]["resultOmitted"]["maxResultBytes"], 50);
        let plain = Outbox::new(hooks(""));
        let body: Value =
            serde_json::from_str(&plain.events(Some(TaskStatus::Working), &rec)[0].body).unwrap();
        assert!(
            body["data"].get("result").is_none(),
            "no result unless asked: {body}"
        );
    }
}
