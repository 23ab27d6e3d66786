//! How a request enters the engine: `tools/call` decides whether and how the call
//! may become a task (the handle a client may get, a detached call's replay, low
//! disk space, the task limits), answers with what was asked for meanwhile, and
//! starts the upstream call; any other request is relayed. Both then run the
//! race to the threshold (race.rs).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::core::{part, Parts};
use super::handles::{Handle, Waiter};
use super::input::STATE_PREFIX;
use super::phases::{SyncCall, TaskSpec};
use crate::config::{NonTaskClients, OnDisconnect, ToolMode, ToolPolicy};
use crate::reply::Reply;
use crate::upstream::{CallContext, Upstream};
use tasklift_protocol::jsonrpc::{self, Request};
use tasklift_protocol::mcp;

part!(
    /// Requests entering the engine.
    Intake
);

impl Intake {
    /// Handle `tools/call`.
    pub async fn call_tool(
        &self,
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
            match self.handles().answer_waited(&req, who).await {
                Ok(None) => {}
                Ok(Some(id)) => return self.detach().join(id, waiter(), Duration::ZERO),
                Err(e) => return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(e.into()))),
            }
        }
        // The retry of an identical call that became a task: that task's answer.
        let replay = replay.filter(|_| eligible);
        if let Some(key) = &replay {
            if let Some(rec) = self.detach().replayable(key, who).await {
                return self.detach().replay(rec, waiter(), handle);
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
            return self.race().resume(&req, &state, &ctx, task).await;
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
        &self,
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
            return self.race().resume(&req, &state, &ctx, None).await;
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
        &self,
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
        self.race().drive(sc, task).await
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
