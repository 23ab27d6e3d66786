//! Prometheus metrics, kept and exposed with `prometheus-client` (the maintained
//! client) in the text exposition format, version 0.0.4: the crate does the format,
//! the escaping and the types.
//!
//! One [`Metrics`] per running tasklift (tests run several in one process), each with
//! a registry of its own ([`families`]); the figures read at scrape time go through
//! a collector ([`scrape`]). Names follow Prometheus conventions: `tasklift_`
//! prefix, `_total` counters, base units (`_seconds`, `_bytes`).

mod families;
mod scrape;
mod striped;

use std::sync::Arc;
use std::time::Instant;

use crate::hashing::{FastDashMap, FastMap};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;

use families::{Families, UpstreamFigures, LIMITS};
pub use scrape::{Snapshot, WebhookFigures};

/// Where `/metrics` reads the webhook destinations' figures at scrape time (the
/// webhook worker's counts and the store's outbox), when webhooks are configured.
pub trait WebhookSource: Send + Sync {
    /// Each destination's figures now.
    fn figures(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<WebhookFigures>> + Send + '_>>;
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

/// Everything tasklift counts.
pub struct Metrics {
    families: Families,
    /// The configured upstreams' series by name ([`Metrics::for_upstreams`]),
    /// made at start: every call finds its upstream's without a lock (a read
    /// lock is a write to the lock's cache line, from both workers) and without
    /// allocating its label (the families are keyed by owned label sets).
    configured: FastMap<String, Arc<UpstreamFigures>>,
    /// Any other upstream's series by name, made with its first call.
    upstreams: FastDashMap<String, Arc<UpstreamFigures>>,
    /// The webhook destinations' figures, read at scrape time.
    webhooks: std::sync::OnceLock<Arc<dyn WebhookSource>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            families: Families::new(),
            configured: FastMap::default(),
            upstreams: FastDashMap::default(),
            webhooks: std::sync::OnceLock::new(),
        }
    }
}

/// An upstream call in flight: counted until dropped, and timed.
pub struct CallMeter {
    figures: Arc<UpstreamFigures>,
    started: Instant,
}

impl Drop for CallMeter {
    fn drop(&mut self) {
        self.figures.in_flight.dec();
        self.figures.duration.observe(self.started.elapsed());
    }
}

impl Metrics {
    /// Metrics for a tasklift serving the upstreams `names`, whose series are
    /// there (at 0) from the start.
    pub fn for_upstreams<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut m = Self::default();
        m.configured = names
            .into_iter()
            .map(|n| (n.to_string(), Arc::new(m.families.upstreams.figures(n))))
            .collect();
        m
    }

    /// A task was created.
    pub fn task_created(&self) {
        self.families.tasks_created.inc();
    }

    /// A task reached a terminal status.
    pub fn task_finished(&self, how: Finished) {
        let i = match how {
            Finished::Completed => 0,
            Finished::Failed => 1,
            Finished::Cancelled => 2,
        };
        self.families.tasks_finished[i].inc();
    }

    /// A retried call was answered from the task of an identical earlier one.
    pub fn replayed(&self, how: Replay) {
        let i = match how {
            Replay::Joined => 0,
            Replay::Stored => 1,
        };
        self.families.replays[i].inc();
    }

    /// Replays so far: (joined a running task, answered from a stored result).
    pub fn replays(&self) -> (u64, u64) {
        let [joined, stored] = &self.families.replays;
        (joined.get(), stored.get())
    }

    /// A client without the tasks extension got a still-running answer naming
    /// `tasklift_wait` (a tool-level handle).
    pub fn tool_handle(&self) {
        self.families.tool_handles.inc();
    }

    /// A synchronous call passed its threshold and runs on as a task its caller
    /// waits on (`on_disconnect = "detach"`).
    pub fn detached(&self) {
        self.families.detached.inc();
    }

    /// `n` spans went to the OTLP collector, or did not (`tasklift_trace_spans_total`).
    pub fn spans(&self, outcome: Spans, n: u64) {
        let i = match outcome {
            Spans::Exported => 0,
            Spans::Dropped => 1,
            Spans::Failed => 2,
        };
        self.families.spans[i].inc_by(n);
    }

    /// Tasks deleted by the sweeper at the end of their TTL.
    pub fn tasks_expired(&self, n: u64) {
        self.families.tasks_expired.inc_by(n);
    }

    /// A request was answered: `outcome` is `ok`, `error`, `task`, `input_required`,
    /// `stream`, `accepted` or `rejected`.
    pub fn request(&self, method: &str, outcome: &'static str) {
        self.families.requests.count(method, outcome);
    }

    /// A limit refused something (`limit` is its configuration key; refusals that
    /// are not a setting's are not shown).
    pub fn limit_hit(&self, limit: &'static str) {
        if let Some(i) = LIMITS.iter().position(|l| *l == limit) {
            self.families.limit_hits[i].inc();
        }
    }

    /// Start counting an upstream call.
    pub fn call_started(&self, upstream: &str) -> CallMeter {
        let figures = self.upstream(upstream);
        figures.in_flight.inc();
        CallMeter {
            figures,
            started: Instant::now(),
        }
    }

    /// Read the webhook destinations' figures from `source` at each scrape.
    pub fn watch_webhooks(&self, source: Arc<dyn WebhookSource>) {
        let _ = self.webhooks.set(source);
    }

    /// The webhook destinations' figures now (none without webhooks).
    pub async fn webhook_figures(&self) -> Vec<WebhookFigures> {
        match self.webhooks.get() {
            Some(s) => s.figures().await,
            None => Vec::new(),
        }
    }

    /// Upstream calls in flight now.
    pub fn in_flight(&self, upstream: &str) -> i64 {
        self.known(upstream).map_or(0, |f| f.in_flight.get())
    }

    /// The text exposition: what tasklift counted, then `snap`. Every upstream
    /// `snap` names has its call series, at 0 before its first call.
    pub fn render(&self, snap: &Snapshot) -> String {
        for (name, _, _) in &snap.upstreams {
            self.upstream(name);
        }
        let mut scraped = Registry::default();
        scraped.register_collector(Box::new(scrape::Scraped(snap.clone())));
        let mut out = String::with_capacity(8192);
        // Writing to a String cannot fail, nor can the encoders on their own.
        let _ = prometheus_text::encode(&mut out, &self.families.registry);
        let _ = prometheus_text::encode(&mut out, &scraped);
        out
    }

    /// The series of `upstream` if it has any: a configured upstream's found
    /// without a lock, another's under a read lock; neither allocates.
    fn known(&self, upstream: &str) -> Option<Arc<UpstreamFigures>> {
        match self.configured.get(upstream) {
            Some(f) => Some(f.clone()),
            None => self.upstreams.get(upstream).map(|f| f.clone()),
        }
    }

    /// The series of `upstream`, made (at 0) if it has none yet.
    fn upstream(&self, upstream: &str) -> Arc<UpstreamFigures> {
        if let Some(f) = self.known(upstream) {
            return f;
        }
        self.upstreams
            .entry(upstream.to_string())
            .or_insert_with(|| Arc::new(self.families.upstreams.figures(upstream)))
            .clone()
    }
}

#[cfg(test)]
mod tests;
