//! The verdicts: ratios and differences against the targets of the performance
//! issue, each PASS or MISS, and reference figures beside them (no target).

use crate::loadgen::quantile;
use crate::plan;
use crate::RunArgs;

use super::figures::{creation_of, spread, Spread};
use super::{Report, Sample};

/// Pass-through throughput, tasklift ÷ nginx, at least (the aim: 1.0×).
const PASS_THROUGH_MIN: f64 = 0.90;
/// The same in front of a 2025-11-25 server, JSON and SSE answers, at least.
const LEGACY_PASS_THROUGH_MIN: f64 = 0.85;
/// tasklift's CPU per call in front of a 2025-11-25 server, over what it is in
/// front of a 2026-07-28 one, at most (µs).
const LEGACY_EXTRA_CPU_MAX_US: f64 = 3.0;
/// Added p99 over direct in the open loop, at most (µs).
const ADDED_P99_MAX_US: f64 = 500.0;
/// tasks/get ÷ direct tools/call throughput, at least.
const TASKS_GET_MIN: f64 = 0.90;
/// Time to handle p99 − threshold, at most (µs).
const HANDLE_OVER_MAX_US: f64 = 2000.0;
/// RSS per running task, at most (KiB), over an HTTP/2 upstream ...
const PER_TASK_MAX_KIB_H2: f64 = 8.0;
/// ... and over HTTP/1.1, where each running call holds a connection ...
const PER_TASK_MAX_KIB_H1: f64 = 16.0;
/// ... with this many tasks running (fewer leave the fixed part in the figure).
const PER_TASK_AT: usize = 10_000;
/// tasklift's idle RSS, at most (KiB: 16 MiB).
const IDLE_RSS_MAX_KIB: u64 = 16 * 1024;
/// The release binary, at most (bytes: 20 MB).
const BINARY_MAX_BYTES: u64 = 20_000_000;

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

/// `n` with thousands separators: 15,644,888.
pub(super) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut s = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            s.push(',');
        }
        s.push(c);
    }
    s
}

/// A ratio's target: a floor (and what to aim for), or none.
#[derive(Clone, Copy)]
enum Goal {
    AtLeast(f64, &'static str),
    Reference,
}

fn ratio(s: Spread) -> (String, String) {
    (
        format!("{:.2}×", s.med),
        format!("{:.2}–{:.2}", s.min, s.max),
    )
}

impl Report {
    fn per_rep(&self, a: &str, b: &str, f: impl Fn(&Sample, &Sample) -> f64) -> Option<Spread> {
        let (x, y) = (self.samples.get(a)?, self.samples.get(b)?);
        let v: Vec<f64> = x.iter().zip(y).map(|(x, y)| f(x, y)).collect();
        (!v.is_empty()).then(|| spread(v))
    }

    /// A ratio of two labels' throughput per repetition `a ÷ b`, against a target
    /// if there is one.
    fn rps_ratio(&self, v: &mut Vec<Verdict>, what: &str, (a, b): (&str, &str), goal: Goal) {
        if let Some(s) = self.per_rep(a, b, |x, y| x.rps / y.rps) {
            let (value, spread) = ratio(s);
            v.push(Verdict {
                what: what.into(),
                value,
                spread,
                target: match goal {
                    Goal::AtLeast(m, "") => format!("≥ {m:.2}×"),
                    Goal::AtLeast(m, aim) => format!("≥ {m:.2}× (aim {aim})"),
                    Goal::Reference => "(reference)".into(),
                },
                pass: match goal {
                    Goal::AtLeast(m, _) => Some(s.med >= m),
                    Goal::Reference => None,
                },
            });
        }
    }

    /// The added p99 of `a` over `b` per repetition, against `max` (µs) if any.
    fn added_p99(&self, v: &mut Vec<Verdict>, what: String, a: &str, b: &str, max: Option<f64>) {
        if let Some(s) = self.per_rep(a, b, |t, d| t.pct.p99 as f64 - d.pct.p99 as f64) {
            v.push(Verdict {
                what,
                value: ms(s.med),
                spread: format!("{} – {}", ms(s.min), ms(s.max)),
                target: match max {
                    Some(m) => format!("≤ {} ms", m / 1000.0),
                    None => "(reference)".into(),
                },
                pass: max.map(|m| s.med <= m),
            });
        }
    }

    pub(super) fn verdicts(&self, args: &RunArgs) -> Vec<Verdict> {
        let mut v = Vec::new();
        let throughput = [
            (
                "pass-through throughput, tasklift ÷ nginx",
                ("tasklift", "nginx"),
                Goal::AtLeast(PASS_THROUGH_MIN, "1.0×"),
            ),
            (
                "pass-through throughput, tasklift ÷ direct",
                ("tasklift", "direct"),
                Goal::Reference,
            ),
            (
                "pass-through, stdio upstream ÷ HTTP upstream",
                (plan::STDIO, "tasklift"),
                Goal::Reference,
            ),
            (
                "pass-through throughput, nginx ÷ direct",
                ("nginx", "direct"),
                Goal::Reference,
            ),
            (
                "pass-through throughput, hyper forwarder ÷ nginx",
                (plan::FORWARDER, "nginx"),
                Goal::Reference,
            ),
            (
                "pass-through throughput, tasklift ÷ hyper forwarder",
                ("tasklift", plan::FORWARDER),
                Goal::Reference,
            ),
        ];
        for (what, pair, goal) in throughput {
            self.rps_ratio(&mut v, what, pair, goal);
        }
        let open = |l: &str| format!("{l} @{:.0}/s", args.rate);
        for (who, max) in [("tasklift", Some(ADDED_P99_MAX_US)), ("nginx", None)] {
            let what = format!(
                "added p99, {who} − direct, open loop {:.0} req/s",
                args.rate
            );
            self.added_p99(&mut v, what, &open(who), &open("direct"), max);
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
        self.rps_ratio(
            &mut v,
            "tasks/get ÷ direct tools/call throughput",
            ("tasks/get", "direct"),
            Goal::AtLeast(TASKS_GET_MIN, ""),
        );
        self.legacy_verdicts(&mut v);
        self.creation_verdicts(&mut v);
        self.memory_verdicts(&mut v);
        self.scale_verdicts(&mut v);
        self.binary_verdict(&mut v);
        v
    }

    /// In front of a 2025-11-25 server: throughput against nginx in front of the
    /// same server, and tasklift's CPU per call against the modern path's.
    fn legacy_verdicts(&self, v: &mut Vec<Verdict>) {
        use plan::{
            LEGACY_DIRECT, LEGACY_NGINX, LEGACY_NGINX_SSE, LEGACY_TL, LEGACY_TL_2025,
            LEGACY_TL_SSE, PEER_MCP_PROXY, PEER_MCP_PROXY_2026, PEER_MCP_PROXY_2026_LEGACY,
        };
        let goal = Goal::AtLeast(LEGACY_PASS_THROUGH_MIN, "");
        for (what, pair, goal) in [
            (
                "legacy upstream, JSON answers: tasklift ÷ nginx",
                (LEGACY_TL, LEGACY_NGINX),
                goal,
            ),
            (
                "legacy upstream, SSE answers: tasklift ÷ nginx",
                (LEGACY_TL_SSE, LEGACY_NGINX_SSE),
                goal,
            ),
            (
                "legacy upstream, 2025 clients: tasklift ÷ nginx",
                (LEGACY_TL_2025, LEGACY_NGINX),
                Goal::Reference,
            ),
            (
                "legacy upstream: tasklift ÷ direct",
                (LEGACY_TL, LEGACY_DIRECT),
                Goal::Reference,
            ),
            // Against what users would pick instead (peers.rs), same clients.
            (
                "legacy upstream, 2025 clients: tasklift ÷ mcp-proxy",
                (LEGACY_TL_2025, PEER_MCP_PROXY),
                Goal::Reference,
            ),
            (
                "legacy upstream: tasklift ÷ mcp-proxy (protocol-2026-07-28 build)",
                (LEGACY_TL, PEER_MCP_PROXY_2026),
                Goal::Reference,
            ),
            (
                "legacy upstream, 2025 clients: tasklift ÷ mcp-proxy (protocol-2026-07-28 build)",
                (LEGACY_TL_2025, PEER_MCP_PROXY_2026_LEGACY),
                Goal::Reference,
            ),
        ] {
            self.rps_ratio(v, what, pair, goal);
        }
        for (answers, label) in [
            ("JSON answers", LEGACY_TL),
            ("SSE answers", LEGACY_TL_SSE),
            ("JSON answers, 2025 clients", LEGACY_TL_2025),
        ] {
            let Some(s) = self.per_rep(label, "tasklift", |l, m| {
                l.proxy_us_per_req - m.proxy_us_per_req
            }) else {
                continue;
            };
            let reference = label == LEGACY_TL_2025;
            v.push(Verdict {
                what: format!(
                    "tasklift CPU per call, legacy upstream ({answers}) − modern upstream"
                ),
                value: format!("{:.1} µs", s.med),
                spread: format!("{:.1} – {:.1} µs", s.min, s.max),
                target: match reference {
                    true => "(reference)".into(),
                    false => format!("≤ {LEGACY_EXTRA_CPU_MAX_US} µs"),
                },
                pass: (!reference).then_some(s.med <= LEGACY_EXTRA_CPU_MAX_US),
            });
        }
        // A proxy that drops its upstream connection after each answer pays a
        // TCP handshake per call, and so does the upstream.
        for label in [LEGACY_NGINX, LEGACY_TL, LEGACY_NGINX_SSE, LEGACY_TL_SSE] {
            let per_1000: Vec<f64> = self
                .samples
                .get(label)
                .into_iter()
                .flatten()
                .filter_map(|x| {
                    let n = x.upstream_connections?;
                    Some(n as f64 * 1000.0 / x.total.max(1) as f64)
                })
                .collect();
            if per_1000.is_empty() {
                continue;
            }
            let s = spread(per_1000);
            v.push(Verdict {
                what: format!("upstream connections opened per 1,000 calls: {label}"),
                value: format!("{:.1}", s.med),
                spread: format!("{:.1} – {:.1}", s.min, s.max),
                target: "(reference)".into(),
                pass: None,
            });
        }
    }

    fn creation_verdicts(&self, v: &mut Vec<Verdict>) {
        let threshold = plan::CREATION_THRESHOLD.as_micros() as f64;
        if let Some(c) = self.creation_all() {
            let over = quantile(&c.handle_sorted, 0.99) as f64 - threshold;
            let per: Vec<f64> = self
                .creation
                .iter()
                .map(|c| {
                    let mut h = c.handle_us.clone();
                    h.sort_unstable();
                    quantile(&h, 0.99) as f64 - threshold
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
                target: format!("≤ {} ms", HANDLE_OVER_MAX_US / 1000.0),
                pass: Some(over <= HANDLE_OVER_MAX_US && c.errors == 0),
            });
        }
        self.rps_ratio(
            v,
            "tasks/get throughput, PostgreSQL store ÷ sled",
            (plan::PG_GET, "tasks/get"),
            Goal::Reference,
        );
        if let Some(c) = creation_of(&self.creation_pg) {
            let over = quantile(&c.handle_sorted, 0.99) as f64 - threshold;
            v.push(Verdict {
                what: "time to handle p99 − threshold, PostgreSQL store".into(),
                value: ms(over),
                spread: format!("{} errors", c.errors),
                target: "(reference)".into(),
                pass: None,
            });
        }
    }

    fn memory_verdicts(&self, v: &mut Vec<Verdict>) {
        // Issue 32: 8 KiB over HTTP/2, 16 KiB over HTTP/1.1 (a connection each).
        for (via, m, max) in [
            ("HTTP/2", &self.memory_h2, PER_TASK_MAX_KIB_H2),
            ("HTTP/1.1", &self.memory, PER_TASK_MAX_KIB_H1),
        ] {
            let Some(m) = m else { continue };
            let per_task = m.per_task_kib();
            // Fewer running tasks leave more of the fixed part in each one's share:
            // the target holds at 10,000.
            let at_target = m.tasks >= PER_TASK_AT;
            v.push(Verdict {
                what: format!(
                    "RSS per running task, {} running, {via} upstream",
                    grouped(m.tasks as u64)
                ),
                value: format!("{per_task:.2} KiB"),
                spread: format!("PSS {:.2} KiB", m.per_task_pss_kib()),
                target: match at_target {
                    true => format!("≤ {max} KiB"),
                    false => format!("≤ {max} KiB at {}", grouped(PER_TASK_AT as u64)),
                },
                pass: at_target.then_some(per_task <= max),
            });
        }
        if let Some(m) = &self.memory_h2 {
            v.push(Verdict {
                what: format!(
                    "{} concurrent slow calls complete, HTTP/2 upstream",
                    grouped(m.tasks as u64)
                ),
                value: format!("{} completed, {} errors", m.completed, m.errors),
                spread: format!("drain {:.2} s", m.drain.as_secs_f64()),
                target: "0 errors".into(),
                pass: Some(m.errors == 0 && m.completed == m.tasks),
            });
        }
        let Some(m) = &self.memory else { return };
        v.push(Verdict {
            what: format!("{} concurrent slow calls complete", grouped(m.tasks as u64)),
            value: format!("{} completed, {} errors", m.completed, m.errors),
            spread: format!("drain {:.2} s", m.drain.as_secs_f64()),
            target: "0 errors".into(),
            pass: Some(m.errors == 0 && m.completed == m.tasks),
        });
        v.push(Verdict {
            what: "idle RSS of tasklift (memory scenario, before the load)".into(),
            value: format!("{:.1} MiB", m.idle.rss_kib as f64 / 1024.0),
            spread: format!("PSS {:.1} MiB", m.idle.pss_kib as f64 / 1024.0),
            target: format!("≤ {} MiB", IDLE_RSS_MAX_KIB / 1024),
            pass: Some(m.idle.rss_kib <= IDLE_RSS_MAX_KIB),
        });
    }

    /// Issue 32 item 4: at 100,000 running tasks on one instance (HTTP/2
    /// upstream), RSS and `tasks/get` p99 under that load; every call a task that
    /// completes, at any size.
    fn scale_verdicts(&self, v: &mut Vec<Verdict>) {
        let Some(sc) = &self.scale else { return };
        let Some(top) = sc.top() else { return };
        let at = grouped(plan::SCALE_AT as u64);
        // Fewer tasks say nothing about the target (a smoke run): a reference row.
        let judged = top.running >= plan::SCALE_AT;
        let running = grouped(top.running as u64);
        v.push(Verdict {
            what: format!("tasklift RSS with {running} running tasks, HTTP/2 upstream (scale)"),
            value: format!("{:.1} MiB", top.mem.rss_kib as f64 / 1024.0),
            spread: format!("{:.2} KiB/task", top.per_task_kib(&sc.idle)),
            target: match judged {
                true => format!("≤ {} MiB", plan::SCALE_RSS_MAX_KIB / 1024),
                false => format!("≤ {} MiB at {at}", plan::SCALE_RSS_MAX_KIB / 1024),
            },
            pass: judged.then_some(top.mem.rss_kib <= plan::SCALE_RSS_MAX_KIB),
        });
        let p99 = quantile(&top.get_lat, 0.99);
        v.push(Verdict {
            what: format!("tasks/get p99 with {running} running tasks (scale)"),
            value: ms(p99 as f64),
            spread: format!(
                "p50 {}, {} gets",
                ms(quantile(&top.get_lat, 0.5) as f64),
                top.get_lat.len()
            ),
            target: match judged {
                true => format!("≤ {} ms", plan::SCALE_GET_P99_MAX_US / 1000),
                false => format!("≤ {} ms at {at}", plan::SCALE_GET_P99_MAX_US / 1000),
            },
            pass: judged.then_some(
                p99 <= plan::SCALE_GET_P99_MAX_US && !top.get_lat.is_empty() && top.get_errors == 0,
            ),
        });
        let tasks = sc.tasks();
        v.push(Verdict {
            what: format!(
                "{} concurrent slow calls become tasks and complete, HTTP/2 upstream (scale)",
                grouped(tasks as u64)
            ),
            value: format!("{} completed, {} errors", sc.completed, sc.errors()),
            spread: format!("drain {:.2} s", sc.drain.as_secs_f64()),
            target: "every call, 0 errors".into(),
            pass: Some(sc.errors() == 0 && sc.completed == tasks),
        });
    }

    fn binary_verdict(&self, v: &mut Vec<Verdict>) {
        let Some(b) = &self.binary else { return };
        // The target is the release binary's; a debug build's size says nothing.
        let debug = b.profile() == super::Profile::Debug;
        v.push(Verdict {
            what: "tasklift binary size".into(),
            value: format!("{:.2} MB", b.bytes as f64 / 1e6),
            spread: format!("{} bytes", grouped(b.bytes)),
            target: if debug {
                format!("≤ {} MB (release build)", BINARY_MAX_BYTES / 1_000_000)
            } else {
                format!("≤ {} MB", BINARY_MAX_BYTES / 1_000_000)
            },
            pass: (!debug).then_some(b.bytes <= BINARY_MAX_BYTES),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::grouped;

    #[test]
    fn thousands_are_grouped_by_commas() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(15_644_888), "15,644,888");
        assert_eq!(grouped(100_000), "100,000");
    }
}
