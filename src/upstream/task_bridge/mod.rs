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
//!
//! This file holds the wrapper (`Bridged`), the start of a bridged call and the
//! follower's state (`Follower`), and imports none of its files: `follower.rs` follows
//! the task to its outcome, `poll.rs` polls its `tasks/get`.

mod follower;
mod poll;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::{
    CallContext, CallEvent, Canceller, Era, Listening, Upstream, UpstreamCall, UpstreamError,
    UpstreamFuture,
};
use tasklift_protocol::jsonrpc::{Outcome, Request};
use tasklift_protocol::mcp;

/// Longest wait for one `tasks/get` or `tasks/cancel` answer.
const SHORT_CALL: Duration = Duration::from_secs(30);

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
    fn close_idle<'a>(&'a self, all: bool) -> super::Plain<'a, ()> {
        self.inner.close_idle(all)
    }
    fn shutdown<'a>(&'a self) -> super::Plain<'a, ()> {
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
    fn end_session<'a>(&'a self, ctx: &'a CallContext) -> super::Plain<'a, ()> {
        self.inner.end_session(ctx)
    }
    fn check_health<'a>(&'a self) -> super::Plain<'a, ()> {
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
    let follower = Follower {
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
    tokio::spawn(follower.run(first, cancel_rx).in_current_span());
    Ok(UpstreamCall {
        events: events.into(),
        canceller: Canceller::on_cancel(Box::new(move || {
            let _ = cancel_tx.send(());
        })),
    })
}

/// Follows one upstream task, sending what the engine should see to `tx`.
struct Follower {
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
