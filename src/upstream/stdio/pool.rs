//! Which child takes a call: the least busy ready one, with `isolate_input` one
//! with no other call that may ask for input (growing the pool for it), and the
//! child that created an upstream task for its `tasks/*` requests.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{Conn, Health, Pool, Slot};
use crate::upstream::UpstreamError;
use tasklift_protocol::jsonrpc::{RpcError, UPSTREAM_ERROR};

/// After this many exits in a row, none after settling (`child.rs` `SETTLE`), the
/// upstream is reported unready and calls fail at once.
const CRASH_LOOP_AFTER: u32 = 3;
/// How long a call waits for a child to become ready.
const READY_WAIT: Duration = Duration::from_secs(30);

impl Pool {
    /// A ready child with the fewest calls in flight, waiting for one if none is ready.
    /// With `isolate_input`, a call that may ask for input (`asks`) gets a child with
    /// no other such call, growing the pool up to `max_processes` for it; past that
    /// it shares one, and requests the child cannot attribute are refused.
    /// The child comes with the upstream id of the call, already counted among the
    /// child's askers when `asks` (so two calls picking at once never both take the
    /// same idle child).
    pub(super) async fn pick(self: &Arc<Self>, asks: bool) -> Result<(Arc<Conn>, u64), RpcError> {
        let deadline = tokio::time::Instant::now() + READY_WAIT;
        let isolate = asks && self.stdio.isolate_input;
        let mut grew: Option<usize> = None;
        let claim = |c: &Arc<Conn>| {
            let id = c.next_id.fetch_add(1, Ordering::Relaxed);
            if asks {
                c.askers.insert(id, ());
            }
            (c.clone(), id)
        };
        loop {
            let live: Vec<Arc<Conn>> = self
                .slots
                .iter()
                .filter_map(|s| s.conn.borrow().clone())
                .filter(|c| !c.closed.load(Ordering::Relaxed))
                .collect();
            if isolate {
                let _choosing = self.choosing.lock().expect("choosing lock");
                if let Some(c) = live
                    .iter()
                    .filter(|c| c.plain_askers() == 0)
                    .min_by_key(|c| c.pending.len())
                {
                    return Ok(claim(c));
                }
                // None idle: start a child for this call (again, if another call
                // took the one it started).
                if grew.is_none_or(|i| self.slots[i].conn.borrow().is_some()) {
                    grew = self.grow();
                }
            }
            let best = live
                .iter()
                .min_by_key(|c| (c.plain_askers(), c.pending.len()))
                .cloned();
            if let Some(c) = best {
                // Wait only for the child this call started, while it starts (and
                // has not failed): then it takes that one or any that went idle.
                let waiting = grew.is_some_and(|i| {
                    let slot = &self.slots[i];
                    slot.conn.borrow().is_none()
                        && slot.health.lock().expect("health").failures == 0
                });
                if !isolate || !waiting {
                    return Ok(claim(&c));
                }
            }
            if let Some(e) = self.crash_looping() {
                return Err(RpcError::new(UPSTREAM_ERROR, e));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RpcError::new(
                    UPSTREAM_ERROR,
                    format!(
                        "upstream {} has no running process (still starting after {READY_WAIT:?})",
                        self.name()
                    ),
                ));
            }
            let mut rxs: Vec<_> = self.slots.iter().map(|s| s.conn.subscribe()).collect();
            let any = futures_any(&mut rxs);
            let _ = tokio::time::timeout(Duration::from_millis(200), any).await;
        }
    }

    /// The live child that created upstream task `task` for `owner`, if any.
    pub(super) fn home_of(&self, task: &str, owner: &str) -> Option<Arc<Conn>> {
        self.started()
            .iter()
            .filter_map(|s| s.conn.borrow().clone())
            .find(|c| {
                !c.closed.load(Ordering::Relaxed)
                    && c.tasks.get(task).is_some_and(|o| o.value() == owner)
            })
    }

    /// The slots whose supervisor runs (the pool grows with `isolate_input`).
    fn started(&self) -> &[Arc<Slot>] {
        let n = self.started.load(Ordering::Relaxed);
        &self.slots[..n.clamp(1, self.slots.len())]
    }

    /// A ready child, as an upstream error when there is none.
    pub(super) async fn ready(self: &Arc<Self>) -> Result<Arc<Conn>, UpstreamError> {
        self.pick(false)
            .await
            .map(|(c, _)| c)
            .map_err(|e| UpstreamError::Unreachable {
                name: self.name().to_string(),
                message: e.message,
            })
    }

    /// `Some(explanation)` when every child keeps crashing.
    pub(super) fn crash_looping(&self) -> Option<String> {
        let hs: Vec<Health> = self
            .started()
            .iter()
            .map(|s| s.health.lock().expect("health").clone())
            .collect();
        if hs.iter().all(|h| h.failures >= CRASH_LOOP_AFTER) {
            let h = &hs[0];
            Some(format!(
                "upstream {} keeps crashing: its process exited {} times in a row (last: {}){}",
                self.name(),
                h.failures,
                h.last_exit.as_deref().unwrap_or("unknown"),
                h.last_stderr
                    .as_deref()
                    .map(|l| format!("; last stderr line: {l}"))
                    .unwrap_or_default()
            ))
        } else {
            None
        }
    }
}

/// Resolve when any of the watched slots changes.
async fn futures_any(rxs: &mut [watch::Receiver<Option<Arc<Conn>>>]) {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut tasks = Vec::new();
    for r in rxs.iter() {
        let mut r = r.clone();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let _ = r.changed().await;
            let _ = tx.send(()).await;
        }));
    }
    drop(tx);
    let _ = rx.recv().await;
    for t in tasks {
        t.abort();
    }
}
