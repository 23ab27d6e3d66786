//! The task scenarios: tasks created and completed for the `tasks/get` runs, and
//! task creation timed to the handle and to a visible completion.

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::plan::CREATION_SLEEP;
use crate::report::Creation;
use crate::wire::{self, Conn, Endpoint};

/// Create `n` tasks (sleep 50 ms past a 20 ms threshold) from 50 connections and wait
/// until every one is `completed`; their ids. A call answered before its threshold
/// (a loaded machine) is made again, up to 5 times.
pub(super) async fn create_completed_tasks(ep: &Endpoint, n: usize) -> anyhow::Result<Vec<String>> {
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

pub(super) fn task_id(r: &Value) -> anyhow::Result<String> {
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
pub(super) async fn creation(
    ep: &Endpoint,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Creation> {
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
