//! The figures: medians, minima and maxima over repetitions, each label's summary,
//! the pooled creation scenario, and the verdicts (ratios and differences against
//! the targets of the benchmark issue).

use crate::loadgen::quantile;
use crate::plan;
use crate::RunArgs;

use super::{Creation, Report, Sample};

/// Median, min and max of some values.
#[derive(Clone, Copy, Default)]
pub(super) struct Spread {
    pub(super) med: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

fn spread(mut v: Vec<f64>) -> Spread {
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
    }
}

/// A ratio or difference with its target.
pub(super) struct Verdict {
    pub(super) what: String,
    pub(super) value: String,
    pub(super) spread: String,
    pub(super) target: String,
    pub(super) pass: Option<bool>,
}

pub(super) fn pass_text(p: Option<bool>) -> &'static str {
    match p {
        Some(true) => "PASS",
        Some(false) => "MISS",
        None => "n/a",
    }
}

fn ms(us: f64) -> String {
    format!("{:.3} ms", us / 1000.0)
}

impl Report {
    fn per_rep(&self, a: &str, b: &str, f: impl Fn(&Sample, &Sample) -> f64) -> Option<Spread> {
        let (x, y) = (self.samples.get(a)?, self.samples.get(b)?);
        let v: Vec<f64> = x.iter().zip(y).map(|(x, y)| f(x, y)).collect();
        (!v.is_empty()).then(|| spread(v))
    }

    pub(super) fn verdicts(&self, args: &RunArgs) -> Vec<Verdict> {
        let mut v = Vec::new();
        let ratio = |s: Spread| {
            (
                format!("{:.2}×", s.med),
                format!("{:.2}–{:.2}", s.min, s.max),
            )
        };
        if let Some(s) = self.per_rep("tasklift", "nginx", |t, n| t.rps / n.rps) {
            let (value, spread) = ratio(s);
            v.push(Verdict {
                what: "pass-through throughput, tasklift ÷ nginx".into(),
                value,
                spread,
                target: "≥ 0.80×".into(),
                pass: Some(s.med >= 0.8),
            });
        }
        if let Some(s) = self.per_rep("tasklift", "direct", |t, d| t.rps / d.rps) {
            let (value, spread) = ratio(s);
            v.push(Verdict {
                what: "pass-through throughput, tasklift ÷ direct".into(),
                value,
                spread,
                target: "(reference)".into(),
                pass: None,
            });
        }
        if let Some(s) = self.per_rep(plan::STDIO, "tasklift", |s, h| s.rps / h.rps) {
            let (value, spread) = ratio(s);
            v.push(Verdict {
                what: "pass-through, stdio upstream ÷ HTTP upstream".into(),
                value,
                spread,
                target: "(reference)".into(),
                pass: None,
            });
        }
        if let Some(s) = self.per_rep("nginx", "direct", |t, d| t.rps / d.rps) {
            let (value, spread) = ratio(s);
            v.push(Verdict {
                what: "pass-through throughput, nginx ÷ direct".into(),
                value,
                spread,
                target: "(reference)".into(),
                pass: None,
            });
        }
        let open_t = format!("tasklift @{:.0}/s", args.rate);
        let open_d = format!("direct @{:.0}/s", args.rate);
        if let Some(s) = self.per_rep(&open_t, &open_d, |t, d| t.pct.p99 as f64 - d.pct.p99 as f64)
        {
            v.push(Verdict {
                what: format!(
                    "added p99, tasklift − direct, open loop {:.0} req/s",
                    args.rate
                ),
                value: ms(s.med),
                spread: format!("{} – {}", ms(s.min), ms(s.max)),
                target: "≤ 1 ms".into(),
                pass: Some(s.med <= 1000.0),
            });
        }
        let open_n = format!("nginx @{:.0}/s", args.rate);
        if let Some(s) = self.per_rep(&open_n, &open_d, |t, d| t.pct.p99 as f64 - d.pct.p99 as f64)
        {
            v.push(Verdict {
                what: format!(
                    "added p99, nginx − direct, open loop {:.0} req/s",
                    args.rate
                ),
                value: ms(s.med),
                spread: format!("{} – {}", ms(s.min), ms(s.max)),
                target: "(reference)".into(),
                pass: None,
            });
        }
        if let Some(s) = self.per_rep("tasklift", "direct", |t, d| {
            t.pct.p99 as f64 - d.pct.p99 as f64
        }) {
            v.push(Verdict {
                what: format!(
                    "added p99, tasklift − direct, closed loop {} connections",
                    args.concurrency
                ),
                value: ms(s.med),
                spread: format!("{} – {}", ms(s.min), ms(s.max)),
                target: "(saturated; reference)".into(),
                pass: None,
            });
        }
        if let Some(s) = self.per_rep("tasks/get", "direct", |g, d| g.rps / d.rps) {
            let (value, spread) = ratio(s);
            v.push(Verdict {
                what: "tasks/get ÷ direct tools/call throughput".into(),
                value,
                spread,
                target: "≥ 0.70×".into(),
                pass: Some(s.med >= 0.7),
            });
        }
        if let Some(c) = self.creation_all() {
            let p99 = quantile(&c.handle_sorted, 0.99) as f64;
            let over = p99 - plan::CREATION_THRESHOLD.as_micros() as f64;
            let per: Vec<f64> = self
                .creation
                .iter()
                .map(|c| {
                    let mut h = c.handle_us.clone();
                    h.sort_unstable();
                    quantile(&h, 0.99) as f64 - plan::CREATION_THRESHOLD.as_micros() as f64
                })
                .collect();
            let s = spread(per);
            v.push(Verdict {
                what: format!(
                    "time to handle p99 − threshold ({} ms)",
                    plan::CREATION_THRESHOLD.as_millis()
                ),
                value: ms(over),
                spread: format!("{} – {} (per rep)", ms(s.min), ms(s.max)),
                target: "≤ 2 ms".into(),
                pass: Some(over <= 2000.0 && c.errors == 0),
            });
        }
        if let Some(s) = self.per_rep(plan::PG_GET, "tasks/get", |p, g| p.rps / g.rps) {
            let (value, spread) = ratio(s);
            v.push(Verdict {
                what: "tasks/get throughput, PostgreSQL store ÷ sled".into(),
                value,
                spread,
                target: "(reference)".into(),
                pass: None,
            });
        }
        if let Some(c) = creation_of(&self.creation_pg) {
            let p99 = quantile(&c.handle_sorted, 0.99) as f64;
            let over = p99 - plan::CREATION_THRESHOLD.as_micros() as f64;
            v.push(Verdict {
                what: "time to handle p99 − threshold, PostgreSQL store".into(),
                value: ms(over),
                spread: format!("{} errors", c.errors),
                target: "(reference)".into(),
                pass: None,
            });
        }
        if let Some(m) = &self.memory {
            v.push(Verdict {
                what: "RSS per running task".into(),
                value: format!("{:.2} KiB", m.per_task_kib()),
                spread: format!("PSS {:.2} KiB", m.per_task_pss_kib()),
                target: "≤ 8 KiB".into(),
                pass: Some(m.per_task_kib() <= 8.0),
            });
            v.push(Verdict {
                what: format!("{} concurrent slow calls complete", m.tasks),
                value: format!("{} completed, {} errors", m.completed, m.errors),
                spread: format!("drain {:.2} s", m.drain.as_secs_f64()),
                target: "0 errors".into(),
                pass: Some(m.errors == 0 && m.completed == m.tasks),
            });
        }
        v
    }

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
