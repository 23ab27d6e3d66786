//! The figures: medians, minima and maxima over repetitions, each label's summary,
//! and the pooled creation scenario (`verdicts` weighs them against the targets).

use super::{Creation, Report, Sample};

/// Median, min and max of some values.
#[derive(Clone, Copy, Default)]
pub(super) struct Spread {
    pub(super) med: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

pub(super) fn spread(mut v: Vec<f64>) -> Spread {
    if v.is_empty() {
        return Spread::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Spread {
        med,
        min: v[0],
        max: v[n - 1],
    }
}

/// A label's summary over repetitions.
#[derive(Clone, Default)]
pub(super) struct Summary {
    pub(super) rps: Spread,
    pub(super) p50: f64,
    pub(super) p90: f64,
    pub(super) p99: Spread,
    pub(super) max: f64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) late: u64,
    pub(super) n: usize,
    pub(super) sse: u64,
    pub(super) cpu_client: f64,
    pub(super) cpu_proxy: f64,
    pub(super) cpu_upstream: f64,
    pub(super) cpu_other: f64,
    pub(super) proxy_us: f64,
    pub(super) upstream_us: f64,
    /// Context switches per answer, voluntary + involuntary (medians).
    pub(super) proxy_switches: f64,
    pub(super) upstream_switches: f64,
}

pub(super) fn summarize(s: &[Sample]) -> Summary {
    let med = |f: &dyn Fn(&Sample) -> f64| spread(s.iter().map(f).collect()).med;
    Summary {
        rps: spread(s.iter().map(|x| x.rps).collect()),
        p50: med(&|x| x.pct.p50 as f64),
        p90: med(&|x| x.pct.p90 as f64),
        p99: spread(s.iter().map(|x| x.pct.p99 as f64).collect()),
        max: med(&|x| x.pct.max as f64),
        errors: s.iter().map(|x| x.errors).sum(),
        first_error: s.iter().find_map(|x| x.first_error.clone()),
        late: s.iter().map(|x| x.late).sum(),
        n: s.iter().map(|x| x.n).sum(),
        sse: s.iter().map(|x| x.sse).sum(),
        cpu_client: med(&|x| x.cpu_client),
        cpu_proxy: med(&|x| x.cpu_proxy),
        cpu_upstream: med(&|x| x.cpu_upstream),
        cpu_other: spread(s.iter().map(|x| x.cpu_other).collect()).max,
        proxy_us: med(&|x| x.proxy_us_per_req),
        upstream_us: med(&|x| x.upstream_us_per_req),
        proxy_switches: med(&|x| x.proxy_switches.0 + x.proxy_switches.1),
        upstream_switches: med(&|x| x.upstream_switches.0 + x.upstream_switches.1),
    }
}

impl Report {
    /// Each label's runs summarised, in report order.
    pub(super) fn summaries(&self) -> Vec<(&str, Summary)> {
        self.order
            .iter()
            .filter_map(|l| Some((l.as_str(), summarize(self.samples.get(l)?))))
            .collect()
    }

    pub(super) fn creation_all(&self) -> Option<CreationAll> {
        creation_of(&self.creation)
    }
}

/// The repetitions of a creation scenario pooled.
pub(super) fn creation_of(reps: &[Creation]) -> Option<CreationAll> {
    {
        if reps.is_empty() {
            return None;
        }
        let mut handle_sorted: Vec<u32> = reps.iter().flat_map(|c| c.handle_us.clone()).collect();
        handle_sorted.sort_unstable();
        let mut over_sorted: Vec<u32> = reps
            .iter()
            .flat_map(|c| c.complete_over_us.clone())
            .collect();
        over_sorted.sort_unstable();
        Some(CreationAll {
            handle_sorted,
            over_sorted,
            errors: reps.iter().map(|c| c.errors).sum(),
            first_error: reps.iter().find_map(|c| c.first_error.clone()),
        })
    }
}

pub(super) struct CreationAll {
    pub(super) handle_sorted: Vec<u32>,
    pub(super) over_sorted: Vec<u32>,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
}
