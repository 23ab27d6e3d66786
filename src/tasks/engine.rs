//! The task engine: races each `tools/call` against its threshold, turns slow calls
//! into durable tasks, finishes them in the background, and answers `tasks/*`.
//!
//! Lifecycle of a call:
//! 1. Start the upstream call (tasklift's own progress token is added when the
//!    client gave none, so progress can feed `statusMessage`).
//! 2. Upstream answers first: the plain result goes back; nothing is stored.
//! 3. Threshold first, client declared the Tasks extension: a `working` record is
//!    written durably, the `CreateTaskResult` goes back, and a background task owns
//!    the call until it ends `completed`, `failed` or `cancelled`.
//! 4. Threshold first, no extension: the caller keeps waiting on an SSE stream with
//!    keep-alive comments; never a handle.
//! 5. The client goes away before any answer: the upstream call is cancelled.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{create_task_result, detailed_task, progress_message, Clock};
use crate::config::{ToolMode, ToolPolicy};
use crate::jsonrpc::{self, Outcome, Request, RpcError, INTERNAL_ERROR};
use crate::mcp::{self, method};
use crate::reply::{Reply, StreamItem};
use crate::store::{TaskOutcome, TaskRecord, TaskStatus, TaskStore};
use crate::upstream::{broken, CallContext, CallEvent, Upstream, UpstreamCall};

/// Why a running task is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// `tasks/cancel`.
    Cancelled,
    /// It ran past its TTL.
    Expired,
}

/// The engine. One per process; shared by every mount.
pub struct Engine {
    /// Durable records.
    store: Arc<dyn TaskStore>,
    /// Tasks whose upstream call is still running here, with the way to stop them.
    running: DashMap<String, mpsc::Sender<StopReason>>,
    /// Task ids created by an upstream itself (passed through untouched), by upstream name.
    upstream_tasks: DashMap<String, String>,
    /// Time source.
    clock: Clock,
    /// How long a task failed at its TTL stays readable.
    expired_grace: Duration,
    /// Interval between SSE keep-alives.
    keepalive: Duration,
}

/// Where a `tasks/*` request should go.
pub enum TaskRoute {
    /// The task is tasklift's: answered here.
    Local,
    /// The upstream created this task itself: forward untouched.
    Upstream,
}

/// What the synchronous phase of a call saw next.
enum Step {
    /// The final response message.
    Final(Value),
    /// A notification to relay to the client.
    Relay(Value),
    /// Time to send a keep-alive.
    KeepAlive,
    /// The threshold passed and a task may be created.
    Threshold,
}

/// How a call may become a task.
struct TaskSpec {
    /// The caller's principal.
    owner: String,
    /// Tool name.
    tool: String,
    /// The tool's rules.
    policy: ToolPolicy,
}

/// A request in its synchronous phase.
struct SyncCall {
    /// The upstream call.
    call: UpstreamCall,
    /// The client's request id.
    id: Option<Value>,
    /// Whether the client asked for progress (it is then relayed).
    relay_progress: bool,
    /// The token progress arrives under (the client's or tasklift's own; null if none).
    token: Value,
    /// `ttlMs` and `cacheScope` to add to a cacheable result that lacks them.
    cache_hint: Option<(u64, String)>,
    /// When the threshold passes, if a task may be created.
    threshold_at: Option<tokio::time::Instant>,
    /// Latest progress, for the task's first statusMessage.
    last_progress: Option<String>,
    /// Upstream name (for errors).
    upstream: String,
}

impl Engine {
    /// A new engine over a store.
    pub fn new(
        store: Arc<dyn TaskStore>,
        clock: Clock,
        expired_grace: Duration,
        keepalive: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            running: DashMap::new(),
            upstream_tasks: DashMap::new(),
            clock,
            expired_grace,
            keepalive,
        })
    }

    /// The store (for health and figures).
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Number of tasks whose upstream call runs in this process.
    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    /// At start: tasks a previous process left running can never finish; fail them.
    pub async fn recover(&self) -> Result<usize, crate::store::StoreError> {
        let orphans = self.store.unfinished().await?;
        let now = self.clock.now_ms();
        for mut rec in orphans.iter().cloned() {
            let err = RpcError::new(
                INTERNAL_ERROR,
                "tasklift restarted while this task was running; the upstream outcome is unknown",
            );
            rec.status = TaskStatus::Failed;
            rec.status_message = Some(err.message.clone());
            rec.input_requests.clear();
            rec.outcome = Some(TaskOutcome::Error(err.to_value()));
            rec.updated_at_ms = now;
            self.store.put(&rec).await?;
        }
        if !orphans.is_empty() {
            tracing::warn!(
                count = orphans.len(),
                "failed tasks left running by a previous process"
            );
        }
        Ok(orphans.len())
    }

    /// Handle `tools/call`.
    pub async fn call_tool(
        self: &Arc<Self>,
        upstream: Arc<dyn Upstream>,
        policy: &ToolPolicy,
        mut req: Request,
        ctx: CallContext,
    ) -> Reply {
        let declares = mcp::declares_tasks(&req.params);
        if policy.mode == ToolMode::Required && !declares {
            let tool = req.str_param("name").unwrap_or_default();
            let err = mcp::missing_tasks_capability(&format!("tool {tool:?}"));
            return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(err)));
        }
        // tasklift follows progress under its own token when the client gave none.
        let token = match req.meta().and_then(|m| m.get(mcp::META_PROGRESS_TOKEN)) {
            Some(t) => t.clone(),
            None => {
                let t = json!(format!("tasklift-{}", uuid::Uuid::new_v4().simple()));
                mcp::meta_mut(&mut req.params).insert(mcp::META_PROGRESS_TOKEN.into(), t.clone());
                t
            }
        };
        let task = (declares && policy.mode != ToolMode::Never).then(|| TaskSpec {
            owner: ctx.principal.clone(),
            tool: req.str_param("name").unwrap_or_default().to_string(),
            policy: policy.clone(),
        });
        self.run_sync(upstream, req, ctx, Some(token), task, None)
            .await
    }

    /// Forward any other request and relay its answer (notifications stream over SSE).
    /// `cache_hint` is added to cacheable results that lack `ttlMs`/`cacheScope`.
    pub async fn relay(
        self: &Arc<Self>,
        upstream: Arc<dyn Upstream>,
        req: Request,
        ctx: CallContext,
        cache_hint: Option<(u64, String)>,
    ) -> Reply {
        let token = req
            .meta()
            .and_then(|m| m.get(mcp::META_PROGRESS_TOKEN))
            .cloned();
        self.run_sync(upstream, req, ctx, token, None, cache_hint)
            .await
    }

    /// Start an upstream request and carry it through its synchronous phase. `token`
    /// is the progress token the upstream reports under; `task` says whether and how
    /// the call may become a task.
    async fn run_sync(
        self: &Arc<Self>,
        upstream: Arc<dyn Upstream>,
        req: Request,
        ctx: CallContext,
        token: Option<Value>,
        task: Option<TaskSpec>,
        cache_hint: Option<(u64, String)>,
    ) -> Reply {
        let id = req.id.clone();
        let client_token = req
            .meta()
            .and_then(|m| m.get(mcp::META_PROGRESS_TOKEN))
            .cloned();
        let call = match upstream.call(&req, &ctx).await {
            Ok(c) => c,
            Err(e) => return Reply::Json(jsonrpc::response(id.as_ref(), &Err(e.to_rpc()))),
        };
        let mut sc = SyncCall {
            call,
            id,
            relay_progress: client_token.is_some(),
            token: token.unwrap_or(Value::Null),
            threshold_at: task
                .as_ref()
                .map(|t| tokio::time::Instant::now() + t.policy.threshold),
            last_progress: None,
            upstream: upstream.name().to_string(),
            cache_hint,
        };
        // Phase 1 runs in the request's own future: if the client goes away, hyper
        // drops it, and dropping the call cancels it upstream.
        let first = match self.step(&mut sc, None).await {
            Step::Final(v) => return Reply::Json(v),
            Step::Threshold => match self
                .create_task(&mut sc, task.as_ref().expect("threshold implies task"))
                .await
            {
                Some(v) => return Reply::Json(v),
                None => None,
            },
            Step::Relay(n) => Some(StreamItem::Message(n)),
            Step::KeepAlive => Some(StreamItem::KeepAlive),
        };
        // Phase 2: something must be streamed (progress or keep-alives).
        let (tx, rx) = mpsc::channel(32);
        let engine = self.clone();
        tokio::spawn(
            async move {
                if let Some(item) = first {
                    if tx.send(item).await.is_err() {
                        return;
                    }
                }
                let mut last_send = tokio::time::Instant::now();
                loop {
                    let item = tokio::select! {
                        _ = tx.closed() => {
                            tracing::debug!("client went away; cancelling the upstream call");
                            return; // dropping `sc` cancels upstream
                        }
                        step = engine.step(&mut sc, Some(last_send)) => match step {
                            Step::Final(v) => StreamItem::Message(v),
                            Step::Relay(n) => StreamItem::Message(n),
                            Step::KeepAlive => StreamItem::KeepAlive,
                            Step::Threshold => match engine.create_task(&mut sc, task.as_ref().expect("threshold implies task")).await {
                                Some(v) => StreamItem::Message(v),
                                None => continue,
                            },
                        },
                    };
                    let last = matches!(&item, StreamItem::Message(m) if m.get("method").is_none());
                    if tx.send(item).await.is_err() {
                        return;
                    }
                    last_send = tokio::time::Instant::now();
                    if last {
                        return;
                    }
                }
            }
            .in_current_span(),
        );
        Reply::Stream(rx)
    }

    /// Wait for the next thing the synchronous phase must act on. `last_send` is set
    /// once a stream is open (keep-alives are due `keepalive` after the last send);
    /// before that, keep-alives start `keepalive` after the threshold, or right away
    /// for a caller that can never get a task.
    async fn step(&self, sc: &mut SyncCall, last_send: Option<tokio::time::Instant>) -> Step {
        loop {
            let keepalive_at = match (last_send, sc.threshold_at) {
                (Some(t), _) => t + self.keepalive,
                (None, Some(t)) => t + self.keepalive,
                (None, None) => tokio::time::Instant::now() + self.keepalive,
            };
            let threshold_at = sc.threshold_at;
            tokio::select! {
                biased;
                ev = sc.call.events.recv() => match ev {
                    Some(CallEvent::Done(outcome)) => {
                        sc.call.canceller.disarm();
                        if let Ok(r) = &outcome {
                            self.note_upstream_task(r, &sc.upstream);
                        }
                        let mut outcome = finalize_result(outcome);
                        if let (Ok(Value::Object(r)), Some((ttl, scope))) = (&mut outcome, &sc.cache_hint) {
                            r.entry("ttlMs").or_insert_with(|| json!(ttl));
                            r.entry("cacheScope").or_insert_with(|| json!(scope));
                        }
                        return Step::Final(jsonrpc::response(sc.id.as_ref(), &outcome));
                    }
                    Some(CallEvent::Notification(n)) => {
                        if is_progress_for(&n, &sc.token) {
                            sc.last_progress = n.get("params").and_then(progress_message).or(sc.last_progress.take());
                            if sc.relay_progress {
                                return Step::Relay(n);
                            }
                        } else if n.get("method").and_then(Value::as_str) == Some("notifications/message") {
                            return Step::Relay(n);
                        }
                    }
                    None => {
                        sc.call.canceller.disarm();
                        return Step::Final(jsonrpc::response(sc.id.as_ref(), &Err(broken(&sc.upstream))));
                    }
                },
                _ = sleep_until_opt(threshold_at) => {
                    return Step::Threshold;
                }
                _ = tokio::time::sleep_until(keepalive_at) => return Step::KeepAlive,
            }
        }
    }

    /// The threshold passed: persist a task, hand the call to a background owner,
    /// and return the `CreateTaskResult` message. `None` if the task could not be
    /// stored: the caller then keeps waiting synchronously, so nothing is lost.
    async fn create_task(self: &Arc<Self>, sc: &mut SyncCall, spec: &TaskSpec) -> Option<Value> {
        let (owner, tool, policy) = (&spec.owner, &spec.tool, &spec.policy);
        sc.threshold_at = None;
        let now = self.clock.now_ms();
        let ttl_ms = policy.ttl.as_millis() as u64;
        let rec = TaskRecord {
            id: uuid::Uuid::new_v4().to_string(),
            owner: owner.to_string(),
            upstream: sc.upstream.clone(),
            tool: tool.to_string(),
            status: TaskStatus::Working,
            status_message: sc.last_progress.clone(),
            created_at_ms: now,
            updated_at_ms: now,
            ttl_ms,
            poll_interval_ms: policy.poll_interval.as_millis() as u64,
            expires_at_ms: now + ttl_ms,
            input_requests: Default::default(),
            outcome: None,
        };
        if let Err(e) = self.store.create(&rec).await {
            tracing::error!(error = %e, "cannot store a new task; the call stays synchronous");
            return None;
        }
        let (stop_tx, stop_rx) = mpsc::channel(1);
        self.running.insert(rec.id.clone(), stop_tx);
        let handle = create_task_result(&rec);
        tracing::info!(task.id = %rec.id, tool = %tool, upstream = %sc.upstream, "call became a task");
        let call = std::mem::replace(&mut sc.call, UpstreamCall::finished());
        let engine = self.clone();
        let span = tracing::info_span!("task", task.id = %rec.id, tool = %tool);
        let token = sc.token.clone();
        tokio::spawn(
            engine
                .finish_task(rec, call, token, stop_rx)
                .instrument(span),
        );
        Some(jsonrpc::response(sc.id.as_ref(), &Ok(handle)))
    }

    /// Own a task's upstream call until it ends, recording each change.
    async fn finish_task(
        self: Arc<Self>,
        mut rec: TaskRecord,
        mut call: UpstreamCall,
        token: Value,
        mut stop: mpsc::Receiver<StopReason>,
    ) {
        let upstream = rec.upstream.clone();
        loop {
            tokio::select! {
                ev = call.events.recv() => match ev {
                    Some(CallEvent::Notification(n)) => {
                        if is_progress_for(&n, &token) {
                            if let Some(m) = n.get("params").and_then(progress_message) {
                                rec.status_message = Some(m);
                                rec.updated_at_ms = self.clock.now_ms();
                                if let Err(e) = self.store.put(&rec).await {
                                    tracing::warn!(error = %e, "could not record progress");
                                }
                            }
                        }
                    }
                    Some(CallEvent::Done(outcome)) => {
                        call.canceller.disarm();
                        match finalize_result(outcome) {
                            Ok(r) => {
                                rec.status = TaskStatus::Completed;
                                rec.outcome = Some(TaskOutcome::Result(r));
                            }
                            Err(e) => {
                                rec.status = TaskStatus::Failed;
                                rec.status_message = Some(e.message.clone());
                                rec.outcome = Some(TaskOutcome::Error(e.to_value()));
                            }
                        }
                        break;
                    }
                    None => {
                        let e = broken(&upstream);
                        rec.status = TaskStatus::Failed;
                        rec.status_message = Some(e.message.clone());
                        rec.outcome = Some(TaskOutcome::Error(e.to_value()));
                        break;
                    }
                },
                Some(reason) = stop.recv() => {
                    call.canceller.cancel();
                    match reason {
                        StopReason::Cancelled => {
                            rec.status = TaskStatus::Cancelled;
                            rec.status_message = Some("cancelled by the client".into());
                        }
                        StopReason::Expired => {
                            let e = RpcError::new(INTERNAL_ERROR, format!(
                                "the task ran past its TTL of {} ms and was cancelled upstream", rec.ttl_ms));
                            rec.status = TaskStatus::Failed;
                            rec.status_message = Some(e.message.clone());
                            rec.outcome = Some(TaskOutcome::Error(e.to_value()));
                            rec.expires_at_ms = self.clock.now_ms() + self.expired_grace.as_millis() as u64;
                        }
                    }
                    break;
                }
            }
        }
        rec.input_requests.clear();
        rec.updated_at_ms = self.clock.now_ms();
        if let Err(e) = self.store.put(&rec).await {
            tracing::error!(error = %e, "could not record the task's final state");
            // Keep the outcome visible in a smaller form if the full one did not fit.
            let e2 = RpcError::new(
                INTERNAL_ERROR,
                format!("tasklift could not store this task's outcome: {e}"),
            );
            rec.status = TaskStatus::Failed;
            rec.status_message = Some(e2.message.clone());
            rec.outcome = Some(TaskOutcome::Error(e2.to_value()));
            let _ = self.store.put(&rec).await;
        }
        tracing::info!(status = rec.status.as_str(), "task settled");
        self.running.remove(&rec.id);
    }

    /// Remember a task id an upstream created itself, so `tasks/*` for it pass through.
    pub fn note_upstream_task(&self, result: &Value, upstream: &str) {
        if result.get("resultType").and_then(Value::as_str) == Some("task") {
            if let Some(id) = result.get("taskId").and_then(Value::as_str) {
                self.upstream_tasks
                    .insert(id.to_string(), upstream.to_string());
            }
        }
    }

    /// Where a `tasks/*` request for `task_id` on `upstream` goes.
    pub fn route(&self, task_id: &str, upstream: &str) -> TaskRoute {
        match self.upstream_tasks.get(task_id) {
            Some(u) if u.value() == upstream => TaskRoute::Upstream,
            _ => TaskRoute::Local,
        }
    }

    /// Load a task the caller may see, or the not-found error.
    async fn visible(
        &self,
        task_id: &str,
        owner: &str,
        upstream: &str,
    ) -> Result<TaskRecord, RpcError> {
        let rec = self.store.get(task_id).await.map_err(|e| {
            tracing::error!(error = %e, "task store read failed");
            RpcError::new(
                INTERNAL_ERROR,
                format!("tasklift could not read its task store: {e}"),
            )
        })?;
        match rec {
            Some(r) if r.owner == owner && r.upstream == upstream => {
                if r.expires_at_ms <= self.clock.now_ms() && r.status.is_terminal() {
                    Err(RpcError::new(
                        jsonrpc::INVALID_PARAMS,
                        "Failed to retrieve task: Task has expired",
                    ))
                } else {
                    Ok(r)
                }
            }
            _ => Err(mcp::task_not_found()),
        }
    }

    /// Handle `tasks/get`, `tasks/update` and `tasks/cancel` for a local task.
    pub async fn task_method(&self, req: &Request, owner: &str, upstream: &str) -> Outcome {
        let Some(task_id) = req.str_param("taskId") else {
            return Err(RpcError::new(
                jsonrpc::INVALID_PARAMS,
                "taskId is required and must be a string",
            ));
        };
        let rec = self.visible(task_id, owner, upstream).await?;
        match req.method.as_str() {
            method::TASKS_GET => Ok(detailed_task(&rec)),
            method::TASKS_CANCEL => {
                if !rec.status.is_terminal() {
                    let sender = self.running.get(task_id).map(|s| s.value().clone());
                    match sender {
                        Some(s) => {
                            let _ = s.try_send(StopReason::Cancelled);
                        }
                        None => {
                            let mut rec = rec;
                            rec.status = TaskStatus::Cancelled;
                            rec.status_message = Some("cancelled by the client".into());
                            rec.updated_at_ms = self.clock.now_ms();
                            self.store
                                .put(&rec)
                                .await
                                .map_err(|e| RpcError::new(INTERNAL_ERROR, e.to_string()))?;
                        }
                    }
                }
                Ok(json!({"resultType": "complete"}))
            }
            method::TASKS_UPDATE => {
                // Keys that are not outstanding are ignored, as the extension says.
                // No upstream asks for input yet, so no key is ever outstanding.
                Ok(json!({"resultType": "complete"}))
            }
            _ => Err(RpcError::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!("Method not found: {}", req.method),
            )),
        }
    }

    /// Sweep: fail running tasks past their TTL, delete expired ones. Returns how many
    /// records were deleted.
    pub async fn sweep(&self) -> Result<usize, crate::store::StoreError> {
        let mut deleted = 0;
        loop {
            let ids = self.store.expired(self.clock.now_ms(), 512).await?;
            let n = ids.len();
            let mut progressed = false;
            for id in ids {
                let sender = self.running.get(&id).map(|s| s.value().clone());
                match sender {
                    Some(s) => {
                        let _ = s.try_send(StopReason::Expired);
                    }
                    None => {
                        self.store.delete(&id).await?;
                        deleted += 1;
                        progressed = true;
                    }
                }
            }
            if n < 512 || !progressed {
                break;
            }
        }
        if deleted > 0 {
            tracing::debug!(deleted, "swept expired tasks");
        }
        Ok(deleted)
    }
}

/// Whether `n` is a progress notification under `token`.
fn is_progress_for(n: &Value, token: &Value) -> bool {
    n.get("method").and_then(Value::as_str) == Some(method::PROGRESS)
        && n.get("params").and_then(|p| p.get("progressToken")) == Some(token)
}

/// Results relayed to modern clients carry `resultType`; a 2025-11-25 server's
/// `related-task` metadata does not belong on them.
fn finalize_result(outcome: Outcome) -> Outcome {
    outcome.map(|mut r| {
        mcp::mark_complete(&mut r);
        if let Some(Value::Object(meta)) = r.get_mut("_meta") {
            meta.remove("io.modelcontextprotocol/related-task");
        }
        r
    })
}

async fn sleep_until_opt(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

impl UpstreamCall {
    /// A placeholder for a call whose ownership moved elsewhere.
    fn finished() -> Self {
        let (_tx, rx) = mpsc::channel(1);
        UpstreamCall {
            events: rx,
            canceller: crate::upstream::Canceller::none(),
        }
    }
}
