//! The scenarios and their order: start the components, run each repetition with
//! the targets interleaved, then the one-off scenarios (memory, scale, store
//! churn), and hand everything to the report.
//!
//! This module has the run itself; `components` starts what is measured,
//! `measure` runs a load on a quiet machine, `legacy` and `peers` put proxies in
//! front of 2025-11-25 servers, `tasks`, `memory`, `scale` and `churn` are the
//! other scenarios.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use serde_json::json;
use tokio::time::Instant;

use crate::loadgen::{self, Workload};
use crate::plan::{
    skip, CREATION_THRESHOLD, FORWARDER, GET_THRESHOLD, LEGACY_NGINX, LEGACY_TL, LEGACY_TL_2025,
    MAIN_THRESHOLD, MEMORY_THRESHOLD, PG_GET, SCALE_GETS, SCALE_GET_CONNECTIONS, STDIO, TRACED,
};
use crate::procs::{self, TempDir};
use crate::report::{Binary, Report};
use crate::wire::{self, Endpoint};
use crate::RunArgs;

mod churn;
mod components;
mod held;
mod legacy;
mod measure;
mod memory;
mod peers;
mod scale;
mod tasks;

use churn::churn;
use components::{
    find_nginx, start_forwarder, start_nginx, start_upstream, stdio_upstream, ScratchDb, Tasklift,
    TraceSink, Via,
};
use legacy::Legacy;
use measure::{log_run, measured, quiet_budget_left, wait_quiet, Cpu};
use memory::memory;
use peers::Peers;
use tasks::{create_completed_tasks, creation};

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
    // Its size now: the file may be rebuilt while the run goes on.
    let binary = Binary::of(&tasklift_bin)?;
    // The harness's own limit up to the hard one (its children inherit it).
    match procs::raise_nofile() {
        Ok((soft, hard)) => eprintln!(
            "tasklift-bench: open files limit {soft} (hard {hard}); children raise theirs to the hard limit"
        ),
        Err(e) => {
            let (soft, hard) = procs::nofile_limits();
            eprintln!("tasklift-bench: open files limit {soft} (hard {hard}), not raised: {e:#}");
        }
    }
    let work = TempDir::new("run")?;
    let (mut upstream, up) = start_upstream(&args, work.path(), "baseline", &[]).await?;
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
    let mut forwarder = None;
    if !skip(&args, "forwarder") {
        let (p, ep) = start_forwarder(work.path(), &up).await?;
        eprintln!("hyper forwarder on {}", ep.url());
        forwarder = Some((p, ep));
    }
    let http = Via::Http(&up);
    let main = Tasklift::start(
        &tasklift_bin,
        &http,
        "main",
        MAIN_THRESHOLD,
        &[("sleep", GET_THRESHOLD)],
        None,
    )
    .await?;
    eprintln!("tasklift on {} (threshold 2s; sleep: 20ms)", main.ep.url());
    // The same, with every request traced and exported over OTLP.
    let mut traced = None;
    if !skip(&args, "traced") {
        let sink = TraceSink::start().await?;
        let tl = Tasklift::start_with(
            &tasklift_bin,
            &http,
            "traced",
            MAIN_THRESHOLD,
            &[("sleep", GET_THRESHOLD)],
            None,
            &format!("\n[telemetry]\notlp_endpoint = \"{}\"\n", sink.url),
        )
        .await?;
        eprintln!("tasklift exporting every span over OTLP on {}", tl.ep.url());
        traced = Some((tl, sink));
    }
    // The same, in front of the baseline upstream as its stdio child.
    let mut stdio = None;
    if !skip(&args, "stdio") {
        let tl = Tasklift::start(
            &tasklift_bin,
            &stdio_upstream(&args)?,
            "stdio",
            MAIN_THRESHOLD,
            &[("sleep", GET_THRESHOLD)],
            None,
        )
        .await?;
        eprintln!("tasklift with a stdio upstream on {}", tl.ep.url());
        stdio = Some(tl);
    }

    // In front of 2025-11-25 servers: the retrofit case.
    let mut legacy = None;
    if !skip(&args, "legacy") {
        legacy = Some(Legacy::start(&args, &tasklift_bin, work.path()).await?);
    }
    // What users would pick instead, in front of the same legacy JSON upstream.
    let mut peers = None;
    if !skip(&args, "peers") {
        match &legacy {
            Some(l) => peers = Some(Peers::start(&args, l.json_upstream()?.0).await?),
            None => eprintln!(
                "peers: not measured: they go in front of the legacy upstream (--skip legacy)"
            ),
        }
    }

    // The same tasks/get and creation scenarios with the PostgreSQL store, on a
    // scratch database dropped at the end.
    let scratch = match &args.postgres {
        Some(url) => Some(ScratchDb::create(url, "bench").await?),
        None => None,
    };
    let mut pg = None;
    if let Some(db) = &scratch {
        let get = Tasklift::start(
            &tasklift_bin,
            &http,
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
            &http,
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
                &http,
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
    rep.binary = Some(binary);
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
                accepted_at: Some(up.clone()),
            },
        )];
        if let Some((p, ep)) = &nginx {
            let cpu = Cpu {
                proxy: procs::with_children(p.pid()?),
                upstream: up_cpu.clone(),
                accepted_at: Some(up.clone()),
            };
            targets.push(("nginx", ep, cpu));
        }
        let tl_cpu = Cpu {
            proxy: vec![main.pid()?],
            upstream: up_cpu.clone(),
            accepted_at: Some(up.clone()),
        };
        targets.push(("tasklift", &main.ep, tl_cpu.clone()));
        // The closed loop also runs tasklift with the stdio upstream, whose CPU is
        // its child's (looked up each time: a child tasklift restarted is new).
        let mut closed = targets.clone();
        if let Some((p, ep)) = &forwarder {
            let cpu = Cpu {
                proxy: vec![p.pid()?],
                upstream: up_cpu.clone(),
                accepted_at: Some(up.clone()),
            };
            closed.insert(closed.len() - 1, (FORWARDER, ep, cpu));
        }
        if let Some((tl, _)) = &traced {
            let cpu = Cpu {
                proxy: vec![tl.pid()?],
                upstream: up_cpu.clone(),
                accepted_at: Some(up.clone()),
            };
            closed.push((TRACED, &tl.ep, cpu));
        }
        if let Some(tl) = &stdio {
            let pid = tl.pid()?;
            let cpu = Cpu {
                proxy: vec![pid],
                upstream: procs::children(pid),
                accepted_at: None,
            };
            if cpu.upstream.is_empty() {
                bail!("{STDIO}: tasklift runs no child process");
            }
            closed.push((STDIO, &tl.ep, cpu));
        }
        for (label, ep, cpu) in &closed {
            let s = measured(&args, cpu, || loadgen::closed(ep, fast.clone(), c, w, d)).await?;
            log_run(label, &s);
            rep.push(label, s);
        }
        if let Some(l) = &mut legacy {
            for (label, ep, cpu, work) in l.targets()? {
                let s =
                    measured(&args, &cpu, || loadgen::closed(ep, work.clone(), c, w, d)).await?;
                log_run(label, &s);
                rep.push(label, s);
            }
        }
        if let (Some(p), Some(l)) = (&mut peers, &legacy) {
            for (label, ep, cpu, work) in p.targets(l.json_upstream()?)? {
                let s =
                    measured(&args, &cpu, || loadgen::closed(ep, work.clone(), c, w, d)).await?;
                log_run(label, &s);
                rep.push(label, s);
            }
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
                accepted_at: Some(up.clone()),
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
        if let Some(tl) = &mut stdio {
            tl.check_alive()?;
        }
    }
    // The proxies in front of the legacy JSON upstream, after the load.
    if let Some(l) = &legacy {
        let (nginx, tl) = l.json_mem()?;
        if let Some(m) = nginx {
            rep.peer_mem.push((LEGACY_NGINX.into(), m));
        }
        rep.peer_mem.push((LEGACY_TL.into(), tl));
        rep.peer_mem.push((LEGACY_TL_2025.into(), tl));
    }
    if let Some(p) = peers.take() {
        for (label, m) in p.mem()? {
            rep.peer_mem.push((label.into(), m));
        }
    }
    rep.logs.push(main.log_summary("main"));
    if let Some(l) = legacy.take() {
        rep.logs.extend(l.logs());
    }
    if let Some(tl) = stdio.take() {
        rep.logs.push(tl.log_summary("stdio"));
    }
    if let Some((tl, sink)) = traced.take() {
        rep.logs.push(tl.log_summary("traced"));
        let kib = sink.bytes.load(std::sync::atomic::Ordering::Relaxed) / 1024;
        eprintln!("traced: {kib} KiB of OTLP exports received");
    }
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
        let tl =
            Tasklift::start(&tasklift_bin, &http, "memory", MEMORY_THRESHOLD, &[], None).await?;
        if quiet_budget_left(&args) {
            wait_quiet(args.max_other, args.quiet_wait).await;
        }
        let m = memory(&tl, &up, upstream.pid()?, args.tasks, args.memory_clients).await?;
        rep.logs.push(tl.log_summary("memory"));
        drop(tl);
        // The same with the upstream over HTTP/2, where every call shares a few
        // connections instead of holding one each.
        let tl = Tasklift::start(
            &tasklift_bin,
            &Via::Http2(&up),
            "memory-h2",
            MEMORY_THRESHOLD,
            &[],
            None,
        )
        .await?;
        if quiet_budget_left(&args) {
            wait_quiet(args.max_other, args.quiet_wait).await;
        }
        let h2 = memory(&tl, &up, upstream.pid()?, args.tasks, args.memory_clients).await?;
        rep.logs.push(tl.log_summary("memory-h2"));
        print_memory("memory, HTTP/2 upstream", &h2);
        rep.memory_h2 = Some(h2);
        print_memory("memory", &m);
        rep.memory = Some(m);
    }
    if !skip(&args, "scale") {
        // Running tasks on one instance at 1,000, 10,000, 100,000: the upstream over
        // HTTP/2, as memory-h2.
        let tl = Tasklift::start(
            &tasklift_bin,
            &Via::Http2(&up),
            "scale",
            MEMORY_THRESHOLD,
            &[],
            None,
        )
        .await?;
        eprintln!(
            "scale: tasklift on {}, running tasks {:?}",
            tl.ep.url(),
            args.scale_levels
        );
        if quiet_budget_left(&args) {
            wait_quiet(args.max_other, args.quiet_wait).await;
        }
        let plan = scale::Plan {
            levels: &args.scale_levels,
            clients: args.memory_clients,
            gets: if args.quick { 200 } else { SCALE_GETS },
            get_connections: SCALE_GET_CONNECTIONS,
        };
        let s = scale::scale(&tl, &up, upstream.pid()?, &plan).await?;
        rep.logs.push(tl.log_summary("scale"));
        drop(tl);
        eprintln!(
            "scale: {} tasks: {} completed in {:.2}s after release, {} errors{}",
            s.tasks(),
            s.completed,
            s.drain.as_secs_f64(),
            s.errors(),
            s.first_error()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        );
        rep.scale = Some(s);
    }
    if !skip(&args, "churn") {
        rep.churn = Some(churn(&args).await?);
    }
    drop(nginx);
    drop(forwarder);
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

/// One memory scenario's line on stderr.
fn print_memory(label: &str, m: &crate::report::Memory) {
    eprintln!(
        "{label}: {} tasks, idle {} KiB, loaded {} KiB → {:.2} KiB per task; {} completed in {:.2}s, {} errors",
        m.tasks,
        m.idle.rss_kib,
        m.loaded.rss_kib,
        m.per_task_kib(),
        m.completed,
        m.drain.as_secs_f64(),
        m.errors
    );
}
