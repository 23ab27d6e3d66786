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
use tokio::sync::{broadcast, mpsc};

use super::handles::{Handle, Waiter};
use super::input::{StateSealer, STATE_PREFIX};
use super::phases::{Control, Parked, StopReason, SyncCall, TaskSpec};
use super::Clock;
use crate::config::{NonTaskClients, OnDisconnect, ToolMode, ToolPolicy};
use crate::reply::Reply;
use crate::store::{TaskRecord, TaskStore};
use crate::upstream::{CallContext, Upstream};
use tasklift_protocol::jsonrpc::{self, Request, RpcError, INTERNAL_ERROR};
use tasklift_protocol::mcp;

/// The engine. One per process; shared by every mount.
pub struct Engine {
    /// Durable records.
    store: Arc<dyn TaskStore>,
    /// Tasks whose upstream call is still running here, with the way to reach their owner.
    pub(super) running: DashMap<String, mpsc::Sender<Control>>,
    /// Every background driver this engine spawned, so shutdown waits for them.
    pub(super) drivers: tokio_util::task::TaskTracker,
    /// Calls parked until the client retries with answers (MRTR), by park id.
    pub(super) parked: DashMap<String, std::sync::Mutex<Parked>>,
    /// Seals the `requestState` of parked calls.
    sealer: StateSealer,
    /// Every task change, for `subscriptions/listen` streams.
    changes: broadcast::Sender<TaskRecord>,
    /// Turns true at shutdown: listen streams end gracefully.
    pub(super) closing: tokio::sync::watch::Sender<bool>,
    /// Task ids created by an upstream itself (passed through untouched). Kept in
    /// memory: after a restart, `tasks/*` for them answer as unknown.
    upstream_tasks: DashMap<String, UpstreamTask>,
    /// Time source.
    clock: Clock,
    /// How long a task failed at its TTL stays readable.
    pub(super) expired_grace: Duration,
    /// Interval between SSE keep-alives.
    pub(super) keepalive: Duration,
    /// Counters for `/metrics`.
    metrics: Arc<crate::observe::metrics::Metrics>,
    /// tasklift's spans (off unless traces are exported).
    tracer: crate::observe::spans::Tracer,
    /// Limits on calls, tasks and results.
    gate: super::limits::Gate,
    /// Free space for the embedded store, when it is watched.
    disk: Option<Arc<crate::store::space::DiskSpace>>,
    /// The longest one `tasklift_wait` blocks.
    pub(super) max_wait: Duration,
    /// How long each client waits, learned from its waits.
    pub(super) patience: super::patience::Patience,
}

/// Longest time an upstream's own task id is remembered.
const UPSTREAM_TASK_MAX_MS: u64 = 24 * 3600 * 1000;

/// An upstream's own task handle that tasklift passes through.
struct UpstreamTask {
    /// The upstream that created it.
    upstream: String,
    /// The caller it was returned to.
    owner: String,
    /// When it is forgotten.
    expires_at_ms: u64,
}

/// Where a `tasks/*` request should go.
pub enum TaskRoute {
    /// The task is tasklift's: answered here.
    Local,
    /// The upstream created this task itself: forward untouched.
    Upstream,
}

/// What an engine is built with, besides its store.
pub struct EngineSettings {
    /// Time source.
    pub clock: Clock,
    /// How long a task failed at its TTL stays readable.
    pub expired_grace: Duration,
    /// Interval between SSE keep-alives.
    pub keepalive: Duration,
    /// Limits on calls, tasks and results.
    pub limits: crate::config::Limits,
    /// Counters for `/metrics` (the front door counts into the same ones).
    pub metrics: Arc<crate::observe::metrics::Metrics>,
    /// Replicas sharing a store: `requestState` is sealed with a key derived from
    /// this shared one, so another replica recognises a state it cannot resume and
    /// says so. `None`: a key of this process's own.
    pub shared_state_key: Option<Vec<u8>>,
    /// Free space against `store.min_free_bytes`: below it no new tasks are created.
    pub disk: Option<Arc<crate::store::space::DiskSpace>>,
    /// The longest one `tasklift_wait` blocks (`tasks.max_wait`).
    pub max_wait: Duration,
    /// Records tasklift's spans (requests at the front door, tasks here).
    pub tracer: crate::observe::spans::Tracer,
}

impl EngineSettings {
    /// Defaults for an engine of one process: the system clock, no limits.
    pub fn new(expired_grace: Duration, keepalive: Duration) -> Self {
        Self {
            clock: Clock::new(),
            expired_grace,
            keepalive,
            limits: Default::default(),
            metrics: Arc::default(),
            shared_state_key: None,
            disk: None,
            max_wait: Duration::from_secs(50),
            tracer: Default::default(),
        }
    }
}

impl Engine {
    /// A new engine over a store, complete: nothing is set after this.
    pub fn new(store: Arc<dyn TaskStore>, settings: EngineSettings) -> Arc<Self> {
        let sealer = match &settings.shared_state_key {
            Some(key) => StateSealer::shared(key),
            None => StateSealer::default(),
        };
        Arc::new(Self {
            store,
            running: DashMap::new(),
            drivers: tokio_util::task::TaskTracker::new(),
            parked: DashMap::new(),
            sealer,
            changes: broadcast::channel(1024).0,
            closing: tokio::sync::watch::channel(false).0,
            upstream_tasks: DashMap::new(),
            clock: settings.clock,
            expired_grace: settings.expired_grace,
            keepalive: settings.keepalive,
            metrics: settings.metrics,
            gate: super::limits::Gate::new(settings.limits),
            disk: settings.disk,
            max_wait: settings.max_wait,
            patience: Default::default(),
            tracer: settings.tracer,
        })
    }

    /// Seals `requestState`.
    pub(super) fn sealer(&self) -> &StateSealer {
        &self.sealer
    }

    /// The limits and their counts.
    pub(super) fn gate(&self) -> &super::limits::Gate {
        &self.gate
    }

    /// The counters behind `/metrics`.
    pub(super) fn metrics(&self) -> &Arc<crate::observe::metrics::Metrics> {
        &self.metrics
    }

    /// tasklift's spans: the front door records each request with it.
    pub fn tracer(&self) -> &crate::observe::spans::Tracer {
        &self.tracer
    }

    /// The store.
    pub(super) fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// The clock.
    pub(super) fn clock(&self) -> Clock {
        self.clock
    }

    /// Number of tasks whose upstream call runs in this process.
    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    /// At start: tasks a previous process left running can never finish; fail them.
    /// With a shared store this is the lease reaper's job instead: other replicas'
    /// tasks are running, and this process's are found by their lapsed leases.
    pub async fn recover(&self) -> Result<usize, crate::store::StoreError> {
        if self.store.shared().is_some() {
            return Ok(0);
        }
        let orphans = self.store.unfinished().await?;
        let now = self.clock.now_ms();
        let mut unwritten = 0;
        for mut rec in orphans.iter().cloned() {
            let err = RpcError::new(
                INTERNAL_ERROR,
                "tasklift restarted while this task was running; the upstream outcome is unknown",
            );
            if rec.settle(super::failed(err)).is_err() {
                continue;
            }
            rec.input_requests.clear();
            rec.updated_at_ms = now;
            // A store that cannot take the write (a full disk) does not stop the
            // start: stored tasks are still served; the next start tries again.
            if let Err(e) = self.store.put(&rec).await {
                unwritten += 1;
                tracing::error!(task.id = %rec.id, error = %e, "could not record a task left running by a previous process as failed; it shows as working until a start that can write");
                continue;
            }
            self.metrics
                .task_finished(crate::observe::metrics::Finished::Failed);
        }
        if unwritten > 0 {
            tracing::error!(
                count = unwritten,
                "tasks left running by a previous process could not be recorded as failed"
            );
        }
        if orphans.len() > unwritten {
            tracing::warn!(
                count = orphans.len() - unwritten,
                "failed tasks left running by a previous process"
            );
        }
        Ok(orphans.len())
    }

    /// The longest one `tasklift_wait` blocks.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// Free space for the embedded store, when it is watched.
    pub fn disk(&self) -> Option<&crate::store::space::DiskSpace> {
        self.disk.as_deref()
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
        // The retry of a detached call is found by this key; a call without one
        // (no principal, legacy session or idempotency key tells its caller apart)
        // is never detached: its retry would run the tool a second time.
        // (`serve` and `check-config` say so at start for auth none, the only
        // mode where a call can lack all three.)
        let replay = (!declares && policy.on_disconnect == OnDisconnect::Detach)
            .then(|| super::detach::replay_key(&ctx, upstream.name(), &req))
            .flatten();
        // A client without the extension never gets a CreateTaskResult: past the
        // threshold it gets a tool-level handle, or waits on the task (detach).
        let handle = if declares {
            Handle::Extension
        } else if policy.non_task_clients == NonTaskClients::ToolHandles {
            Handle::Tool
        } else if replay.is_some() && policy.mode != ToolMode::Required {
            Handle::Join
        } else if policy.mode == ToolMode::Required {
            let tool = req.str_param("name").unwrap_or_default();
            let err = mcp::missing_tasks_capability(&format!("tool {tool:?}"));
            return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(err)));
        } else {
            Handle::Extension
        };
        let mut eligible =
            (declares || handle != Handle::Extension) && policy.mode != ToolMode::Never;
        let waiter = || Waiter::new(&req, &ctx, upstream.name());
        let who = super::Caller {
            principal: &ctx.principal,
            upstream: upstream.name(),
        };
        // An answer to questions asked while the caller waited on the task.
        if handle != Handle::Extension {
            match self.answer_waited(&req, who).await {
                Ok(None) => {}
                Ok(Some(id)) => return self.join(id, waiter(), Duration::ZERO),
                Err(e) => return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(e.into()))),
            }
        }
        // The retry of an identical call that became a task: that task's answer.
        let replay = replay.filter(|_| eligible);
        if let Some(key) = &replay {
            if let Some(rec) = self.replayable(key, who).await {
                return self.replay(rec, waiter(), handle);
            }
        }
        let low = self.disk.as_ref().filter(|d| eligible && d.is_low());
        if let Some(d) = low {
            // No room to store a new task: a tool that runs only as a task is
            // refused before anything runs; any other runs synchronously.
            let e = if d.store_unreachable() {
                super::limits::LimitError::StoreUnreachable
            } else if d.store_refused() {
                super::limits::LimitError::StoreFull
            } else {
                super::limits::LimitError::LowDisk {
                    free: d.free_bytes().unwrap_or(0),
                    min: d.min_free(),
                }
            };
            self.metrics.limit_hit(e.setting());
            if policy.mode == ToolMode::Required {
                return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(e.into())));
            }
            eligible = false;
        }
        if eligible {
            // Refused before any work starts: a call that may become a task needs room.
            if let Err(e) = self.gate.may_start_task(&ctx.principal) {
                self.metrics.limit_hit(e.setting());
                return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(e.into())));
            }
        }
        let task = eligible.then(|| TaskSpec {
            tool: req.str_param("name").unwrap_or_default().to_string(),
            policy: policy.clone(),
            handle,
            replay,
        });
        // A retry answering input tasklift asked for on behalf of a legacy upstream.
        if let Some(state) = req
            .str_param("requestState")
            .filter(|s| s.starts_with(STATE_PREFIX))
        {
            let state = state.to_string();
            return self.resume(&req, &state, &ctx, task).await;
        }
        // tasklift follows progress under its own token when the client gave none.
        let client_token = req
            .meta()
            .and_then(|m| m.get(mcp::META_PROGRESS_TOKEN))
            .is_some();
        let token = match req.meta().and_then(|m| m.get(mcp::META_PROGRESS_TOKEN)) {
            Some(t) => t.clone(),
            None => {
                let t = json!(progress_token());
                mcp::meta_mut(&mut req.params).insert(mcp::META_PROGRESS_TOKEN.into(), t.clone());
                t
            }
        };
        self.start(upstream, req, ctx, (Some(token), client_token), task, None)
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
        if let Some(state) = req
            .str_param("requestState")
            .filter(|s| s.starts_with(STATE_PREFIX))
        {
            let state = state.to_string();
            return self.resume(&req, &state, &ctx, None).await;
        }
        let relay_progress = token.is_some();
        self.start(
            upstream,
            req,
            ctx,
            (token, relay_progress),
            None,
            cache_hint,
        )
        .await
    }

    /// Start an upstream request and carry it through its synchronous phase. `token`
    /// is the progress token the upstream reports under (and whether the client asked
    /// for progress, so it is relayed); `task` says whether and how
    /// the call may become a task.
    async fn start(
        self: &Arc<Self>,
        upstream: Arc<dyn Upstream>,
        req: Request,
        ctx: CallContext,
        (token, relay_progress): (Option<Value>, bool),
        task: Option<TaskSpec>,
        cache_hint: Option<(u64, String)>,
    ) -> Reply {
        let slot = match self.gate.call_slot(upstream.name()).await {
            Ok(s) => s,
            Err(e) => {
                self.metrics.limit_hit(e.setting());
                return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(e.into())));
            }
        };
        let call = match upstream.call(&req, &ctx).await {
            Ok(c) => c,
            Err(e) => return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(e.to_rpc()))),
        };
        let meta = req.meta();
        let sc = SyncCall {
            slot,
            meter: Some(self.metrics.call_started(upstream.name())),
            call,
            id: req.id.clone(),
            relay_progress,
            token: token.unwrap_or(Value::Null),
            cache_hint,
            threshold_at: task
                .as_ref()
                .map(|t| tokio::time::Instant::now() + t.policy.threshold),
            ahead: None,
            last_progress: None,
            upstream: upstream.name().to_string(),
            caps: meta
                .and_then(|m| m.get(mcp::META_CLIENT_CAPABILITIES))
                .cloned()
                .unwrap_or_default(),
            log_level: meta
                .and_then(|m| m.get("io.modelcontextprotocol/logLevel"))
                .and_then(Value::as_str)
                .map(str::to_string),
            owner: ctx.principal.clone(),
            input_keys: Default::default(),
            backlog: Default::default(),
            session: ctx.session.clone(),
            origin: Some((upstream, req, ctx)),
        };
        self.drive(sc, task).await
    }

    /// Remember a task id an upstream created itself, so `tasks/*` for it pass
    /// through, for its owner only, until the handle's `ttlMs` (at most a day) passes.
    pub fn note_upstream_task(&self, result: &Value, upstream: &str, owner: &str) {
        if result.get("resultType").and_then(Value::as_str) == Some("task") {
            if let Some(id) = result.get("taskId").and_then(Value::as_str) {
                let ttl = result
                    .get("ttlMs")
                    .and_then(Value::as_u64)
                    .unwrap_or(UPSTREAM_TASK_MAX_MS)
                    .min(UPSTREAM_TASK_MAX_MS);
                let route = UpstreamTask {
                    upstream: upstream.to_string(),
                    owner: owner.to_string(),
                    expires_at_ms: self.clock.now_ms() + ttl,
                };
                self.upstream_tasks.insert(id.to_string(), route);
            }
        }
    }

    /// Where a `tasks/*` request for `task_id` from `owner` on `upstream` goes. Another
    /// caller's upstream task is answered locally, that is, as unknown.
    pub fn route(&self, task_id: &str, owner: &str, upstream: &str) -> TaskRoute {
        match self.upstream_tasks.get(task_id) {
            Some(r)
                if r.upstream == upstream
                    && r.owner == owner
                    && r.expires_at_ms > self.clock.now_ms() =>
            {
                TaskRoute::Upstream
            }
            _ => TaskRoute::Local,
        }
    }

    /// End every `subscriptions/listen` stream with its completion response (at
    /// shutdown, so open streams do not hold the front door open).
    pub fn close_streams(&self) {
        self.closing.send_replace(true);
    }

    /// At shutdown, after the grace period: cancel every task still running upstream
    /// and mark it failed (the proxy shut down), then wait up to `wait` for their
    /// owners to record it. Returns how many tasks were stopped.
    pub async fn stop_all(&self, wait: Duration) -> usize {
        let senders: Vec<mpsc::Sender<Control>> =
            self.running.iter().map(|e| e.value().clone()).collect();
        for s in &senders {
            let _ = s.send(Control::Stop(StopReason::Shutdown)).await;
        }
        self.drivers.close();
        let _ = tokio::time::timeout(wait, self.drivers.wait()).await;
        senders.len()
    }

    /// Wait until no task's driver runs here, or `limit` passes; true if none runs.
    /// A driver started while this waits is waited for too.
    pub async fn settled_within(&self, limit: Duration) -> bool {
        self.drivers.close();
        let settled = tokio::time::timeout(limit, self.drivers.wait())
            .await
            .is_ok();
        // Drivers may still start (a call crossing its threshold meanwhile).
        self.drivers.reopen();
        settled
    }

    /// Tell `subscriptions/listen` streams about a change.
    pub(super) fn publish(&self, rec: &TaskRecord) {
        let _ = self.changes.send(rec.clone());
    }

    /// Whether anything here waits for task changes (`subscriptions/listen` streams,
    /// blocked 2025-11-25 `tasks/result` calls).
    pub(super) fn has_listeners(&self) -> bool {
        self.changes.receiver_count() > 0
    }

    /// Subscribe to task changes (every record the engine writes, as written).
    pub fn subscribe(&self) -> broadcast::Receiver<TaskRecord> {
        self.changes.subscribe()
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
                        let _ = s.try_send(Control::Stop(StopReason::Expired));
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
        if let Some(shared) = self.store.shared() {
            // Finished tasks of every replica, in batches, by their indexed expiry.
            loop {
                let n = shared.purge_expired(self.clock.now_ms(), 1000).await?;
                deleted += n;
                if n < 1000 {
                    break;
                }
            }
        }
        let now = self.clock.now_ms();
        if let Some(replays) = self.store.replays() {
            replays.purge_calls(now).await?;
        }
        self.upstream_tasks.retain(|_, r| r.expires_at_ms > now);
        if deleted > 0 {
            self.metrics.tasks_expired(deleted as u64);
            tracing::debug!(deleted, "swept expired tasks");
        }
        Ok(deleted)
    }
}

/// A progress token of tasklift's own: unique in this process and across restarts
/// (a random prefix per process), without a random draw per call.
fn progress_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| uuid::Uuid::new_v4().simple().to_string()[..12].to_string());
    format!("tasklift-{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
