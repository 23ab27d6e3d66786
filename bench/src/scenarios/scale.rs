//! The scale scenario: one tasklift in front of the upstream over HTTP/2, ramped
//! through levels of running tasks (1,000, 10,000, 100,000 by default). At each
//! level: tasklift's RSS, CPU, store size on disk and open descriptors, and
//! `tasks/get` latency under that load; then every call is released and each task
//! must read `completed`.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::loadgen::quantile;
use crate::plan::SCALE_HOLD;
use crate::procs;
use crate::report::{Scale, ScaleLevel};
use crate::wire::{self, Conn, Endpoint};

use super::components::Tasklift;
use super::held::{drain, upstream_stats, Client};
use super::tasks::task_id;

/// How the scenario runs.
pub(super) struct Plan<'a> {
    /// Running tasks at each step, ascending.
    pub levels: &'a [usize],
    /// Client connections that start the calls (kept across the steps).
    pub clients: usize,
    /// `tasks/get`s timed at each level,
    pub gets: usize,
    /// over this many connections.
    pub get_connections: usize,
}

/// What one client's part of a step gave.
struct Started {
    client: Client,
    errors: usize,
    first_error: Option<String>,
}

pub(super) async fn scale(
    tl: &Tasklift,
    up: &Endpoint,
    up_pid: u32,
    plan: &Plan<'_>,
) -> anyhow::Result<Scale> {
    let pid = tl.pid()?;
    let data = tl.data_dir();
    // Warm: connections, pools, the tool list.
    {
        let mut c = Conn::connect(&tl.ep).await?;
        for _ in 0..20 {
            c.result(&wire::tool_call("fast", json!({}), true)).await?;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut out = Scale {
        idle: procs::mem(pid)?,
        idle_fds: procs::fd_count(pid),
        idle_store: procs::disk_usage(&data),
        get_connections: plan.get_connections.max(1),
        ..Scale::default()
    };
    let held_before = upstream_stats(up).await?["held"].as_u64().unwrap_or(0);

    let top = plan.levels.last().copied().unwrap_or(0);
    let clients = plan.clients.clamp(1, top.max(1));
    out.clients = clients;
    let mut pool = Vec::with_capacity(clients);
    for _ in 0..clients {
        pool.push(Client {
            conn: Conn::connect(&tl.ep).await?,
            ids: Vec::new(),
        });
    }
    let mut running = 0usize;
    let mut cpu_ramps = 0.0;
    for &level in plan.levels {
        let n = level.saturating_sub(running);
        let cpu0 = procs::cpu_secs(&[pid]);
        let t0 = Instant::now();
        let mut handles = Vec::with_capacity(clients);
        for (k, client) in pool.drain(..).enumerate() {
            let count = n / clients + usize::from(k < n % clients);
            handles.push(tokio::spawn(start_calls(tl.ep.clone(), client, count)));
        }
        let mut l = ScaleLevel {
            running: level,
            started: n,
            ..ScaleLevel::default()
        };
        for h in handles {
            let s = h.await?;
            l.errors += s.errors;
            if l.first_error.is_none() {
                l.first_error = s.first_error;
            }
            pool.push(s.client);
        }
        l.ramp = t0.elapsed();
        running = level;
        let tasks: usize = pool.iter().map(|c| c.ids.len()).sum();
        // Every handle's call is open upstream (or will be soon).
        let deadline = Instant::now() + Duration::from_secs(60);
        l.held = loop {
            let held = upstream_stats(up).await?["held"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(held_before);
            if held as usize >= tasks {
                break held;
            }
            if Instant::now() > deadline {
                l.first_error.get_or_insert_with(|| {
                    format!("the upstream holds {held} calls, not {tasks}, a minute after the handles came back")
                });
                break held;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let cpu1 = procs::cpu_secs(&[pid]);
        l.cpu_step = cpu1 - cpu0;
        cpu_ramps += l.cpu_step;
        l.cpu_ramps = cpu_ramps;
        // A second with the tasks running and nothing asked: what holding them costs.
        let th = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        l.cpu_holding = (procs::cpu_secs(&[pid]) - cpu1) / th.elapsed().as_secs_f64();
        l.mem = procs::mem(pid)?;
        l.upstream_mem = procs::mem(up_pid)?;
        l.fds = procs::fd_count(pid);
        l.store = procs::disk_usage(&data);
        l.cpu_total = procs::cpu_secs(&[pid]);

        let ids: Vec<&str> = pool
            .iter()
            .flat_map(|c| c.ids.iter().map(String::as_str))
            .collect();
        let cpu2 = procs::cpu_secs(&[pid]);
        let (lat, errors, first) =
            get_latency(&tl.ep, &ids, plan.gets, out.get_connections).await?;
        l.get_cpu_us = (procs::cpu_secs(&[pid]) - cpu2) * 1e6 / (lat.len() as f64).max(1.0);
        l.get_lat = lat;
        l.get_errors = errors;
        l.get_first_error = first;
        print_level(&out, &l);
        out.levels.push(l);
    }

    // Release every call; each task must read `completed`.
    let cpu0 = procs::cpu_secs(&[pid]);
    let mut c = Conn::connect(up).await?;
    let t1 = Instant::now();
    let (s, _) = c.plain("POST", "/release").await?;
    if !s.is_success() {
        anyhow::bail!("upstream /release: HTTP {s}");
    }
    // Time enough for the largest level on a small machine.
    let limit = Duration::from_secs(120) + Duration::from_millis(2) * running as u32;
    let mut handles = Vec::new();
    for client in pool {
        handles.push(tokio::spawn(drain(client, limit)));
    }
    for h in handles {
        let (done, errs, first) = h.await?;
        out.completed += done;
        out.drain_errors += errs;
        if out.drain_first_error.is_none() {
            out.drain_first_error = first;
        }
    }
    out.drain = t1.elapsed();
    out.cpu_drain = procs::cpu_secs(&[pid]) - cpu0;
    tokio::time::sleep(Duration::from_millis(500)).await;
    out.after = procs::mem(pid).ok();
    out.after_store = procs::disk_usage(&data);
    Ok(out)
}

/// Start `count` `hold` calls on a client's connection, one after the other, each
/// answered with a task handle after the threshold.
async fn start_calls(ep: Endpoint, mut client: Client, count: usize) -> Started {
    let call = wire::tool_call(
        "hold",
        json!({"max_ms": SCALE_HOLD.as_millis() as u64}),
        true,
    );
    let (mut errors, mut first_error) = (0, None);
    let mut fail = |e: String| {
        errors += 1;
        first_error.get_or_insert(e);
    };
    client.ids.reserve(count);
    for _ in 0..count {
        if client.conn.is_closed() {
            match Conn::connect(&ep).await {
                Ok(c) => client.conn = c,
                Err(e) => {
                    fail(format!("reconnecting: {e:#}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        match client.conn.result(&call).await.and_then(|r| task_id(&r)) {
            Ok(id) => client.ids.push(id),
            Err(e) => fail(format!("{e:#}")),
        }
    }
    Started {
        client,
        errors,
        first_error,
    }
}

/// `n` `tasks/get`s of running tasks spread over all of them, from `connections`
/// connections each sending its next when the last is answered; the latencies
/// (sorted, µs), the failures and the first of them. A good answer is HTTP 200
/// with the task `working`.
async fn get_latency(
    ep: &Endpoint,
    ids: &[&str],
    n: usize,
    connections: usize,
) -> anyhow::Result<(Vec<u32>, u64, Option<String>)> {
    if ids.is_empty() || n == 0 {
        return Ok((Vec::new(), 0, None));
    }
    // A multiplicative stride visits old and new tasks alike.
    let requests: Vec<wire::Prepared> = (0..n as u64)
        .map(|i| wire::tasks_get(ids[((i * 2_654_435_761) % ids.len() as u64) as usize]))
        .collect();
    let requests = std::sync::Arc::new(requests);
    let mut handles = Vec::new();
    for k in 0..connections.min(n) {
        let mut conn = Conn::connect(ep).await?;
        let requests = requests.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(requests.len() / connections + 1);
            let (mut errors, mut first) = (0u64, None);
            for req in requests.iter().skip(k).step_by(connections) {
                let t = Instant::now();
                let outcome = conn.send(req).await;
                let us = t.elapsed().as_micros().min(u32::MAX as u128) as u32;
                match outcome
                    .map_err(|e| format!("{e:#}"))
                    .and_then(|a| a.check(br#""status":"working""#))
                {
                    Ok(()) => lat.push(us),
                    Err(e) => {
                        errors += 1;
                        first.get_or_insert(e);
                    }
                }
            }
            (lat, errors, first)
        }));
    }
    let (mut lat, mut errors, mut first) = (Vec::with_capacity(n), 0, None);
    for h in handles {
        let (l, e, f) = h.await?;
        lat.extend(l);
        errors += e;
        if first.is_none() {
            first = f;
        }
    }
    lat.sort_unstable();
    Ok((lat, errors, first))
}

/// A level's line on stderr.
fn print_level(s: &Scale, l: &ScaleLevel) {
    let ms = |q: f64| quantile(&l.get_lat, q) as f64 / 1000.0;
    eprintln!(
        "  scale: {} running ({} started in {:.2}s, {} errors): RSS {:.1} MiB ({:.2} KiB/task), CPU {:.2}s \
         (this step {:.2}s, holding {:.0}% of a core), store {:.1} MiB ({:.1} MiB apparent), {} fds; \
         tasks/get p50 {:.3} p99 {:.3} max {:.3} ms, {} errors",
        l.running,
        l.started,
        l.ramp.as_secs_f64(),
        l.errors,
        l.mem.rss_kib as f64 / 1024.0,
        l.per_task_kib(&s.idle),
        l.cpu_total,
        l.cpu_step,
        l.cpu_holding * 100.0,
        l.store.allocated as f64 / 1048576.0,
        l.store.apparent as f64 / 1048576.0,
        l.fds,
        ms(0.5),
        ms(0.99),
        ms(1.0),
        l.get_errors
    );
}
