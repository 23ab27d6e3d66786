//! The figures `/metrics` reads at scrape time from the rest of tasklift
//! ([`Snapshot`]: tasks in the store, its disk, legacy sessions, each upstream's
//! readiness and restarts, each webhook destination's deliveries and outbox),
//! encoded by a `prometheus_client` collector.

use std::collections::BTreeMap;
use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

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
    /// Per webhook destination (none unless `[[webhooks]]` are configured).
    pub webhooks: Vec<WebhookFigures>,
}

/// One webhook destination's figures at scrape time.
#[derive(Debug, Default, Clone)]
pub struct WebhookFigures {
    /// The destination's name.
    pub destination: String,
    /// Since start, by outcome: attempts `delivered`, `refused`, `error`,
    /// `timeout`; events `given_up`, and `dropped` past `max_pending`.
    pub outcomes: Vec<(&'static str, u64)>,
    /// Events waiting in the outbox.
    pub pending: u64,
    /// Age of the oldest of them, in seconds (0 when none wait).
    pub oldest_age_seconds: u64,
}

/// The statuses `tasklift_tasks` shows, each always (0 when none).
const STATUSES: [&str; 5] = [
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];

/// One scrape's [`Snapshot`], as a collector of a registry made for that scrape.
/// Help texts here are written whole: a collector's are not completed by the
/// registry.
#[derive(Debug)]
pub(super) struct Scraped(pub Snapshot);

impl Collector for Scraped {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        labelled(
            &mut enc,
            (
                "tasklift_tasks",
                "Tasks in the store by current status.",
                MetricType::Gauge,
            ),
            "status",
            STATUSES.iter().map(|status| {
                let n = s.tasks_by_status.get(status).copied().unwrap_or(0);
                (*status, ConstGauge::new(n))
            }),
        )?;
        labelled(
            &mut enc,
            (
                "tasklift_upstream_ready",
                "Whether the upstream can take calls (1) or not (0).",
                MetricType::Gauge,
            ),
            "upstream",
            s.upstreams
                .iter()
                .map(|(name, ready, _)| (name.as_str(), ConstGauge::new(u64::from(*ready)))),
        )?;
        labelled(
            &mut enc,
            (
                // Exposed as tasklift_stdio_restarts_total.
                "tasklift_stdio_restarts",
                "Times a stdio upstream's child process was restarted.",
                MetricType::Counter,
            ),
            "upstream",
            s.upstreams
                .iter()
                .filter_map(|(name, _, r)| Some((name.as_str(), ConstCounter::new((*r)?)))),
        )?;
        gauge(
            &mut enc,
            "tasklift_store_disk_bytes",
            "Bytes the task store uses on disk.",
            s.store_disk_bytes,
        )?;
        if let Some(free) = s.store_free_bytes {
            gauge(
                &mut enc,
                "tasklift_store_free_bytes",
                "Bytes free on the filesystem of the data directory.",
                free,
            )?;
        }
        if let Some(low) = s.store_low_space {
            gauge(
                &mut enc,
                "tasklift_store_low_space",
                "1 while free space is below store.min_free_bytes or the database refuses writes (no new tasks are created).",
                u64::from(low),
            )?;
        }
        gauge(
            &mut enc,
            "tasklift_legacy_sessions",
            "Open legacy client sessions.",
            s.legacy_sessions,
        )?;
        webhooks(&mut enc, &s.webhooks)
    }
}

/// The webhook families, each declared even without destinations.
fn webhooks(enc: &mut DescriptorEncoder, hooks: &[WebhookFigures]) -> fmt::Result {
    let mut family = enc.encode_descriptor(
        // Exposed as tasklift_webhook_deliveries_total.
        "tasklift_webhook_deliveries",
        "Webhook attempts by destination and outcome (delivered, refused, error, timeout), and events given up at max_age or dropped past max_pending.",
        None,
        MetricType::Counter,
    )?;
    for h in hooks {
        for (outcome, n) in &h.outcomes {
            let labels = [
                ("destination", h.destination.as_str()),
                ("outcome", outcome),
            ];
            ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
        }
    }
    labelled(
        enc,
        (
            "tasklift_webhook_outbox_events",
            "Webhook events waiting in the outbox, by destination.",
            MetricType::Gauge,
        ),
        "destination",
        hooks
            .iter()
            .map(|h| (h.destination.as_str(), ConstGauge::new(h.pending))),
    )?;
    labelled(
        enc,
        (
            "tasklift_webhook_outbox_oldest_age_seconds",
            "Age of the oldest webhook event waiting in the outbox, by destination (0 when none wait).",
            MetricType::Gauge,
        ),
        "destination",
        hooks
            .iter()
            .map(|h| (h.destination.as_str(), ConstGauge::new(h.oldest_age_seconds))),
    )
}

/// An unlabelled gauge.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A family with one label: its HELP and TYPE lines, then a series per value,
/// even when there are none.
fn labelled<'a, M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    label: &'static str,
    series: impl Iterator<Item = (&'a str, M)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, kind)?;
    for (value, metric) in series {
        metric.encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}
