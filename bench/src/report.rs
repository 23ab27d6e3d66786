//! The figures: medians over repetitions, ratios against the targets of the
//! benchmark issue, a table on stdout, `results.md`, and hand-written SVG charts.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use crate::loadgen::{quantile, Pct};
use crate::plan;
use crate::procs::Mem;
use crate::RunArgs;

/// One load run.
#[derive(Clone, Default)]
pub struct Sample {
    /// Requests per second.
    pub rps: f64,
    /// Requests measured.
    pub n: usize,
    /// Latency percentiles (µs).
    pub pct: Pct,
    /// Failed requests.
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
    /// Open loop: sends that waited for a busy connection.
    pub late: u64,
    /// Every latency, sorted (µs).
    pub lat: Vec<u32>,
    /// Answers of the whole run (warm-up included).
    pub total: u64,
    /// Answers sent as SSE.
    pub sse: u64,
    /// CPU used during the run, as a share of one core: the load generator.
    pub cpu_client: f64,
    /// The proxy (nginx or tasklift; 0 for direct).
    pub cpu_proxy: f64,
    /// The upstream.
    pub cpu_upstream: f64,
    /// Everything else on the machine (other work disturbing the figures).
    pub cpu_other: f64,
    /// Runs it took to get one the rest of the machine did not disturb (the last
    /// kept is the least disturbed).
    pub attempts: u32,
    /// The proxy's CPU time per answer, µs.
    pub proxy_us_per_req: f64,
    /// The upstream's CPU time per answer, µs.
    pub upstream_us_per_req: f64,
}

/// The task-creation scenario (one repetition).
#[derive(Default, Clone)]
pub struct Creation {
    /// Request to handle, µs.
    pub handle_us: Vec<u32>,
    /// Request to `completed` seen by `tasks/get`, minus the upstream's sleep, µs.
    pub complete_over_us: Vec<u32>,
    /// Failures.
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
}

impl Creation {
    /// Count a failure.
    pub fn fail(&mut self, e: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

/// The memory scenario.
#[derive(Default, Clone)]
pub struct Memory {
    /// Tasks started.
    pub tasks: usize,
    /// Client connections that started them.
    pub clients: usize,
    /// tasklift idle.
    pub idle: Mem,
    /// tasklift with every task running.
    pub loaded: Mem,
    /// The upstream idle.
    pub upstream_idle: Mem,
    /// The upstream holding every call.
    pub upstream_loaded: Mem,
    /// tasklift after they all completed.
    pub after: Option<Mem>,
    /// File descriptors idle and loaded.
    pub idle_fds: usize,
    /// File descriptors with every task running.
    pub loaded_fds: usize,
    /// Calls the upstream held.
    pub held: u64,
    /// Connections open at the upstream while they were held.
    pub upstream_connections: u64,
    /// Time until every handle came back.
    pub to_handles: Duration,
    /// Release to every task `completed`.
    pub drain: Duration,
    /// Tasks seen `completed`.
    pub completed: usize,
    /// Failures.
    pub errors: usize,
    /// The first failure.
    pub first_error: Option<String>,
}

impl Memory {
    /// RSS growth per running task, KiB.
    pub fn per_task_kib(&self) -> f64 {
        (self.loaded.rss_kib as f64 - self.idle.rss_kib as f64) / self.tasks.max(1) as f64
    }

    /// PSS growth per running task, KiB (0 when PSS is unknown).
    pub fn per_task_pss_kib(&self) -> f64 {
        if self.loaded.pss_kib == 0 {
            return 0.0;
        }
        (self.loaded.pss_kib as f64 - self.idle.pss_kib as f64) / self.tasks.max(1) as f64
    }
}

/// What one tasklift instance logged (default level, `info`).
#[derive(Default, Clone)]
pub struct LogSummary {
    /// Which instance.
    pub instance: String,
    /// Bytes.
    pub bytes: usize,
    /// Lines.
    pub lines: usize,
    /// WARN lines.
    pub warnings: usize,
    /// ERROR lines.
    pub errors: usize,
    /// The first warnings and errors.
    pub samples: Vec<String>,
}

/// The store churn example's output.
pub struct Churn {
    /// What ran.
    pub command: String,
    /// Its stdout.
    pub output: String,
    /// How long it took.
    pub seconds: f64,
}

/// Everything measured.
pub struct Report {
    /// Load runs by label.
    pub samples: Samples,
    /// Task creation, per repetition.
    pub creation: Vec<Creation>,
    /// Task creation with the PostgreSQL store, per repetition.
    pub creation_pg: Vec<Creation>,
    /// The memory scenario.
    pub memory: Option<Memory>,
    /// Store churn.
    pub churn: Option<Churn>,
    /// What the tasklift instances logged.
    pub logs: Vec<LogSummary>,
    /// The main tasklift's memory after the load runs.
    pub main_mem: Option<Mem>,
    /// When the run started.
    pub started: Option<SystemTime>,
    /// Latency of a small write + fdatasync in the temp directory, sorted (µs).
    pub fsync: Vec<u32>,
    order: Vec<String>,
}

/// Median, min and max of some values.
#[derive(Clone, Copy, Default)]
struct Spread {
    med: f64,
    min: f64,
    max: f64,
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
struct Summary {
    rps: Spread,
    p50: f64,
    p90: f64,
    p99: Spread,
    max: f64,
    errors: u64,
    first_error: Option<String>,
    late: u64,
    n: usize,
    sse: u64,
    cpu_client: f64,
    cpu_proxy: f64,
    cpu_upstream: f64,
    cpu_other: f64,
    proxy_us: f64,
    upstream_us: f64,
}

fn summarize(s: &[Sample]) -> Summary {
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
struct Verdict {
    what: String,
    value: String,
    spread: String,
    target: String,
    pass: Option<bool>,
}

fn pass_text(p: Option<bool>) -> &'static str {
    match p {
        Some(true) => "PASS",
        Some(false) => "MISS",
        None => "n/a",
    }
}

fn ms(us: f64) -> String {
    format!("{:.3} ms", us / 1000.0)
}

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    let mut s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if s.is_empty() {
        s = String::from_utf8_lossy(&out.stderr).trim().to_string();
    }
    (!s.is_empty()).then_some(s)
}

impl Report {
    /// An empty report for `args`.
    pub fn new(args: &RunArgs) -> Self {
        Self {
            samples: Samples::new(),
            creation: Vec::new(),
            creation_pg: Vec::new(),
            memory: None,
            churn: None,
            logs: Vec::new(),
            main_mem: None,
            started: None,
            fsync: Vec::new(),
            order: plan::order(args),
        }
    }

    /// Record a run.
    pub fn push(&mut self, label: &str, s: Sample) {
        self.samples.entry(label.to_string()).or_default().push(s);
    }

    fn per_rep(&self, a: &str, b: &str, f: impl Fn(&Sample, &Sample) -> f64) -> Option<Spread> {
        let (x, y) = (self.samples.get(a)?, self.samples.get(b)?);
        let v: Vec<f64> = x.iter().zip(y).map(|(x, y)| f(x, y)).collect();
        (!v.is_empty()).then(|| spread(v))
    }

    fn verdicts(&self, args: &RunArgs) -> Vec<Verdict> {
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
    fn summaries(&self) -> Vec<(&str, Summary)> {
        self.order
            .iter()
            .filter_map(|l| Some((l.as_str(), summarize(self.samples.get(l)?))))
            .collect()
    }

    fn creation_all(&self) -> Option<CreationAll> {
        creation_of(&self.creation)
    }
}

/// The creation table: time to handle and to `completed`, in milliseconds.
fn creation_table(s: &mut String, c: &CreationAll) {
    let q = |v: &[u32], x: f64| quantile(v, x) as f64 / 1000.0;
    let row = |s: &mut String, what: &str, v: &[u32]| {
        let max = v.last().copied().unwrap_or(0) as f64 / 1000.0;
        let _ = writeln!(
            s,
            "| {what} | {} | {:.3} | {:.3} | {:.3} | {max:.3} |",
            v.len(),
            q(v, 0.5),
            q(v, 0.9),
            q(v, 0.99)
        );
    };
    let _ = writeln!(
        s,
        "| | tasks | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|"
    );
    row(s, "request → handle", &c.handle_sorted);
    let what = format!(
        "request → `completed` visible, minus the {} ms sleep",
        plan::CREATION_SLEEP.as_millis()
    );
    row(s, &what, &c.over_sorted);
}

/// The repetitions of a creation scenario pooled.
fn creation_of(reps: &[Creation]) -> Option<CreationAll> {
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

impl Report {
    /// Print the table, write results.md and the charts.
    pub fn finish(&self, args: &RunArgs, tasklift_bin: &Path) -> anyhow::Result<()> {
        let verdicts = self.verdicts(args);
        let table = self.table(&verdicts);
        println!("{table}");
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("creating {}", args.out.display()))?;
        let md = self.markdown(args, tasklift_bin, &table, &verdicts);
        std::fs::write(args.out.join("results.md"), md)?;
        std::fs::write(args.out.join("throughput.svg"), self.throughput_svg(args))?;
        std::fs::write(args.out.join("latency.svg"), self.latency_svg(args))?;
        eprintln!(
            "wrote {}/results.md, throughput.svg, latency.svg",
            args.out.display()
        );
        let misses = verdicts.iter().filter(|v| v.pass == Some(false)).count();
        if misses > 0 {
            eprintln!("{misses} target(s) missed (see the table)");
        }
        Ok(())
    }

    fn table(&self, verdicts: &[Verdict]) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<20} {:>10} {:>19} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "target", "req/s", "(min–max)", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
        );
        for (label, m) in self.summaries() {
            let _ = writeln!(
                t,
                "{:<20} {:>10.0} {:>19} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                label,
                m.rps.med,
                format!("({:.0}–{:.0})", m.rps.min, m.rps.max),
                m.p50 / 1000.0,
                m.p90 / 1000.0,
                m.p99.med / 1000.0,
                m.max / 1000.0,
                m.errors
            );
        }
        let _ = writeln!(
            t,
            "\n{:<20} {:>11} {:>10} {:>13} {:>15} {:>18} {:>16}",
            "CPU (share of a core)",
            "load gen",
            "proxy",
            "upstream",
            "proxy µs/req",
            "upstream µs/req",
            "elsewhere (max)"
        );
        for (label, m) in self.summaries() {
            let _ = writeln!(
                t,
                "{:<20} {:>10.0}% {:>9.0}% {:>12.0}% {:>15.1} {:>18.1} {:>15.0}%",
                label,
                m.cpu_client * 100.0,
                m.cpu_proxy * 100.0,
                m.cpu_upstream * 100.0,
                m.proxy_us,
                m.upstream_us,
                m.cpu_other * 100.0
            );
        }
        if !self.fsync.is_empty() {
            let _ = writeln!(
                t,
                "\nfsync in the store's filesystem: p50 {:.2} ms, p99 {:.2} ms",
                quantile(&self.fsync, 0.5) as f64 / 1000.0,
                quantile(&self.fsync, 0.99) as f64 / 1000.0
            );
        }
        if let Some(c) = creation_of(&self.creation_pg) {
            let _ = writeln!(
                t,
                "\ntask creation with the PostgreSQL store ({} tasks): time to handle p50 {:.3} p99 {:.3} max {:.3} ms; \
                 completed visible after sleep + p50 {:.3} p99 {:.3} ms; errors {}",
                c.handle_sorted.len(),
                quantile(&c.handle_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.handle_sorted, 0.99) as f64 / 1000.0,
                c.handle_sorted.last().copied().unwrap_or(0) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.99) as f64 / 1000.0,
                c.errors
            );
        }
        if let Some(c) = self.creation_all() {
            let _ = writeln!(
                t,
                "\ntask creation ({} tasks, threshold {} ms, upstream sleep {} ms): time to handle p50 {:.3} p90 {:.3} p99 {:.3} max {:.3} ms; \
                 completed visible after sleep + p50 {:.3} p99 {:.3} max {:.3} ms; errors {}",
                c.handle_sorted.len(),
                plan::CREATION_THRESHOLD.as_millis(),
                plan::CREATION_SLEEP.as_millis(),
                quantile(&c.handle_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.handle_sorted, 0.9) as f64 / 1000.0,
                quantile(&c.handle_sorted, 0.99) as f64 / 1000.0,
                c.handle_sorted.last().copied().unwrap_or(0) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.5) as f64 / 1000.0,
                quantile(&c.over_sorted, 0.99) as f64 / 1000.0,
                c.over_sorted.last().copied().unwrap_or(0) as f64 / 1000.0,
                c.errors
            );
        }
        if let Some(m) = &self.memory {
            let _ = writeln!(
                t,
                "\nmemory: {} running tasks: RSS idle {} KiB → {} KiB ({:.2} KiB/task), PSS {} → {} KiB ({:.2} KiB/task); \
                 fds {} → {}; handles in {:.2} s; drained in {:.2} s; {} completed, {} errors",
                m.tasks,
                m.idle.rss_kib,
                m.loaded.rss_kib,
                m.per_task_kib(),
                m.idle.pss_kib,
                m.loaded.pss_kib,
                m.per_task_pss_kib(),
                m.idle_fds,
                m.loaded_fds,
                m.to_handles.as_secs_f64(),
                m.drain.as_secs_f64(),
                m.completed,
                m.errors
            );
        }
        if let Some(c) = &self.churn {
            let last: Vec<&str> = c.output.lines().rev().take(3).collect();
            let _ = writeln!(
                t,
                "\nstore churn ({:.1} s): {}",
                c.seconds,
                last.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        let _ = writeln!(
            t,
            "\n{:<58} {:>16} {:>26} {:>14} {:>6}",
            "ratio", "value", "spread", "target", ""
        );
        for v in verdicts {
            let _ = writeln!(
                t,
                "{:<58} {:>16} {:>26} {:>14} {:>6}",
                v.what,
                v.value,
                v.spread,
                v.target,
                pass_text(v.pass)
            );
        }
        t
    }

    fn markdown(&self, args: &RunArgs, bin: &Path, table: &str, verdicts: &[Verdict]) -> String {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let mem_total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .next()
                    .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
            })
            .unwrap_or_default();
        let date = sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
        let repo = args.repo.display().to_string();
        let commit =
            sh("git", &["-C", &repo, "rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into());
        let bin_s = bin.display().to_string();
        let version = sh(&bin_s, &["--version"]).unwrap_or_else(|| "?".into());
        let nginx_v = if self.samples.contains_key("nginx") {
            sh("nginx", &["-v"]).or_else(|| sh("/usr/sbin/nginx", &["-v"]))
        } else {
            None
        };
        let cmdline: Vec<String> = std::env::args().collect();
        let mut s = String::new();
        let _ = writeln!(s, "# tasklift benchmarks\n");
        let _ = writeln!(
            s,
            "Generated by `tasklift-bench` (`bench/`, run with `scripts/bench`). \
             Every component is a separate process on loopback, started by the harness.\n"
        );
        let _ = writeln!(s, "## Machine and build\n");
        let _ = writeln!(s, "| | |\n|---|---|");
        let _ = writeln!(s, "| CPU | {cpu} |");
        let _ = writeln!(s, "| cores (nproc) | {cores} |");
        let _ = writeln!(s, "| memory | {mem_total} kB |");
        let _ = writeln!(s, "| kernel | {kernel} |");
        let _ = writeln!(s, "| date | {date} |");
        let _ = writeln!(s, "| commit | `{commit}` (working tree as built) |");
        let profile = if bin_s.contains("/release/") {
            "release build"
        } else if bin_s.contains("/debug/") {
            "debug build: figures are not meaningful"
        } else {
            "build profile unknown"
        };
        let _ = writeln!(s, "| tasklift version | {version} ({profile}, `{bin_s}`) |");
        if let Some(n) = &nginx_v {
            let _ = writeln!(s, "| nginx version | {n} |");
        }
        let _ = writeln!(s, "| harness | `{}` |", cmdline.join(" "));
        if !self.fsync.is_empty() {
            let _ = writeln!(
                s,
                "| fsync (512 B write + fdatasync in {}, {} times) | p50 {:.2} ms, p99 {:.2} ms |",
                std::env::temp_dir().display(),
                self.fsync.len(),
                quantile(&self.fsync, 0.5) as f64 / 1000.0,
                quantile(&self.fsync, 0.99) as f64 / 1000.0
            );
        }
        let _ = writeln!(
            s,
            "| load | closed loop: {} connections, {} s warm-up + {} s measured per run; open loop: {:.0} req/s over {} connections; {} repetition(s), targets interleaved in each; figures are medians over repetitions (min–max beside req/s) |\n",
            args.concurrency,
            args.warmup.as_secs_f64(),
            args.duration.as_secs_f64(),
            args.rate,
            args.open_connections,
            args.reps
        );
        let _ = writeln!(s, "## Setup\n");
        let _ = writeln!(
            s,
            "- **Load generator**: the harness itself, on a single-threaded tokio runtime (one core, like `wrk -t1`), \
             one keep-alive HTTP/1.1 connection per client (`hyper::client::conn::http1`, no pool). Each request is a \
             2026-07-28 `tools/call` of the upstream's `fast` tool with `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` \
             and the `_meta` tasklift requires, declaring the tasks extension (so tasklift runs its threshold race \
             on every call; none becomes a task). An answer counts as an error unless it is HTTP 200, holds no \
             JSON-RPC error and carries the expected result.\n\
             - **Open loop**: request *i* is due at start + *i*/rate; latency counts from that time when the connection \
             was still busy with an earlier request (no coordinated omission), else from the actual send (tokio's \
             timer wakes up to 1 ms late, which is not the server's doing).\n\
             - **direct**: the baseline upstream (`tasklift-bench upstream`, a minimal modern MCP server on hyper, 2 \
             tokio workers) without anything in between.\n\
             - **nginx**: `proxy_pass` to the upstream with `keepalive 64`, `proxy_http_version 1.1`, \
             `proxy_set_header Connection \"\"`, `worker_processes 2`, access log off.\n\
             - **tasklift**: `target/release/tasklift serve --config FILE` in front of the upstream (era detected \
             by `server/discover`: modern), threshold 2 s (the `sleep` tool 20 ms, for the tasks of `tasks/get`), \
             default limits, default logging (`info`). tasklift's runtime has 2 worker threads (one per core).\n\
             - The machine has {cores} cores shared by the load generator, the upstream and the proxy: absolute \
             figures are small-machine figures, the ratios are what to compare.\n\
             - **Disturbed runs**: before each run the harness waits (up to {:.0} s) until the rest of the machine \
             uses less than {:.0}% of a core; a run during which it used more is run again (up to {} more times) \
             and the least disturbed run is kept (\"CPU elsewhere\" and \"attempts\" per repetition below); at \
             most {:.0} s go to waiting and re-running in all.\n",
            args.quiet_wait.as_secs_f64(),
            args.max_other * 100.0,
            args.retries,
            args.quiet_budget.as_secs_f64()
        );
        let _ = writeln!(s, "## Summary\n");
        let _ = writeln!(
            s,
            "| ratio | value | spread | target | |\n|---|---:|---:|---:|---|"
        );
        for v in verdicts {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | **{}** |",
                v.what,
                v.value,
                v.spread,
                v.target,
                pass_text(v.pass)
            );
        }
        let _ = writeln!(
            s,
            "\n![throughput](throughput.svg)\n\n![latency](latency.svg)\n"
        );
        let _ = writeln!(s, "## Pass-through and tasks/get\n");
        let _ = writeln!(
            s,
            "| target | req/s (median) | min–max | p50 ms | p90 ms | p99 ms (median) | p99 min–max | max ms | requests | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (label, m) in self.summaries() {
            let _ = writeln!(
                s,
                "| {label} | {:.0} | {:.0}–{:.0} | {:.3} | {:.3} | {:.3} | {:.3}–{:.3} | {:.3} | {} | {} |",
                m.rps.med,
                m.rps.min,
                m.rps.max,
                m.p50 / 1000.0,
                m.p90 / 1000.0,
                m.p99.med / 1000.0,
                m.p99.min / 1000.0,
                m.p99.max / 1000.0,
                m.max / 1000.0,
                m.n,
                m.errors
            );
        }
        let _ = writeln!(s);
        for (label, m) in self.summaries() {
            if let Some(e) = &m.first_error {
                let _ = writeln!(s, "- {label}: first error: `{e}`");
            }
            if m.late > 0 {
                let _ = writeln!(
                    s,
                    "- {label}: {} open-loop sends found their connection still busy (latency counted from the schedule)",
                    m.late
                );
            }
        }
        let _ = writeln!(
            s,
            "\nCPU during each run (warm-up included; medians over repetitions), as a share of one core, and CPU time \
             per answer. The load generator is one thread: near 100% means it, not the server, set the pace. \
             \"other\" is the rest of the machine (the kernel's softirq work not charged to a process, and anything \
             else running), the highest of the repetitions: a large share means the run was disturbed.\n"
        );
        let _ = writeln!(
            s,
            "| target | load generator | proxy | upstream | other (max) | proxy CPU µs/req | upstream CPU µs/req | answers as SSE |\n|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (label, m) in self.summaries() {
            let _ = writeln!(
                s,
                "| {label} | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.1} | {:.1} | {} |",
                m.cpu_client * 100.0,
                m.cpu_proxy * 100.0,
                m.cpu_upstream * 100.0,
                m.cpu_other * 100.0,
                m.proxy_us,
                m.upstream_us,
                m.sse
            );
        }
        let _ = writeln!(
            s,
            "\n`tasks/get`: {} completed tasks (created with `sleep` 50 ms past a 20 ms threshold) polled round-robin \
             by the same closed loop; compared with `tools/call fast` sent directly to the upstream.\n",
            args.get_tasks
        );
        let _ = writeln!(s, "### Per repetition\n");
        let _ = writeln!(
            s,
            "| target | rep | req/s | p50 ms | p99 ms | max ms | errors | CPU elsewhere | attempts |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for label in &self.order {
            let Some(v) = self.samples.get(label) else {
                continue;
            };
            for (i, x) in v.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "| {label} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {} | {:.0}% | {} |",
                    i + 1,
                    x.rps,
                    x.pct.p50 as f64 / 1000.0,
                    x.pct.p99 as f64 / 1000.0,
                    x.pct.max as f64 / 1000.0,
                    x.errors,
                    x.cpu_other * 100.0,
                    x.attempts
                );
            }
        }
        if let Some(m) = self.main_mem {
            let _ = writeln!(
                s,
                "\nThe main tasklift after these runs: RSS {} KiB, PSS {} KiB.\n",
                m.rss_kib, m.pss_kib
            );
        }
        if let Some(c) = self.creation_all() {
            let q = |v: &[u32], x: f64| quantile(v, x) as f64 / 1000.0;
            let _ = writeln!(s, "## Task creation\n");
            let _ = writeln!(
                s,
                "A separate tasklift with threshold {} ms; {} clients each call `sleep` {} ms with the tasks extension for \
                 {} s per repetition, time the handle, then poll `tasks/get` every 2 ms until it reads `completed`.\n",
                plan::CREATION_THRESHOLD.as_millis(),
                args.creation_clients,
                plan::CREATION_SLEEP.as_millis(),
                args.duration.as_secs_f64()
            );
            creation_table(&mut s, &c);
            let h = &c.handle_sorted;
            let _ = writeln!(
                s,
                "\np99 − threshold: {:.3} ms. tasklift writes and flushes the `working` record before the handle \
                 leaves, and a terminal state before `tasks/get` shows it, so each figure includes at least one \
                 flush to disk (see the fsync line under Machine); the threshold timer itself fires on tokio's 1 ms \
                 wheel. The completion figure also includes up to one 2 ms polling interval. Errors: {}{}.\n",
                q(h, 0.99) - plan::CREATION_THRESHOLD.as_micros() as f64 / 1000.0,
                c.errors,
                c.first_error.map(|e| format!(" (first: `{e}`)")).unwrap_or_default()
            );
        }
        if let Some(c) = creation_of(&self.creation_pg) {
            let _ = writeln!(s, "## PostgreSQL store\n");
            let _ = writeln!(
                s,
                "The same `tasks/get` and task-creation scenarios against tasklift instances using the PostgreSQL \
                 store (`--store postgres://…`, a scratch database on the local server, pool of 16) instead of sled. \
                 `{}` in the tables above is the `tasks/get` run; every read is a query, every create and status \
                 change a committed transaction with a `NOTIFY`. Its proxy CPU includes the local PostgreSQL \
                 server's processes.\n",
                plan::PG_GET
            );
            creation_table(&mut s, &c);
            let _ = writeln!(s, "\nErrors: {}.\n", c.errors);
        }
        if let Some(m) = &self.memory {
            let _ = writeln!(s, "## Memory per running task\n");
            let _ = writeln!(
                s,
                "A fresh tasklift (threshold {} ms). RSS (`VmRSS` of /proc/PID/status) and PSS (/proc/PID/smaps_rollup) \
                 idle after a few calls, then with {} `hold` calls running as tasks (started from {} client \
                 connections; each answered with a handle after the threshold while its call stays open upstream, \
                 confirmed by the upstream's count of held requests), then after release.\n",
                plan::MEMORY_THRESHOLD.as_millis(),
                m.tasks,
                m.clients
            );
            let _ = writeln!(
                s,
                "| | RSS KiB | PSS KiB | open fds |\n|---|---:|---:|---:|"
            );
            let _ = writeln!(
                s,
                "| idle | {} | {} | {} |",
                m.idle.rss_kib, m.idle.pss_kib, m.idle_fds
            );
            let _ = writeln!(
                s,
                "| {} tasks running | {} | {} | {} |",
                m.tasks, m.loaded.rss_kib, m.loaded.pss_kib, m.loaded_fds
            );
            if let Some(a) = m.after {
                let _ = writeln!(
                    s,
                    "| all completed (0.5 s after) | {} | {} | |",
                    a.rss_kib, a.pss_kib
                );
            }
            let _ = writeln!(
                s,
                "\n- per running task: **{:.2} KiB RSS**, {:.2} KiB PSS (for comparison, the upstream, a plain hyper \
                 server, grows by {:.2} KiB per held request and its connection)\n\
                 - held at the upstream: {}; connections open at the upstream meanwhile: {} (each running call \
                 holds one HTTP/1.1 connection from tasklift to the upstream)\n\
                 - all {} handles back in {:.2} s\n\
                 - release → all `completed` (polled through `tasks/get`): {:.2} s\n\
                 - completed: {}, errors: {}{}\n",
                m.per_task_kib(),
                m.per_task_pss_kib(),
                (m.upstream_loaded.rss_kib as f64 - m.upstream_idle.rss_kib as f64) / m.tasks.max(1) as f64,
                m.held,
                m.upstream_connections,
                m.tasks,
                m.to_handles.as_secs_f64(),
                m.drain.as_secs_f64(),
                m.completed,
                m.errors,
                m.first_error
                    .as_ref()
                    .map(|e| format!(" (first: `{e}`)"))
                    .unwrap_or_default()
            );
        }
        if !self.logs.is_empty() {
            let _ = writeln!(s, "## tasklift's logs\n");
            let _ = writeln!(
                s,
                "| instance | bytes | lines | WARN | ERROR |\n|---|---:|---:|---:|---:|"
            );
            for l in &self.logs {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} |",
                    l.instance, l.bytes, l.lines, l.warnings, l.errors
                );
            }
            for l in &self.logs {
                for line in &l.samples {
                    let _ = writeln!(s, "\n- {}: `{}`", l.instance, line.replace('`', "'"));
                }
            }
            let _ = writeln!(s);
        }
        if let Some(c) = &self.churn {
            let _ = writeln!(s, "## Store churn\n");
            let _ = writeln!(
                s,
                "`{}` ({:.1} s; see `bench/examples/store_churn.rs`):\n\n```text\n{}\n```\n",
                c.command,
                c.seconds,
                c.output.trim_end()
            );
        }
        let _ = writeln!(s, "## Raw output\n\n```text\n{}```", table);
        s
    }

    fn throughput_svg(&self, args: &RunArgs) -> String {
        let labels: Vec<&str> = ["direct", "nginx", "tasklift", "tasks/get"]
            .into_iter()
            .filter(|l| self.samples.contains_key(*l))
            .collect();
        let sums: Vec<Summary> = labels
            .iter()
            .map(|l| summarize(&self.samples[*l]))
            .collect();
        let top = sums.iter().map(|m| m.rps.max).fold(1.0_f64, f64::max) * 1.15;
        let (w, h, left, bottom, topm) = (640.0, 360.0, 70.0, 50.0, 50.0);
        let plot_h = h - bottom - topm;
        let bw = (w - left - 20.0) / labels.len().max(1) as f64;
        let y = |v: f64| topm + plot_h * (1.0 - v / top);
        let colors = ["#7f8c8d", "#2e86de", "#e67e22", "#27ae60"];
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">Requests per second, closed loop, {} connections (median of {}; bars min–max)</text>"#,
            w / 2.0,
            args.concurrency,
            args.reps
        );
        for i in 0..=4 {
            let v = top / 4.0 * i as f64;
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
                w - 20.0,
                left - 6.0,
                yy + 4.0,
                v
            );
        }
        for (i, (l, m)) in labels.iter().zip(&sums).enumerate() {
            let x = left + bw * i as f64 + bw * 0.15;
            let bwid = bw * 0.7;
            let yy = y(m.rps.med);
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{yy:.1}" width="{bwid:.1}" height="{:.1}" fill="{}"/>"#,
                topm + plot_h - yy,
                colors[i % colors.len()]
            );
            let cx = x + bwid / 2.0;
            let _ = writeln!(
                s,
                r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="#333"/>"##,
                y(m.rps.min),
                y(m.rps.max)
            );
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{:.0}/s</text>"#,
                y(m.rps.max) - 18.0,
                m.rps.med
            );
            let _ = writeln!(
                s,
                r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#555">p99 {:.2} ms</text>"##,
                y(m.rps.max) - 5.0,
                m.p99.med / 1000.0
            );
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="13">{}</text>"#,
                h - bottom + 18.0,
                xml(l)
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{left}" x2="{left}" y1="{topm}" y2="{}" stroke="black"/>"#,
            topm + plot_h
        );
        let _ = writeln!(s, "</svg>");
        s
    }

    fn latency_svg(&self, args: &RunArgs) -> String {
        // Percentile curves of the open-loop runs (all repetitions pooled), else of
        // the closed-loop runs.
        let open: Vec<String> = ["direct", "nginx", "tasklift"]
            .iter()
            .map(|l| format!("{l} @{:.0}/s", args.rate))
            .filter(|l| self.samples.contains_key(l))
            .collect();
        let (labels, title) = if open.is_empty() {
            (
                ["direct", "nginx", "tasklift", "tasks/get"]
                    .iter()
                    .map(|s| s.to_string())
                    .filter(|l| self.samples.contains_key(l))
                    .collect::<Vec<_>>(),
                format!(
                    "Latency by percentile, closed loop, {} connections",
                    args.concurrency
                ),
            )
        } else {
            (
                open,
                format!("Latency by percentile, open loop at {:.0} req/s", args.rate),
            )
        };
        let qs = [0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0];
        let qnames = ["p50", "p75", "p90", "p95", "p99", "p99.9", "p99.99", "max"];
        let curves: Vec<(String, Vec<f64>)> = labels
            .iter()
            .map(|l| {
                let mut all: Vec<u32> = self.samples[l]
                    .iter()
                    .flat_map(|x| x.lat.iter().copied())
                    .collect();
                all.sort_unstable();
                (
                    l.clone(),
                    qs.iter()
                        .map(|q| quantile(&all, *q).max(1) as f64)
                        .collect(),
                )
            })
            .collect();
        let maxv = curves
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(10.0_f64, f64::max);
        let minv = curves
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(f64::MAX, f64::min)
            .min(maxv / 10.0);
        let (lo, hi) = (
            minv.log10().floor(),
            maxv.log10().ceil().max(minv.log10().floor() + 1.0),
        );
        let (w, h, left, bottom, topm, right) = (640.0, 360.0, 70.0, 50.0, 50.0, 130.0);
        let plot_w = w - left - right;
        let plot_h = h - bottom - topm;
        let x = |i: usize| left + plot_w * i as f64 / (qs.len() - 1) as f64;
        let y = |v: f64| topm + plot_h * (1.0 - (v.log10() - lo) / (hi - lo));
        let colors = ["#7f8c8d", "#2e86de", "#e67e22", "#27ae60"];
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            w / 2.0,
            xml(&title)
        );
        let mut e = lo;
        while e <= hi {
            let v = 10f64.powf(e);
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                left + plot_w,
                left - 6.0,
                yy + 4.0,
                if v >= 1000.0 {
                    format!("{} ms", v / 1000.0)
                } else {
                    format!("{v} µs")
                }
            );
            e += 1.0;
        }
        for (i, q) in qnames.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{q}</text>"#,
                x(i),
                h - bottom + 18.0
            );
        }
        for (k, (l, v)) in curves.iter().enumerate() {
            let c = colors[k % colors.len()];
            let pts: Vec<String> = v
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
                pts.join(" ")
            );
            let ly = topm + 14.0 + 18.0 * k as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                left + plot_w + 10.0,
                left + plot_w + 30.0,
                left + plot_w + 35.0,
                ly + 4.0,
                xml(l)
            );
        }
        let _ = writeln!(s, "</svg>");
        s
    }
}

struct CreationAll {
    handle_sorted: Vec<u32>,
    over_sorted: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Samples by label, one per repetition.
pub type Samples = std::collections::BTreeMap<String, Vec<Sample>>;
