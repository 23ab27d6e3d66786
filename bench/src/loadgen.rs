//! The load generator: closed loop (C keep-alive connections, each sending its next
//! request when the last one is answered, like `wrk`) and open loop (a fixed request
//! rate on a timetable, latency counted from the scheduled time, like `wrk2`).
//! Runs on the harness's single-threaded runtime, so it uses one core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::wire::{Conn, Endpoint, Prepared};

/// What to send: requests taken round-robin, and the bytes a good answer contains.
pub struct Workload {
    /// The requests (one, or e.g. a `tasks/get` per task id).
    pub requests: Vec<Prepared>,
    /// A good answer contains these bytes.
    pub expect: &'static [u8],
}

/// One run's measurements.
#[derive(Default, Clone)]
pub struct RunResult {
    /// Latency of every request of the measured window, in microseconds.
    pub lat_us: Vec<u32>,
    /// Failed requests (the warm-up included).
    pub errors: u64,
    /// The first failure, to show.
    pub first_error: Option<String>,
    /// The measured window.
    pub window: Duration,
    /// Open loop: sends that started after their scheduled time because the
    /// connection was still busy (their latency counts from the schedule).
    pub late: u64,
    /// Answers of the whole run, warm-up included.
    pub total: u64,
    /// Answers that came as an SSE stream.
    pub sse: u64,
}

impl RunResult {
    fn merge(&mut self, w: WorkerOut) {
        self.lat_us.extend(w.lat_us);
        self.errors += w.errors;
        self.late += w.late;
        self.total += w.total;
        self.sse += w.sse;
        if self.first_error.is_none() {
            self.first_error = w.first_error;
        }
    }
}

#[derive(Default)]
struct WorkerOut {
    lat_us: Vec<u32>,
    errors: u64,
    late: u64,
    total: u64,
    sse: u64,
    first_error: Option<String>,
}

impl WorkerOut {
    fn fail(&mut self, e: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

impl Workload {
    /// A connection for this workload: with a 2025-11-25 session of its own when
    /// its requests are legacy ones.
    async fn connect(&self, ep: &Endpoint) -> anyhow::Result<Conn> {
        match self.requests.first().is_some_and(|r| r.legacy) {
            true => Conn::connect_legacy(ep).await,
            false => Conn::connect(ep).await,
        }
    }
}

async fn connect_all(ep: &Endpoint, work: &Workload, n: usize) -> anyhow::Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(work.connect(ep).await?);
    }
    Ok(conns)
}

/// One request on `conn`, reconnecting first if the connection was closed; records
/// the outcome in `out` and returns when it was answered.
async fn one(
    ep: &Endpoint,
    conn: &mut Conn,
    work: &Workload,
    req: &Prepared,
    out: &mut WorkerOut,
) -> bool {
    let expect = work.expect;
    if conn.is_closed() {
        match work.connect(ep).await {
            Ok(c) => *conn = c,
            Err(e) => {
                out.fail(format!("reconnect: {e:#}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
                return false;
            }
        }
    }
    match conn.send(req).await {
        Ok(a) => {
            out.total += 1;
            out.sse += u64::from(a.sse);
            match a.check(expect) {
                Ok(()) => true,
                Err(e) => {
                    out.fail(e);
                    false
                }
            }
        }
        Err(e) => {
            out.fail(format!("{e:#}"));
            false
        }
    }
}

/// Closed loop: `concurrency` connections, each sending back to back for
/// `warmup + duration`; latencies of requests sent and answered inside the
/// measured window are kept.
pub async fn closed(
    ep: &Endpoint,
    work: Arc<Workload>,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<RunResult> {
    let conns = connect_all(ep, &work, concurrency).await?;
    let start = Instant::now();
    let from = start + warmup;
    let end = from + duration;
    let next = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for mut conn in conns {
        let (work, next, ep) = (work.clone(), next.clone(), ep.clone());
        handles.push(tokio::spawn(async move {
            let mut out = WorkerOut {
                lat_us: Vec::with_capacity(1 << 16),
                ..WorkerOut::default()
            };
            let n = work.requests.len() as u64;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed) % n;
                let ok = one(&ep, &mut conn, &work, &work.requests[i as usize], &mut out).await;
                let t1 = Instant::now();
                if ok && t0 >= from && t1 <= end {
                    out.lat_us.push(micros(t1 - t0));
                }
            }
            out
        }));
    }
    gather(handles, duration).await
}

/// Open loop: `rate` requests per second for `warmup + duration`, request `i`
/// scheduled at `start + i / rate`, spread over `connections` connections
/// (connection `k` sends requests `k, k + connections, …`). Latency counts from the
/// scheduled time when the connection was still busy with an earlier request then
/// (so a stall is not hidden by the client waiting), and from the actual send
/// otherwise (the timer's own wake-up delay is not the server's).
pub async fn open(
    ep: &Endpoint,
    work: Arc<Workload>,
    rate: f64,
    connections: usize,
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<RunResult> {
    let conns = connect_all(ep, &work, connections).await?;
    let start = Instant::now() + Duration::from_millis(20);
    let from = start + warmup;
    let end = from + duration;
    let total = (rate * (warmup + duration).as_secs_f64()).ceil() as u64;
    let mut handles = Vec::new();
    for (k, mut conn) in conns.into_iter().enumerate() {
        let (work, ep) = (work.clone(), ep.clone());
        let k = k as u64;
        let step = connections as u64;
        handles.push(tokio::spawn(async move {
            let mut out = WorkerOut::default();
            let n = work.requests.len() as u64;
            let mut i = k;
            let mut free_at = Instant::now();
            while i < total {
                let scheduled = start + Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(scheduled).await;
                let sent = Instant::now();
                let origin = if free_at > scheduled {
                    out.late += 1;
                    scheduled
                } else {
                    sent
                };
                let req = &work.requests[(i % n) as usize];
                let ok = one(&ep, &mut conn, &work, req, &mut out).await;
                let done = Instant::now();
                free_at = done;
                if ok && scheduled >= from && scheduled < end {
                    out.lat_us.push(micros(done - origin));
                }
                i += step;
            }
            out
        }));
    }
    gather(handles, duration).await
}

/// Merge the workers' results of a run measured over `window`.
async fn gather(
    handles: Vec<tokio::task::JoinHandle<WorkerOut>>,
    window: Duration,
) -> anyhow::Result<RunResult> {
    let mut r = RunResult {
        window,
        ..RunResult::default()
    };
    for h in handles {
        r.merge(h.await?);
    }
    Ok(r)
}

/// Percentiles of a latency sample (sorted in place), in microseconds.
#[derive(Clone, Copy, Default, Debug)]
pub struct Pct {
    pub p50: u32,
    pub p90: u32,
    pub p99: u32,
    pub max: u32,
}

/// The `q` quantile of sorted data (nearest rank).
pub fn quantile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Pct {
    /// Sorts `v` and reads its percentiles.
    pub fn of(v: &mut [u32]) -> Self {
        v.sort_unstable();
        Self {
            p50: quantile(v, 0.50),
            p90: quantile(v, 0.90),
            p99: quantile(v, 0.99),
            max: v.last().copied().unwrap_or(0),
        }
    }
}
