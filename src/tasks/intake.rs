//! How a request enters the engine: `tools/call` decides whether and how the call
//! may become a task (the handle a client may get, a detached call's replay, low
//! disk space, the task limits), answers with what was asked for meanwhile, and
//! starts the upstream call; any other request is relayed. Both then run the
//! race to the threshold (race.rs).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::answer::{Answer, Failure};
use super::core::part;
use super::detach::Detach;
use super::handles::{Handle, Handles, Waiter};
use super::input::STATE_PREFIX;
use super::limits::LimitError;
use super::phases::{SyncCall, TaskSpec};
use super::race::Race;
use crate::config::{NonTaskClients, OnDisconnect, ToolMode, ToolPolicy};
use crate::upstream::{CallContext, ClientRequest, Upstream};
use tasklift_protocol::mcp;

part!(
    /// Requests entering the engine.
    Intake
);

impl Intake {
    /// Handle `tools/call`: the handle its client may get, an answer it already
    /// has (to questions asked while it waited, or a detached call's replay), room
    /// for a task, then the call itself.
    pub async fn call_tool(
        &self,
        upstream: Arc<dyn Upstream>,
        policy: &ToolPolicy,
        mut req: ClientRequest,
        ctx: CallContext,
    ) -> Answer {
        let declares = req.declares_tasks();
        let replay = detach_key(declares, policy, &ctx, upstream.name(), &req);
        let handle = match handle_for(declares, policy, replay.is_some()) {
            Some(h) => h,
            None => return Answer::Failed(Failure::NeedsExtension(tool_named(&req))),
        };
        let mut eligible =
            (declares || handle != Handle::Extension) && policy.mode != ToolMode::Never;
        if handle != Handle::Extension {
            if let Some(answer) = self.answered(&req, &ctx, &upstream).await {
                return answer;
            }
        }
        // The retry of an identical call that became a task: that task's answer.
        let replay = replay.filter(|_| eligible);
        if let Some(key) = &replay {
            if let Some(rec) = Detach::of(self)
                .replayable(key, caller(&ctx, &upstream))
                .await
            {
                let w = Waiter::new(&req, &ctx, upstream.name());
                return Detach::of(self).replay(rec, w, handle);
            }
        }
        if eligible {
            eligible = match self.room_for_task(policy, &ctx.principal) {
                Ok(room) => room,
                Err(refused) => return Answer::Failed(refused),
            };
        }
        let task = eligible.then(|| TaskSpec {
            tool: req.tool().to_string(),
            policy: policy.clone(),
            handle,
            replay,
        });
        // A retry answering input tasklift asked for on behalf of a legacy upstream.
        if let Some(state) = req.request_state().filter(|s| s.starts_with(STATE_PREFIX)) {
            let state = state.to_string();
            return super::streamed::resume(&Race::of(self), &req, &state, &ctx, task).await;
        }
        let progress = follow_progress(&mut req);
        self.start(upstream, req, ctx, progress, task, None).await
    }

    /// An answer to questions asked while the caller waited on the task: the
    /// caller waits on it again (or hears why the answer went nowhere).
    async fn answered(
        &self,
        req: &ClientRequest,
        ctx: &CallContext,
        upstream: &Arc<dyn Upstream>,
    ) -> Option<Answer> {
        match Handles::of(self)
            .answer_waited(req, caller(ctx, upstream))
            .await
        {
            Ok(None) => None,
            Ok(Some(id)) => {
                let w = Waiter::new(req, ctx, upstream.name());
                Some(Detach::of(self).join(id, w, Duration::ZERO))
            }
            Err(e) => Some(Answer::Failed(Failure::Task(e))),
        }
    }

    /// Whether the call may still become a task: not with the store low on space
    /// (a tool that runs only as a task is then refused before anything runs; any
    /// other runs synchronously), nor past the caller's task limit (refused).
    fn room_for_task(&self, policy: &ToolPolicy, principal: &str) -> Result<bool, Failure> {
        if let Some(e) = self.low_disk() {
            self.metrics.limit_hit(e.setting());
            if policy.mode == ToolMode::Required {
                return Err(Failure::Limit(e));
            }
            return Ok(false);
        }
        // Refused before any work starts: a call that may become a task needs room.
        if let Err(e) = self.gate.may_start_task(principal) {
            self.metrics.limit_hit(e.setting());
            return Err(Failure::Limit(e));
        }
        Ok(true)
    }

    /// No room to store a new task: why.
    fn low_disk(&self) -> Option<LimitError> {
        let d = self.disk.as_ref().filter(|d| d.is_low())?;
        Some(if d.store_unreachable() {
            LimitError::StoreUnreachable
        } else if d.store_refused() {
            LimitError::StoreFull
        } else {
            LimitError::LowDisk {
                free: d.free_bytes().unwrap_or(0),
                min: d.min_free(),
            }
        })
    }

    /// Forward any other request and relay its answer (notifications stream over SSE).
    /// `cache_hint` is added to cacheable results that lack `ttlMs`/`cacheScope`.
    pub async fn relay(
        &self,
        upstream: Arc<dyn Upstream>,
        req: ClientRequest,
        ctx: CallContext,
        cache_hint: Option<(u64, String)>,
    ) -> Answer {
        let token = req.meta(mcp::META_PROGRESS_TOKEN).cloned();
        if let Some(state) = req.request_state().filter(|s| s.starts_with(STATE_PREFIX)) {
            let state = state.to_string();
            return super::streamed::resume(&Race::of(self), &req, &state, &ctx, None).await;
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
        req: ClientRequest,
        ctx: CallContext,
        (token, relay_progress): (Option<Value>, bool),
        task: Option<TaskSpec>,
        cache_hint: Option<(u64, String)>,
    ) -> Answer {
        let slot = match self.gate.call_slot(upstream.name()).await {
            Ok(s) => s,
            Err(e) => {
                self.metrics.limit_hit(e.setting());
                return Answer::Failed(Failure::Limit(e));
            }
        };
        let call = match upstream.call(req.wire(), &ctx).await {
            Ok(c) => c,
            Err(e) => return Answer::Failed(Failure::Unreachable(e)),
        };
        let sc = SyncCall {
            slot,
            meter: Some(self.metrics.call_started(upstream.name())),
            call,
            relay_progress,
            token: token.unwrap_or(Value::Null),
            cache_hint,
            threshold_at: task
                .as_ref()
                .map(|t| tokio::time::Instant::now() + t.policy.threshold),
            ahead: None,
            last_progress: None,
            upstream: upstream.name().to_string(),
            caps: req.declared(),
            log_level: req
                .meta("io.modelcontextprotocol/logLevel")
                .and_then(Value::as_str)
                .map(str::to_string),
            owner: ctx.principal.clone(),
            input_keys: Default::default(),
            backlog: Default::default(),
            session: ctx.session.clone(),
            origin: Some((upstream, req, ctx)),
        };
        super::streamed::drive(&Race::of(self), sc, task).await
    }
}

/// The key a detached call's retry is found by. A call without one (no
/// principal, legacy session or idempotency key tells its caller apart) is never
/// detached: its retry would run the tool a second time. (`serve` and
/// `check-config` say so at start for auth none, the only mode where a call can
/// lack all three.)
fn detach_key(
    declares: bool,
    policy: &ToolPolicy,
    ctx: &CallContext,
    upstream: &str,
    req: &ClientRequest,
) -> Option<String> {
    (!declares && policy.on_disconnect == OnDisconnect::Detach)
        .then(|| super::detach::replay_key(ctx, upstream, req))
        .flatten()
}

/// The handle a client may get past the threshold: a client without the
/// extension never gets a CreateTaskResult, but a tool-level handle, or it waits
/// on the task (detach). `None`: the tool runs only as a task, and this client
/// could hold none (the call is refused).
fn handle_for(declares: bool, policy: &ToolPolicy, detaches: bool) -> Option<Handle> {
    Some(if declares {
        Handle::Extension
    } else if policy.non_task_clients == NonTaskClients::ToolHandles {
        Handle::Tool
    } else if detaches && policy.mode != ToolMode::Required {
        Handle::Join
    } else if policy.mode == ToolMode::Required {
        return None;
    } else {
        Handle::Extension
    })
}

/// Who calls, as the stored tasks know their owner.
fn caller<'a>(ctx: &'a CallContext, upstream: &'a Arc<dyn Upstream>) -> super::Caller<'a> {
    super::Caller {
        principal: &ctx.principal,
        upstream: upstream.name(),
    }
}

/// What a refusal names the tool as.
fn tool_named(req: &ClientRequest) -> String {
    format!("tool {:?}", req.tool())
}

/// The progress token the upstream reports under, and whether the client gave
/// it (progress is then relayed): tasklift follows progress under its own token
/// when the client gave none.
fn follow_progress(req: &mut ClientRequest) -> (Option<Value>, bool) {
    if let Some(t) = req.meta(mcp::META_PROGRESS_TOKEN) {
        return (Some(t.clone()), true);
    }
    let t = json!(progress_token());
    req.set_progress_token(t.clone());
    (Some(t), false)
}

/// A progress token of tasklift's own: unique in this process and across restarts
/// (a random prefix per process, then a number from [`crate::sequence`]), without
/// a random draw per call.
fn progress_token() -> String {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let id = uuid::Uuid::new_v4().simple().to_string();
        format!("tasklift-{}-", &id[..12])
    });
    let n = crate::sequence::decimal(crate::sequence::next());
    let mut token = String::with_capacity(prefix.len() + n.as_bytes().len());
    token.push_str(prefix);
    token.extend(n.as_bytes().iter().map(|&d| char::from(d)));
    token
}

#[cfg(test)]
mod tests {
    use super::progress_token;

    #[test]
    fn progress_tokens_share_the_process_prefix_and_count_up() {
        let (a, b) = (progress_token(), progress_token());
        let (pa, na) = a.rsplit_once('-').expect("prefix-number");
        let (pb, nb) = b.rsplit_once('-').expect("prefix-number");
        assert_eq!(pa, pb);
        assert!(pa.starts_with("tasklift-") && pa.len() == "tasklift-".len() + 12);
        let (na, nb): (u64, u64) = (na.parse().expect("a number"), nb.parse().expect("a number"));
        assert!(nb > na, "{a} then {b}");
    }
}
