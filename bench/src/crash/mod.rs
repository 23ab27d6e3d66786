//! `tasklift-bench crash`: `kill -9` at scale. The real `tasklift serve` in front of
//! the real fixture upstream, clients making slow calls that declare the tasks
//! extension, a `kill -9` at a random (seeded) moment each round, a restart, and
//! after each round every handle ever returned read back:
//!
//! - found by `tasks/get` (else *missing*);
//! - a terminal state identical, byte for byte, to what a client saw before, and
//!   an outcome the upstream gave or the kill's error (else *changed*);
//! - nothing `working`/`input_required` past its deadline (else *stuck*): on sled,
//!   a task in flight at the kill is `failed` ("tasklift restarted …") once the
//!   process is back; on PostgreSQL, the surviving replicas fail the killed
//!   replica's tasks ("… replica … was lost …") within the lease.
//!
//! `--store sled`: one process, killed and restarted each round. `--store postgres
//! --replicas 3`: one of three killed each round (load goes on on the others),
//! restarted after its tasks are settled; with `--restart-postgres`, one round
//! restarts the PostgreSQL server itself instead (`pg_ctlcluster … restart`).
//!
//! `--store sled --fill-and-free --cycles 50`: no kills; the data directory's disk
//! (a tmpfs of its own) is filled to the last byte under load and freed, each
//! cycle, with the same book of handles and checks (`fill.rs`).

mod book;
mod cluster;
mod fill;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

use book::{Conns, Rng, Shared, State};
use cluster::{Fixture, Instance, ScratchDb, Store};

/// Which store the processes use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    Sled,
    Postgres,
}

/// Options of `tasklift-bench crash`.
#[derive(Args, Clone, Debug)]
pub struct CrashArgs {
    /// The store: one process on sled, or replicas on PostgreSQL.
    #[arg(long, value_enum, default_value = "sled")]
    pub store: StoreKind,
    /// Replicas (PostgreSQL only; one is killed each round).
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Rounds, one `kill -9` each.
    #[arg(long, default_value_t = 100)]
    pub rounds: usize,
    /// Seed of the kill moments, victims and calls (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Concurrent clients making calls.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Shortest load before the kill of a round.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    pub min_load: Duration,
    /// Longest load before the kill of a round.
    #[arg(long, default_value = "2500ms", value_parser = humantime::parse_duration)]
    pub max_load: Duration,
    /// Longest of the long calls made on each process every round (at least 2 s).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub long_max: Duration,
    /// The replicas' lease (PostgreSQL).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub lease: Duration,
    /// How long past its deadline (the lease after a kill, its run time otherwise)
    /// a task may stay open before it counts as stuck: a hang guard, not a target.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// The PostgreSQL server: a scratch database is created on it and dropped.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub postgres: String,
    /// Also restart the PostgreSQL server in one round (`pg_ctlcluster VERSION NAME
    /// restart`, as root). Off by default: the server may be shared.
    #[arg(long)]
    pub restart_postgres: bool,
    /// The cluster `--restart-postgres` restarts, "VERSION NAME" (default: the one
    /// version under /etc/postgresql, `main`).
    #[arg(long)]
    pub pg_cluster: Option<String>,
    /// The tasklift binary (default: `tasklift` beside this one).
    #[arg(long)]
    pub tasklift: Option<PathBuf>,
    /// The fixture upstream's binary (default: `tasklift-fixture` beside this one).
    #[arg(long)]
    pub fixture: Option<PathBuf>,
    /// Keep the processes' logs and data (printed at the end) even when all is well.
    #[arg(long)]
    pub keep: bool,
    /// Instead of kills: fill the data directory's disk (a tmpfs of its own) to the
    /// last byte under load, keep calling, free it, and again (`--store sled`; see
    /// fill.rs). Needs root to mount the tmpfs.
    #[arg(long)]
    pub fill_and_free: bool,
    /// Fill-and-free cycles.
    #[arg(long, default_value_t = 50)]
    pub cycles: usize,
    /// Size of the tmpfs the data directory is on (fill-and-free).
    #[arg(long, default_value = "80m")]
    pub tmpfs_size: String,
    /// `store.min_free_bytes` of tasklift (fill-and-free).
    #[arg(long, default_value_t = 8 << 20)]
    pub min_free_bytes: u64,
    /// How long calls go on against the full disk each cycle (fill-and-free).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub full_for: Duration,
    /// Load with room on the disk between a cycle's tasks coming back and the
    /// next fill (fill-and-free).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub room_for: Duration,
    /// The longest time from a free to a slow call becoming a task again that
    /// passes (fill-and-free).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub tasks_again_max: Duration,
}

/// Figures of the whole run, beyond the load's.
#[derive(Default)]
struct RunFigures {
    kills: usize,
    restarts: Vec<Duration>,
    slowest_orphan: Duration,
    orphans_at_kills: usize,
    db_restart: Option<Duration>,
}

fn beside_me(given: &Option<PathBuf>, name: &str) -> anyhow::Result<PathBuf> {
    let p = match given {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name(name),
    };
    if !p.is_file() {
        bail!(
            "no {name} binary at {} (build it, e.g. cargo build --release -p tasklift -p tasklift-fixture, or pass --{})",
            p.display(),
            if name == "tasklift" { "tasklift" } else { "fixture" }
        );
    }
    Ok(p)
}

fn commit() -> String {
    std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The run's seed: `--seed`, or the clock's; always odd.
fn seed(args: &CrashArgs) -> u64 {
    args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    }) | 1
}

/// Run it; `Ok(true)` when nothing was missing, stuck or changed.
pub async fn run(args: CrashArgs) -> anyhow::Result<bool> {
    if args.fill_and_free {
        return fill::run(args).await;
    }
    let seed = seed(&args);
    let tasklift = beside_me(&args.tasklift, "tasklift")?;
    let fixture_bin = beside_me(&args.fixture, "tasklift-fixture")?;
    let n = match args.store {
        StoreKind::Sled => 1,
        StoreKind::Postgres if args.replicas >= 2 => args.replicas,
        StoreKind::Postgres => bail!("--replicas: at least 2, one survives each kill"),
    };
    let dir = crate::procs::TempDir::new("crash")?;
    let db = match args.store {
        StoreKind::Sled => None,
        StoreKind::Postgres => Some(ScratchDb::create(&args.postgres, "crash").await?),
    };
    let cluster_name = if args.restart_postgres && db.is_some() {
        Some(cluster::pg_cluster(args.pg_cluster.as_deref())?)
    } else {
        None
    };
    println!(
        "kill -9 harness: store {}, {n} process{}, {} rounds, seed {seed}, {} clients, load {:?}–{:?} before each kill, long calls up to {:?}{}, commit {}",
        match args.store {
            StoreKind::Sled => "sled",
            StoreKind::Postgres => "postgres",
        },
        if n == 1 { "" } else { "es" },
        args.rounds,
        args.clients,
        args.min_load,
        args.max_load,
        args.long_max,
        if db.is_some() { format!(", lease {:?}", args.lease) } else { String::new() },
        commit(),
    );
    println!("tasklift: {}", tasklift.display());
    let result = rounds(
        &args,
        seed,
        n,
        &tasklift,
        &fixture_bin,
        &dir,
        db.as_ref(),
        cluster_name,
    )
    .await;
    if let Some(db) = &db {
        db.drop_db().await;
    }
    kept_if_failed(result, dir, args.keep, "logs and data")
}

/// A run's verdict; its directory (`what` it holds) is kept, and named, when the
/// run failed or `keep` asks for it, and deleted otherwise.
fn kept_if_failed(
    result: anyhow::Result<bool>,
    dir: crate::procs::TempDir,
    keep: bool,
    what: &str,
) -> anyhow::Result<bool> {
    let ok = match result {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("{what} kept in {}", dir.path().display());
            std::mem::forget(dir);
            return Err(e);
        }
    };
    if !ok || keep {
        println!("{what} kept in {}", dir.path().display());
        std::mem::forget(dir);
    }
    Ok(ok)
}

#[allow(clippy::too_many_arguments)]
async fn rounds(
    args: &CrashArgs,
    seed: u64,
    n: usize,
    tasklift: &std::path::Path,
    fixture_bin: &std::path::Path,
    dir: &crate::procs::TempDir,
    db: Option<&ScratchDb>,
    cluster_name: Option<(String, String)>,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let mut rng = Rng(seed);
    let fixture = Fixture::start(fixture_bin, dir.path()).await?;
    let store = match db {
        None => Store::Sled,
        Some(db) => Store::Postgres {
            url: db.url.clone(),
            lease: args.lease,
        },
    };
    let shared: Shared = Arc::new(Mutex::new(State::default()));
    let mut gen = 0usize;
    let mut procs: Vec<Instance> = Vec::new();
    for slot in 0..n {
        gen += 1;
        procs.push(Instance::start(tasklift, dir.path(), slot, gen, &store, &fixture.url).await?);
    }
    set_live(&shared, &procs);
    let mut fig = RunFigures::default();
    // The PostgreSQL restart round: the middle one.
    let db_round = (db.is_some()).then_some(args.rounds.div_ceil(2).max(1));
    let long_max = args.long_max.max(Duration::from_secs(2));
    for round in 1..=args.rounds {
        let before = shared.lock().unwrap().order.len();
        let stop = Arc::new(AtomicBool::new(false));
        let mut load = Vec::new();
        for i in 0..args.clients {
            let s = rng.next();
            let tag = format!("r{round}c{i}");
            load.push(tokio::spawn(book::client(
                shared.clone(),
                stop.clone(),
                s,
                tag,
            )));
        }
        for _ in 0..2 {
            load.push(tokio::spawn(book::poller(
                shared.clone(),
                stop.clone(),
                rng.next(),
            )));
        }
        // One long call on each process: certainly in flight at its kill.
        let mut conns = Conns::default();
        for p in &procs {
            let secs = rng.range(2_000, long_max.as_millis() as u64 + 1) as f64 / 1000.0;
            let call = book::compute(&mut rng, &format!("long-r{round}-g{}-", p.gen), secs);
            book::make_call(&shared, &mut conns, &mut rng, Some(call), Some(p.gen))
                .await
                .with_context(|| format!("round {round}: the long call on process {}", p.gen))?;
        }
        let load_for = rng.between(args.min_load, args.max_load);
        tokio::time::sleep(load_for).await;
        for p in procs.iter_mut() {
            p.check_alive()?;
        }
        let what;
        if db_round == Some(round) && cluster_name.is_none() {
            println!("round {round}: PostgreSQL restart SKIPPED (pass --restart-postgres to restart the server)");
        }
        if let (Some(cl), true) = (&cluster_name, db_round == Some(round)) {
            // The database goes away under load; every replica lives.
            let from = Instant::now();
            // Known before the database goes: tasks it fails are judged meanwhile.
            shared.lock().unwrap().db_restarts.push((from, from));
            let took = cluster::restart_postgres(cl).await?;
            if let Some(r) = shared.lock().unwrap().db_restarts.last_mut() {
                r.1 = Instant::now();
            }
            fig.db_restart = Some(took);
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.store(true, Ordering::Relaxed);
            join(load).await?;
            what = format!(
                "restarted PostgreSQL ({} {}) after {:.2} s of load, in {:.2} s",
                cl.0,
                cl.1,
                load_for.as_secs_f64(),
                took.as_secs_f64()
            );
        } else {
            let slot = (rng.next() % n as u64) as usize;
            let victim = procs[slot].gen;
            procs[slot].kill9().await?;
            let killed = Instant::now();
            fig.kills += 1;
            {
                let mut st = shared.lock().unwrap();
                st.dead.insert(victim, killed);
                st.live.retain(|(g, _)| *g != victim);
            }
            let (settled, count, took);
            if n == 1 {
                // Nobody serves until it is back.
                stop.store(true, Ordering::Relaxed);
                join(load).await?;
                gen += 1;
                let t0 = Instant::now();
                procs[slot] =
                    Instance::start(tasklift, dir.path(), slot, gen, &store, &fixture.url).await?;
                took = t0.elapsed();
                set_live(&shared, &procs);
                (settled, count) = book::settle_dead(
                    &shared,
                    victim,
                    killed,
                    Instant::now() + args.grace,
                    "restarted",
                )
                .await;
            } else {
                // The others serve on and fail its tasks within the lease.
                (settled, count) = book::settle_dead(
                    &shared,
                    victim,
                    killed,
                    killed + args.lease + args.grace,
                    "lease lapsed",
                )
                .await;
                stop.store(true, Ordering::Relaxed);
                join(load).await?;
                gen += 1;
                let t0 = Instant::now();
                procs[slot] =
                    Instance::start(tasklift, dir.path(), slot, gen, &store, &fixture.url).await?;
                took = t0.elapsed();
                set_live(&shared, &procs);
            }
            fig.restarts.push(took);
            fig.slowest_orphan = fig.slowest_orphan.max(settled);
            fig.orphans_at_kills += count;
            what = format!(
                "killed {} (process {victim}) after {:.2} s of load; {count} in flight settled {:.2} s after the kill; restarted in {:.2} s",
                if n == 1 { "tasklift".to_string() } else { format!("replica {slot}") },
                load_for.as_secs_f64(),
                settled.as_secs_f64(),
                took.as_secs_f64()
            );
        }
        let checked = book::check_all(&shared, 6, args.grace).await;
        let st = shared.lock().unwrap();
        println!(
            "round {round}/{}: {what}; {} new handles; checked {checked}: missing {}, stuck {}, changed {}",
            args.rounds,
            st.order.len() - before,
            st.findings.missing.len(),
            st.findings.stuck.len(),
            st.findings.changed.len(),
        );
    }
    // The long calls on live processes end on their own: wait for them.
    let deadline = Instant::now() + long_max + args.grace;
    loop {
        let open = {
            let st = shared.lock().unwrap();
            st.handles.values().filter(|h| h.is_open()).count()
        };
        if open == 0 || Instant::now() > deadline {
            break;
        }
        book::check_all(&shared, 6, args.grace).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    book::check_all(&shared, 6, Duration::ZERO).await;
    for p in procs.iter_mut() {
        p.check_alive()?;
    }
    drop(procs);
    let st = shared.lock().unwrap();
    let f = &st.fig;
    let handles = st.order.len();
    let open = st.handles.values().filter(|h| h.is_open()).count();
    let restarts: Vec<f64> = fig.restarts.iter().map(Duration::as_secs_f64).collect();
    let slowest_restart = restarts.iter().cloned().fold(0.0, f64::max);
    println!();
    println!("seed: {seed}");
    println!("rounds: {}", args.rounds);
    println!("kills: {}", fig.kills);
    match (db.is_some(), fig.db_restart, &cluster_name) {
        (false, _, _) => {}
        (true, Some(t), _) => println!("PostgreSQL restarts: 1 (took {:.2} s)", t.as_secs_f64()),
        (true, None, _) => println!("PostgreSQL restarts: 0 (SKIPPED: pass --restart-postgres)"),
    }
    println!(
        "calls: {} ({} answered synchronously, {} got an error or no answer, around the kills)",
        f.calls, f.sync_answers, f.call_errors
    );
    println!("handles returned: {handles}");
    println!(
        "handles found afterwards: {} (missing {})",
        handles - st.findings.missing.len(),
        st.findings.missing.len()
    );
    println!(
        "terminal states seen by clients under load: {}; re-read unchanged after later kills: {} reads",
        f.seen_live, f.terminal_rechecked
    );
    println!(
        "in flight at a kill and failed for it: {} (slowest settled {:.2} s after its kill{})",
        f.orphans_failed,
        fig.slowest_orphan.as_secs_f64(),
        if db.is_some() {
            format!(", lease {:.1} s", args.lease.as_secs_f64())
        } else {
            String::new()
        }
    );
    if db.is_some() {
        println!(
            "failed during the PostgreSQL restart while their replica lived: {}",
            f.failed_by_db_restart
        );
    }
    println!(
        "result bytes read back: {} (largest result {} bytes); handle reads in checks: {}",
        f.result_bytes, f.largest_result, f.handle_checks
    );
    println!(
        "slowest restart: {slowest_restart:.2} s; open at the end: {open}; wall time {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "tasks stuck past their lease: {}{}",
        st.findings.stuck.len(),
        book::first_few(&st.findings.stuck)
    );
    println!(
        "results lost or changed: {}{}",
        st.findings.changed.len(),
        book::first_few(&st.findings.changed)
    );
    if !st.findings.missing.is_empty() {
        println!("missing:{}", book::first_few(&st.findings.missing));
    }
    Ok(st.findings.missing.is_empty()
        && st.findings.stuck.is_empty()
        && st.findings.changed.is_empty()
        && open == 0)
}

fn set_live(shared: &Shared, procs: &[Instance]) {
    shared.lock().unwrap().live = procs.iter().map(|p| (p.gen, p.ep.clone())).collect();
}

async fn join(load: Vec<tokio::task::JoinHandle<()>>) -> anyhow::Result<()> {
    for l in load {
        tokio::time::timeout(Duration::from_secs(60), l)
            .await
            .context("a client did not stop within 60 s")?
            .context("a client panicked")?;
    }
    Ok(())
}
