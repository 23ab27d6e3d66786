//! Following one upstream task, from the upstream's `CreateTaskResult` to its
//! outcome: `Follower::run` waits for the task (phase 1), then `Following` reads
//! the blocking `tasks/result` (asked again when its stream breaks) while the task
//! is polled (phase 2). Status messages become progress, the task's input requests
//! are relayed without its `related-task` metadata, and a cancel sends `tasks/cancel`.

use std::ops::ControlFlow;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
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

/// Whether phase 2 goes on after an event (`Break`: the call is over).
type Step = ControlFlow<()>;

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
            params: params.into(),
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
    pub(super) async fn run(mut self, mut first: UpstreamCall, cancel: oneshot::Receiver<()>) {
        let mut cancel = CancelSignal {
            rx: cancel,
            open: true,
        };
        // `first` lives until the end: dropping it unanswered cancels the call itself.
        let Some((created, cancelled)) = self.await_created(&mut first, &mut cancel).await else {
            return;
        };
        let Some(task) = self.start_following(created, cancelled).await else {
            return;
        };
        self.follow_task(task, &mut cancel).await;
    }

    /// Phase 1: the upstream's answer to the task-augmented call, and whether the
    /// call was cancelled meanwhile. `None` when the call ended there (its error
    /// was reported, or it was cancelled and the answer did not come in time).
    async fn await_created(
        &mut self,
        first: &mut UpstreamCall,
        cancel: &mut CancelSignal,
    ) -> Option<(Value, bool)> {
        let mut cancelled_at: Option<Instant> = None;
        loop {
            let give_up = sleep_until_or_never(cancelled_at.map(|t| t + CANCEL_WAIT));
            tokio::select! {
                ev = first.events.recv() => match ev {
                    Some(CallEvent::Done(o)) => {
                        first.canceller.disarm();
                        return self.answered(o, cancelled_at.is_some()).await;
                    }
                    Some(ev) => self.event(ev).await,
                    None => {
                        first.canceller.disarm();
                        if cancelled_at.is_none() {
                            self.finish(Err(broken(self.up.name()))).await;
                        }
                        return None;
                    }
                },
                r = &mut cancel.rx, if cancel.open => {
                    cancel.open = false;
                    if r.is_ok() {
                        // Wait a little for the task id, so the task is cancelled too.
                        cancelled_at = Some(Instant::now());
                    }
                }
                // Dropping `first` cancels the call itself.
                _ = give_up => return None,
            }
        }
    }

    /// The upstream answered the task-augmented call: its result goes on to phase 2,
    /// its error is the call's (unless the call was cancelled).
    async fn answered(&self, o: Outcome, cancelled: bool) -> Option<(Value, bool)> {
        match o {
            Ok(r) => Some((r, cancelled)),
            Err(e) => {
                if !cancelled {
                    self.finish(Err(e)).await;
                }
                None
            }
        }
    }

    /// Take the task out of the upstream's answer: `None` when there is nothing
    /// to follow (the answer was the result, or the call was cancelled meanwhile).
    async fn start_following(&mut self, created: Value, cancelled: bool) -> Option<Value> {
        let Some(task) = created
            .get("task")
            .filter(|t| t.get("taskId").and_then(Value::as_str).is_some())
            .cloned()
        else {
            // The upstream ran the call without a task: that is its answer.
            if !cancelled {
                self.finish(Ok(created)).await;
            }
            return None;
        };
        self.task_id = task["taskId"].as_str().unwrap_or_default().to_string();
        tracing::info!(upstream = %self.up.name(), task = %self.task_id, "following the upstream's own task");
        if cancelled {
            self.cancel_upstream().await;
            return None;
        }
        self.status(&task).await;
        Some(task)
    }

    /// Phase 2: poll the task's status; wait for its outcome on a blocking tasks/result.
    async fn follow_task(&mut self, task: Value, cancel: &mut CancelSignal) {
        let (poll_tx, polled) = mpsc::channel(16);
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
        Following {
            f: self,
            cancel,
            result: None,
            _poller: AbortOnDrop(poller.abort_handle()),
            polled,
            polling: true,
            breaks: 0,
            retry_at: Some(Instant::now()),
            last_task: task,
            disarmed: false,
            first_break: None,
        }
        .run()
        .await;
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

/// The call's canceller, as the follower hears it.
struct CancelSignal {
    rx: oneshot::Receiver<()>,
    /// Whether it has not fired (nor been disarmed) yet.
    open: bool,
}

/// Sleep until `at`, or forever when there is no such time.
async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Phase 2's state: the task is polled, and its outcome read on a blocking
/// `tasks/result`, asked again when its stream breaks.
struct Following<'a> {
    f: &'a mut Follower,
    cancel: &'a mut CancelSignal,
    /// The open `tasks/result`, if any (dropping it ends the request).
    result: Option<UpstreamCall>,
    _poller: AbortOnDrop,
    polled: mpsc::Receiver<Polled>,
    /// Whether the poller still runs.
    polling: bool,
    /// How often `tasks/result` broke or could not be sent.
    breaks: u32,
    /// tasks/result is (re)sent when this time comes.
    retry_at: Option<Instant>,
    /// The task as last seen (its `pollInterval`, its status).
    last_task: Value,
    /// Whether the call was answered and is no longer cancellable.
    disarmed: bool,
    /// The first time the tasks/result stream broke, when it did.
    first_break: Option<RpcError>,
}

impl Following<'_> {
    /// Wait for the next event of any kind until one ends the call.
    async fn run(mut self) {
        loop {
            let retry = sleep_until_or_never(self.retry_at);
            let step = tokio::select! {
                r = &mut self.cancel.rx, if self.cancel.open => self.on_cancel(r).await,
                ev = next_event(&mut self.result) => self.on_result_event(ev).await,
                p = self.polled.recv(), if self.polling => self.on_polled(p).await,
                _ = retry => self.ask_result().await,
                _ = self.f.tx.closed() => self.on_call_dropped().await,
            };
            if step.is_break() {
                return;
            }
        }
    }

    /// The call was cancelled, or its canceller disarmed.
    async fn on_cancel(&mut self, r: Result<(), oneshot::error::RecvError>) -> Step {
        self.cancel.open = false;
        if r.is_ok() {
            self.f.cancel_upstream().await;
            return Step::Break(()); // dropping `result` ends the tasks/result request
        }
        // Disarmed: the call was answered and is no longer cancellable.
        self.disarmed = true;
        Step::Continue(())
    }

    /// Something on the tasks/result stream: the outcome, an event, or its end.
    async fn on_result_event(&mut self, ev: Option<CallEvent>) -> Step {
        let broke = match ev {
            Some(CallEvent::Done(Err(e))) if e.code == UPSTREAM_ERROR => e,
            Some(CallEvent::Done(o)) => {
                self.outcome(o).await;
                return Step::Break(());
            }
            Some(ev) => {
                self.f.event(ev).await;
                return Step::Continue(());
            }
            None => broken(self.f.up.name()),
        };
        self.result_broke(broke).await
    }

    /// tasks/result answered: the task's outcome is the call's.
    async fn outcome(&mut self, o: Outcome) {
        if let Some(c) = &mut self.result {
            c.canceller.disarm();
        }
        // Asked again after a break, the task may be gone (a
        // restarted server): the break is what happened.
        let o = match (o, self.first_break.take()) {
            (Err(e), Some(b)) if e.code == INVALID_PARAMS => Err(b),
            (o, _) => o,
        };
        self.f.finish(o).await;
    }

    /// The tasks/result stream broke, not the task: ask again, a few times.
    async fn result_broke(&mut self, e: RpcError) -> Step {
        if let Some(c) = &mut self.result {
            c.canceller.disarm();
        }
        self.result = None;
        self.breaks += 1;
        let first = self.first_break.get_or_insert(e).clone();
        if self.breaks > RESULT_RETRIES {
            self.f.finish(Err(first)).await;
            return Step::Break(());
        }
        tracing::info!(task = %self.f.task_id, "the upstream's tasks/result stream broke; asking again");
        self.retry_at = Some(Instant::now() + poll_interval(&self.last_task));
        Step::Continue(())
    }

    /// What the poller saw.
    async fn on_polled(&mut self, p: Option<Polled>) -> Step {
        match p {
            Some(Polled::Task(t)) => {
                self.f.status(&t).await;
                self.last_task = t;
            }
            Some(Polled::Event(ev)) => self.f.event(ev).await,
            Some(Polled::Gone(e)) => {
                let e = RpcError::new(
                    tasklift_protocol::jsonrpc::UPSTREAM_ERROR,
                    format!(
                        "upstream {} no longer knows its task: {}",
                        self.f.up.name(),
                        e.message
                    ),
                );
                self.f.finish(Err(e)).await;
                return Step::Break(());
            }
            // The poller saw the task end (or gave up): the result comes on tasks/result.
            None => self.polling = false,
        }
        Step::Continue(())
    }

    /// Time to (re)send tasks/result.
    async fn ask_result(&mut self) -> Step {
        self.retry_at = None;
        self.result = match self.f.open_result().await {
            Ok(c) => Some(c),
            Err(e) => {
                self.first_break.get_or_insert(e);
                None
            }
        };
        if self.result.is_none() {
            self.breaks += 1;
            if self.breaks > RESULT_RETRIES {
                let e = self
                    .first_break
                    .take()
                    .unwrap_or_else(|| ended_without_result(self.f.up.name(), &self.last_task));
                self.f.finish(Err(e)).await;
                return Step::Break(());
            }
            self.retry_at = Some(Instant::now() + poll_interval(&self.last_task));
        }
        Step::Continue(())
    }

    /// The call was dropped; its canceller says whether that was a
    /// cancellation. Nobody can read the result any more either way,
    /// so unless it was disarmed, the upstream's task is cancelled.
    async fn on_call_dropped(&mut self) -> Step {
        if self.cancel.open {
            let waited = tokio::time::timeout(Duration::from_secs(1), &mut self.cancel.rx).await;
            if let Ok(Err(_)) = waited {
                self.disarmed = true;
            }
        }
        if !self.disarmed {
            self.f.cancel_upstream().await;
        }
        Step::Break(())
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
