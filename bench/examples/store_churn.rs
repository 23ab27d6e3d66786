//! Disk use of the sled store under task churn (issue 2).
//!
//! ```text
//! cargo run --release -p tasklift-bench --example store_churn -- [rounds] [batch] [size] [large_result_bytes]
//! ```
//!
//! Every round creates `batch` tasks (created `working`, then put `completed` with a
//! result), then deletes the previous round's tasks through `expired()` +
//! `delete()`, the way the sweeper does, and flushes. So one batch is live at each
//! measurement: the steady state of a proxy whose tasks expire as fast as new ones
//! arrive. Result sizes are mixed: a fixed cycle from 1 KB up to `size` bytes
//! (default 4 MiB), mostly large. Results over `large_result_bytes` (default
//! 64 KiB, the configuration default), and any that would make a record over 6 KiB,
//! go to files; the rest stay inside sled: pass `size` 5000 to churn records that
//! all live in sled, 60000 for mid-size results.
//!
//! Prints round, live data (the JSON of the live results), disk use as
//! `TaskStore::stats` reports it (apparent file sizes) and the blocks actually
//! allocated, then the final disk use against peak live data.
//!
//! Meanwhile a reader polls one small task (`get`, what `tasks/get` does) without
//! pause, and the latency of its reads is reported apart for the time the sweep
//! deletes and for the rest: whether the sweeper's work stalls requests.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tasklift::store::{NewTask, Settle, SledStore, TaskOutcome, TaskRecord, TaskStore};

const MIB: f64 = 1024.0 * 1024.0;

/// Result sizes of one batch as fractions of the largest: mostly large (above the
/// default file threshold when `size` is MBs), a few small.
const SIZE_CYCLE: [f64; 8] = [1.0, 0.5, 0.25, 0.75, 0.0002, 0.125, 0.9, 0.004];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let rounds = args.next().transpose()?.unwrap_or(200);
    let batch = args.next().transpose()?.unwrap_or(8);
    let size = args.next().transpose()?.unwrap_or(4 << 20).max(1024);
    let threshold = args.next().transpose()?.unwrap_or(64 * 1024);

    let dir = tempfile::tempdir()?;
    let store = SledStore::open(dir.path(), threshold)?;
    let noise = noise(size);
    println!(
        "store_churn: {rounds} rounds x {batch} tasks, results 1 KB..{:.2} MiB, \
         file threshold {threshold} bytes, dir {}",
        size as f64 / MIB,
        dir.path().display()
    );
    println!(
        "{:>6} {:>12} {:>12} {:>12} {:>10} {:>8}",
        "round", "live MiB", "disk MiB", "alloc MiB", "db MiB", "ms"
    );

    // The reader: a small task that never expires, polled in a loop.
    let mut probe = complete(record(u64::MAX, "status"));
    probe.owner = "probe".into();
    store.create(&probe).await?;
    let sweeping = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<(Vec<Duration>, Vec<Duration>)>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (store, id) = (store.clone(), probe.id.clone());
        let (sweeping, samples, stop) = (sweeping.clone(), samples.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let during = sweeping.load(Ordering::Relaxed);
                let t = Instant::now();
                let _ = store.get(&id).await;
                let took = t.elapsed();
                {
                    let mut s = samples.lock().unwrap();
                    if during {
                        s.0.push(took)
                    } else {
                        s.1.push(took)
                    }
                }
                tokio::task::yield_now().await;
            }
        })
    };

    let mut live: Vec<(String, usize)> = Vec::new();
    let (mut peak_live, mut peak_disk, mut written) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    for round in 0..rounds {
        let t = Instant::now();
        for i in 0..batch {
            let n = ((size as f64 * SIZE_CYCLE[(round * batch + i) % SIZE_CYCLE.len()]) as usize)
                .max(1024)
                .min(size);
            let rec = record(round as u64 + 1, &noise[..n]);
            store.create(&rec).await?;
            let done = complete(rec);
            let len = outcome_len(&done);
            store.put(&done).await?;
            written += len as u64;
            live.push((done.id, len));
        }
        // Sweep what expired: everything created in earlier rounds.
        sweeping.store(true, Ordering::Relaxed);
        loop {
            let ids = store.expired(round as u64, 64).await?;
            if ids.is_empty() {
                break;
            }
            for id in ids {
                store.delete(&id).await?;
                live.retain(|(l, _)| *l != id);
            }
        }
        store.flush().await?;
        sweeping.store(false, Ordering::Relaxed);
        let live_bytes: u64 = live.iter().map(|(_, n)| *n as u64).sum();
        let disk = store.stats().await?.disk_bytes;
        peak_live = peak_live.max(live_bytes);
        peak_disk = peak_disk.max(disk);
        if round < 10 || round % (rounds / 20).max(1) == 0 || round + 1 == rounds {
            println!(
                "{:>6} {:>12.2} {:>12.2} {:>12.2} {:>10.2} {:>8}",
                round,
                live_bytes as f64 / MIB,
                disk as f64 / MIB,
                allocated(dir.path()) as f64 / MIB,
                allocated(&dir.path().join("db")) as f64 / MIB,
                t.elapsed().as_millis()
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = reader.await;
    let (during, other) = std::mem::take(&mut *samples.lock().unwrap());
    for (what, mut s) in [("while sweeping", during), ("otherwise", other)] {
        s.sort();
        let q = |p: f64| {
            s.get(((s.len() as f64 * p) as usize).min(s.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        println!(
            "reader get() {what:>15}: {:>8} reads, p50 {:>8.3} ms, p99 {:>8.3} ms, max {:>8.3} ms",
            s.len(),
            q(0.5).as_secs_f64() * 1e3,
            q(0.99).as_secs_f64() * 1e3,
            s.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        );
    }
    let last = store.stats().await?.disk_bytes;
    println!(
        "written {:.1} MiB in {:.1} s; peak live {:.2} MiB, peak disk {:.2} MiB, final disk {:.2} MiB",
        written as f64 / MIB,
        started.elapsed().as_secs_f64(),
        peak_live as f64 / MIB,
        peak_disk as f64 / MIB,
        last as f64 / MIB
    );
    println!(
        "final disk / peak live = {:.2}; peak disk / peak live = {:.2}",
        last as f64 / peak_live.max(1) as f64,
        peak_disk as f64 / peak_live.max(1) as f64
    );
    Ok(())
}

/// A `working` record that expires at `expires_at_ms` (a small number: the past).
fn record(expires_at_ms: u64, text: &str) -> TaskRecord {
    {
        let mut rec = TaskRecord::new(NewTask {
            id: uuid::Uuid::new_v4().to_string(),
            owner: "churn".into(),
            upstream: "default".into(),
            tool: "big_report".into(),
            created_at_ms: 0,
            ttl_ms: 1,
            poll_interval_ms: 1000,
        });
        rec.expires_at_ms = expires_at_ms;
        rec.outcome = Some(TaskOutcome::Result(json!(text)));
        rec
    }
}

fn complete(mut rec: TaskRecord) -> TaskRecord {
    let Some(TaskOutcome::Result(serde_json::Value::String(text))) = rec.outcome.take() else {
        unreachable!("built by record()")
    };
    rec.settle(Settle::Completed(serde_json::Value::Null))
        .unwrap();
    rec.outcome = Some(TaskOutcome::Result(json!({
        "content": [{"type": "text", "text": text}],
        "isError": false,
    })));
    rec
}

fn outcome_len(rec: &TaskRecord) -> usize {
    serde_json::to_vec(&rec.outcome)
        .map(|v| v.len())
        .unwrap_or(0)
}

/// `n` bytes of incompressible-looking ASCII that needs no JSON escaping.
fn noise(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x >> 58) as usize] as char
        })
        .collect()
}

/// Bytes actually allocated on disk under `path` (sparse files count what they use).
fn allocated(path: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(path) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => allocated(&e.path()),
            Ok(m) => blocks(&m),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(unix)]
fn blocks(m: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(m) * 512
}

#[cfg(not(unix))]
fn blocks(m: &std::fs::Metadata) -> u64 {
    m.len()
}
