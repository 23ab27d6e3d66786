//! A legacy upstream's own 2025-11-25 tasks, bridged into ordinary calls.
//!
//! A tool whose legacy upstream lists it with `execution.taskSupport: "required"`
//! cannot be called plainly: the server wants `params.task` and answers with a
//! `CreateTaskResult` (`{"task": {...}}`), then serves the outcome through its own
//! `tasks/*` methods. For such a tool tasklift calls it with `params.task` (a `ttl`)
//! and follows the upstream's task:
//! - `tasks/get` at the task's `pollInterval` (and `notifications/tasks/status`, when
//!   the upstream sends them on a stream tasklift reads) for its status: each new
//!   `statusMessage` becomes a progress notification under the call's progress
//!   token, so it is what a tasklift task's `statusMessage` shows;
//! - one blocking `tasks/result` for the outcome: the upstream's result, or its
//!   JSON-RPC error (a failed call); the input requests the upstream sends on it
//!   (`elicitation/create` with `related-task` metadata) become the call's input
//!   requests, without the upstream's task id;
//! - cancelling the call (dropping it, or its canceller) sends `tasks/cancel`.
//!
//! The engine sees an ordinary call (notifications, input requests, then the tool's
//! result), so modern clients get a tasklift task or a plain wait, and 2025-11-25
//! clients a task of their era or a plain wait, with the machinery that serves any
//! other call. The upstream's task id never leaves tasklift.
//!
//! Every `tasks/*` request goes out with the call's own context, so it reaches the
//! upstream session (HTTP) the task was created in; a transport that spreads one
//! caller's requests over several sessions or child processes must send them to
//! the one that created the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::{
    broken, CallContext, CallEvent, Canceller, Era, Listening, Upstream, UpstreamCall,
    UpstreamError, UpstreamFuture,
};
use tasklift_protocol::jsonrpc::{
    Outcome, Request, RpcError, INTERNAL_ERROR, INVALID_PARAMS, UPSTREAM_ERROR,
};
use tasklift_protocol::mcp;

/// `_meta` key tying a 2025-11-25 message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The upstream's `notifications/tasks/status`.
const TASK_STATUS: &str = "notifications/tasks/status";
/// Poll interval when the upstream suggests none.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// Bounds on the upstream's suggested poll interval.
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(5);
/// Longest wait for one `tasks/get` or `tasks/cancel` answer.
const SHORT_CALL: Duration = Duration::from_secs(30);
/// After a cancel that came before the upstream answered the call: how long to wait
/// for its `CreateTaskResult`, so the task it creates is cancelled too.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// How often a broken `tasks/result` stream is asked again.
const RESULT_RETRIES: u32 = 3;

/// How a bridged call asks for and follows its upstream task.
#[derive(Debug, Clone, Copy)]
pub struct Follow {
    /// The `ttl` asked for in `params.task`, in milliseconds (the upstream may pick another).
    pub ttl_ms: u64,
    /// Whether the client gave a progress token of its own: the status messages then
    /// reach it as progress notifications, which need a `progress` count; tasklift's
    /// own token gets the bare message (it only feeds a task's `statusMessage`).
    pub client_token: bool,
}

/// `inner` with its `tools/call` requests bridged into upstream tasks (every other
/// request goes to `inner` as it is). Used for the calls of tools whose upstream
/// requires tasks.
pub fn bridged(inner: Arc<dyn Upstream>, follow: Follow) -> Arc<dyn Upstream> {
    Arc::new(Bridged { inner, follow })
}

/// An upstream whose `tools/call` runs as an upstream task.
struct Bridged {
    inner: Arc<dyn Upstream>,
    follow: Follow,
}

impl Upstream for Bridged {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn era<'a>(&'a self, ctx: &'a CallContext) -> UpstreamFuture<'a, Era> {
        self.inner.era(ctx)
    }
    fn known_era(&self) -> Option<Era> {
        self.inner.known_era()
    }
    fn call<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, UpstreamCall> {
        if req.method == mcp::method::TOOLS_CALL {
            Box::pin(call_as_task(self.inner.clone(), req, ctx, self.follow))
        } else {
            self.inner.call(req, ctx)
        }
    }
    fn notify<'a>(&'a self, req: &'a Request, ctx: &'a CallContext) -> UpstreamFuture<'a, ()> {
        self.inner.notify(req, ctx)
    }
    fn discover<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Outcome> {
        self.inner.discover(req, ctx)
    }
    fn close_idle<'a>(&'a self, all: bool) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.inner.close_idle(all)
    }
    fn shutdown<'a>(&'a self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.inner.shutdown()
    }
    fn listen<'a>(
        &'a self,
        filter: &'a Map<String, Value>,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Listening> {
        self.inner.listen(filter, req, ctx)
    }
    fn session_per_client(&self) -> bool {
        self.inner.session_per_client()
    }
    fn end_session<'a>(
        &'a self,
        ctx: &'a CallContext,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.inner.end_session(ctx)
    }
    fn check_health<'a>(&'a self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.inner.check_health()
    }
    fn restarts(&self) -> Option<u64> {
        self.inner.restarts()
    }
    fn health(&self) -> Result<(), String> {
        self.inner.health()
    }
}

/// Call the tool `req` names as an upstream task and follow it: the returned call's
/// events are the task's progress (as notifications), the input requests the
/// upstream sends while it runs, and finally the tool's result or error. Cancelling
/// the call sends `tasks/cancel` upstream.
pub async fn call_as_task(
    up: Arc<dyn Upstream>,
    req: &Request,
    ctx: &CallContext,
    follow: Follow,
) -> Result<UpstreamCall, UpstreamError> {
    let mut r = req.clone();
    r.params
        .insert("task".into(), json!({ "ttl": follow.ttl_ms }));
    let first = up.call(&r, ctx).await?;
    let (tx, events) = mpsc::channel(32);
    let (cancel_tx, cancel_rx) = oneshot::channel::<()>();
    let meta = req.meta().cloned().unwrap_or_default();
    let driver = Driver {
        token: meta.get(mcp::META_PROGRESS_TOKEN).cloned(),
        meta,
        up,
        ctx: ctx.clone(),
        tx,
        follow,
        progress: 0,
        last_message: None,
        task_id: String::new(),
    };
    tokio::spawn(driver.run(first, cancel_rx).in_current_span());
    Ok(UpstreamCall {
        events,
        canceller: Canceller::on_cancel(Box::new(move || {
            let _ = cancel_tx.send(());
        })),
    })
}

/// Follows one upstream task, sending what the engine should see to `tx`.
struct Driver {
    up: Arc<dyn Upstream>,
    ctx: CallContext,
    /// The call's `_meta` (protocol fields, trace context, progress token).
    meta: Map<String, Value>,
    /// The call's progress token, under which status messages are reported.
    token: Option<Value>,
    tx: mpsc::Sender<CallEvent>,
    follow: Follow,
    /// Progress notifications sent so far.
    progress: u64,
    /// The last status message reported.
    last_message: Option<String>,
    /// The upstream's task id, once known.
    task_id: String,
}

/// What the `tasks/get` poller saw.
enum Polled {
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

/// The upstream's poll interval suggestion, within bounds.
fn poll_interval(task: &Value) -> Duration {
    task.get("pollInterval")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_POLL)
        .clamp(MIN_POLL, MAX_POLL)
}

/// Wait for the next event of a call, or forever when there is none.
async fn next_event(call: &mut Option<UpstreamCall>) -> Option<CallEvent> {
    match call {
        Some(c) => c.events.recv().await,
        None => std::future::pending().await,
    }
}

impl Driver {
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
    async fn run(mut self, mut first: UpstreamCall, mut cancel: oneshot::Receiver<()>) {
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

/// Poll `tasks/get` every `interval` until the task is terminal (or the driver is gone).
async fn poll(
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
