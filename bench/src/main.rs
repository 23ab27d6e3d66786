//! `tasklift-bench`: measures tasklift against a baseline MCP upstream and nginx, on
//! loopback, with every component a separate process the harness starts and stops.
//!
//! ```text
//! tasklift-bench [--duration 5s] [--warmup 1s] [--reps 3] [--concurrency 16] [--rate 2000]
//!                [--tasks 10000] [--scale-levels 1000,10000,100000]
//!                [--skip nginx,stdio,memory,scale,churn,...] [--out docs/benchmarks] [--quick]
//!                [--mcp-proxy PATH] [--mcp-proxy-2026 PATH]
//! tasklift-bench upstream --listen 127.0.0.1:0      # the baseline upstream alone
//! tasklift-bench upstream --stdio                   # the same on stdin/stdout
//! tasklift-bench upstream --legacy [--sse]          # a 2025-11-25 server with sessions
//! tasklift-bench forwarder --upstream ADDR            # hyper passing bytes through: the ceiling
//! tasklift-bench crash --store sled --rounds 100     # kill -9 at scale (see crash/mod.rs)
//! tasklift-bench crash --store postgres --replicas 3 --rounds 100 [--restart-postgres]
//! tasklift-bench crash --store sled --fill-and-free --cycles 50   # a full disk, 50 times (root)
//! ```
//!
//! Scenarios: pass-through throughput and latency (direct to the upstream, through
//! nginx, through a hyper proxy that only forwards (closed loop), through tasklift; closed loop and open loop at a fixed rate), pass-through
//! throughput of tasklift fronting the same upstream as a stdio child, tasklift, nginx
//! and `mcp-proxy` (a peer gateway) in front of a 2025-11-25 upstream, `tasks/get`
//! throughput, task creation (time to handle, time to a visible completion), memory
//! per running task with 10,000 held calls, running tasks on one instance at scale
//! (RSS, CPU, store size and `tasks/get` latency at 1,000, 10,000 and 100,000), and
//! the store churn example. Results go to stdout, `results.md`, `throughput.svg`,
//! `latency.svg` and `scale.svg` in `--out`.
//! `scripts/bench` installs nginx, builds in release mode and runs this.

mod crash;
mod forwarder;
mod loadgen;
mod plan;
mod procs;
mod report;
mod scenarios;
mod upstream;
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tasklift-bench",
    version,
    about = "Benchmark tasklift against a direct upstream and nginx",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the baseline upstream MCP server (prints `listening on ADDR`), or with
    /// `--stdio` serve it on stdin/stdout, as a stdio upstream of tasklift.
    Upstream {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Tokio worker threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Speak newline-delimited JSON-RPC on stdin/stdout instead of HTTP.
        #[arg(long, conflicts_with = "listen")]
        stdio: bool,
        /// Be a 2025-11-25 server with sessions (HTTP only).
        #[arg(long, conflicts_with = "stdio")]
        legacy: bool,
        /// Answer `tools/call` as an SSE stream (HTTP only).
        #[arg(long, conflicts_with = "stdio")]
        sse: bool,
    },
    /// A reverse proxy on hyper that only passes requests and answers through
    /// (prints `listening on ADDR`): the ceiling of a proxy built on hyper.
    Forwarder {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// The upstream's address (host:port).
        #[arg(long)]
        upstream: SocketAddr,
        /// Workers, each a thread with a current-thread runtime.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// kill -9 at scale: kill tasklift (or one of its PostgreSQL replicas) at random
    /// moments under load, restart it, and check every task handle ever returned.
    /// Exits 1 if a handle was missing, a task stuck or a result lost or changed.
    /// With `--fill-and-free`, fills the data directory's disk under load instead
    /// and frees it, again and again (see crash/fill.rs).
    Crash(Box<crash::CrashArgs>),
}

/// Options of a benchmark run.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Measured time of each load run (after the warm-up).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Warm-up before each load run (sent, not measured).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Repetitions; the targets are interleaved within each.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Closed-loop connections.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Open-loop request rate (requests per second).
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Open-loop connections the timetable is spread over.
    #[arg(long, default_value_t = 32)]
    pub open_connections: usize,
    /// Running tasks in the memory scenario.
    #[arg(long, default_value_t = 10_000)]
    pub tasks: usize,
    /// Client connections that start the memory scenario's calls (and the scale
    /// scenario's).
    #[arg(long, default_value_t = 200)]
    pub memory_clients: usize,
    /// Running tasks at each step of the scale scenario, one instance ramped from
    /// one to the next [default: 1000,10000,100000; with --quick: 100,1000].
    #[arg(long, value_delimiter = ',')]
    pub scale_levels: Vec<usize>,
    /// Tasks created for the tasks/get scenario.
    #[arg(long, default_value_t = 1000)]
    pub get_tasks: usize,
    /// Clients of the task-creation scenario.
    #[arg(long, default_value_t = 8)]
    pub creation_clients: usize,
    /// Scenarios to leave out: nginx, forwarder, traced, stdio, legacy, peers, open, tasks-get,
    /// creation, memory, scale, churn.
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
    /// Where results.md and the SVG charts go.
    #[arg(long, default_value = "docs/benchmarks")]
    pub out: PathBuf,
    /// A smoke run: tiny durations and counts.
    #[arg(long)]
    pub quick: bool,
    /// The tasklift binary (default: `tasklift` beside this one).
    #[arg(long)]
    pub tasklift: Option<PathBuf>,
    /// The nginx binary (default: `nginx` on PATH or in /usr/sbin).
    #[arg(long)]
    pub nginx: Option<PathBuf>,
    /// The `mcp-proxy` 0.6.0 binary, a peer in front of the legacy upstream (default:
    /// target/tools/mcp-proxy/bin/mcp-proxy, installed by scripts/bench, when present).
    #[arg(long)]
    pub mcp_proxy: Option<PathBuf>,
    /// The same built with `--features protocol-2026-07-28` (default:
    /// target/tools/mcp-proxy-2026/bin/mcp-proxy when present).
    #[arg(long)]
    pub mcp_proxy_2026: Option<PathBuf>,
    /// Also measure tasks/get and task creation with the PostgreSQL store on this
    /// server (a scratch database is created and dropped), e.g.
    /// postgres://postgres@127.0.0.1:5432/postgres.
    #[arg(long)]
    pub postgres: Option<String>,
    /// Arguments of `examples/store_churn` (rounds batch size).
    #[arg(long, default_value = "200 8 1048576")]
    pub churn_args: String,
    /// The repository, for the store churn example and the git commit.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/.."))]
    pub repo: PathBuf,
    /// A run during which the rest of the machine (other processes, interrupts) kept
    /// more than this share of a core busy counts as disturbed and is run again.
    #[arg(long, default_value_t = 0.3)]
    pub max_other: f64,
    /// How many times a disturbed run is repeated (the least disturbed is kept).
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
    /// Before each run, wait up to this long for the machine to be quiet.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub quiet_wait: Duration,
    /// Stop waiting and retrying once this much time went to it in all.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub quiet_budget: Duration,
    /// Worker threads of the baseline upstream.
    #[arg(long, default_value_t = 2)]
    pub upstream_threads: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Some(Cmd::Upstream {
            stdio: true,
            threads,
            ..
        }) => upstream::run_stdio(threads),
        Some(Cmd::Upstream {
            listen,
            threads,
            legacy,
            sse,
            ..
        }) => upstream::run(listen, threads, upstream::Mode { legacy, sse }),
        Some(Cmd::Forwarder {
            listen,
            upstream,
            threads,
        }) => forwarder::run(listen, upstream, threads),
        Some(Cmd::Crash(args)) => {
            let ran = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    rt.block_on(async {
                        tokio::select! {
                            r = crash::run(*args) => r,
                            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
                        }
                    })
                });
            return match ran {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("tasklift-bench crash: error: {e:#}");
                    ExitCode::from(2)
                }
            };
        }
        None => {
            let mut args = cli.run;
            if args.quick {
                args.duration = Duration::from_millis(500);
                args.warmup = Duration::from_millis(200);
                args.reps = 1;
                args.get_tasks = args.get_tasks.min(100);
                args.rate = args.rate.min(500.0);
                args.open_connections = args.open_connections.min(8);
                args.memory_clients = args.memory_clients.min(50);
                if args.scale_levels.is_empty() {
                    args.scale_levels = vec![100, 1000];
                }
                args.retries = 0;
                args.quiet_wait = Duration::ZERO;
                args.quiet_budget = Duration::ZERO;
            }
            if args.scale_levels.is_empty() {
                args.scale_levels = vec![1000, 10_000, 100_000];
            }
            args.scale_levels.retain(|n| *n > 0);
            args.scale_levels.sort_unstable();
            args.scale_levels.dedup();
            // One core for the load generator, like `wrk -t1`.
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    rt.block_on(async {
                        tokio::select! {
                            r = scenarios::run(args) => r,
                            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
                        }
                    })
                })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tasklift-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
