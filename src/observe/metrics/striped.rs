//! The metrics every proxied call writes, striped by front-door worker: each
//! worker adds to a stripe of its own, on a cache line of its own, and a scrape
//! sums the stripes.
//!
//! `prometheus-client`'s own counter and gauge are one atomic each, and its
//! histogram is a mutex around its buckets: on every call both workers wrote
//! the same cache lines (the request counter, the upstream's in-flight gauge,
//! its duration histogram's lock and buckets), so the lines went back and forth
//! between the cores. A thread that is not a worker counts on worker 0's stripe;
//! the stripes are atomics, so any thread may write any stripe.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Stripes per metric; workers past this many share them (`worker % STRIPES`).
const STRIPES: usize = 8;

/// The stripe the calling thread writes.
fn stripe() -> usize {
    crate::workers::current() % STRIPES
}

/// A value alone on its cache line (two lines: the adjacent-line prefetcher
/// pairs them).
#[repr(align(128))]
#[derive(Default)]
struct Line<T>(T);

/// A sum kept as one stripe per worker: what the counter and the gauge both are.
#[derive(Clone, Default)]
struct Sums(Arc<[Line<AtomicI64>; STRIPES]>);

impl Sums {
    fn add(&self, n: i64) {
        self.0[stripe()].0.fetch_add(n, Ordering::Relaxed);
    }

    fn sum(&self) -> i64 {
        self.0.iter().map(|l| l.0.load(Ordering::Relaxed)).sum()
    }
}

impl std::fmt::Debug for Sums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.sum().fmt(f)
    }
}

/// A counter (only goes up).
#[derive(Clone, Debug, Default)]
pub(crate) struct StripedCounter(Sums);

impl StripedCounter {
    pub(crate) fn inc(&self) {
        self.0.add(1);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.sum().max(0) as u64
    }
}

impl TypedMetric for StripedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for StripedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge: a stripe may go below zero (a call counted in on one worker and out
/// on another); the sum is the gauge.
#[derive(Clone, Debug, Default)]
pub(crate) struct StripedGauge(Sums);

impl StripedGauge {
    pub(crate) fn inc(&self) {
        self.0.add(1);
    }

    pub(crate) fn dec(&self) {
        self.0.add(-1);
    }

    pub(crate) fn get(&self) -> i64 {
        self.0.sum()
    }
}

impl TypedMetric for StripedGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for StripedGauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Room for a histogram's buckets in each stripe: its bounds and `+Inf`.
const BUCKET_SLOTS: usize = 16;

/// A histogram of durations over fixed bucket bounds (seconds), then `+Inf`;
/// the sum is kept in nanoseconds and shown in seconds.
#[derive(Clone)]
pub(crate) struct StripedHistogram(Arc<Histogram>);

struct Histogram {
    /// The buckets' upper bounds in seconds, as shown, and in nanoseconds, as
    /// compared.
    bounds: Vec<(f64, u64)>,
    stripes: [Line<Stripe>; STRIPES],
}

/// One stripe of a histogram: a count per bucket (after the bounds', `+Inf`),
/// and the sum. The counts are held in the stripe itself, so that they share
/// its lines and no other stripe's.
#[derive(Default)]
struct Stripe {
    buckets: [AtomicU64; BUCKET_SLOTS],
    sum_ns: AtomicU64,
}

impl StripedHistogram {
    /// A histogram over `bounds` (seconds, increasing), then `+Inf`.
    pub(crate) fn new<const N: usize>(bounds: &[f64; N]) -> Self {
        const { assert!(N < BUCKET_SLOTS, "more bounds than a stripe holds") };
        let bounds: Vec<(f64, u64)> = bounds
            .iter()
            .map(|&s| (s, Duration::from_secs_f64(s).as_nanos() as u64))
            .collect();
        let stripes = std::array::from_fn(|_| Line(Stripe::default()));
        Self(Arc::new(Histogram { bounds, stripes }))
    }

    /// Count one duration, in the first bucket whose bound is not below it.
    pub(crate) fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let h = &self.0;
        let bucket = h
            .bounds
            .iter()
            .position(|&(_, b)| ns <= b)
            .unwrap_or(h.bounds.len());
        let s = &h.stripes[stripe()].0;
        s.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        s.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The sum (seconds), the count, and each bucket's own count with its bound.
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let h = &self.0;
        let mut buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .map(|&(s, _)| (s, 0))
            .chain(std::iter::once((f64::INFINITY, 0)))
            .collect();
        let mut sum_ns = 0u64;
        for Line(s) in &h.stripes {
            sum_ns = sum_ns.wrapping_add(s.sum_ns.load(Ordering::Relaxed));
            for (b, n) in buckets.iter_mut().zip(&s.buckets) {
                b.1 += n.load(Ordering::Relaxed);
            }
        }
        let count = buckets.iter().map(|b| b.1).sum();
        (sum_ns as f64 / 1e9, count, buckets)
    }
}

impl std::fmt::Debug for StripedHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sum, count, _) = self.snapshot();
        f.debug_struct("StripedHistogram")
            .field("sum", &sum)
            .field("count", &count)
            .finish()
    }
}

impl TypedMetric for StripedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for StripedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Run `f` on `n` threads, each named as worker `i` the way the front door
    /// names its threads, and wait for them.
    fn on_workers(n: usize, f: impl Fn() + Send + Sync + 'static) {
        let f = Arc::new(f);
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let f = f.clone();
                std::thread::spawn(move || {
                    crate::workers::name_this_thread_for_tests(i);
                    f()
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
    }

    #[test]
    fn stripes_written_from_every_worker_sum_to_the_whole() {
        let c = StripedCounter::default();
        let g = StripedGauge::default();
        let h = StripedHistogram::new(&[0.005, 0.5]);
        let (c2, g2, h2) = (c.clone(), g.clone(), h.clone());
        // Ten workers: more than there are stripes, so two share one.
        on_workers(10, move || {
            for i in 0..1000u64 {
                c2.inc();
                g2.inc();
                h2.observe(Duration::from_millis(i % 3)); // 0, 1 and 2 ms
            }
            g2.dec();
        });
        // A gauge counted in on one worker and out on another.
        let g3 = g.clone();
        on_workers(1, move || g3.dec());
        assert_eq!(c.get(), 10_000);
        assert_eq!(g.get(), 10_000 - 10 - 1);
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 10_000);
        assert_eq!(buckets, vec![(0.005, 10_000), (0.5, 0), (f64::INFINITY, 0)]);
        // 334 × 0 ms + 333 × 1 ms + 333 × 2 ms = 0.999 s per worker.
        assert!((sum - 9.99).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn each_stripe_keeps_its_counts_on_lines_of_its_own() {
        // The counts live inside the stripe (no pointer to memory elsewhere),
        // and a stripe fills whole 128-byte lines, so no two stripes share one.
        assert_eq!(std::mem::align_of::<Line<Stripe>>(), 128);
        assert_eq!(std::mem::size_of::<Line<Stripe>>() % 128, 0);
        assert!(std::mem::size_of::<Stripe>() >= BUCKET_SLOTS * 8 + 8);
        assert_eq!(std::mem::size_of::<Line<AtomicI64>>(), 128);
    }

    #[test]
    fn a_duration_goes_to_the_first_bucket_whose_bound_is_not_below_it() {
        let h = StripedHistogram::new(&[0.005, 0.01, 1.0]);
        for ms in [5, 6, 10, 999, 1000, 1001, 60_000] {
            h.observe(Duration::from_millis(ms));
        }
        let (_, count, buckets) = h.snapshot();
        assert_eq!(count, 7);
        let counts: Vec<u64> = buckets.iter().map(|b| b.1).collect();
        assert_eq!(counts, vec![1, 2, 2, 2]);
    }
}
