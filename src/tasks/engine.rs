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

//!
//! `Engine` is the façade: every method here hands the request to the part whose
//! file owns that behaviour (`intake.rs`, `race.rs`, `driver.rs`, `handles.rs`,
//! `detach.rs`, `listen.rs`, `replicas.rs`, `sweeper.rs`, `api.rs`), each a type
//! over the shared core (`core.rs`).

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use super::answer::Answer;
use super::answer::TaskError;
use super::api::Caller;
use super::api::Stored;
use super::core::{Core, HoldsCore};
use super::driver::Drivers;
use super::handles::Handles;
use super::input::StateSealer;
use super::intake::Intake;
use super::listen::Listen;
use super::sweeper::Sweeper;
use super::Clock;
use crate::config::{ToolPolicy, UpstreamConfig};
use crate::store::{StoreError, StoreStats, TaskRecord, TaskStatus, TaskStore};
use crate::upstream::{CallContext, ClientRequest, Upstream};

pub use super::upstream_tasks::TaskRoute;

/// The engine. One per process; shared by every mount.
pub struct Engine {
    core: Arc<Core>,
}

impl HoldsCore for Engine {
    fn core(&self) -> &Arc<Core> {
        &self.core
    }
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
    /// How a failure is written into a task's record: the front door's error map
    /// (`front::errors::written`), which owns every code.
    pub write_failure: super::WriteFailure,
}

impl EngineSettings {
    /// Defaults for an engine of one process: the system clock, no limits.
    pub fn new(
        expired_grace: Duration,
        keepalive: Duration,
        write_failure: super::WriteFailure,
    ) -> Self {
        Self {
            write_failure,
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
            core: Arc::new(Core {
                store,
                running: DashMap::new(),
                driver_tasks: tokio_util::task::TaskTracker::new(),
                settling: tokio::sync::Semaphore::new(super::core::SETTLING),
                parked: DashMap::new(),
                sealer,
                changes: broadcast::channel(1024).0,
                closing: tokio::sync::watch::channel(false).0,
                upstream_tasks: Default::default(),
                clock: settings.clock,
                expired_grace: settings.expired_grace,
                keepalive: settings.keepalive,
                metrics: settings.metrics,
                gate: super::limits::Gate::new(settings.limits),
                disk: settings.disk,
                max_wait: settings.max_wait,
                patience: Default::default(),
                tracer: settings.tracer,
                write_failure: settings.write_failure,
            }),
        })
    }

    /// tasklift's spans: the front door records each request with it.
    pub fn tracer(&self) -> &crate::observe::spans::Tracer {
        self.core.tracer()
    }

    /// Number of tasks whose upstream call runs in this process.
    pub fn running_count(&self) -> usize {
        self.core.running.len()
    }

    /// The longest one `tasklift_wait` blocks.
    pub fn max_wait(&self) -> Duration {
        self.core.max_wait
    }

    /// Free space for the embedded store, when it is watched.
    pub fn disk(&self) -> Option<&crate::store::space::DiskSpace> {
        self.core.disk.as_deref()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        self.core.store()
    }

    /// Subscribe to task changes (every record the engine writes, as written).
    pub fn subscribe(&self) -> broadcast::Receiver<TaskRecord> {
        self.core.changes.subscribe()
    }

    /// Handle `tools/call` (intake.rs, then the race to the threshold).
    pub async fn call_tool(
        &self,
        upstream: Arc<dyn Upstream>,
        policy: &ToolPolicy,
        req: ClientRequest,
        ctx: CallContext,
    ) -> Answer {
        Intake::of(self).call_tool(upstream, policy, req, ctx).await
    }

    /// Forward any other request and relay its answer (intake.rs).
    pub async fn relay(
        &self,
        upstream: Arc<dyn Upstream>,
        req: ClientRequest,
        ctx: CallContext,
        cache_hint: Option<(u64, String)>,
    ) -> Answer {
        Intake::of(self).relay(upstream, req, ctx, cache_hint).await
    }

    /// Remember a task id an upstream created itself (upstream_tasks.rs).
    pub fn note_upstream_task(&self, result: &Value, upstream: &str, owner: &str) {
        let now = self.core.clock.now_ms();
        self.core.upstream_tasks.note(result, upstream, owner, now);
    }

    /// Where a `tasks/*` request for `task_id` from `owner` on `upstream` goes.
    pub fn route(&self, task_id: &str, owner: &str, upstream: &str) -> TaskRoute {
        let now = self.core.clock.now_ms();
        self.core
            .upstream_tasks
            .route(task_id, owner, upstream, now)
    }

    /// A stored task, for its owner (api.rs).
    pub async fn get(&self, task_id: &str, who: Caller<'_>) -> Result<TaskRecord, TaskError> {
        Stored::of(self).get(task_id, who).await
    }

    /// A task for `tasks/get`, within the poll limits (api.rs).
    pub async fn poll(&self, task_id: &str, who: Caller<'_>) -> Result<TaskRecord, TaskError> {
        Stored::of(self).poll(task_id, who).await
    }

    /// Cancel a task (api.rs).
    pub async fn cancel(&self, task_id: &str, who: Caller<'_>) -> Result<(), TaskError> {
        Stored::of(self).cancel(task_id, who).await
    }

    /// Answer a task's input requests (api.rs).
    pub async fn update(
        &self,
        task_id: &str,
        who: Caller<'_>,
        answers: Map<String, Value>,
    ) -> Result<(), TaskError> {
        Stored::of(self).update(task_id, who, answers).await
    }

    /// A caller's tasks, or every task (api.rs).
    pub async fn list(&self, who: Option<Caller<'_>>) -> Result<Vec<TaskRecord>, TaskError> {
        Stored::of(self).list(who).await
    }

    /// Tasks by status (api.rs).
    pub async fn counts(&self) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        Stored::of(self).counts().await
    }

    /// The store's figures (api.rs).
    pub async fn health(&self) -> Result<StoreStats, StoreError> {
        Stored::of(self).health().await
    }

    /// Make every write durable (api.rs).
    pub async fn flush(&self) -> Result<(), StoreError> {
        Stored::of(self).flush().await
    }

    /// Now, in unix milliseconds, on the engine's clock.
    pub fn now_ms(&self) -> u64 {
        self.core.clock.now_ms()
    }

    /// `subscriptions/listen` (listen.rs).
    pub async fn listen(
        &self,
        up: Arc<dyn Upstream>,
        req: &ClientRequest,
        ctx: &CallContext,
    ) -> Answer {
        Listen::of(self).listen(up, req, ctx).await
    }

    /// End every `subscriptions/listen` stream with its completion response (at
    /// shutdown, so open streams do not hold the front door open).
    pub fn close_streams(&self) {
        self.core.closing.send_replace(true);
    }

    /// `tasklift_wait`, for clients given tool-level handles (handles.rs).
    pub async fn tool_wait(
        &self,
        req: ClientRequest,
        ctx: &CallContext,
        cfg: &UpstreamConfig,
    ) -> Answer {
        super::tool_wait::tool_wait(&Handles::of(self), req, ctx, cfg).await
    }

    /// `tasklift_cancel`, for clients given tool-level handles (handles.rs).
    pub async fn tool_cancel(
        &self,
        req: ClientRequest,
        ctx: &CallContext,
        upstream: &str,
    ) -> Answer {
        Handles::of(self).tool_cancel(req, ctx, upstream).await
    }

    /// At start: fail the tasks a previous process left running (sweeper.rs).
    pub async fn recover(&self) -> Result<usize, StoreError> {
        Sweeper::of(self).recover().await
    }

    /// Fail running tasks past their TTL, delete expired ones (sweeper.rs).
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        Sweeper::of(self).sweep().await
    }

    /// At shutdown, after the grace period: stop every task still running here
    /// (driver.rs).
    pub async fn stop_all(&self, wait: Duration) -> usize {
        Drivers::of(self).stop_all(wait).await
    }

    /// Wait until no task's driver runs here, or `limit` passes (driver.rs).
    pub async fn settled_within(&self, limit: Duration) -> bool {
        Drivers::of(self).settled_within(limit).await
    }
}
