//! Dispatch: which method goes where. `server/discover` is answered from the
//! upstream plus the Tasks extension; `tools/call` and `tasks/*` go to the task
//! engine (a tool whose legacy upstream runs it only as its own 2025-11-25 task
//! through the task bridge); everything else is forwarded and its answer relayed,
//! `tools/list` rewritten for the era it is listed to.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::config::{NonTaskClients, ToolMode, ToolPolicy, UpstreamConfig};
use crate::front::render;
use crate::reply::{Reply, StreamItem};
use crate::tasks::engine::{Engine, TaskRoute};
use crate::tasks::handles;
use crate::tasks::{into_detailed_task, Caller};
use crate::upstream::task_bridge::{self, Follow};
use crate::upstream::tools::{TaskSupport, ToolCatalog};
use crate::upstream::{CallContext, ClientRequest, Era, Upstream};
use tasklift_protocol::jsonrpc::{self, Outcome, Request, RpcError, METHOD_NOT_FOUND};
use tasklift_protocol::mcp::{self, method};

/// One upstream mounted at a path.
pub struct Mount {
    /// Its configuration.
    pub cfg: UpstreamConfig,
    /// The connection to it.
    pub upstream: Arc<dyn Upstream>,
    /// What tasklift learned of the upstream's tools: `x-mcp-header` annotations, for
    /// checking `Mcp-Param-*` headers, and which ones run only as its own tasks.
    pub tools: ToolCatalog,
}

/// Where a `tools/call` goes: the mount's upstream, or, for a tool its legacy
/// upstream lists with `execution.taskSupport: "required"`, that upstream behind the
/// task bridge (called with `params.task` asking for `ttl`, and followed to its
/// result). Called before the engine sees the request: whether the client gave a
/// progress token of its own is read here.
pub async fn call_target(
    mount: &Mount,
    req: &Request,
    ctx: &CallContext,
    ttl: Duration,
) -> Arc<dyn Upstream> {
    let up = mount.upstream.clone();
    if !matches!(up.era(ctx).await, Ok(Era::Legacy)) {
        return up;
    }
    // The common case is answered from memory: a tool already listed as anything
    // but task-only. Otherwise the upstream's capabilities decide whether its tools
    // can need tasks at all (and so whether an unlisted tool is worth a tools/list).
    let tool = req.str_param("name").unwrap_or_default();
    let listed = mount.tools.listed_task_support(tool);
    if listed.is_some_and(|s| s != TaskSupport::Required) || !up.offers_tool_tasks(req, ctx).await {
        return up;
    }
    if listed.is_none()
        && mount.tools.task_support(up.as_ref(), req, ctx).await != TaskSupport::Required
    {
        return up;
    }
    let client_token = req.meta_value(mcp::META_PROGRESS_TOKEN).is_some();
    tracing::debug!(tool = ?req.str_param("name"), "the upstream runs this tool only as its own task; following it");
    task_bridge::bridged(
        up,
        Follow {
            ttl_ms: ttl.as_millis() as u64,
            client_token,
        },
    )
}

/// Handle one parsed message for a mount: a notification is forwarded; a request
/// goes where its method says.
pub async fn dispatch(
    engine: &Arc<Engine>,
    mount: &Mount,
    mut req: Request,
    ctx: CallContext,
) -> Reply {
    // A 2025-11-25 `params.task` means nothing in 2026-07-28 (servers MUST ignore
    // it), and a 2025-era upstream would take it as a task request of its own: no
    // request carries one upstream unless tasklift adds it (the task bridge).
    if req.params.contains_key("task") {
        req.params.remove("task");
    }
    if req.id.is_none() {
        return forward_notification(mount, &req, &ctx).await;
    }
    match req.method.as_str() {
        method::DISCOVER => discover(mount, &req, &ctx).await,
        method::TOOLS_CALL => tools_call(engine, mount, req, ctx).await,
        method::TASKS_GET | method::TASKS_UPDATE | method::TASKS_CANCEL => {
            task_method(engine, mount, req, ctx).await
        }
        "subscriptions/listen" => {
            let id = req.id.clone();
            let req = ClientRequest::from(req);
            let answer = engine.listen(mount.upstream.clone(), &req, &ctx).await;
            render::reply(answer, id.as_ref())
        }
        "initialize"
        | "ping"
        | "logging/setLevel"
        | "resources/subscribe"
        | "resources/unsubscribe"
            if ctx.session.is_none() =>
        {
            answer(&req, Err(removed_method(&req.method)))
        }
        "tasks/result" | "tasks/list" => answer(&req, Err(not_in_extension(&req.method))),
        _ => relay(engine, mount, req, ctx).await,
    }
}

/// A request's answer as a JSON reply.
fn answer(req: &Request, outcome: Outcome) -> Reply {
    Reply::Json(jsonrpc::response_from(req.id.as_ref(), outcome))
}

/// Notifications have no answer: forwarded, and accepted whatever came of it.
async fn forward_notification(mount: &Mount, req: &Request, ctx: &CallContext) -> Reply {
    if let Err(e) = mount.upstream.notify(req, ctx).await {
        tracing::warn!(error = %e, method = %req.method, "could not forward a notification");
    }
    Reply::Accepted
}

/// `server/discover`: the upstream's answer plus the Tasks extension.
async fn discover(mount: &Mount, req: &Request, ctx: &CallContext) -> Reply {
    match mount.upstream.discover(req, ctx).await {
        Ok(outcome) => answer(req, outcome.map(|r| discover_result(r, &mount.cfg))),
        Err(e) => answer(req, Err(e.to_rpc())),
    }
}

/// `tools/call`: `tasklift_wait`/`tasklift_cancel` where tasklift answers them
/// itself, else the tool under its policy, through the engine.
async fn tools_call(engine: &Arc<Engine>, mount: &Mount, req: Request, ctx: CallContext) -> Reply {
    let id = req.id.clone();
    let answer = if let Some(tool) = handles_for(mount, &req) {
        let waits = tool == handles::WAIT_TOOL;
        let req = ClientRequest::from(req);
        match waits {
            true => engine.tool_wait(req, &ctx, &mount.cfg).await,
            false => engine.tool_cancel(req, &ctx, &mount.cfg.name).await,
        }
    } else {
        let policy = mount
            .cfg
            .policy(req.str_param("name").unwrap_or_default())
            .clone();
        let up = call_target(mount, &req, &ctx, policy.ttl).await;
        engine.call_tool(up, &policy, req.into(), ctx).await
    };
    render::reply(answer, id.as_ref())
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` from a caller that declares the
/// extension: relayed for a task the upstream issued, else over the engine's API.
async fn task_method(engine: &Arc<Engine>, mount: &Mount, req: Request, ctx: CallContext) -> Reply {
    if !mcp::declares_tasks(&req.params) {
        return answer(&req, Err(mcp::missing_tasks_capability(&req.method)));
    }
    let task_id = req.str_param("taskId").unwrap_or_default();
    match engine.route(task_id, &ctx.principal, &mount.cfg.name) {
        TaskRoute::Upstream => {
            let id = req.id.clone();
            let answer = engine
                .relay(mount.upstream.clone(), req.into(), ctx, None)
                .await;
            render::reply(answer, id.as_ref())
        }
        TaskRoute::Local => {
            let who = Caller {
                principal: &ctx.principal,
                upstream: &mount.cfg.name,
            };
            answer(&req, extension_task_method(engine, &req, who).await)
        }
    }
}

/// A session-era method 2026-07-28 removed, asked by a caller with no session.
fn removed_method(name: &str) -> RpcError {
    RpcError::new(
        METHOD_NOT_FOUND,
        format!(
            "Method not found: {name} is not part of MCP {} (per-request _meta and subscriptions/listen replace it)",
            mcp::MODERN_VERSION
        ),
    )
}

/// A 2025-11-25 task method the extension does without.
fn not_in_extension(name: &str) -> RpcError {
    RpcError::new(
        METHOD_NOT_FOUND,
        format!(
            "Method not found: {name} is not part of the {} extension (poll tasks/get instead)",
            mcp::TASKS_EXTENSION
        ),
    )
}

/// Any other method: relayed upstream, with cache hints for modern clients of a
/// legacy upstream; a `tools/list` answer is learned, loses `taskSupport`, and on
/// its first page offers the tool-level handle tools.
async fn relay(engine: &Arc<Engine>, mount: &Mount, req: Request, ctx: CallContext) -> Reply {
    let up = mount.upstream.clone();
    let hint = match up.era(&ctx).await {
        // Cache hints are for modern clients only.
        _ if ctx.session.is_some() => None,
        Ok(Era::Legacy) if mcp::is_cacheable_method(&req.method) => {
            Some((mount.cfg.list_ttl_ms, mount.cfg.list_cache_scope.clone()))
        }
        _ => None,
    };
    let lists_tools = req.method == "tools/list";
    // The first page of a listing for a client without the extension offers
    // tasklift_wait and tasklift_cancel where tool-level handles are on.
    let offer = (lists_tools
        && offers_handles(&mount.cfg)
        && !mcp::declares_tasks(&req.params)
        && req.params.get("cursor").is_none_or(Value::is_null))
    .then(|| (engine.max_wait(), mount.cfg.clone()));
    let id = req.id.clone();
    let reply = render::reply(engine.relay(up, req.into(), ctx, hint).await, id.as_ref());
    if !lists_tools {
        return reply;
    }
    let learned = mount.tools.clone();
    map_final(reply, move |mut v| {
        learned.observe(&v);
        without_task_support(&mut v);
        if let Some((max_wait, cfg)) = offer {
            handles::offer_tools(&mut v, max_wait, |name| gives_handles(cfg.policy(name)));
        }
        v
    })
}

/// Whether a tool's calls may answer a client without the extension with a
/// tool-level handle.
fn gives_handles(p: &ToolPolicy) -> bool {
    p.non_task_clients == NonTaskClients::ToolHandles && p.mode != ToolMode::Never
}

/// Whether any tool of the upstream gives tool-level handles.
fn offers_handles(cfg: &UpstreamConfig) -> bool {
    gives_handles(&cfg.default_policy) || cfg.tools.values().any(gives_handles)
}

/// A `tools/call` of `tasklift_wait` or `tasklift_cancel` that tasklift answers
/// itself: from a client without the extension, on an upstream that gives
/// tool-level handles (the upstream's own tools of those names are shadowed there).
fn handles_for<'a>(mount: &Mount, req: &'a Request) -> Option<&'a str> {
    req.str_param("name")
        .filter(|n| [handles::WAIT_TOOL, handles::CANCEL_TOOL].contains(n))
        .filter(|_| offers_handles(&mount.cfg) && !mcp::declares_tasks(&req.params))
}

/// Remove the 2025-era `execution.taskSupport` from each tool of a `tools/list`
/// response (and `execution` when nothing else is in it). It says how a client may
/// ask the upstream for a task, and tasklift decides that for every era: modern
/// clients get a task whenever tasklift makes one (the Tasks extension has no
/// per-tool field; task creation is the server's decision), clients before
/// 2025-11-25 know no tasks, and a 2025-11-25 session gets the field back from
/// tasklift's tool rules. A tool the upstream runs only as its own task is bridged,
/// so it is called like any other.
pub fn without_task_support(msg: &mut Value) {
    let Some(Value::Array(tools)) = msg.get_mut("result").and_then(|r| r.get_mut("tools")) else {
        return;
    };
    for t in tools {
        let Value::Object(o) = t else { continue };
        if let Some(Value::Object(e)) = o.get_mut("execution") {
            e.remove("taskSupport");
            if e.is_empty() {
                o.remove("execution");
            }
        }
    }
}

/// Apply `f` to a reply's final message (a JSON answer, or a stream's last message).
fn map_final(reply: Reply, f: impl FnOnce(Value) -> Value + Send + 'static) -> Reply {
    match reply.parsed() {
        Reply::Json(v) => Reply::Json(f(v)),
        Reply::UpstreamError(status, v) => Reply::UpstreamError(status, f(v)),
        Reply::Accepted => Reply::Accepted,
        raw @ Reply::Raw(_) => raw,
        Reply::Stream(mut rx) => {
            let (tx, out) = mpsc::channel(32);
            tokio::spawn(async move {
                let mut f = Some(f);
                while let Some(item) = rx.recv().await {
                    let item = match item {
                        StreamItem::Message(m) if m.get("method").is_none() => match f.take() {
                            Some(f) => StreamItem::Message(f(m)),
                            None => StreamItem::Message(m),
                        },
                        other => other,
                    };
                    if tx.send(item).await.is_err() {
                        return;
                    }
                }
            });
            Reply::Stream(out)
        }
    }
}

/// `tasks/get`, `tasks/update` and `tasks/cancel` of the extension, for a task of
/// tasklift's, over the engine's typed API.
async fn extension_task_method(engine: &Engine, req: &Request, who: Caller<'_>) -> Outcome {
    let Some(task_id) = req.str_param("taskId") else {
        return Err(RpcError::new(
            jsonrpc::INVALID_PARAMS,
            "taskId is required and must be a string",
        ));
    };
    let done = |()| json!({"resultType": "complete"});
    let answered = match req.method.as_str() {
        method::TASKS_GET => engine.poll(task_id, who).await.map(into_detailed_task),
        method::TASKS_CANCEL => engine.cancel(task_id, who).await.map(done),
        _ => {
            let answers = req.params.get("inputResponses").and_then(Value::as_object);
            let answers = answers.cloned().unwrap_or_default();
            engine.update(task_id, who, answers).await.map(done)
        }
    };
    answered.map_err(RpcError::from)
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
