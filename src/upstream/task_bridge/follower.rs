//! Following one upstream task, from the upstream's `CreateTaskResult` to its
//! outcome: `Follower::run` reads the blocking `tasks/result` (asked again when its
//! stream breaks), reports status messages as progress, relays the task's input
//! requests without its `related-task` metadata, and sends `tasks/cancel`.

use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::poll::{poll, poll_interval, Polled};
use super::{Follower, SHORT_CALL};
use crate::upstream::{broken, CallEvent, UpstreamCall};
use tasklift_protocol::jsonrpc::{
    Outcome, Request, RpcError, INTERNAL_ERROR, INVALID_PARAMS, UPSTREAM_ERROR,
};
use tasklift_protocol::mcp;

/// `_meta` key tying a 2025-11-25 message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The upstream's `notifications/tasks/status`.
const TASK_STATUS: &str = "notifications/tasks/status";
/// After a cancel that came before the upstream answered the call: how long to wait
/// for its `CreateTaskResult`, so the task it creates is cancelled too.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// How often a broken `tasks/result` stream is asked again.
const RESULT_RETRIES: u32 = 3;

/// Remove the upstream's `related-task` metadata from a message's params or result.
fn strip_related(v: &mut Value) {
    if let Some(Value::Object(meta)) = v.get_mut("_meta") {
        meta.remove(RELATED_TASK);
        if meta.is_empty() {
            if let Value::Object(o) = v {
                o.remove("_meta");
            }
        }
    }
}

/// Wait for the next event of a call, or forever when there is none.
async fn next_event(call: &mut Option<UpstreamCall>) -> Option<CallEvent> {
    match call {
        Some(c) => c.events.recv().await,
        None => std::future::pending().await,
    }
}

impl Follower {
    /// A `tasks/*` request for the upstream's task, with the call's `_meta` (the
    /// progress token only on `tasks/result`, whose stream may carry progress).
    fn task_request(&self, method: &str) -> Request {
        let mut meta = self.meta.clone();
        if method != "tasks/result" {
            meta.remove(mcp::META_PROGRESS_TOKEN);
        }
        let mut params = Map::new();
        params.insert("taskId".into(), json!(self.task_id));
        if !meta.is_empty() {
            params.insert("_meta".into(), Value::Object(meta));
        }
        Request {
            id: Some(json!("tasklift-task-bridge")),
            method: method.into(),
            params,
        }
    }

    async fn send(&self, ev: CallEvent) -> bool {
        self.tx.send(ev).await.is_ok()
    }

    /// The call's final answer.
    async fn finish(&self, outcome: Outcome) {
        let outcome = outcome.map(|mut r| {
            strip_related(&mut r);
            r
        });
        if let Err(e) = &outcome {
            tracing::info!(upstream = %self.up.name(), task = %self.task_id, error = %e, "the upstream's task failed");
        }
        self.send(CallEvent::Done(outcome)).await;
    }

    /// Report the upstream task's status message, when it changed, as progress.
    async fn status(&mut self, task: &Value) {
        let Some(msg) = task.get("statusMessage").and_then(Value::as_str) else {
            return;
        };
        if self.last_message.as_deref() == Some(msg) {
            return;
        }
        self.last_message = Some(msg.to_string());
        let Some(token) = self.token.clone() else {
            return;
        };
        self.progress += 1;
        let mut params = json!({"progressToken": token, "message": msg});
        if self.follow.client_token {
            params["progress"] = json!(self.progress);
        }
        self.send(CallEvent::Notification(
            tasklift_protocol::jsonrpc::notification(mcp::method::PROGRESS, params),
        ))
        .await;
    }

    /// Something the upstream sent on one of the task's streams.
    async fn event(&mut self, ev: CallEvent) {
        match ev {
            CallEvent::Notification(mut n) => {
                if n.get("method").and_then(Value::as_str) == Some(TASK_STATUS) {
                    let params = n.get("params").cloned().unwrap_or_default();
                    let ours =
                        params.get("taskId").and_then(Value::as_str) == Some(self.task_id.as_str());
                    if ours {
                        self.status(&params).await;
                    }
                    return;
                }
                if let Some(p) = n.get_mut("params") {
                    strip_related(p);
                }
                self.send(CallEvent::Notification(n)).await;
            }
            CallEvent::Input(mut r) => {
                strip_related(&mut r.params);
                tracing::debug!(method = %r.method, task = %self.task_id, "the upstream's task asks for input");
                self.send(CallEvent::Input(r)).await;
            }
            // A response on a stream that is not the call's own: not possible.
            CallEvent::Done(_) => {}
        }
    }

    /// Follow the call from its `CreateTaskResult` to the task's outcome, until it
    /// ends or is cancelled.
    pub(super) async fn run(mut self, mut first: UpstreamCall, mut cancel: oneshot::Receiver<()>) {
        // Phase 1: the upstream's answer to the task-augmented call.
        let mut cancelled_at: Option<tokio::time::Instant> = None;
        let mut cancel_open = true;
        let created = loop {
            let give_up = async {
                match cancelled_at {
                    Some(t) => tokio::time::sleep_until(t + CANCEL_WAIT).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ev = first.events.recv() => match ev {
                    Some(CallEvent::Done(o)) => {
                        first.canceller.disarm();
                        match o {
                            Ok(r) => break r,
                            Err(e) => {
                                if cancelled_at.is_none() {
                                    self.finish(Err(e)).await;
                                }
                                return;
                            }
                        }
                    }
                    Some(ev) => self.event(ev).await,
                    None => {
                        first.canceller.disarm();
                        if cancelled_at.is_none() {
                            self.finish(Err(broken(self.up.name()))).await;
                        }
                        return;
                    }
                },
                r = &mut cancel, if cancel_open => {
                    cancel_open = false;
                    if r.is_ok() {
                        // Wait a little for the task id, so the task is cancelled too.
                        cancelled_at = Some(tokio::time::Instant::now());
                    }
                }
                // Dropping `first` cancels the call itself.
                _ = give_up => return,
            }
        };
        let Some(task) = created
            .get("task")
            .filter(|t| t.get("taskId").and_then(Value::as_str).is_some())
            .cloned()
        else {
            // The upstream ran the call without a task: that is its answer.
            if cancelled_at.is_none() {
                self.finish(Ok(created)).await;
            }
            return;
        };
        self.task_id = task["taskId"].as_str().unwrap_or_default().to_string();
        tracing::info!(upstream = %self.up.name(), task = %self.task_id, "following the upstream's own task");
        if cancelled_at.is_some() {
            self.cancel_upstream().await;
            return;
        }
        self.status(&task).await;

        // Phase 2: poll its status; wait for its outcome on a blocking tasks/result.
        let (poll_tx, mut polled) = mpsc::channel(16);
        let poller = tokio::spawn(
            poll(
                self.up.clone(),
                self.ctx.clone(),
                self.task_request("tasks/get"),
                poll_interval(&task),
                poll_tx,
            )
            .in_current_span(),
        );
        let _poller = AbortOnDrop(poller.abort_handle());
        let mut result = None;
        let mut breaks = 0;
        // tasks/result is (re)sent when this time comes.
        let mut retry_at = Some(tokio::time::Instant::now());
        let mut last_task = task;
        let mut disarmed = false;
        let mut polling = true;
        // The first time the tasks/result stream broke, when it did.
        let mut first_break: Option<RpcError> = None;
        loop {
            let retry = async {
                match retry_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut cancel, if cancel_open => {
                    cancel_open = false;
                    if r.is_ok() {
                        self.cancel_upstream().await;
                        return; // dropping `result` ends the tasks/result request
                    }
                    // Disarmed: the call was answered and is no longer cancellable.
                    disarmed = true;
                }
                ev = next_event(&mut result) => {
                    let broke = match ev {
                        Some(CallEvent::Done(Err(e))) if e.code == UPSTREAM_ERROR => Some(e),
                        Some(CallEvent::Done(o)) => {
                            if let Some(c) = &mut result {
                                c.canceller.disarm();
                            }
                            // Asked again after a break, the task may be gone (a
                            // restarted server): the break is what happened.
                            let o = match (o, first_break.take()) {
                                (Err(e), Some(b)) if e.code == INVALID_PARAMS => Err(b),
                                (o, _) => o,
                            };
                            self.finish(o).await;
                            return;
                        }
                        Some(ev) => {
                            self.event(ev).await;
                            None
                        }
                        None => Some(broken(self.up.name())),
                    };
                    if let Some(e) = broke {
                        // The tasks/result stream broke, not the task: ask again.
                        if let Some(c) = &mut result {
                            c.canceller.disarm();
                        }
                        result = None;
                        breaks += 1;
                        let first = first_break.get_or_insert(e).clone();
                        if breaks > RESULT_RETRIES {
                            self.finish(Err(first)).await;
                            return;
                        }
                        tracing::info!(task = %self.task_id, "the upstream's tasks/result stream broke; asking again");
                        retry_at = Some(tokio::time::Instant::now() + poll_interval(&last_task));
                    }
                },
                p = polled.recv(), if polling => match p {
                    Some(Polled::Task(t)) => {
                        self.status(&t).await;
                        last_task = t;
                    }
                    Some(Polled::Event(ev)) => self.event(ev).await,
                    Some(Polled::Gone(e)) => {
                        let e = RpcError::new(
                            tasklift_protocol::jsonrpc::UPSTREAM_ERROR,
                            format!("upstream {} no longer knows its task: {}", self.up.name(), e.message),
                        );
                        self.finish(Err(e)).await;
                        return;
                    }
                    // The poller saw the task end (or gave up): the result comes on tasks/result.
                    None => polling = false,
                },
                _ = retry => {
                    retry_at = None;
                    result = match self.open_result().await {
                        Ok(c) => Some(c),
                        Err(e) => {
                            first_break.get_or_insert(e);
                            None
                        }
                    };
                    if result.is_none() {
                        breaks += 1;
                        if breaks > RESULT_RETRIES {
                            let e = first_break
                                .take()
                                .unwrap_or_else(|| ended_without_result(self.up.name(), &last_task));
                            self.finish(Err(e)).await;
                            return;
                        }
                        retry_at = Some(tokio::time::Instant::now() + poll_interval(&last_task));
                    }
                }
                _ = self.tx.closed() => {
                    // The call was dropped; its canceller says whether that was a
                    // cancellation. Nobody can read the result any more either way,
                    // so unless it was disarmed, the upstream's task is cancelled.
                    if cancel_open {
                        let waited = tokio::time::timeout(Duration::from_secs(1), &mut cancel).await;
                        if let Ok(Err(_)) = waited {
                            disarmed = true;
                        }
                    }
                    if !disarmed {
                        self.cancel_upstream().await;
                    }
                    return;
                }
            }
        }
    }

    /// Start the blocking `tasks/result` (asked again later if it could not be sent).
    async fn open_result(&self) -> Result<UpstreamCall, RpcError> {
        self.up
            .call(&self.task_request("tasks/result"), &self.ctx)
            .await
            .map_err(|e| {
                tracing::info!(task = %self.task_id, error = %e, "could not ask for the upstream task's result");
                e.to_rpc()
            })
    }

    /// Send `tasks/cancel` for the upstream's task and wait (a little) for its answer.
    async fn cancel_upstream(&self) {
        let req = self.task_request("tasks/cancel");
        let asked = async {
            match self.up.call(&req, &self.ctx).await {
                Ok(c) => c.outcome(self.up.name()).await,
                Err(e) => Err(e.to_rpc()),
            }
        };
        match tokio::time::timeout(SHORT_CALL, asked).await {
            Ok(Ok(_)) => {
                tracing::info!(upstream = %self.up.name(), task = %self.task_id, "cancelled the upstream's task")
            }
            Ok(Err(e)) => {
                tracing::info!(upstream = %self.up.name(), task = %self.task_id, error = %e, "the upstream refused to cancel its task")
            }
            Err(_) => {
                tracing::warn!(upstream = %self.up.name(), task = %self.task_id, "the upstream did not answer tasks/cancel")
            }
        }
    }
}

/// The error of a task whose result could not be read.
fn ended_without_result(upstream: &str, task: &Value) -> RpcError {
    match (
        task.get("status").and_then(Value::as_str),
        task.get("statusMessage").and_then(Value::as_str),
    ) {
        (Some("failed"), Some(m)) => RpcError::new(INTERNAL_ERROR, m),
        (Some("cancelled"), _) => RpcError::new(
            INTERNAL_ERROR,
            format!("upstream {upstream} cancelled its task before it produced a result"),
        ),
        _ => RpcError::new(
            UPSTREAM_ERROR,
            format!("upstream {upstream} kept closing the stream of its task's result"),
        ),
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn related_task_metadata_is_removed_and_empty_meta_dropped() {
        let mut r = json!({"content": [], "_meta": {RELATED_TASK: {"taskId": "t"}}});
        strip_related(&mut r);
        assert_eq!(r, json!({"content": []}));
        let mut r = json!({"_meta": {RELATED_TASK: {"taskId": "t"}, "x": 1}});
        strip_related(&mut r);
        assert_eq!(r, json!({"_meta": {"x": 1}}));
    }
}
