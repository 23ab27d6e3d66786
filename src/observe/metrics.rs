//! Prometheus metrics, in the text exposition format (version 0.0.4), written by hand:
//! a few atomic counters and one histogram do not need a metrics crate.
//!
//! One [`Metrics`] per running tasklift (tests run several in one process). Names
//! follow Prometheus conventions: `tasklift_` prefix, `_total` counters, base units
//! (`_seconds`, `_bytes`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dashmap::DashMap;

/// Upper bounds of the upstream call duration buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Methods counted under their own name; anything else is `other`, so a client
/// cannot grow the label set without bound.
const KNOWN_METHODS: &[&str] = &[
    "server/discover",
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
];

/// A histogram of durations.
#[derive(Default)]
struct Histogram {
    /// Count per bucket (not cumulative), plus one for +Inf.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i] += 1;
        self.sum += secs;
        self.count += 1;
    }
}

/// Per-upstream figures.
#[derive(Default)]
struct UpstreamFigures {
    in_flight: AtomicI64,
    duration: Mutex<Histogram>,
}

/// How a task ended (the `status` label of `tasklift_tasks_finished_total`).
#[derive(Debug, Clone, Copy)]
pub enum Finished {
    /// `completed`.
    Completed,
    /// `failed`.
    Failed,
    /// `cancelled`.
    Cancelled,
}

/// Everything tasklift counts.
#[derive(Default)]
pub struct Metrics {
    tasks_created: AtomicU64,
    tasks_completed: AtomicU64,
    tasks_failed: AtomicU64,
    tasks_cancelled: AtomicU64,
    tasks_expired: AtomicU64,
    requests: DashMap<(&'static str, &'static str), AtomicU64>,
    limit_hits: DashMap<&'static str, AtomicU64>,
    upstreams: DashMap<String, Arc<UpstreamFigures>>,
    replays_joined: AtomicU64,
    replays_stored: AtomicU64,
    tool_handles: AtomicU64,
    detached: AtomicU64,
    spans_exported: AtomicU64,
    spans_dropped: AtomicU64,
    spans_failed: AtomicU64,
}

/// What became of spans (the `outcome` label of `tasklift_trace_spans_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spans {
    /// The collector took them.
    Exported,
    /// The export queue was full: never sent.
    Dropped,
    /// Their export failed (after its retries).
    Failed,
}

/// How a retried call was replayed instead of running the tool again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// It joined the task the identical call became, still running.
    Joined,
    /// It got the stored result of the identical call.
    Stored,
}

/// Figures read at scrape time from the rest of tasklift.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Tasks in the store by status.
    pub tasks_by_status: BTreeMap<&'static str, u64>,
    /// Bytes the store uses on disk.
    pub store_disk_bytes: u64,
    /// Bytes free for the embedded store, when watched and measured.
    pub store_free_bytes: Option<u64>,
    /// Whether free space is below `store.min_free_bytes`, when watched.
    pub store_low_space: Option<bool>,
    /// Open legacy client sessions.
    pub legacy_sessions: u64,
    /// Per upstream: (name, ready, stdio restarts if a stdio upstream).
    pub upstreams: Vec<(String, bool, Option<u64>)>,
}

/// An upstream call in flight: counted until dropped, and timed.
pub struct CallMeter {
    figures: Arc<UpstreamFigures>,
    started: Instant,
}

impl Drop for CallMeter {
    fn drop(&mut self) {
        self.figures.in_flight.fetch_sub(1, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        self.figures
            .duration
            .lock()
            .expect("histogram")
            .observe(secs);
    }
}

impl Metrics {
    /// A task was created.
    pub fn task_created(&self) {
        self.tasks_created.fetch_add(1, Ordering::Relaxed);
    }

    /// A task reached a terminal status.
    pub fn task_finished(&self, how: Finished) {
        let c = match how {
            Finished::Completed => &self.tasks_completed,
            Finished::Failed => &self.tasks_failed,
            Finished::Cancelled => &self.tasks_cancelled,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A retried call was answered from the task of an identical earlier one.
    pub fn replayed(&self, how: Replay) {
        match how {
            Replay::Joined => &self.replays_joined,
            Replay::Stored => &self.replays_stored,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Replays so far: (joined a running task, answered from a stored result).
    pub fn replays(&self) -> (u64, u64) {
        (
            self.replays_joined.load(Ordering::Relaxed),
            self.replays_stored.load(Ordering::Relaxed),
        )
    }

    /// A client without the tasks extension got a still-running answer naming
    /// `tasklift_wait` (a tool-level handle).
    pub fn tool_handle(&self) {
        self.tool_handles.fetch_add(1, Ordering::Relaxed);
    }

    /// A synchronous call passed its threshold and runs on as a task its caller
    /// waits on (`on_disconnect = "detach"`).
    pub fn detached(&self) {
        self.detached.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` spans went to the OTLP collector, or did not (`tasklift_trace_spans_total`).
    pub fn spans(&self, outcome: Spans, n: u64) {
        let c = match outcome {
            Spans::Exported => &self.spans_exported,
            Spans::Dropped => &self.spans_dropped,
            Spans::Failed => &self.spans_failed,
        };
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Tasks deleted by the sweeper at the end of their TTL.
    pub fn tasks_expired(&self, n: u64) {
        self.tasks_expired.fetch_add(n, Ordering::Relaxed);
    }

    /// A request was answered: `outcome` is `ok`, `error`, `task`, `input_required`,
    /// `stream`, `accepted` or `rejected`.
    pub fn request(&self, method: &str, outcome: &'static str) {
        let m = KNOWN_METHODS
            .iter()
            .find(|k| **k == method)
            .copied()
            .unwrap_or("other");
        // A read lock once the counter exists: every front-door worker counts here.
        if let Some(c) = self.requests.get(&(m, outcome)) {
            c.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.requests
            .entry((m, outcome))
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A limit refused something (`limit` is its configuration key).
    pub fn limit_hit(&self, limit: &'static str) {
        self.limit_hits
            .entry(limit)
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Start counting an upstream call.
    pub fn call_started(&self, upstream: &str) -> CallMeter {
        // Known upstreams take a read lock and allocate nothing.
        let figures = match self.upstreams.get(upstream) {
            Some(f) => f.clone(),
            None => self
                .upstreams
                .entry(upstream.to_string())
                .or_default()
                .clone(),
        };
        figures.in_flight.fetch_add(1, Ordering::Relaxed);
        CallMeter {
            figures,
            started: Instant::now(),
        }
    }

    /// Upstream calls in flight now.
    pub fn in_flight(&self, upstream: &str) -> i64 {
        self.upstreams
            .get(upstream)
            .map_or(0, |f| f.in_flight.load(Ordering::Relaxed))
    }

    /// The text exposition.
    pub fn render(&self, snap: &Snapshot) -> String {
        let mut out = String::with_capacity(4096);
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
            );
        };
        counter(
            &mut out,
            "tasklift_tasks_created_total",
            "Tasks created (a call that outlived its threshold, or a 2025-11-25 task request).",
            self.tasks_created.load(Ordering::Relaxed),
        );
        out.push_str("# HELP tasklift_tasks_finished_total Tasks that reached a terminal status.\n# TYPE tasklift_tasks_finished_total counter\n");
        for (status, c) in [
            ("completed", &self.tasks_completed),
            ("failed", &self.tasks_failed),
            ("cancelled", &self.tasks_cancelled),
        ] {
            let _ = writeln!(
                out,
                "tasklift_tasks_finished_total{{status=\"{status}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        counter(
            &mut out,
            "tasklift_tasks_expired_total",
            "Tasks deleted at the end of their TTL.",
            self.tasks_expired.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "tasklift_tool_handles_total",
            "Still-running answers naming tasklift_wait, given to clients without the tasks extension.",
            self.tool_handles.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "tasklift_detached_calls_total",
            "Synchronous calls that passed their threshold and run on as tasks their callers wait on (on_disconnect = detach).",
            self.detached.load(Ordering::Relaxed),
        );
        out.push_str("# HELP tasklift_trace_spans_total Spans sent to the OTLP collector (exported), dropped with the export queue full (dropped), or lost to an export that failed (failed).\n# TYPE tasklift_trace_spans_total counter\n");
        for (outcome, c) in [
            ("exported", &self.spans_exported),
            ("dropped", &self.spans_dropped),
            ("failed", &self.spans_failed),
        ] {
            let _ = writeln!(
                out,
                "tasklift_trace_spans_total{{outcome=\"{outcome}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP tasklift_replays_total Retried calls answered from the task of an identical earlier call instead of running the tool again.\n# TYPE tasklift_replays_total counter\n");
        let (joined, stored) = self.replays();
        let _ = writeln!(out, "tasklift_replays_total{{outcome=\"joined\"}} {joined}");
        let _ = writeln!(out, "tasklift_replays_total{{outcome=\"stored\"}} {stored}");
        out.push_str("# HELP tasklift_tasks Tasks in the store by current status.\n# TYPE tasklift_tasks gauge\n");
        for status in [
            "working",
            "input_required",
            "completed",
            "failed",
            "cancelled",
        ] {
            let n = snap.tasks_by_status.get(status).copied().unwrap_or(0);
            let _ = writeln!(out, "tasklift_tasks{{status=\"{status}\"}} {n}");
        }
        out.push_str("# HELP tasklift_requests_total Requests answered, by method and outcome.\n# TYPE tasklift_requests_total counter\n");
        let mut reqs: Vec<((&str, &str), u64)> = self
            .requests
            .iter()
            .map(|e| (*e.key(), e.value().load(Ordering::Relaxed)))
            .collect();
        reqs.sort();
        for ((m, o), n) in reqs {
            let _ = writeln!(
                out,
                "tasklift_requests_total{{method=\"{m}\",outcome=\"{o}\"}} {n}"
            );
        }
        out.push_str("# HELP tasklift_limit_hits_total Requests or tasks refused or held back by a limit, by its setting.\n# TYPE tasklift_limit_hits_total counter\n");
        for limit in [
            "max_concurrent_calls",
            "max_active_tasks_per_principal",
            "max_result_bytes",
            "poll_rate_limit",
            "max_body_bytes",
            "header_read_timeout",
            "min_free_bytes",
        ] {
            let n = self
                .limit_hits
                .get(limit)
                .map_or(0, |c| c.load(Ordering::Relaxed));
            let _ = writeln!(out, "tasklift_limit_hits_total{{limit=\"{limit}\"}} {n}");
        }
        let mut ups: Vec<(String, Arc<UpstreamFigures>)> = self
            .upstreams
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        for (name, _, _) in &snap.upstreams {
            if !ups.iter().any(|(n, _)| n == name) {
                ups.push((name.clone(), Arc::default()));
            }
        }
        ups.sort_by(|a, b| a.0.cmp(&b.0));
        out.push_str("# HELP tasklift_upstream_calls_in_flight Upstream calls running now.\n# TYPE tasklift_upstream_calls_in_flight gauge\n");
        for (name, f) in &ups {
            let _ = writeln!(
                out,
                "tasklift_upstream_calls_in_flight{{upstream=\"{}\"}} {}",
                escape(name),
                f.in_flight.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP tasklift_upstream_call_duration_seconds How long upstream calls ran (tools/call and relayed requests).\n# TYPE tasklift_upstream_call_duration_seconds histogram\n");
        for (name, f) in &ups {
            let h = f.duration.lock().expect("histogram");
            let name = escape(name);
            let mut cumulative = 0;
            for (i, b) in BUCKETS.iter().enumerate() {
                cumulative += h.counts[i];
                let _ = writeln!(
                    out,
                    "tasklift_upstream_call_duration_seconds_bucket{{upstream=\"{name}\",le=\"{b}\"}} {cumulative}"
                );
            }
            cumulative += h.counts[BUCKETS.len()];
            let _ = writeln!(
                out,
                "tasklift_upstream_call_duration_seconds_bucket{{upstream=\"{name}\",le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "tasklift_upstream_call_duration_seconds_sum{{upstream=\"{name}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "tasklift_upstream_call_duration_seconds_count{{upstream=\"{name}\"}} {}",
                h.count
            );
        }
        out.push_str("# HELP tasklift_upstream_ready Whether the upstream can take calls (1) or not (0).\n# TYPE tasklift_upstream_ready gauge\n");
        for (name, ready, _) in &snap.upstreams {
            let _ = writeln!(
                out,
                "tasklift_upstream_ready{{upstream=\"{}\"}} {}",
                escape(name),
                u8::from(*ready)
            );
        }
        out.push_str("# HELP tasklift_stdio_restarts_total Times a stdio upstream's child process was restarted.\n# TYPE tasklift_stdio_restarts_total counter\n");
        for (name, _, restarts) in &snap.upstreams {
            if let Some(r) = restarts {
                let _ = writeln!(
                    out,
                    "tasklift_stdio_restarts_total{{upstream=\"{}\"}} {r}",
                    escape(name)
                );
            }
        }
        let _ = write!(
            out,
            "# HELP tasklift_store_disk_bytes Bytes the task store uses on disk.\n# TYPE tasklift_store_disk_bytes gauge\ntasklift_store_disk_bytes {}\n",
            snap.store_disk_bytes
        );
        if let Some(free) = snap.store_free_bytes {
            let _ = write!(
                out,
                "# HELP tasklift_store_free_bytes Bytes free on the filesystem of the data directory.\n# TYPE tasklift_store_free_bytes gauge\ntasklift_store_free_bytes {free}\n"
            );
        }
        if let Some(low) = snap.store_low_space {
            let _ = write!(
                out,
                "# HELP tasklift_store_low_space 1 while free space is below store.min_free_bytes or the database refuses writes (no new tasks are created).\n# TYPE tasklift_store_low_space gauge\ntasklift_store_low_space {}\n",
                u8::from(low)
            );
        }
        let _ = write!(
            out,
            "# HELP tasklift_legacy_sessions Open legacy client sessions.\n# TYPE tasklift_legacy_sessions gauge\ntasklift_legacy_sessions {}\n",
            snap.legacy_sessions
        );
        out
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.task_created();
        m.task_finished(Finished::Completed);
        m.request("tools/call", "task");
        m.request("made/up", "error");
        {
            let _a = m.call_started("reports");
            assert_eq!(m.in_flight("reports"), 1);
        }
        assert_eq!(m.in_flight("reports"), 0);
        let mut snap = Snapshot::default();
        snap.tasks_by_status.insert("working", 2);
        snap.upstreams.push(("reports".into(), true, None));
        let text = m.render(&snap);
        for line in [
            "tasklift_tasks_created_total 1",
            "tasklift_tasks_finished_total{status=\"completed\"} 1",
            "tasklift_tasks{status=\"working\"} 2",
            "tasklift_requests_total{method=\"tools/call\",outcome=\"task\"} 1",
            "tasklift_requests_total{method=\"other\",outcome=\"error\"} 1",
            "tasklift_upstream_calls_in_flight{upstream=\"reports\"} 0",
            "tasklift_upstream_call_duration_seconds_bucket{upstream=\"reports\",le=\"+Inf\"} 1",
            "tasklift_upstream_call_duration_seconds_count{upstream=\"reports\"} 1",
            "tasklift_upstream_ready{upstream=\"reports\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
