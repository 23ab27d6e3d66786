//! 2025-11-25 tasks for legacy clients: a `tools/call` with `params.task` gets a
//! `CreateTaskResult` (`{"task": {...}}`) at once, and `tasks/get`, blocking
//! `tasks/result`, `tasks/list` (the caller's own tasks) and `tasks/cancel` are served
//! from the same store and engine as the 2026-07-28 extension. A task waiting for
//! input asks the client on the `tasks/result` stream, with the
//! `io.modelcontextprotocol/related-task` metadata, and the answers go to the task
//! as a `tasks/update` would.
//!
//! A tool whose legacy upstream runs it only as its own 2025-11-25 task is called
//! through the task bridge (see [`crate::dispatch::call_target`]), whether the
//! client asked for a task or not: tasklift's task (or the plain wait) follows the
//! upstream's.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http::{Response, StatusCode};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::super::State;
use super::session::ClientSession;
use super::shape::{legacy_shape, modernize, sse, upstream_error};
use crate::config::{ToolMode, UpstreamConfig};
use crate::dispatch::Mount;
use crate::reply::{Reply, StreamItem};
use crate::serving::body::RespBody;
use crate::serving::json_response;
use crate::tasks::{detailed_task, into_detailed_task, Caller, Engine};
use crate::upstream::CallContext;
use tasklift_protocol::jsonrpc::{
    self, Outcome, Request, RpcError, INVALID_PARAMS, METHOD_NOT_FOUND,
};
use tasklift_protocol::mcp;

/// `_meta` key tying a message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// Tasks per `tasks/list` page.
const PAGE: usize = 50;
/// Longest wait for a cancelled task's owner to record it.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// Shortest TTL a client may ask for.
const MIN_TTL: Duration = Duration::from_secs(1);

/// Add `execution.taskSupport` to each tool of a `tools/list` response, from the
/// tool's rule: `never` is forbidden, `required` required, anything else optional.
/// What the upstream lists does not matter: tasklift runs the task, and a tool the
/// upstream runs only as its own task is bridged (tasklift follows the upstream's
/// task for a plain call too), so it is `optional` unless a rule says otherwise.
pub fn mark_task_support(msg: &mut Value, cfg: &UpstreamConfig) {
    let Some(Value::Array(tools)) = msg.get_mut("result").and_then(|r| r.get_mut("tools")) else {
        return;
    };
    for t in tools {
        let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
        let support = match cfg.policy(name).mode {
            ToolMode::Never => "forbidden",
            ToolMode::Required => "required",
            _ => "optional",
        };
        if let Value::Object(o) = t {
            let ex = o.entry("execution").or_insert_with(|| json!({}));
            if let Value::Object(e) = ex {
                e.insert("taskSupport".into(), json!(support));
            }
        }
    }
}

/// Whether the rule of the tool a `tools/call` names makes it a task always
/// (`taskSupport: "required"`): 2025-11-25 wants -32601 for a call without `task`.
pub fn task_required(mount: &Mount, req: &Request) -> bool {
    let name = req.str_param("name").unwrap_or_default();
    mount.cfg.policy(name).mode == ToolMode::Required
}

/// A 2026-07-28 task shape (`CreateTaskResult`, `DetailedTask`) as a 2025-11-25 `Task`.
fn legacy_task(t: &Value) -> Value {
    let mut o = Map::new();
    for (from, to) in [
        ("taskId", "taskId"),
        ("status", "status"),
        ("statusMessage", "statusMessage"),
        ("createdAt", "createdAt"),
        ("lastUpdatedAt", "lastUpdatedAt"),
        ("ttlMs", "ttl"),
        ("pollIntervalMs", "pollInterval"),
    ] {
        if let Some(v) = t.get(from) {
            o.insert(to.into(), v.clone());
        }
    }
    Value::Object(o)
}

fn is_terminal(t: &Value) -> bool {
    matches!(
        t.get("status").and_then(Value::as_str),
        Some("completed" | "failed" | "cancelled")
    )
}

fn respond(id: Option<&Value>, outcome: Outcome) -> Response<RespBody> {
    json_response(StatusCode::OK, &jsonrpc::response_from(id, outcome))
}

/// `tools/call` with `params.task`: a task right away, as 2025-11-25 requires.
pub async fn create(
    state: &Arc<State>,
    mount: &Mount,
    s: &Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    let id = req.id.clone();
    let name = req.str_param("name").unwrap_or_default().to_string();
    let mut policy = mount.cfg.policy(&name).clone();
    if policy.mode == ToolMode::Never {
        return respond(
            id.as_ref(),
            Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: tool {name:?} does not run as a task (its execution.taskSupport is \"forbidden\")"),
            )),
        );
    }
    if let Some(ms) = req
        .params
        .get("task")
        .and_then(|t| t.get("ttl"))
        .and_then(Value::as_u64)
    {
        policy.ttl = Duration::from_millis(ms).clamp(MIN_TTL, policy.ttl.max(MIN_TTL));
    }
    policy.threshold = Duration::ZERO;
    policy.mode = ToolMode::Always;
    let mut req = modernize(s, req);
    req.params.remove("task");
    if let Some(Value::Object(caps)) =
        mcp::meta_mut(&mut req.params).get_mut(mcp::META_CLIENT_CAPABILITIES)
    {
        let ext = caps.entry("extensions").or_insert_with(|| json!({}));
        if let Value::Object(e) = ext {
            e.insert(mcp::TASKS_EXTENSION.into(), json!({}));
        }
    }
    let up = crate::dispatch::call_target(mount, &req, &ctx, policy.ttl).await;
    let answer = state.engine.call_tool(up, &policy, req.into(), ctx.clone());
    match crate::front::render::reply(answer.await, id.as_ref()) {
        Reply::Json(v) => {
            let created = v
                .get("result")
                .filter(|r| r.get("resultType").and_then(Value::as_str) == Some("task"));
            match created {
                Some(r) => {
                    tracing::info!(task.id = ?r.get("taskId"), tool = %name, "2025-11-25 task created");
                    respond(id.as_ref(), Ok(json!({ "task": legacy_task(r) })))
                }
                None => json_response(StatusCode::OK, &legacy_shape("tools/call", v)),
            }
        }
        Reply::UpstreamError(status, v) => {
            upstream_error(mount, &ctx, status, &legacy_shape("tools/call", v)).await
        }
        // A plain result (never a task).
        Reply::Raw(b) => {
            let v = crate::reply::raw_message(&b);
            json_response(StatusCode::OK, &legacy_shape("tools/call", v))
        }
        // The task could not be stored: the call went on synchronously.
        Reply::Stream(rx) => {
            let rx = s.resumable(rx, id.as_ref(), |v| legacy_shape("tools/call", v));
            sse(rx)
        }
        Reply::Accepted => respond(id.as_ref(), Ok(json!({}))),
    }
}

/// A task the caller may see, as a 2026-07-28 `DetailedTask` (the shape the
/// helpers here read).
async fn detailed(engine: &Engine, task_id: &str, who: Caller<'_>) -> Result<Value, RpcError> {
    Ok(into_detailed_task(engine.get(task_id, who).await?))
}

/// `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`.
pub async fn legacy_task_method(
    state: &Arc<State>,
    mount: &Mount,
    s: &Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    let id = req.id.clone();
    let engine = &state.engine;
    let who = Caller {
        principal: ctx.principal.as_str(),
        upstream: mount.cfg.name.as_str(),
    };
    if req.method == "tasks/list" {
        return respond(id.as_ref(), list(engine, who, &req).await);
    }
    let Some(task_id) = req.str_param("taskId").map(str::to_string) else {
        return respond(
            id.as_ref(),
            Err(RpcError::new(
                INVALID_PARAMS,
                "Invalid params: taskId is required",
            )),
        );
    };
    if req.method == "tasks/get" {
        let polled = engine.poll(&task_id, who).await;
        return respond(
            id.as_ref(),
            polled
                .map(|r| legacy_task(&into_detailed_task(r)))
                .map_err(RpcError::from),
        );
    }
    let current = match detailed(engine, &task_id, who).await {
        Ok(t) => t,
        Err(e) => return respond(id.as_ref(), Err(e)),
    };
    match req.method.as_str() {
        "tasks/cancel" => respond(id.as_ref(), cancel(engine, &task_id, who, current).await),
        _ => task_result(state, s, task_id, who, &current, id),
    }
}

/// `tasks/cancel` of a task the caller sees as `current`: refused once it has
/// ended; else cancelled, and answered when its owner has recorded it.
async fn cancel(engine: &Engine, task_id: &str, who: Caller<'_>, current: Value) -> Outcome {
    if is_terminal(&current) {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!(
                "Cannot cancel task: it is already {}",
                current["status"].as_str().unwrap_or("finished")
            ),
        ));
    }
    let mut changes = engine.subscribe();
    engine.cancel(task_id, who).await?;
    // The task is `cancelled` before the answer leaves, as 2025-11-25 requires:
    // wait for its owner to record it (a few milliseconds; at most CANCEL_WAIT).
    let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
    let mut t = current;
    loop {
        match detailed(engine, task_id, who).await {
            Ok(now) if is_terminal(&now) => {
                t = now;
                break;
            }
            Ok(now) => t = now,
            Err(_) => break,
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        changed(&mut changes, task_id, left).await;
    }
    Ok(legacy_task(&t))
}

/// `tasks/result`: a finished task's outcome at once; else a resumable stream that
/// asks the client what the task asks and ends with the outcome.
fn task_result(
    state: &State,
    s: &Arc<ClientSession>,
    task_id: String,
    who: Caller<'_>,
    current: &Value,
    id: Option<Value>,
) -> Response<RespBody> {
    if is_terminal(current) {
        return respond(id.as_ref(), final_outcome(current));
    }
    let rx = wait_result(
        state.engine.clone(),
        s.clone(),
        task_id,
        who.principal.to_string(),
        who.upstream.to_string(),
        id.clone().unwrap_or(Value::Null),
        state.cfg.keepalive_interval,
    );
    let rx = s.resumable(rx, id.as_ref(), |v| v);
    sse(rx)
}

/// What `tasks/result` returns for a finished task: exactly what the call would have.
fn final_outcome(t: &Value) -> Outcome {
    let task_id = t.get("taskId").cloned().unwrap_or(Value::Null);
    if let Some(e) = t.get("error") {
        return Err(RpcError::from_value(e));
    }
    match (t.get("status").and_then(Value::as_str), t.get("result")) {
        (_, Some(r)) => {
            let mut r = r.clone();
            if let Value::Object(o) = &mut r {
                o.remove("resultType");
                let meta = o.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(m) = meta {
                    m.insert(RELATED_TASK.into(), json!({ "taskId": task_id }));
                }
            }
            Ok(r)
        }
        (Some("cancelled"), None) => Err(RpcError::new(
            jsonrpc::INTERNAL_ERROR,
            "The task was cancelled before it produced a result",
        )),
        _ => Err(RpcError::new(
            jsonrpc::INTERNAL_ERROR,
            "The task ended without a result",
        )),
    }
}

/// A blocked `tasks/result`: relays the task's input requests to the client and
/// ends with the call's outcome.
fn wait_result(
    engine: Arc<Engine>,
    s: Arc<ClientSession>,
    task_id: String,
    owner: String,
    upstream: String,
    id: Value,
    keepalive: Duration,
) -> mpsc::Receiver<StreamItem> {
    let (tx, rx) = mpsc::channel(32);
    // Subscribed before the first read, so no change falls in between.
    let mut changes = engine.subscribe();
    tokio::spawn(async move {
        let who = Caller {
            principal: &owner,
            upstream: &upstream,
        };
        let mut asked = HashSet::new();
        let mut last_send = tokio::time::Instant::now();
        loop {
            let t = match detailed(&engine, &task_id, who).await {
                Ok(t) => t,
                Err(e) => {
                    let _ = tx
                        .send(StreamItem::Message(jsonrpc::response(Some(&id), &Err(e))))
                        .await;
                    return;
                }
            };
            if is_terminal(&t) {
                let _ = tx
                    .send(StreamItem::Message(jsonrpc::response(
                        Some(&id),
                        &final_outcome(&t),
                    )))
                    .await;
                return;
            }
            if let Some(Value::Object(asks)) = t.get("inputRequests") {
                for (key, ask) in asks {
                    if !asked.insert(key.clone()) {
                        continue;
                    }
                    let method = ask
                        .get("method")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let params = ask.get("params").cloned().unwrap_or_else(|| json!({}));
                    let answer = answer_to_task(&engine, &task_id, &owner, &upstream, key, &method);
                    let msg = s.request(&method, params, answer, Some(&task_id));
                    if tx.send(StreamItem::Message(msg)).await.is_err() {
                        return;
                    }
                    last_send = tokio::time::Instant::now();
                }
            }
            if last_send.elapsed() >= keepalive {
                if tx.send(StreamItem::KeepAlive).await.is_err() {
                    return;
                }
                last_send = tokio::time::Instant::now();
            }
            // Read the task again when it changes, or when a keep-alive is due.
            let until_keepalive = keepalive.saturating_sub(last_send.elapsed());
            tokio::select! {
                _ = changed(&mut changes, &task_id, until_keepalive) => {}
                _ = tx.closed() => return,
            }
        }
    });
    rx
}

/// Wait until the engine records a change of `task_id`, or `limit` passes.
async fn changed(
    changes: &mut tokio::sync::broadcast::Receiver<crate::store::TaskRecord>,
    task_id: &str,
    limit: Duration,
) {
    use tokio::sync::broadcast::error::RecvError;
    let _ = tokio::time::timeout(limit, async {
        loop {
            match changes.recv().await {
                Ok(r) if r.id == task_id => return,
                Ok(_) => {}
                // Changes were dropped: this one may be among them, so read again.
                Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    })
    .await;
}

/// Deliver the client's answer to one input request of a task, as `tasks/update`.
fn answer_to_task(
    engine: &Arc<Engine>,
    task_id: &str,
    owner: &str,
    upstream: &str,
    key: &str,
    method: &str,
) -> super::session::Responder {
    let (engine, task_id, owner, upstream, key) = (
        engine.clone(),
        task_id.to_string(),
        owner.to_string(),
        upstream.to_string(),
        key.to_string(),
    );
    let method = method.to_string();
    Box::new(move |outcome| {
        let value = match outcome {
            Ok(v) => v,
            // tasks/update carries results only: a refused elicitation is a cancel.
            Err(e) if method == "elicitation/create" => {
                tracing::info!(error = %e, "the client refused an elicitation for a task");
                json!({"action": "cancel"})
            }
            Err(e) => {
                tracing::warn!(error = %e, %method, "the client answered a task's request with an error; the task keeps waiting");
                return;
            }
        };
        tokio::spawn(async move {
            let mut answers = Map::new();
            answers.insert(key, value);
            let who = Caller {
                principal: &owner,
                upstream: &upstream,
            };
            if let Err(e) = engine.update(&task_id, who, answers).await {
                let e = RpcError::from(e);
                tracing::warn!(error = %e, "could not give a task the client's answer");
            }
        });
    })
}

/// `tasks/list`: the caller's tasks on this upstream, oldest first, in pages.
async fn list(engine: &Engine, who: Caller<'_>, req: &Request) -> Outcome {
    // The cursor is the (creation time, id) of the last task sent: tasks that expire
    // between pages do not make the rest of the list disappear.
    let unknown = || RpcError::new(INVALID_PARAMS, "Invalid params: unknown cursor");
    let after: Option<(u64, String)> = match req.str_param("cursor") {
        None => None,
        Some(c) => {
            let text = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(unknown)?;
            let (ms, id) = text.split_once(':').ok_or_else(unknown)?;
            Some((ms.parse().map_err(|_| unknown())?, id.to_string()))
        }
    };
    let recs = engine.list(Some(who)).await?;
    let start = match &after {
        Some((ms, id)) => recs
            .iter()
            .position(|r| (r.created_at_ms, &r.id) > (*ms, id))
            .unwrap_or(recs.len()),
        None => 0,
    };
    let page: Vec<Value> = recs
        .iter()
        .skip(start)
        .take(PAGE)
        .map(|r| legacy_task(&detailed_task(r)))
        .collect();
    let mut out = json!({ "tasks": page });
    if start + PAGE < recs.len() {
        let last = &recs[start + PAGE - 1];
        let cursor = format!("{}:{}", last.created_at_ms, last.id);
        out["nextCursor"] =
            json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(cursor.as_bytes()));
    }
    Ok(out)
}
