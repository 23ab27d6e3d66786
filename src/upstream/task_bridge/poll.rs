//! The `tasks/get` poller of a followed upstream task: `poll` asks at the task's
//! `pollInterval` (within bounds) until the task is terminal, and hands the follower
//! what it saw (`Polled`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use super::SHORT_CALL;
use crate::upstream::{CallContext, CallEvent, Upstream};
use tasklift_protocol::jsonrpc::{Request, RpcError};

/// Poll interval when the upstream suggests none.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// Bounds on the upstream's suggested poll interval.
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(5);

/// What the `tasks/get` poller saw.
pub(super) enum Polled {
    /// A `tasks/get` result: the upstream's task.
    Task(Value),
    /// Something the upstream sent on a `tasks/get` stream.
    Event(CallEvent),
    /// The upstream no longer knows the task (`tasks/get` answered -32602: it
    /// expired or was lost): no result will come.
    Gone(RpcError),
}

/// Whether a 2025-11-25 task status is terminal.
fn is_terminal(t: &Value) -> bool {
    matches!(
        t.get("status").and_then(Value::as_str),
        Some("completed" | "failed" | "cancelled")
    )
}

/// The upstream's poll interval suggestion, within bounds.
pub(super) fn poll_interval(task: &Value) -> Duration {
    task.get("pollInterval")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_POLL)
        .clamp(MIN_POLL, MAX_POLL)
}

/// Poll `tasks/get` every `interval` until the task is terminal (or the follower is gone).
pub(super) async fn poll(
    up: Arc<dyn Upstream>,
    ctx: CallContext,
    req: Request,
    interval: Duration,
    tx: mpsc::Sender<Polled>,
) {
    loop {
        let mut terminal = false;
        match up.call(&req, &ctx).await {
            Ok(mut call) => {
                let read = async {
                    while let Some(ev) = call.events.recv().await {
                        match ev {
                            CallEvent::Done(Ok(t)) => {
                                terminal = is_terminal(&t);
                                if tx.send(Polled::Task(t)).await.is_err() {
                                    return false;
                                }
                                return true;
                            }
                            CallEvent::Done(Err(e))
                                if e.code == tasklift_protocol::jsonrpc::INVALID_PARAMS =>
                            {
                                terminal = true;
                                let _ = tx.send(Polled::Gone(e)).await;
                                return true;
                            }
                            CallEvent::Done(Err(e)) => {
                                tracing::debug!(error = %e, "tasks/get of the upstream's task failed");
                                return true;
                            }
                            ev => {
                                if tx.send(Polled::Event(ev)).await.is_err() {
                                    return false;
                                }
                            }
                        }
                    }
                    true
                };
                match tokio::time::timeout(SHORT_CALL, read).await {
                    Ok(true) => call.canceller.disarm(),
                    Ok(false) => return,
                    Err(_) => tracing::debug!("tasks/get of the upstream's task took too long"),
                }
            }
            Err(e) => tracing::debug!(error = %e, "could not poll the upstream's task"),
        }
        if terminal || tx.is_closed() {
            return;
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn poll_interval_is_bounded() {
        assert_eq!(poll_interval(&json!({})), DEFAULT_POLL);
        assert_eq!(poll_interval(&json!({"pollInterval": 1})), MIN_POLL);
        assert_eq!(poll_interval(&json!({"pollInterval": 600000})), MAX_POLL);
        assert_eq!(
            poll_interval(&json!({"pollInterval": 250})),
            Duration::from_millis(250)
        );
    }
}
