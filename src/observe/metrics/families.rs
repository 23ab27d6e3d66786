//! The families tasklift counts as it works, registered once in a `prometheus_client`
//! [`Registry`] under the names, label sets and help texts `/metrics` has always
//! shown, and the handles the hot path keeps to them.
//!
//! Two conventions of the crate shape the registrations: a counter is registered
//! without its `_total` suffix, which the encoder adds (`tasklift_requests` is
//! exposed as `tasklift_requests_total`), and a help text without its full stop,
//! which the registry adds.

use std::sync::OnceLock;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::striped::{StripedCounter, StripedGauge, StripedHistogram};

/// Upper bounds of the upstream call duration buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Methods counted under their own name; anything else is `other`, so a client
/// cannot grow the label set without bound.
const KNOWN_METHODS: [&str; 20] = [
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

/// The outcomes the front doors count (see `Metrics::request`), each with a
/// counter resolved once per method.
const OUTCOMES: [&str; 7] = [
    "ok",
    "error",
    "task",
    "input_required",
    "stream",
    "accepted",
    "rejected",
];

/// The settings `tasklift_limit_hits_total` shows, each from the start (at 0).
/// Other refusals a limit check reports (`store_full`, `store_unreachable`) are
/// not settings, and are not shown.
pub(super) const LIMITS: [&str; 7] = [
    "max_concurrent_calls",
    "max_active_tasks_per_principal",
    "max_result_bytes",
    "poll_rate_limit",
    "max_body_bytes",
    "header_read_timeout",
    "min_free_bytes",
];

/// A label set whose names and values are known at compile time.
type Labels<const N: usize> = [(&'static str, &'static str); N];

/// The `upstream` label.
type UpstreamLabel = [(&'static str, String); 1];

/// One slot per (method or `other`, known outcome).
const REQUEST_SLOTS: usize = (KNOWN_METHODS.len() + 1) * OUTCOMES.len();

/// `tasklift_requests_total`: a series appears with its first request, and every
/// later request of that method and outcome counts on a handle resolved then (no
/// lock, no hashing, no allocation), on its worker's stripe.
pub(super) struct Requests {
    family: Family<Labels<2>, StripedCounter>,
    resolved: [OnceLock<StripedCounter>; REQUEST_SLOTS],
}

impl Requests {
    fn register(r: &mut Registry) -> Self {
        Self {
            family: declared(
                r,
                "tasklift_requests",
                "Requests answered, by method and outcome",
                Family::default(),
            ),
            resolved: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// Count one request (`method` is any string a client sent).
    pub(super) fn count(&self, method: &str, outcome: &'static str) {
        let m = KNOWN_METHODS.iter().position(|k| *k == method);
        let name = m.map_or("other", |i| KNOWN_METHODS[i]);
        let Some(o) = OUTCOMES.iter().position(|k| *k == outcome) else {
            // An outcome no front door gives today: looked up each time.
            self.family
                .get_or_create(&[("method", name), ("outcome", outcome)])
                .inc();
            return;
        };
        let slot = m.unwrap_or(KNOWN_METHODS.len()) * OUTCOMES.len() + o;
        self.resolved[slot]
            .get_or_init(|| {
                self.family
                    .get_or_create_owned(&[("method", name), ("outcome", OUTCOMES[o])])
            })
            .inc();
    }
}

/// One upstream's series: handles into the families, shared with the registry,
/// written on every call (so striped by worker).
pub(super) struct UpstreamFigures {
    /// `tasklift_upstream_calls_in_flight`.
    pub in_flight: StripedGauge,
    /// `tasklift_upstream_call_duration_seconds`.
    pub duration: StripedHistogram,
}

/// The two families of each upstream's calls.
pub(super) struct Upstreams {
    in_flight: Family<UpstreamLabel, StripedGauge>,
    duration: Family<UpstreamLabel, StripedHistogram, fn() -> StripedHistogram>,
}

impl Upstreams {
    fn register(r: &mut Registry) -> Self {
        Self {
            in_flight: declared(
                r,
                "tasklift_upstream_calls_in_flight",
                "Upstream calls running now",
                Family::default(),
            ),
            duration: declared(
                r,
                "tasklift_upstream_call_duration_seconds",
                "How long upstream calls ran (tools/call and relayed requests)",
                Family::new_with_constructor(
                    (|| StripedHistogram::new(&BUCKETS)) as fn() -> StripedHistogram,
                ),
            ),
        }
    }

    /// The series of `upstream`, created (at 0) if it has none yet.
    pub(super) fn figures(&self, upstream: &str) -> UpstreamFigures {
        let labels = [("upstream", upstream.to_string())];
        UpstreamFigures {
            in_flight: self.in_flight.get_or_create_owned(&labels),
            duration: self.duration.get_or_create_owned(&labels),
        }
    }
}

/// Every family tasklift counts, and the registry that exposes them.
pub(super) struct Families {
    pub registry: Registry,
    pub tasks_created: Counter,
    /// By `Finished`: completed, failed, cancelled.
    pub tasks_finished: [Counter; 3],
    pub tasks_expired: Counter,
    pub tool_handles: Counter,
    pub detached: Counter,
    /// By `Spans`: exported, dropped, failed.
    pub spans: [Counter; 3],
    /// By `Replay`: joined, stored.
    pub replays: [Counter; 2],
    pub requests: Requests,
    /// By [`LIMITS`].
    pub limit_hits: [Counter; LIMITS.len()],
    pub upstreams: Upstreams,
}

impl Families {
    /// Register every family, in the order `/metrics` has shown them.
    pub(super) fn new() -> Self {
        let mut r = Registry::default();
        let tasks_created = counter(
            &mut r,
            "tasklift_tasks_created",
            "Tasks created (a call that outlived its threshold, or a 2025-11-25 task request)",
        );
        let tasks_finished = counters(
            &mut r,
            "tasklift_tasks_finished",
            "Tasks that reached a terminal status",
            "status",
            ["completed", "failed", "cancelled"],
        );
        let tasks_expired = counter(
            &mut r,
            "tasklift_tasks_expired",
            "Tasks deleted at the end of their TTL",
        );
        let tool_handles = counter(
            &mut r,
            "tasklift_tool_handles",
            "Still-running answers naming tasklift_wait, given to clients without the tasks extension",
        );
        let detached = counter(
            &mut r,
            "tasklift_detached_calls",
            "Synchronous calls that passed their threshold and run on as tasks their callers wait on (on_disconnect = detach)",
        );
        let spans = counters(
            &mut r,
            "tasklift_trace_spans",
            "Spans sent to the OTLP collector (exported), dropped with the export queue full (dropped), or lost to an export that failed (failed)",
            "outcome",
            ["exported", "dropped", "failed"],
        );
        let replays = counters(
            &mut r,
            "tasklift_replays",
            "Retried calls answered from the task of an identical earlier call instead of running the tool again",
            "outcome",
            ["joined", "stored"],
        );
        let requests = Requests::register(&mut r);
        let limit_hits = counters(
            &mut r,
            "tasklift_limit_hits",
            "Requests or tasks refused or held back by a limit, by its setting",
            "limit",
            LIMITS,
        );
        let upstreams = Upstreams::register(&mut r);
        Self {
            registry: r,
            tasks_created,
            tasks_finished,
            tasks_expired,
            tool_handles,
            detached,
            spans,
            replays,
            requests,
            limit_hits,
            upstreams,
        }
    }
}

/// An unlabelled counter.
fn counter(r: &mut Registry, name: &str, help: &str) -> Counter {
    let c = Counter::default();
    r.register(name, help, c.clone());
    c
}

/// A counter per value of `label`, every one shown from the start (at 0), in
/// the order of `values`.
fn counters<const N: usize>(
    r: &mut Registry,
    name: &str,
    help: &str,
    label: &'static str,
    values: [&'static str; N],
) -> [Counter; N] {
    let counters: [Counter; N] = std::array::from_fn(|_| Counter::default());
    r.register(
        name,
        help,
        ByLabel::<N> {
            label,
            series: std::array::from_fn(|i| (values[i], counters[i].clone())),
        },
    );
    counters
}

/// `family`, registered so that its HELP and TYPE lines are shown before its
/// first series too (the registry leaves out an empty family; `/metrics` never
/// did, and the dashboard check reads families from their TYPE lines).
fn declared<F>(r: &mut Registry, name: &str, help: &str, family: F) -> F
where
    F: EncodeMetric + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    r.register(name, help, Declared(family.clone()));
    family
}

/// A metric that is never empty to the registry (see [`declared`]).
#[derive(Debug)]
struct Declared<F>(F);

impl<F: EncodeMetric> EncodeMetric for Declared<F> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// Counters with one label whose values are fixed (see [`counters`]): no map to
/// look them up in, and their series in a stable order.
#[derive(Debug)]
struct ByLabel<const N: usize> {
    label: &'static str,
    series: [(&'static str, Counter); N],
}

impl<const N: usize> EncodeMetric for ByLabel<N> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (value, counter) in &self.series {
            counter.encode(encoder.encode_family(&[(self.label, *value)])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}
