//! Dispatch: which method goes where. `server/discover` is answered from the
//! upstream plus the Tasks extension; `tools/call` and `tasks/*` go to the task
//! engine; everything else is forwarded and its answer relayed.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::config::UpstreamConfig;
use crate::jsonrpc::{self, Request, RpcError, METHOD_NOT_FOUND};
use crate::mcp::{self, method};
use crate::reply::Reply;
use crate::session::Sessions;
use crate::tasks::engine::{Engine, TaskRoute};
use crate::upstream::{CallContext, Era, Upstream};

/// One upstream mounted at a path.
pub struct Mount {
    /// Its configuration.
    pub cfg: UpstreamConfig,
    /// The connection to it.
    pub upstream: Arc<dyn Upstream>,
    /// Legacy client sessions opened at this path.
    pub sessions: Sessions,
    /// The upstream's `x-mcp-header` annotations, for checking `Mcp-Param-*` headers.
    pub tool_headers: crate::server::params::ToolHeaders,
}

/// Handle one parsed message for a mount.
pub async fn dispatch(
    engine: &Arc<Engine>,
    mount: &Mount,
    req: Request,
    ctx: CallContext,
) -> Reply {
    let up = mount.upstream.clone();
    if req.id.is_none() {
        // Notifications have no answer; forward and accept.
        if let Err(e) = up.notify(&req, &ctx).await {
            tracing::warn!(error = %e, method = %req.method, "could not forward a notification");
        }
        return Reply::Accepted;
    }
    let id = req.id.clone();
    let json = |outcome| Reply::Json(jsonrpc::response_from(id.as_ref(), outcome));
    match req.method.as_str() {
        method::DISCOVER => match up.discover(&req, &ctx).await {
            Ok(outcome) => json(outcome.map(|r| discover_result(r, &mount.cfg))),
            Err(e) => json(Err(e.to_rpc())),
        },
        method::TOOLS_CALL => {
            let policy = mount
                .cfg
                .policy(req.str_param("name").unwrap_or_default())
                .clone();
            engine.call_tool(up, &policy, req, ctx).await
        }
        method::TASKS_GET | method::TASKS_UPDATE | method::TASKS_CANCEL => {
            if !mcp::declares_tasks(&req.params) {
                return json(Err(mcp::missing_tasks_capability(&req.method)));
            }
            let task_id = req.str_param("taskId").unwrap_or_default();
            match engine.route(task_id, &ctx.principal, &mount.cfg.name) {
                TaskRoute::Upstream => engine.relay(up, req, ctx, None).await,
                TaskRoute::Local => {
                    let outcome = engine
                        .task_method(&req, &ctx.principal, &mount.cfg.name)
                        .await;
                    json(polled(engine, &req, &ctx.principal, outcome))
                }
            }
        }
        "subscriptions/listen" => engine.listen(up, &req, &ctx).await,
        "initialize" | "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe"
            if ctx.session.is_none() =>
        {
            json(Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!(
                    "Method not found: {} is not part of MCP {} (per-request _meta and subscriptions/listen replace it)",
                    req.method,
                    mcp::MODERN_VERSION
                ),
            )))
        }
        "tasks/result" | "tasks/list" => json(Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!(
                "Method not found: {} is not part of the {} extension (poll tasks/get instead)",
                req.method,
                mcp::TASKS_EXTENSION
            ),
        ))),
        m => {
            let hint = match up.era(&ctx).await {
                // Cache hints are for modern clients only.
                _ if ctx.session.is_some() => None,
                Ok(Era::Legacy) if mcp::is_cacheable_method(m) => {
                    Some((mount.cfg.list_ttl_ms, mount.cfg.list_cache_scope.clone()))
                }
                _ => None,
            };
            engine.relay(up, req, ctx, hint).await
        }
    }
}

/// A `tasks/get` answer, unless the caller polls faster than the task asks
/// (`limits.poll_rate_limit`).
pub fn polled(
    engine: &Engine,
    req: &Request,
    owner: &str,
    outcome: crate::jsonrpc::Outcome,
) -> crate::jsonrpc::Outcome {
    let Ok(t) = &outcome else { return outcome };
    if req.method != method::TASKS_GET {
        return outcome;
    }
    let interval = t.get("pollIntervalMs").and_then(Value::as_u64).unwrap_or(0);
    let id = t.get("taskId").and_then(Value::as_str).unwrap_or_default();
    match engine.gate().poll(owner, id, interval) {
        Ok(()) => outcome,
        Err(e) => {
            engine.metrics().limit_hit("poll_rate_limit");
            Err(e)
        }
    }
}

/// Add the Tasks extension (and the cache fields 2026-07-28 requires) to a discover result.
fn discover_result(mut r: Value, cfg: &UpstreamConfig) -> Value {
    if let Value::Object(o) = &mut r {
        o.entry("resultType").or_insert_with(|| json!("complete"));
        o.entry("ttlMs").or_insert_with(|| json!(cfg.list_ttl_ms));
        o.entry("cacheScope")
            .or_insert_with(|| json!(cfg.list_cache_scope));
        let caps = o.entry("capabilities").or_insert_with(|| json!({}));
        if let Value::Object(c) = caps {
            // A 2025-11-25 upstream's experimental `tasks` capability is not what
            // tasklift offers; the extension below is.
            c.remove("tasks");
            let ext = c.entry("extensions").or_insert_with(|| json!({}));
            if let Value::Object(e) = ext {
                e.insert(mcp::TASKS_EXTENSION.into(), json!({}));
            }
        }
    }
    r
}
