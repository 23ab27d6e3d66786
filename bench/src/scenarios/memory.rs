//! The memory scenario: tasklift's and the upstream's memory idle, with every
//! task running, and after they all complete.

use std::time::Duration;

use anyhow::bail;
use serde_json::json;
use tokio::time::Instant;

use crate::procs;
use crate::report::Memory;
use crate::wire::{self, Conn, Endpoint};

use super::components::Tasklift;
use super::held::{drain, upstream_stats, Client};
use super::tasks::task_id;

/// Memory per running task: RSS idle, then with `n` `hold` calls running as tasks,
/// then release them all and time until every task reads `completed`.
pub(super) async fn memory(
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
    for (conn, ids) in workers {
        let client = Client { conn, ids };
        handles.push(tokio::spawn(drain(client, Duration::from_secs(120))));
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
