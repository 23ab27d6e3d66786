//! `results.md`: the machine, the versions, every table, the logs and the store
//! churn output.

use std::fmt::Write as _;
use std::path::Path;

use crate::loadgen::quantile;
use crate::plan;
use crate::RunArgs;

use super::figures::{creation_of, summarize, CreationAll};
use super::verdicts::{grouped, pass_text, Verdict};
use super::{Binary, Profile, Report};

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    let mut s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if s.is_empty() {
        s = String::from_utf8_lossy(&out.stderr).trim().to_string();
    }
    (!s.is_empty()).then_some(s)
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

/// The peers table's rows: label, proxy, its clients' revision.
const PEER_ROWS: [(&str, &str, &str); 7] = [
    (plan::LEGACY_DIRECT, "none (direct)", "2025-11-25"),
    (plan::LEGACY_NGINX, "nginx", "2025-11-25"),
    (plan::LEGACY_TL_2025, "tasklift", "2025-11-25"),
    (plan::LEGACY_TL, "tasklift", "2026-07-28"),
    (plan::PEER_MCP_PROXY, "mcp-proxy 0.6.0", "2025-11-25"),
    (
        plan::PEER_MCP_PROXY_2026,
        "mcp-proxy 0.6.0, `protocol-2026-07-28` build",
        "2026-07-28",
    ),
    (
        plan::PEER_MCP_PROXY_2026_LEGACY,
        "mcp-proxy 0.6.0, `protocol-2026-07-28` build",
        "2025-11-25",
    ),
];

impl Report {
    /// Whether a peer (mcp-proxy) was measured.
    fn has_peers(&self) -> bool {
        PEER_ROWS[4..]
            .iter()
            .any(|(l, ..)| self.samples.contains_key(*l))
    }

    /// The Setup bullet on the peers, when they ran.
    fn peers_setup(&self, s: &mut String) {
        if !self.has_peers() {
            return;
        }
        let modern = if self.samples.contains_key(plan::PEER_MCP_PROXY_2026) {
            "by the same 2026-07-28 requests as tasklift (sessionless; named `legacy/fast`)"
        } else {
            "by 2025-11-25 clients too (it refused a 2026-07-28 client: see the run's stderr)"
        };
        let _ = writeln!(
            s,
            "- **Peers**: `mcp-proxy` 0.6.0 from crates.io (a tower-mcp gateway), installed by `scripts/bench` \
             under `target/tools/` with `cargo install --locked --no-default-features` and again with `--features \
             protocol-2026-07-28`, each run as `mcp-proxy --config FILE` in front of the legacy JSON upstream above: \
             one `http` backend named `legacy` (so the upstream's `fast` is `legacy/fast`), everything else at its \
             defaults (no auth, audit log, cache or resilience layers) but the log level, set to its documented \
             default `info` (0.6.0 without an `[observability]` table logs every level, two DEBUG lines a call). \
             It serves MCP on `/` and speaks 2025-11-25 to the backend on one session of its own. The plain build \
             is loaded by 2025-11-25 clients with a session per connection (mcp-proxy's own sessions), the \
             `protocol-2026-07-28` build {modern}. Closed loop only; the Peers table below puts them beside nginx \
             and tasklift."
        );
    }

    /// nginx, tasklift and the peers in front of the same legacy JSON upstream,
    /// with each one's memory after the load.
    fn peers_table(&self, s: &mut String, args: &RunArgs) {
        if !self.has_peers() {
            return;
        }
        let _ = writeln!(s, "## Peers\n");
        let _ = writeln!(
            s,
            "What users would pick instead of tasklift, each in front of the same 2025-11-25 server (the legacy \
             upstream with JSON answers): closed loop, {} connections, medians over repetitions. The CPU per call is \
             the proxy's alone; RSS is `VmRSS` after the load runs (nginx: master and workers summed; tasklift: the \
             one instance both its rows measured, with its sled store).\n",
            args.concurrency
        );
        let _ = writeln!(
            s,
            "| proxy | clients | req/s | p50 ms | p99 ms | proxy CPU µs/call | RSS MiB |\n|---|---|---:|---:|---:|---:|---:|"
        );
        for (label, proxy, clients) in PEER_ROWS {
            let Some(v) = self.samples.get(label) else {
                continue;
            };
            let m = summarize(v);
            let rss = self
                .peer_mem
                .iter()
                .find(|(l, _)| l == label)
                .map(|(_, m)| format!("{:.1}", m.rss_kib as f64 / 1024.0))
                .unwrap_or_else(|| "–".into());
            let _ = writeln!(
                s,
                "| {proxy} | {clients} | {:.0} | {:.3} | {:.3} | {:.1} | {rss} |",
                m.rps.med,
                m.p50 / 1000.0,
                m.p99.med / 1000.0,
                m.proxy_us,
            );
        }
        let _ = writeln!(s);
    }

    /// The scale scenario: a row per level, the release, the chart.
    fn scale_section(&self, s: &mut String) {
        let Some(sc) = &self.scale else { return };
        let mib = |b: u64| b as f64 / 1048576.0;
        let _ = writeln!(
            s,
            "## Running tasks at scale, one instance, an HTTP/2 upstream\n"
        );
        let _ = writeln!(
            s,
            "A fresh tasklift (threshold {} ms, the upstream over HTTP/2 with `http2 = true`, no limit on calls or \
             tasks per principal, task TTL 1 h) ramped through {} running tasks: {} client connections (kept from \
             step to step) start `hold` calls until that many are running as tasks (each answered with a handle \
             after the threshold, its call held open at the upstream until the harness releases it, confirmed by \
             the upstream's count of held requests). At each level, tasklift's RSS (`VmRSS`) and PSS, its CPU time \
             (user + system from /proc/PID/stat: since it started, and to start this step's calls), its CPU while \
             holding the tasks for a second with nothing asked of it, its store's size on disk (every file under \
             its `data_dir`: sled and result files; allocated blocks, as `du`, and apparent size, as `du \
             --apparent-size`), its open descriptors, and the latency of {} `tasks/get`s of running tasks spread \
             over all of them, from {} connections each sending its next when the last is answered. The harness \
             raised its open-files limit to the hard limit ({}); every process it starts does too. Then every call \
             is released and each task polled through `tasks/get` until it reads `completed`.\n",
            plan::MEMORY_THRESHOLD.as_millis(),
            sc.levels
                .iter()
                .map(|l| grouped(l.running as u64))
                .collect::<Vec<_>>()
                .join(", "),
            sc.clients,
            sc.levels.first().map(|l| l.get_lat.len() + l.get_errors as usize).unwrap_or(0),
            sc.get_connections,
            crate::procs::nofile_limits().0,
        );
        let _ = writeln!(s, "![running tasks at scale](scale.svg)\n");
        let _ = writeln!(
            s,
            "| running tasks | started in s | RSS MiB | PSS MiB | RSS KiB per task | CPU s so far | CPU s this step | \
             CPU holding | store MiB (allocated) | store MiB (apparent) | open fds | held upstream | tasks/get p50 ms | \
             p99 ms | max ms | errors |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let _ = writeln!(
            s,
            "| idle | | {:.1} | {:.1} | | | | | {:.2} | {:.2} | {} | | | | | |",
            sc.idle.rss_kib as f64 / 1024.0,
            sc.idle.pss_kib as f64 / 1024.0,
            mib(sc.idle_store.allocated),
            mib(sc.idle_store.apparent),
            sc.idle_fds
        );
        for l in &sc.levels {
            let q = |x: f64| quantile(&l.get_lat, x) as f64 / 1000.0;
            let _ = writeln!(
                s,
                "| {} | {:.2} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.0}% | {:.2} | {:.2} | {} | {} | {:.3} | {:.3} | {:.3} | {} |",
                grouped(l.running as u64),
                l.ramp.as_secs_f64(),
                l.mem.rss_kib as f64 / 1024.0,
                l.mem.pss_kib as f64 / 1024.0,
                l.per_task_kib(&sc.idle),
                l.cpu_total,
                l.cpu_step,
                l.cpu_holding * 100.0,
                mib(l.store.allocated),
                mib(l.store.apparent),
                l.fds,
                l.held,
                q(0.5),
                q(0.99),
                q(1.0),
                l.errors + l.get_errors as usize
            );
        }
        if let Some(a) = sc.after {
            let _ = writeln!(
                s,
                "| all completed (0.5 s after) | | {:.1} | {:.1} | | | | | {:.2} | {:.2} | | | | | | |",
                a.rss_kib as f64 / 1024.0,
                a.pss_kib as f64 / 1024.0,
                mib(sc.after_store.allocated),
                mib(sc.after_store.apparent),
            );
        }
        let _ = writeln!(s);
        for l in &sc.levels {
            let _ = writeln!(
                s,
                "- {} running: {} calls started in {:.2} s ({:.0}/s); the upstream's RSS {:.1} MiB; tasklift's CPU per \
                 `tasks/get` {:.1} µs",
                grouped(l.running as u64),
                l.started,
                l.ramp.as_secs_f64(),
                l.started as f64 / l.ramp.as_secs_f64().max(1e-9),
                l.upstream_mem.rss_kib as f64 / 1024.0,
                l.get_cpu_us
            );
        }
        let _ = writeln!(
            s,
            "- release → all `completed` (polled through `tasks/get`): {:.2} s, {:.2} s of tasklift's CPU\n\
             - completed: {} of {}, errors: {}{}\n",
            sc.drain.as_secs_f64(),
            sc.cpu_drain,
            sc.completed,
            sc.tasks(),
            sc.errors(),
            sc.first_error()
                .map(|e| format!(" (first: `{}`)", e.replace('`', "'")))
                .unwrap_or_default()
        );
    }

    pub(super) fn markdown(
        &self,
        args: &RunArgs,
        bin: &Path,
        table: &str,
        verdicts: &[Verdict],
    ) -> String {
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
        let profile = match self.binary.as_ref().map(Binary::profile) {
            Some(Profile::Release) => "release build",
            Some(Profile::Debug) => "debug build: figures are not meaningful",
            _ => "build profile unknown",
        };
        let _ = writeln!(s, "| tasklift version | {version} ({profile}, `{bin_s}`) |");
        if let Some(b) = &self.binary {
            let _ = writeln!(
                s,
                "| tasklift binary size | {} bytes ({:.2} MB) |",
                grouped(b.bytes),
                b.bytes as f64 / 1e6
            );
        }
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
             - **{forwarder}**: `tasklift-bench forwarder`, a reverse proxy on hyper that passes requests and \
             answers through and does nothing else (no JSON, no state, no log): hyper's HTTP/1.1 server as \
             tasklift's front door runs it, one upstream connection of hyper's client per client connection, \
             2 workers each on a current-thread runtime (tasklift's layout). The ceiling of a proxy on hyper; \
             closed loop only.\n\
             - **tasklift**: `target/release/tasklift serve --config FILE` in front of the upstream (era detected \
             by `server/discover`: modern), threshold 2 s (the `sleep` tool 20 ms, for the tasks of `tasks/get`), \
             default limits, default logging (`info`). tasklift's runtime has 2 worker threads (one per core).\n\
             - **{stdio}**: a second tasklift, configured the same, whose upstream is the same baseline server \
             run by tasklift as its stdio child (`command = [\"tasklift-bench\", \"upstream\", \"--stdio\"]`: \
             newline-delimited JSON-RPC on stdin/stdout, one process, every call multiplexed on it); its \
             \"upstream\" CPU is the child's. Closed loop only.\n\
             - **Legacy upstream** (the retrofit case): the baseline upstream as a 2025-11-25 server \
             (`tasklift-bench upstream --legacy`: `initialize` opens a session, every other request must carry it, \
             results without `resultType`), and a second one answering `tools/call` as an SSE stream (`--legacy \
             --sse`, the SDKs' default). In front of each: nginx, configured as above, loaded by 2025-11-25 \
             clients (each connection `initialize`s its own session through it; nginx cannot serve a 2026-07-28 \
             client from a 2025 server), and a tasklift configured as above (era detected: legacy), loaded by the \
             same 2026-07-28 requests as the modern tasklift (it keeps one upstream session per caller and \
             translates) and, on the JSON upstream, by 2025-11-25 clients with a session per connection. Closed \
             loop only.",
            stdio = plan::STDIO,
            forwarder = plan::FORWARDER,
        );
        self.peers_setup(&mut s);
        let _ = writeln!(
            s,
            "- The machine has {cores} cores shared by the load generator, the upstream and the proxy: absolute \
             figures are small-machine figures, the ratios are what to compare.\n\
             - **Disturbed runs**: before each run the harness waits (up to {:.0} s) until the rest of the machine \
             uses less than {:.0}% of a core; a run during which it used more is run again (up to {} more times) \
             and the least disturbed run is kept (\"CPU elsewhere\" and \"attempts\" per repetition below); at \
             most {:.0} s go to waiting and re-running in all.\n\
             - **How a proxy's work fell across its threads**: \"proxy's busiest thread\" per repetition below is \
             the share of the proxy's CPU its busiest thread (an nginx worker, a tasklift or forwarder worker) used: \
             100% when all of the load's connections landed on one worker, about 50% when two split them. nginx and \
             the forwarder take connections as their workers race for them; tasklift balances them across its \
             workers. On a machine the load and the upstream share, a proxy serving every connection from one \
             thread spends less CPU per call, so a repetition's ratio moves with this.\n",
            args.quiet_wait.as_secs_f64(),
            args.max_other * 100.0,
            args.retries,
            args.quiet_budget.as_secs_f64(),
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
             else running), the highest of the repetitions: a large share means the run was disturbed. \
             Context switches per answer count every thread's, voluntary (it waited for work) and involuntary \
             (it was preempted): a process that sleeps and wakes more per answer spends more CPU on the same \
             work.\n"
        );
        let _ = writeln!(
            s,
            "| target | load generator | proxy | upstream | other (max) | proxy CPU µs/req | upstream CPU µs/req | proxy switches/req | upstream switches/req | answers as SSE |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (label, m) in self.summaries() {
            let _ = writeln!(
                s,
                "| {label} | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.1} | {:.1} | {:.2} | {:.2} | {} |",
                m.cpu_client * 100.0,
                m.cpu_proxy * 100.0,
                m.cpu_upstream * 100.0,
                m.cpu_other * 100.0,
                m.proxy_us,
                m.upstream_us,
                m.proxy_switches,
                m.upstream_switches,
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
            "| target | rep | req/s | p50 ms | p99 ms | max ms | errors | CPU elsewhere | attempts | proxy's busiest thread |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for label in &self.order {
            let Some(v) = self.samples.get(label) else {
                continue;
            };
            for (i, x) in v.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "| {label} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {} | {:.0}% | {} | {} |",
                    i + 1,
                    x.rps,
                    x.pct.p50 as f64 / 1000.0,
                    x.pct.p99 as f64 / 1000.0,
                    x.pct.max as f64 / 1000.0,
                    x.errors,
                    x.cpu_other * 100.0,
                    x.attempts,
                    x.proxy_busiest
                        .map_or("".into(), |b| format!("{:.0}%", b * 100.0))
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
        self.peers_table(&mut s, args);
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
                "\np99 − threshold: {:.3} ms. tasklift writes and flushes the `working` record 10 ms before the \
                 threshold (so the handle does not wait on the disk), and flushes a terminal state before \
                 `tasks/get` shows it (see the fsync line under Machine); the threshold's last 3 ms are timed by a \
                 timerfd, not tokio's 1 ms wheel. The completion figure also includes up to one 2 ms polling \
                 interval. Errors: {}{}.\n",
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
        for (via, m) in [
            ("an HTTP/1.1 upstream", &self.memory),
            ("an HTTP/2 upstream (`http2 = true`)", &self.memory_h2),
        ] {
            let Some(m) = m else { continue };
            let _ = writeln!(s, "## Memory per running task, {via}\n");
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
                 - held at the upstream: {}; connections open at the upstream meanwhile: {} (over HTTP/1.1 each \
                 running call holds a connection from tasklift to the upstream; over HTTP/2 they share one per \
                 front-door worker)\n\
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
        self.scale_section(&mut s);
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
}
