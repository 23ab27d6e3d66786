//! The scenarios and their order: start the components, run each repetition with
//! the targets interleaved, then the one-off scenarios (memory, store churn), and
//! hand everything to the report.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::loadgen::{self, Pct, RunResult, Workload};
use crate::plan::{
    skip, CREATION_SLEEP, CREATION_THRESHOLD, GET_THRESHOLD, MAIN_THRESHOLD, MEMORY_THRESHOLD,
    PG_GET,
};
use crate::procs::{self, Proc, TempDir};
use crate::report::{self, Creation, Memory, Report, Sample};
use crate::wire::{self, Conn, Endpoint};
use crate::RunArgs;

/// A scratch database on the PostgreSQL server the harness was given.
struct ScratchDb {
    admin: String,
    name: String,
    url: String,
}

impl ScratchDb {
    async fn create(admin: &str) -> anyhow::Result<Self> {
        let name = format!("tasklift_bench_{}", std::process::id());
        let (c, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {admin} (--postgres)"))?;
        tokio::spawn(conn);
        for sql in [
            format!("DROP DATABASE IF EXISTS {name}"),
            format!("CREATE DATABASE {name}"),
        ] {
            c.batch_execute(&sql)
                .await
                .context("creating the scratch database")?;
        }
        let base = admin.split('?').next().unwrap_or(admin);
        let base = base.rsplit_once('/').map(|(b, _)| b).unwrap_or(base);
        Ok(Self {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    async fn drop_db(self) {
        if let Ok((c, conn)) = tokio_postgres::connect(&self.admin, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            let _ = c
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await;
        }
    }
}

/// A running tasklift.
pub struct Tasklift {
    proc_: Proc,
    /// Its MCP endpoint.
    pub ep: Endpoint,
    /// Its log (stderr).
    pub log: PathBuf,
    _dir: TempDir,
}

impl Tasklift {
    /// Start `tasklift serve` on a fresh store with `threshold` and per-tool rules,
    /// and wait until `/readyz` says it can take calls.
    async fn start(
        bin: &Path,
        upstream: &Endpoint,
        tag: &str,
        threshold: Duration,
        tools: &[(&str, Duration)],
        store_url: Option<&str>,
    ) -> anyhow::Result<Self> {
        let dir = TempDir::new(tag)?;
        let listen = procs::free_port()?;
        let mut toml = format!(
            r#"[server]
listen = "{listen}"
shutdown_grace = "1s"

[store]
data_dir = "{data}"
url = "{store_url}"

[tasks]
threshold = "{threshold}ms"
poll_interval = "50ms"
ttl = "1h"

[limits]
max_concurrent_calls = 0
max_active_tasks_per_principal = 0
poll_rate_limit = false

[[upstreams]]
name = "bench"
path = "/mcp"
url = "{url}"
era = "auto"
"#,
            data = dir.path().join("data").display(),
            threshold = threshold.as_millis(),
            url = upstream.url(),
            store_url = store_url.unwrap_or(""),
        );
        for (tool, t) in tools {
            toml.push_str(&format!(
                "\n[upstreams.tools.{tool}]\nthreshold = \"{}ms\"\n",
                t.as_millis()
            ));
        }
        let config = dir.path().join("tasklift.toml");
        std::fs::write(&config, toml)?;
        let log = dir.path().join("tasklift.log");
        let args = vec![
            "serve".to_string(),
            "--config".into(),
            config.display().to_string(),
        ];
        let mut proc_ = Proc::spawn(&format!("tasklift ({tag})"), bin, &args, &log)?;
        procs::wait_http_ok(&mut proc_, listen, "/readyz", Duration::from_secs(15))
            .await
            .with_context(|| format!("tasklift log:\n{}", tail(&log)))?;
        let t = Self {
            proc_,
            ep: Endpoint::new(listen, "/mcp"),
            log,
            _dir: dir,
        };
        // The first call makes tasklift detect the upstream's era: it must be modern.
        let mut c = Conn::connect(&t.ep).await?;
        c.result(&wire::tool_call("fast", json!({}), true))
            .await
            .context("first tools/call through tasklift")?;
        let text = std::fs::read_to_string(&t.log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("detected upstream era")) {
            if !line.contains("Modern") {
                bail!("tasklift took the baseline upstream for a legacy server: {line}");
            }
        }
        Ok(t)
    }

    fn pid(&self) -> anyhow::Result<u32> {
        self.proc_.pid()
    }

    /// What the log holds: lines, warnings, errors, and the first few of those.
    fn log_summary(&self, tag: &str) -> report::LogSummary {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut l = report::LogSummary {
            instance: tag.to_string(),
            bytes: text.len(),
            ..Default::default()
        };
        for line in text.lines() {
            l.lines += 1;
            let warn = line.contains(" WARN ") || line.contains("\"WARN\"");
            let error = line.contains(" ERROR ") || line.contains("\"ERROR\"");
            l.warnings += usize::from(warn);
            l.errors += usize::from(error);
            if (warn || error) && l.samples.len() < 5 {
                l.samples.push(line.chars().take(300).collect());
            }
        }
        l
    }
}

/// The last lines of a log, for error messages.
fn tail(p: &Path) -> String {
    let t = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Start the baseline upstream (this binary, `upstream` subcommand).
async fn start_upstream(args: &RunArgs, dir: &Path) -> anyhow::Result<(Proc, Endpoint)> {
    let me = std::env::current_exe()?;
    let a = vec![
        "upstream".to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--threads".into(),
        args.upstream_threads.to_string(),
    ];
    let mut p = Proc::spawn("baseline upstream", &me, &a, &dir.join("upstream.log"))?;
    let addr: SocketAddr = p
        .stdout_line("listening on ", Duration::from_secs(10))
        .await?
        .parse()
        .context("the upstream's address")?;
    Ok((p, Endpoint::new(addr, "/mcp")))
}

/// Find nginx: the option, PATH, then /usr/sbin.
fn find_nginx(args: &RunArgs) -> Option<PathBuf> {
    if let Some(p) = &args.nginx {
        return Some(p.clone());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

/// Start nginx as a plain process (no daemon, no systemd) with a generated
/// configuration under `dir`: two workers, `proxy_pass` with upstream keep-alive.
async fn start_nginx(
    bin: &Path,
    upstream: &Endpoint,
    dir: &Path,
) -> anyhow::Result<(Proc, Endpoint)> {
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(prefix.join("logs"))?;
    let listen = procs::free_port()?;
    let root = std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .map(|l| l.split_whitespace().nth(2) == Some("0"))
            })
            .unwrap_or(false);
    let p = prefix.display();
    let conf = format!(
        r#"{user}
worker_processes 2;
daemon off;
master_process on;
pid {p}/nginx.pid;
error_log {p}/logs/error.log warn;
worker_rlimit_nofile 65535;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    keepalive_requests 1000000;
    upstream mcp_upstream {{
        server {up};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://mcp_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"#,
        user = if root { "user root;" } else { "" },
        up = upstream.addr,
    );
    let file = prefix.join("nginx.conf");
    std::fs::write(&file, conf)?;
    let args = vec![
        "-p".to_string(),
        format!("{p}/"),
        "-e".into(),
        format!("{p}/logs/error.log"),
        "-c".into(),
        file.display().to_string(),
    ];
    let mut proc_ = Proc::spawn("nginx", bin, &args, &prefix.join("logs/stderr.log"))?;
    procs::wait_http_ok(&mut proc_, listen, "/stats", Duration::from_secs(10))
        .await
        .with_context(|| {
            format!(
                "nginx error log:\n{}{}",
                tail(&prefix.join("logs/stderr.log")),
                tail(&prefix.join("logs/error.log"))
            )
        })?;
    Ok((proc_, Endpoint::new(listen, "/mcp")))
}

fn sample(r: RunResult) -> Sample {
    let mut lat = r.lat_us;
    let pct = Pct::of(&mut lat);
    Sample {
        rps: lat.len() as f64 / r.window.as_secs_f64().max(1e-9),
        n: lat.len(),
        pct,
        errors: r.errors,
        first_error: r.first_error,
        late: r.late,
        lat,
        total: r.total,
        sse: r.sse,
        ..Sample::default()
    }
}

/// Processes whose CPU a run accounts for.
#[derive(Clone, Default)]
struct Cpu {
    proxy: Vec<u32>,
    upstream: Vec<u32>,
}

/// Wait until the machine, apart from what it ran before, is quiet: less than
/// `max_other` of a core busy over half a second. False if it did not get quiet
/// within `limit`.
async fn wait_quiet(max_other: f64, limit: Duration) -> bool {
    let t0 = Instant::now();
    let quiet = wait_quiet_inner(max_other, limit).await;
    QUIET_SPENT_MS.fetch_add(t0.elapsed().as_millis() as u64, Ordering::Relaxed);
    quiet
}

/// Time spent waiting for a quiet machine and re-running disturbed runs, ms.
static QUIET_SPENT_MS: AtomicU64 = AtomicU64::new(0);

/// Whether there is budget left for waiting and retrying.
fn quiet_budget_left(args: &RunArgs) -> bool {
    !args.quiet_wait.is_zero()
        && QUIET_SPENT_MS.load(Ordering::Relaxed) < args.quiet_budget.as_millis() as u64
}

async fn wait_quiet_inner(max_other: f64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut said = false;
    loop {
        let m0 = procs::machine_busy_secs();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let busy = (procs::machine_busy_secs() - m0) / 0.5;
        if busy <= max_other {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        if !said {
            eprintln!(
                "  (waiting for a quiet machine: {:.0}% of a core busy elsewhere)",
                busy * 100.0
            );
            said = true;
        }
    }
}

/// Run a load until it is not disturbed by the rest of the machine (at most
/// `1 + retries` times), keeping the least disturbed run.
async fn measured<F, Fut>(args: &RunArgs, cpu: &Cpu, mut make: F) -> anyhow::Result<Sample>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<RunResult>>,
{
    let mut best: Option<Sample> = None;
    for attempt in 1..=args.retries + 1 {
        if quiet_budget_left(args) {
            wait_quiet(args.max_other, args.quiet_wait).await;
        }
        let t0 = Instant::now();
        let mut s = with_cpu(cpu, make()).await?;
        if attempt > 1 {
            QUIET_SPENT_MS.fetch_add(t0.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        s.attempts = attempt;
        let quiet = s.cpu_other <= args.max_other;
        if best.as_ref().is_none_or(|b| s.cpu_other < b.cpu_other) {
            best = Some(s);
        }
        if quiet || !quiet_budget_left(args) {
            break;
        }
        if attempt <= args.retries {
            eprintln!("  (disturbed run: the rest of the machine was busy; again)");
        }
    }
    let mut best = best.expect("at least one attempt");
    best.attempts = best.attempts.max(1);
    Ok(best)
}

/// Run `f` and attach the CPU each side used to its sample.
async fn with_cpu<F>(cpu: &Cpu, f: F) -> anyhow::Result<Sample>
where
    F: std::future::Future<Output = anyhow::Result<RunResult>>,
{
    let me = [std::process::id()];
    let (c0, p0, u0, m0) = (
        procs::cpu_secs(&me),
        procs::cpu_secs(&cpu.proxy),
        procs::cpu_secs(&cpu.upstream),
        procs::machine_busy_secs(),
    );
    let t0 = Instant::now();
    let r = f.await?;
    let wall = t0.elapsed().as_secs_f64().max(1e-9);
    let (c1, p1, u1, m1) = (
        procs::cpu_secs(&me),
        procs::cpu_secs(&cpu.proxy),
        procs::cpu_secs(&cpu.upstream),
        procs::machine_busy_secs(),
    );
    let mut s = sample(r);
    let n = s.total.max(1) as f64;
    s.cpu_client = (c1 - c0) / wall;
    s.cpu_proxy = (p1 - p0) / wall;
    s.cpu_upstream = (u1 - u0) / wall;
    s.cpu_other = ((m1 - m0) - (c1 - c0) - (p1 - p0) - (u1 - u0)).max(0.0) / wall;
    s.proxy_us_per_req = (p1 - p0) * 1e6 / n;
    s.upstream_us_per_req = (u1 - u0) * 1e6 / n;
    Ok(s)
}

fn log_run(label: &str, s: &Sample) {
    eprintln!(
        "  {label:<22} {:>9.0} req/s  p50 {:>6} µs  p99 {:>6} µs  max {:>7} µs  cpu: client {:>3.0}% proxy {:>3.0}% upstream {:>3.0}% other {:>3.0}%  errors {}{}",
        s.rps,
        s.pct.p50,
        s.pct.p99,
        s.pct.max,
        s.cpu_client * 100.0,
        s.cpu_proxy * 100.0,
        s.cpu_upstream * 100.0,
        s.cpu_other * 100.0,
        s.errors,
        s.first_error
            .as_ref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
}

/// Run everything and write the report.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let started = std::time::SystemTime::now();
    let tasklift_bin = match &args.tasklift {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the harness's directory")?
            .join("tasklift"),
    };
    if !tasklift_bin.is_file() {
        bail!(
            "no tasklift binary at {} (build it: cargo build --release --bin tasklift, or pass --tasklift)",
            tasklift_bin.display()
        );
    }
    let (soft, hard) = procs::nofile_limits();
    eprintln!("tasklift-bench: open files limit {soft} (hard {hard}); children raise theirs to the hard limit");
    let work = TempDir::new("run")?;
    let (mut upstream, up) = start_upstream(&args, work.path()).await?;
    eprintln!("baseline upstream on {}", up.url());

    let mut nginx = None;
    if !skip(&args, "nginx") {
        let bin = find_nginx(&args).context(
            "nginx not found (install it, e.g. apt-get install -y nginx-light, or pass --skip nginx)",
        )?;
        let (p, ep) = start_nginx(&bin, &up, work.path()).await?;
        eprintln!("nginx ({}) on {}", bin.display(), ep.url());
        nginx = Some((p, ep));
    }
    let main = Tasklift::start(
        &tasklift_bin,
        &up,
        "main",
        MAIN_THRESHOLD,
        &[("sleep", GET_THRESHOLD)],
        None,
    )
    .await?;
    eprintln!("tasklift on {} (threshold 2s; sleep: 20ms)", main.ep.url());

    // The same tasks/get and creation scenarios with the PostgreSQL store, on a
    // scratch database dropped at the end.
    let scratch = match &args.postgres {
        Some(url) => Some(ScratchDb::create(url).await?),
        None => None,
    };
    let mut pg = None;
    if let Some(db) = &scratch {
        let get = Tasklift::start(
            &tasklift_bin,
            &up,
            "pg-main",
            MAIN_THRESHOLD,
            &[("sleep", GET_THRESHOLD)],
            Some(&db.url),
        )
        .await?;
        let ids = create_completed_tasks(&get.ep, args.get_tasks).await?;
        let work = Arc::new(Workload {
            requests: ids.iter().map(|id| wire::tasks_get(id)).collect(),
            expect: b"\"status\":\"completed\"",
        });
        let creation = Tasklift::start(
            &tasklift_bin,
            &up,
            "pg-creation",
            CREATION_THRESHOLD,
            &[],
            Some(&db.url),
        )
        .await?;
        eprintln!("tasklift with the PostgreSQL store on {}", get.ep.url());
        pg = Some((get, work, creation));
    }

    let fast = Arc::new(Workload {
        requests: vec![wire::tool_call("fast", json!({}), true)],
        expect: b"\"text\":\"ok\"",
    });

    // tasks/get: create tasks that complete, then poll them round-robin.
    let mut get_work = None;
    if !skip(&args, "tasks-get") {
        let t0 = Instant::now();
        let ids = create_completed_tasks(&main.ep, args.get_tasks).await?;
        eprintln!(
            "created {} completed tasks for tasks/get in {:.1}s",
            ids.len(),
            t0.elapsed().as_secs_f64()
        );
        get_work = Some(Arc::new(Workload {
            requests: ids.iter().map(|id| wire::tasks_get(id)).collect(),
            expect: b"\"status\":\"completed\"",
        }));
    }
    let creation_tl = if skip(&args, "creation") {
        None
    } else {
        Some(
            Tasklift::start(
                &tasklift_bin,
                &up,
                "creation",
                CREATION_THRESHOLD,
                &[],
                None,
            )
            .await?,
        )
    };

    let mut rep = Report::new(&args);
    rep.started = Some(started);
    rep.fsync = fsync_latency(work.path(), if args.quick { 10 } else { 50 })?;
    let (w, d, c) = (args.warmup, args.duration, args.concurrency);
    for r in 0..args.reps {
        eprintln!("repetition {}/{}", r + 1, args.reps);
        let up_cpu = vec![upstream.pid()?];
        let mut targets: Vec<(&str, &Endpoint, Cpu)> = vec![(
            "direct",
            &up,
            Cpu {
                proxy: Vec::new(),
                upstream: up_cpu.clone(),
            },
        )];
        if let Some((p, ep)) = &nginx {
            let cpu = Cpu {
                proxy: procs::with_children(p.pid()?),
                upstream: up_cpu.clone(),
            };
            targets.push(("nginx", ep, cpu));
        }
        let tl_cpu = Cpu {
            proxy: vec![main.pid()?],
            upstream: up_cpu.clone(),
        };
        targets.push(("tasklift", &main.ep, tl_cpu.clone()));
        for (label, ep, cpu) in &targets {
            let s = measured(&args, cpu, || loadgen::closed(ep, fast.clone(), c, w, d)).await?;
            log_run(label, &s);
            rep.push(label, s);
        }
        if let Some(gw) = &get_work {
            let s = measured(&args, &tl_cpu, || {
                loadgen::closed(&main.ep, gw.clone(), c, w, d)
            })
            .await?;
            log_run("tasks/get", &s);
            rep.push("tasks/get", s);
        }
        if let Some((tl, gw, _)) = &pg {
            // The store's work is the database server's: its CPU counts with
            // tasklift's (a local server; a remote one shows as neither).
            let mut proxy = vec![tl.pid()?];
            proxy.extend(procs::named("postgres"));
            let cpu = Cpu {
                proxy,
                upstream: up_cpu.clone(),
            };
            let s = measured(&args, &cpu, || loadgen::closed(&tl.ep, gw.clone(), c, w, d)).await?;
            log_run(PG_GET, &s);
            rep.push(PG_GET, s);
        }
        if !skip(&args, "open") {
            for (label, ep, cpu) in &targets {
                let label = format!("{label} @{:.0}/s", args.rate);
                let s = measured(&args, cpu, || {
                    loadgen::open(ep, fast.clone(), args.rate, args.open_connections, w, d)
                })
                .await?;
                log_run(&label, &s);
                rep.push(&label, s);
            }
        }
        if let Some(tl) = &creation_tl {
            if quiet_budget_left(&args) {
                wait_quiet(args.max_other, args.quiet_wait).await;
            }
            let cr = creation(&tl.ep, args.creation_clients, d).await?;
            eprintln!(
                "  creation: {} tasks, handle p99 {} µs, completion overhead p99 {} µs, errors {}",
                cr.handle_us.len(),
                loadgen::quantile(&sorted(&cr.handle_us), 0.99),
                loadgen::quantile(&sorted(&cr.complete_over_us), 0.99),
                cr.errors
            );
            rep.creation.push(cr);
        }
        if let Some((_, _, tl)) = &pg {
            let cr = creation(&tl.ep, args.creation_clients, d).await?;
            eprintln!(
                "  creation (PostgreSQL): {} tasks, handle p99 {} µs, completion overhead p99 {} µs, errors {}",
                cr.handle_us.len(),
                loadgen::quantile(&sorted(&cr.handle_us), 0.99),
                loadgen::quantile(&sorted(&cr.complete_over_us), 0.99),
                cr.errors
            );
            rep.creation_pg.push(cr);
        }
        upstream.check_alive()?;
    }
    rep.logs.push(main.log_summary("main"));
    if let Some(t) = &creation_tl {
        rep.logs.push(t.log_summary("creation"));
    }
    rep.main_mem = procs::mem(main.pid()?).ok();
    drop(creation_tl);
    drop(main);
    if let Some((a, _, b)) = pg.take() {
        rep.logs.push(a.log_summary("pg-main"));
        rep.logs.push(b.log_summary("pg-creation"));
    }
    if let Some(db) = scratch {
        db.drop_db().await;
    }

    if !skip(&args, "memory") {
        let tl = Tasklift::start(&tasklift_bin, &up, "memory", MEMORY_THRESHOLD, &[], None).await?;
        if quiet_budget_left(&args) {
            wait_quiet(args.max_other, args.quiet_wait).await;
        }
        let m = memory(&tl, &up, upstream.pid()?, args.tasks, args.memory_clients).await?;
        rep.logs.push(tl.log_summary("memory"));
        eprintln!(
            "memory: {} tasks, idle {} KiB, loaded {} KiB → {:.2} KiB per task; {} completed in {:.2}s, {} errors",
            m.tasks,
            m.idle.rss_kib,
            m.loaded.rss_kib,
            m.per_task_kib(),
            m.completed,
            m.drain.as_secs_f64(),
            m.errors
        );
        rep.memory = Some(m);
    }
    if !skip(&args, "churn") {
        rep.churn = Some(churn(&args).await?);
    }
    drop(nginx);
    drop(upstream);

    rep.finish(&args, &tasklift_bin)?;
    Ok(())
}

/// How long a small write plus `fdatasync` takes in `dir` (where the tasklift
/// stores live): the floor under anything tasklift flushes before it answers.
fn fsync_latency(dir: &Path, n: usize) -> anyhow::Result<Vec<u32>> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let t = std::time::Instant::now();
        f.write_all(&[i as u8; 512])?;
        f.sync_data()?;
        v.push(t.elapsed().as_micros() as u32);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    v.sort_unstable();
    Ok(v)
}

fn sorted(v: &[u32]) -> Vec<u32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// Create `n` tasks (sleep 50 ms past a 20 ms threshold) from 50 connections and wait
/// until every one is `completed`; their ids. A call answered before its threshold
/// (a loaded machine) is made again, up to 5 times.
async fn create_completed_tasks(ep: &Endpoint, n: usize) -> anyhow::Result<Vec<String>> {
    let clients = n.clamp(1, 50);
    let mut handles = Vec::new();
    for k in 0..clients {
        let ep = ep.clone();
        let count = n / clients + usize::from(k < n % clients);
        handles.push(tokio::spawn(async move {
            let mut c = Conn::connect(&ep).await?;
            let call = wire::tool_call("sleep", json!({"ms": 50}), true);
            let mut ids = Vec::with_capacity(count);
            for _ in 0..count {
                // On a loaded machine the 50 ms answer can beat the 20 ms threshold
                // (then it is a plain result, correctly): call again.
                let mut tries = 0;
                let id = loop {
                    let r = c.result(&call).await?;
                    match task_id(&r) {
                        Ok(id) => break id,
                        Err(e) if tries == 5 => return Err(e),
                        Err(_) => tries += 1,
                    }
                };
                ids.push(id);
            }
            for id in &ids {
                wait_completed(
                    &mut c,
                    id,
                    Duration::from_millis(5),
                    Duration::from_secs(30),
                )
                .await?;
            }
            anyhow::Ok(ids)
        }));
    }
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(h.await??);
    }
    Ok(all)
}

fn task_id(r: &Value) -> anyhow::Result<String> {
    if r["resultType"] != "task" {
        bail!("expected a task handle, got {r}");
    }
    Ok(r["taskId"].as_str().context("taskId")?.to_string())
}

/// Poll `tasks/get` every `every` until the task is `completed` (an error if it ends
/// otherwise, or not within `limit`).
async fn wait_completed(
    c: &mut Conn,
    id: &str,
    every: Duration,
    limit: Duration,
) -> anyhow::Result<()> {
    let get = wire::tasks_get(id);
    let deadline = Instant::now() + limit;
    loop {
        let t = c.result(&get).await?;
        match t["status"].as_str() {
            Some("completed") => return Ok(()),
            Some("working") => {}
            _ => bail!("task {id} ended {t}"),
        }
        if Instant::now() > deadline {
            bail!("task {id} not completed within {limit:?}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Task creation: `clients` connections each call `sleep` (200 ms, threshold 50 ms)
/// for `duration`, timing the handle, then poll `tasks/get` every 2 ms until the
/// task is `completed`.
async fn creation(ep: &Endpoint, clients: usize, duration: Duration) -> anyhow::Result<Creation> {
    let end = Instant::now() + duration;
    let mut handles = Vec::new();
    for _ in 0..clients {
        let ep = ep.clone();
        handles.push(tokio::spawn(async move {
            let mut out = Creation::default();
            let mut c = Conn::connect(&ep).await?;
            let call = wire::tool_call(
                "sleep",
                json!({"ms": CREATION_SLEEP.as_millis() as u64}),
                true,
            );
            while Instant::now() < end {
                let t0 = Instant::now();
                let id = match c.result(&call).await.and_then(|r| task_id(&r)) {
                    Ok(id) => id,
                    Err(e) => {
                        out.fail(format!("{e:#}"));
                        if c.is_closed() {
                            c = Conn::connect(&ep).await?;
                        }
                        continue;
                    }
                };
                out.handle_us.push(t0.elapsed().as_micros() as u32);
                let get = wire::tasks_get(&id);
                loop {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    match c.result(&get).await {
                        Ok(t) => match t["status"].as_str() {
                            Some("completed") => {
                                let over = t0.elapsed().saturating_sub(CREATION_SLEEP);
                                out.complete_over_us.push(over.as_micros() as u32);
                                break;
                            }
                            Some("working") => {}
                            _ => {
                                out.fail(format!("task ended {t}"));
                                break;
                            }
                        },
                        Err(e) => {
                            out.fail(format!("{e:#}"));
                            break;
                        }
                    }
                    if t0.elapsed() > Duration::from_secs(30) {
                        out.fail("task not completed within 30s".into());
                        break;
                    }
                }
            }
            anyhow::Ok(out)
        }));
    }
    let mut all = Creation::default();
    for h in handles {
        let o = h.await??;
        all.handle_us.extend(o.handle_us);
        all.complete_over_us.extend(o.complete_over_us);
        all.errors += o.errors;
        if all.first_error.is_none() {
            all.first_error = o.first_error;
        }
    }
    Ok(all)
}

/// Upstream `/stats`.
async fn upstream_stats(up: &Endpoint) -> anyhow::Result<Value> {
    let mut c = Conn::connect(up).await?;
    let (s, b) = c.plain("GET", "/stats").await?;
    if !s.is_success() {
        bail!("upstream /stats: HTTP {s}");
    }
    Ok(serde_json::from_slice(&b)?)
}

/// Memory per running task: RSS idle, then with `n` `hold` calls running as tasks,
/// then release them all and time until every task reads `completed`.
async fn memory(
    tl: &Tasklift,
    up: &Endpoint,
    up_pid: u32,
    n: usize,
    clients: usize,
) -> anyhow::Result<Memory> {
    let pid = tl.pid()?;
    // Warm: connections, pools, the tool list.
    {
        let mut c = Conn::connect(&tl.ep).await?;
        for _ in 0..20 {
            c.result(&wire::tool_call("fast", json!({}), true)).await?;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = procs::mem(pid)?;
    let upstream_idle = procs::mem(up_pid)?;
    let idle_fds = procs::fd_count(pid);
    let held_before = upstream_stats(up).await?["held"].as_u64().unwrap_or(0);

    let clients = clients.clamp(1, n.max(1));
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for k in 0..clients {
        let ep = tl.ep.clone();
        let count = n / clients + usize::from(k < n % clients);
        handles.push(tokio::spawn(async move {
            let mut c = Conn::connect(&ep).await?;
            let call = wire::tool_call("hold", json!({"max_ms": 600_000}), true);
            let mut ids = Vec::with_capacity(count);
            for _ in 0..count {
                ids.push(task_id(&c.result(&call).await?)?);
            }
            anyhow::Ok((c, ids))
        }));
    }
    let mut workers = Vec::new();
    for h in handles {
        workers.push(h.await??);
    }
    let to_handles = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    let held = loop {
        let held = upstream_stats(up).await?["held"].as_u64().unwrap_or(0) - held_before;
        if held as usize >= n {
            break held;
        }
        if Instant::now() > deadline {
            bail!("the upstream holds {held} calls, not {n}, a minute after the handles came back");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = procs::mem(pid)?;
    let upstream_loaded = procs::mem(up_pid)?;
    let loaded_fds = procs::fd_count(pid);
    let ups = upstream_stats(up).await?;

    let mut c = Conn::connect(up).await?;
    let t1 = Instant::now();
    let (s, _) = c.plain("POST", "/release").await?;
    if !s.is_success() {
        bail!("upstream /release: HTTP {s}");
    }
    let mut handles = Vec::new();
    for (mut c, ids) in workers {
        handles.push(tokio::spawn(async move {
            let mut pending: Vec<String> = ids;
            let (mut completed, mut errors) = (0usize, 0usize);
            let mut first_error = None;
            let deadline = Instant::now() + Duration::from_secs(120);
            while !pending.is_empty() {
                let mut still = Vec::new();
                for id in pending {
                    match c.result(&wire::tasks_get(&id)).await {
                        Ok(t) => match t["status"].as_str() {
                            Some("completed") => completed += 1,
                            Some("working") => still.push(id),
                            _ => {
                                errors += 1;
                                first_error.get_or_insert_with(|| format!("task ended {t}"));
                            }
                        },
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| format!("{e:#}"));
                        }
                    }
                }
                pending = still;
                if Instant::now() > deadline {
                    errors += pending.len();
                    first_error.get_or_insert_with(|| "tasks not completed within 120s".into());
                    break;
                }
                if !pending.is_empty() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            (completed, errors, first_error)
        }));
    }
    let mut m = Memory {
        tasks: n,
        clients,
        idle,
        loaded,
        upstream_idle,
        upstream_loaded,
        idle_fds,
        loaded_fds,
        held,
        upstream_connections: ups["connections"].as_u64().unwrap_or(0),
        to_handles,
        ..Memory::default()
    };
    for h in handles {
        let (done, errs, first) = h.await?;
        m.completed += done;
        m.errors += errs;
        if m.first_error.is_none() {
            m.first_error = first;
        }
    }
    m.drain = t1.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    m.after = procs::mem(pid).ok();
    Ok(m)
}

/// Run `examples/store_churn` (the release build when it is there, else through
/// cargo) and keep its output.
async fn churn(args: &RunArgs) -> anyhow::Result<report::Churn> {
    let churn_args: Vec<String> = args
        .churn_args
        .split_whitespace()
        .map(String::from)
        .collect();
    let built = args.repo.join("target/release/examples/store_churn");
    let (program, mut full): (PathBuf, Vec<String>) = if built.is_file() {
        (built.clone(), Vec::new())
    } else {
        (
            PathBuf::from("cargo"),
            [
                "run",
                "-q",
                "--release",
                "-p",
                "tasklift-bench",
                "--example",
                "store_churn",
                "--",
            ]
            .map(String::from)
            .to_vec(),
        )
    };
    full.extend(churn_args);
    let command = format!("{} {}", program.display(), full.join(" "));
    eprintln!("store churn: {command}");
    let t0 = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(&program)
            .args(&full)
            .current_dir(&args.repo)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("store_churn took over 5 minutes")?
    .with_context(|| format!("running {command}"))?;
    if !out.status.success() {
        bail!(
            "{command} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(report::Churn {
        command,
        output: String::from_utf8_lossy(&out.stdout).into_owned(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}
