//! The figures: medians over repetitions, ratios against the targets of the
//! performance issue, a table on stdout, `results.md`, and hand-written SVG charts.
//!
//! This module has what a run records; `figures` summarises it, `verdicts` weighs
//! it against the targets, `table`, `markdown` and `svg` write it out.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;

use crate::loadgen::Pct;
use crate::plan;
use crate::procs::{Disk, Mem};
use crate::RunArgs;

mod figures;
mod markdown;
mod svg;
mod table;
mod verdicts;

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
    /// Connections the upstream accepted during the run (warm-up included), when
    /// it is the baseline's HTTP server: a proxy that keeps its upstream
    /// connections opens about as many as the load has clients.
    pub upstream_connections: Option<u64>,
    /// The share of the proxy's CPU its busiest thread used (1: one thread did
    /// all the work; 0.5: two split it evenly). With two workers, how the load's
    /// connections fell across them, which moves a proxy's cost per call on a
    /// machine the load and the upstream share.
    pub proxy_busiest: Option<f64>,
    /// Context switches per answer of the proxy's threads: (voluntary: a thread
    /// waited for work, involuntary: it was preempted).
    pub proxy_switches: (f64, f64),
    /// The same for the upstream's threads.
    pub upstream_switches: (f64, f64),
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

/// One step of the scale scenario: the figures with this many tasks running.
#[derive(Default, Clone)]
pub struct ScaleLevel {
    /// Tasks running: calls started so far in the scenario.
    pub running: usize,
    /// Calls started in this step.
    pub started: usize,
    /// Time until this step's handles were all back.
    pub ramp: Duration,
    /// Calls of this step that did not come back as a task handle.
    pub errors: usize,
    /// The first of them.
    pub first_error: Option<String>,
    /// Calls the upstream held (of this scenario).
    pub held: u64,
    /// tasklift's memory.
    pub mem: Mem,
    /// The upstream's memory.
    pub upstream_mem: Mem,
    /// tasklift's CPU time (user + system) since it started, seconds.
    pub cpu_total: f64,
    /// Its CPU time during this step's ramp (starting its calls), seconds.
    pub cpu_step: f64,
    /// Its CPU time during the ramps so far (no `tasks/get` runs), seconds.
    pub cpu_ramps: f64,
    /// Its CPU while the tasks were running and nothing was asked of it, as a
    /// share of one core.
    pub cpu_holding: f64,
    /// Its store's directory.
    pub store: Disk,
    /// Its open file descriptors.
    pub fds: usize,
    /// `tasks/get` latencies of running tasks under this load, sorted (µs).
    pub get_lat: Vec<u32>,
    /// Its CPU time per `tasks/get`, µs.
    pub get_cpu_us: f64,
    /// Failed `tasks/get`s (not HTTP 200, a JSON-RPC error, or not `working`).
    pub get_errors: u64,
    /// The first of them.
    pub get_first_error: Option<String>,
}

/// The scale scenario: one tasklift (HTTP/2 upstream) ramped through levels of
/// running tasks, then every task released and checked.
#[derive(Default, Clone)]
pub struct Scale {
    /// Client connections that started the calls.
    pub clients: usize,
    /// Connections of each `tasks/get` run.
    pub get_connections: usize,
    /// tasklift idle.
    pub idle: Mem,
    /// Its file descriptors idle.
    pub idle_fds: usize,
    /// Its store idle.
    pub idle_store: Disk,
    /// Each level.
    pub levels: Vec<ScaleLevel>,
    /// Release to every task `completed`.
    pub drain: Duration,
    /// Tasks seen `completed`.
    pub completed: usize,
    /// Tasks that ended otherwise, or were not seen `completed` in time.
    pub drain_errors: usize,
    /// The first of them.
    pub drain_first_error: Option<String>,
    /// tasklift after they all completed.
    pub after: Option<Mem>,
    /// Its store then.
    pub after_store: Disk,
    /// Its CPU time during the drain, seconds.
    pub cpu_drain: f64,
}

impl Scale {
    /// Calls started in all.
    pub fn tasks(&self) -> usize {
        self.levels.iter().map(|l| l.started).sum()
    }

    /// Every failure: calls that were no task, failed `tasks/get`s, tasks that did
    /// not complete.
    pub fn errors(&self) -> usize {
        self.levels
            .iter()
            .map(|l| l.errors + l.get_errors as usize)
            .sum::<usize>()
            + self.drain_errors
    }

    /// The first failure.
    pub fn first_error(&self) -> Option<&str> {
        self.levels
            .iter()
            .find_map(|l| l.first_error.as_deref().or(l.get_first_error.as_deref()))
            .or(self.drain_first_error.as_deref())
    }

    /// The level with the most tasks running.
    pub fn top(&self) -> Option<&ScaleLevel> {
        self.levels.last()
    }
}

impl ScaleLevel {
    /// RSS growth per running task over idle, KiB.
    pub fn per_task_kib(&self, idle: &Mem) -> f64 {
        (self.mem.rss_kib as f64 - idle.rss_kib as f64) / self.running.max(1) as f64
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

/// The tasklift binary measured.
pub struct Binary {
    /// Where it is.
    pub path: PathBuf,
    /// Its size in bytes, when the run started.
    pub bytes: u64,
}

/// The build profile a binary's path names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Profile {
    Release,
    Debug,
    Unknown,
}

impl Binary {
    /// `path` and its size now.
    pub fn of(path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::metadata(path)
            .with_context(|| format!("the size of {}", path.display()))?
            .len();
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
        })
    }

    /// Its build profile, from the cargo target directory in its path.
    pub(super) fn profile(&self) -> Profile {
        let p = self.path.display().to_string();
        if p.contains("/release/") {
            Profile::Release
        } else if p.contains("/debug/") {
            Profile::Debug
        } else {
            Profile::Unknown
        }
    }
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
    /// The memory scenario with the upstream over HTTP/2.
    pub memory_h2: Option<Memory>,
    /// The scale scenario.
    pub scale: Option<Scale>,
    /// Store churn.
    pub churn: Option<Churn>,
    /// What the tasklift instances logged.
    pub logs: Vec<LogSummary>,
    /// The main tasklift's memory after the load runs.
    pub main_mem: Option<Mem>,
    /// Memory of the proxies in front of the legacy JSON upstream (nginx, tasklift,
    /// the peers) after the load runs, by label.
    pub peer_mem: Vec<(String, Mem)>,
    /// When the run started.
    pub started: Option<SystemTime>,
    /// Latency of a small write + fdatasync in the temp directory, sorted (µs).
    pub fsync: Vec<u32>,
    /// The tasklift binary.
    pub binary: Option<Binary>,
    order: Vec<String>,
}

impl Report {
    /// An empty report for `args`.
    pub fn new(args: &RunArgs) -> Self {
        Self {
            samples: Samples::new(),
            creation: Vec::new(),
            creation_pg: Vec::new(),
            memory: None,
            memory_h2: None,
            scale: None,
            churn: None,
            logs: Vec::new(),
            main_mem: None,
            peer_mem: Vec::new(),
            started: None,
            fsync: Vec::new(),
            binary: None,
            order: plan::order(args),
        }
    }

    /// Record a run.
    pub fn push(&mut self, label: &str, s: Sample) {
        self.samples.entry(label.to_string()).or_default().push(s);
    }

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
        let mut wrote = "throughput.svg, latency.svg".to_string();
        if let Some(svg) = self.scale_svg() {
            std::fs::write(args.out.join("scale.svg"), svg)?;
            wrote.push_str(", scale.svg");
        }
        eprintln!("wrote {}/results.md, {wrote}", args.out.display());
        let misses = verdicts.iter().filter(|v| v.pass == Some(false)).count();
        if misses > 0 {
            eprintln!("{misses} target(s) missed (see the table)");
        }
        Ok(())
    }
}

/// Samples by label, one per repetition.
pub type Samples = std::collections::BTreeMap<String, Vec<Sample>>;
