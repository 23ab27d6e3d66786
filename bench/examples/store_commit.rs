//! Durable creates on the sled store from concurrent writers: how many per
//! second, and how long each waits for its record to be on disk.
//!
//! ```text
//! cargo run --release -p tasklift-bench --example store_commit -- [writers] [creates per writer]
//! ```
//!
//! Each writer creates tasks one after another (`TaskStore::create`, durable
//! before it returns), the way calls crossing their threshold do; the figures are
//! printed for 1 writer and for `writers` (default 1, 8 and 64).

use std::sync::Arc;
use std::time::Instant;

use tasklift::store::{NewTask, SledStore, TaskRecord, TaskStore};

fn record(w: usize, i: usize) -> TaskRecord {
    TaskRecord::new(NewTask {
        id: format!("w{w}-{i}-{}", uuid::Uuid::new_v4().simple()),
        owner: "bench".into(),
        upstream: "bench".into(),
        tool: "t".into(),
        created_at_ms: 1,
        ttl_ms: 3_600_000,
        poll_interval_ms: 1000,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let per = args.get(1).copied().unwrap_or(200);
    let counts: Vec<usize> = match args.first() {
        Some(&w) => vec![w],
        None => vec![1, 8, 64],
    };
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>10}",
        "writers", "creates/s", "p50 ms", "p99 ms", "max ms"
    );
    for writers in counts {
        let dir = tempfile::tempdir()?;
        let store = Arc::new(SledStore::open(dir.path(), 64 * 1024)?);
        let started = Instant::now();
        let mut joins = Vec::new();
        for w in 0..writers {
            let store = store.clone();
            joins.push(tokio::spawn(async move {
                let mut waits = Vec::with_capacity(per);
                for i in 0..per {
                    let rec = record(w, i);
                    let t = Instant::now();
                    store.create(&rec).await.expect("create");
                    waits.push(t.elapsed().as_secs_f64() * 1e3);
                }
                waits
            }));
        }
        let mut waits = Vec::new();
        for j in joins {
            waits.extend(j.await?);
        }
        let secs = started.elapsed().as_secs_f64();
        waits.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| waits[((waits.len() as f64 * p) as usize).min(waits.len() - 1)];
        println!(
            "{writers:>8} {:>10.0} {:>10.3} {:>10.3} {:>10.3}",
            waits.len() as f64 / secs,
            q(0.5),
            q(0.99),
            waits[waits.len() - 1]
        );
    }
    Ok(())
}
