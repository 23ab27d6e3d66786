//! The front door for legacy clients (2025-03-26, 2025-06-18, 2025-11-25), beside
//! the modern one on the same endpoint, as the 2026-07-28 versioning page describes
//! for a dual-era server: an `initialize` without modern `_meta` opens a session on
//! tasklift (its own `Mcp-Session-Id`); requests in it are served by the same
//! pipeline as modern ones, with the session's state turned into per-request
//! `_meta`, and answered the legacy way:
//! - the upstream's requests to the client (elicitation, sampling, roots) go to the
//!   client as JSON-RPC requests on the response stream, and its POSTed answers go
//!   back upstream (a modern upstream's `InputRequiredResult` is answered the same way,
//!   by retrying the call with the client's answers);
//! - results lose the modern-only fields (`resultType`, cache hints);
//! - streams carry event ids and survive a disconnect: the client resumes them with a
//!   GET and `Last-Event-ID`, and only `notifications/cancelled` or the end of the
//!   session stops the work;
//! - the standalone GET stream carries the upstream's change notifications;
//! - 2025-11-25 task-augmented `tools/call` and `tasks/*` ([`tasks`]).
//!
//! [`shape`] turns a session's request into the modern pipeline's and an answer back
//! into the legacy one's; both this module and [`tasks`] use it.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};

use crate::headers::Fields;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::errors::{legacy_status_of, Rejected};
use super::State;
use crate::serving::body::{self, RespBody};
use crate::serving::json_response;
use shape::sse_response;
pub use shape::{legacy_shape, modernize, sse, SESSION_HEADER};

mod door;
mod served;
pub mod session;
mod shape;
mod tasks;

pub(crate) use door::run_reaper;
pub use door::Legacy;

use crate::dispatch::Mount;
use crate::reply::StreamItem;
use crate::upstream::{CallContext, Era};
use session::ClientSession;
use tasklift_protocol::jsonrpc::{
    self, Outcome, Request, RpcError, INVALID_PARAMS, INVALID_REQUEST,
};
use tasklift_protocol::mcp::{self, LEGACY_VERSIONS};

fn accepted() -> Response<RespBody> {
    Response::builder()
        .status(StatusCode::ACCEPTED)
        .body(body::full(Bytes::new()))
        .expect("valid response")
}

/// A string parameter the method needs, or the answer saying it is missing.
fn required<'r>(req: &'r Request, name: &str) -> Result<&'r str, Box<Response<RespBody>>> {
    req.str_param(name).ok_or_else(|| {
        Box::new(ok(
            req.id.as_ref(),
            Err(RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: {name} is required"),
            )),
        ))
    })
}

fn ok(id: Option<&Value>, outcome: Outcome) -> Response<RespBody> {
    json_response(
        legacy_status_of(&outcome),
        &jsonrpc::response_from(id, outcome),
    )
}

/// `initialize` without a session: open one, with the upstream's capabilities.
pub async fn initialize(
    legacy: &Legacy,
    mount: &Mount,
    req: Request,
    mut ctx: CallContext,
) -> Response<RespBody> {
    let id = req.id.clone();
    let s = match open_session(legacy, mount, &req, &ctx).await {
        Ok(s) => s,
        Err(r) => return r.response(id.as_ref()),
    };
    ctx.session = Some(s.peer());
    let d = match described(mount, &s, &ctx).await {
        Ok(d) => d,
        Err(e) => {
            legacy.sessions(mount).remove(&s.id);
            mount.upstream.end_session(&ctx).await;
            tracing::warn!(upstream = %mount.cfg.name, error = %e, "a legacy client could not be initialized");
            return ok(id.as_ref(), Err(e));
        }
    };
    let result = initialize_result(&s, &d);
    // Kept before the client learns the id, so it survives a restart from now on.
    legacy.keep(mount, &s).await;
    tracing::info!(session = %s.id, version = %s.protocol_version, upstream = %mount.cfg.name, "legacy client session opened");
    let mut r = json_response(StatusCode::OK, &jsonrpc::response(id.as_ref(), &Ok(result)));
    r.headers_mut().insert(
        SESSION_HEADER,
        HeaderValue::from_str(&s.id).expect("uuid is header-safe"),
    );
    r
}

/// A new session for the client of an `initialize`, in the mount's table under
/// the cap per principal; the session the cap closed ends upstream too, as after
/// DELETE.
async fn open_session(
    legacy: &Legacy,
    mount: &Mount,
    req: &Request,
    ctx: &CallContext,
) -> Result<Arc<ClientSession>, Rejected> {
    let s = new_session(legacy, req, ctx)?;
    let evicted = legacy
        .sessions(mount)
        .insert(s.clone(), legacy.cfg.max_sessions_per_principal)
        .map_err(|e| Rejected::TooManySessions(e.to_string()))?;
    if let Some(old) = evicted {
        legacy.forget(&old.id).await;
        let mut octx = ctx.clone();
        octx.session = Some(old.peer());
        mount.upstream.end_session(&octx).await;
    }
    Ok(s)
}

/// The session an `initialize` asks for: its version (a version tasklift does not
/// speak gets the latest it does, as initialize says), capabilities and
/// `clientInfo`.
fn new_session(
    legacy: &Legacy,
    req: &Request,
    ctx: &CallContext,
) -> Result<Arc<ClientSession>, Rejected> {
    let Some(requested) = req.str_param("protocolVersion").map(str::to_string) else {
        return Err(Rejected::InvalidParams(
            "Invalid params: protocolVersion is required".into(),
        ));
    };
    let version = if LEGACY_VERSIONS.contains(&requested.as_str()) {
        requested
    } else {
        LEGACY_VERSIONS[0].to_string()
    };
    let caps = req
        .params
        .get("capabilities")
        .filter(|c| c.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let info = req
        .params
        .get("clientInfo")
        .cloned()
        .unwrap_or_else(|| json!({"name": "unknown", "version": "0"}));
    let polling = legacy.polling();
    Ok(ClientSession::with_polling(
        ctx.principal.clone(),
        version,
        caps,
        info,
        polling,
    ))
}

/// The `initialize` result for session `s` from the upstream's description `d`:
/// its capabilities without the modern extensions or its own tasks (2025-11-25
/// tasks are tasklift's, for a session that polls), `serverInfo`, `instructions`.
fn initialize_result(s: &ClientSession, d: &Value) -> Value {
    let mut caps = d.get("capabilities").cloned().unwrap_or_else(|| json!({}));
    if let Value::Object(c) = &mut caps {
        c.remove("extensions");
        c.remove("tasks");
        if s.polls() {
            // 2025-11-25 tasks, served by tasklift whatever the upstream does.
            c.insert(
                "tasks".into(),
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
            );
        }
    }
    let server_info = d
        .get("serverInfo")
        .cloned()
        .unwrap_or_else(|| json!({"name": "tasklift", "version": env!("CARGO_PKG_VERSION")}));
    let mut result = json!({
        "protocolVersion": s.protocol_version,
        "capabilities": caps,
        "serverInfo": server_info,
    });
    if let Some(i) = d.get("instructions") {
        result["instructions"] = i.clone();
    }
    result
}

/// How the upstream describes itself to the client of `s` (`ctx` carries its
/// peer), as an `initialize` result: capabilities, `serverInfo`, `instructions`.
/// What it tells that client as a 2025 client when it speaks 2025 (a legacy or
/// dual-era upstream; `Upstream::legacy_initialize`), else its `server/discover`.
async fn described(mount: &Mount, s: &ClientSession, ctx: &CallContext) -> Result<Value, RpcError> {
    match mount.upstream.legacy_initialize(ctx).await {
        Ok(Some(init)) => return Ok(init),
        Ok(None) => {}
        Err(e) => return Err(e.to_rpc()),
    }
    let discover = modernize(
        s,
        Request {
            id: Some(json!("tasklift-initialize")),
            method: mcp::method::DISCOVER.into(),
            params: Default::default(),
        },
    );
    let d = match mount.upstream.discover(&discover, ctx).await {
        Ok(outcome) => outcome?,
        Err(e) => return Err(e.to_rpc()),
    };
    let mut init = Map::new();
    if let Some(c) = d.get("capabilities") {
        init.insert("capabilities".into(), c.clone());
    }
    if let Some(i) = d.get("_meta").and_then(|m| m.get(mcp::META_SERVER_INFO)) {
        init.insert("serverInfo".into(), i.clone());
    }
    if let Some(i) = d.get("instructions") {
        init.insert("instructions".into(), i.clone());
    }
    Ok(Value::Object(init))
}

/// Where a session's request is served: the front door's state, the legacy
/// door, and the mount.
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub state: &'a Arc<State>,
    pub legacy: &'a Legacy,
    pub mount: &'a Mount,
}

/// A POST in a session: a response to tasklift's request, a notification, or a request.
pub async fn post(
    at: At<'_>,
    s: Arc<ClientSession>,
    headers: &Fields,
    value: Value,
    mut ctx: CallContext,
    peer: std::net::SocketAddr,
) -> Response<RespBody> {
    let At { state, mount, .. } = at;
    if let Some(v) = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
    {
        if !LEGACY_VERSIONS.contains(&v.trim()) {
            return Rejected::BadSessionRequest(format!(
                "Unsupported MCP-Protocol-Version {v:?} in a legacy session (negotiated {})",
                s.protocol_version
            ))
            .response(value.get("id"));
        }
    }
    if value.is_array() {
        return Rejected::BadSessionRequest(
            "Invalid request: JSON-RPC batches are not supported; send one message per POST".into(),
        )
        .response(None);
    }
    // The client answering one of tasklift's requests.
    if value.get("method").is_none()
        && (value.get("result").is_some() || value.get("error").is_some())
    {
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        let outcome = match value.get("error") {
            Some(e) => Err(RpcError::from_value(e)),
            None => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
        };
        if !s.answer(&id, outcome) {
            tracing::debug!(session = %s.id, %id, "a response to no outstanding request; ignored");
        }
        return accepted();
    }
    let mut req = match Request::from_value(value.clone()) {
        Ok(r) => r,
        Err(e) => return Rejected::Malformed(e).response(value.get("id")),
    };
    ctx.session = Some(s.peer());
    let tracer = state.engine.tracer();
    crate::observe::trace::propagate(headers, &mut req, &mut ctx, tracer);
    if let Some(h) = &ctx.trace {
        tracing::debug!(trace_id = %h.trace_hex(), method = %req.method, "continuing the caller's trace");
    }
    let traced = match req.id {
        Some(_) => {
            crate::front::request_span(tracer, ctx.trace.as_ref(), &req, mount, peer, Some(&s.id))
        }
        None => crate::observe::spans::Span::none(),
    };
    body::with_span(request(at, s, req, ctx).await, traced)
}

/// A request or notification in a session, its trace context settled: the methods
/// only sessions have are answered here, 2025-11-25 tasks in [`tasks`], the rest
/// through the shared pipeline.
async fn request(
    at: At<'_>,
    s: Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    let At { state, mount, .. } = at;
    if req.id.is_none() {
        return notification(mount, &s, req, ctx).await;
    }
    match req.method.as_str() {
        mcp::method::INITIALIZE => ok(
            req.id.as_ref(),
            Err(RpcError::new(
                INVALID_REQUEST,
                "Invalid request: this session is already initialized",
            )),
        ),
        "ping" => ok(req.id.as_ref(), Ok(json!({}))),
        "logging/setLevel" => set_level(at, s, req, ctx).await,
        "resources/subscribe" | "resources/unsubscribe" => subscribe(at, s, req, ctx).await,
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => {
            tasks::legacy_task_method(state, mount, &s, req, ctx).await
        }
        mcp::method::TOOLS_CALL if req.params.contains_key("task") && s.polls() => {
            tasks::create(state, mount, &s, req, ctx).await
        }
        mcp::method::TOOLS_CALL if s.polls() && tasks::task_required(mount, &req) => {
            let name = req.str_param("name").unwrap_or_default();
            ok(
                req.id.as_ref(),
                Err(RpcError::new(
                    jsonrpc::METHOD_NOT_FOUND,
                    format!("Method not found: tool {name:?} runs only as a task (its execution.taskSupport is \"required\"); call it with params.task"),
                )),
            )
        }
        // A `params.task` left here (before 2025-11-25 it means nothing) is
        // stripped by dispatch, like every client's.
        _ => served::call(state, mount, &s, req, ctx).await,
    }
}

/// `logging/setLevel`: the session's level, kept. A legacy HTTP upstream has a
/// session for this client and filters too; a modern one gets the level per
/// request. A stdio child's one session is shared by every client, so its level is
/// left alone and tasklift filters.
async fn set_level(
    at: At<'_>,
    s: Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    let At {
        state,
        legacy,
        mount,
    } = at;
    let level = match required(&req, "level") {
        Ok(v) => v.to_string(),
        Err(r) => return *r,
    };
    s.set_log_level(level);
    legacy.keep(mount, &s).await;
    match mount.upstream.era(&ctx).await {
        Ok(Era::Legacy) if mount.upstream.session_per_client() => {
            served::call(state, mount, &s, req, ctx).await
        }
        _ => ok(req.id.as_ref(), Ok(json!({}))),
    }
}

/// `resources/subscribe` and `resources/unsubscribe`. tasklift serves
/// subscriptions (through the upstream's change notifications) where the upstream
/// offers them to this client; where it does not, the client gets the upstream's
/// own answer, as without tasklift.
async fn subscribe(
    at: At<'_>,
    s: Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    let At {
        state,
        legacy,
        mount,
    } = at;
    let uri = match required(&req, "uri") {
        Ok(v) => v.to_string(),
        Err(r) => return *r,
    };
    match described(mount, &s, &ctx).await {
        Ok(d) if subscribable(&d) => {}
        Ok(_) => return served::call(state, mount, &s, req, ctx).await,
        Err(e) => return ok(req.id.as_ref(), Err(e)),
    }
    if s.subscribe(&uri, req.method == "resources/subscribe") {
        legacy.keep(mount, &s).await;
        listen(mount, &s, &ctx, true);
    }
    ok(req.id.as_ref(), Ok(json!({})))
}

/// Whether an upstream described as `d` (an `initialize` result) offers
/// `resources/subscribe`.
fn subscribable(d: &Value) -> bool {
    d.pointer("/capabilities/resources/subscribe") == Some(&Value::Bool(true))
}

/// A notification from the client.
async fn notification(
    mount: &Mount,
    s: &Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    match req.method.as_str() {
        // tasklift initialized the upstream side itself.
        mcp::method::INITIALIZED => {}
        mcp::method::CANCELLED => {
            if let Some(rid) = req.params.get("requestId") {
                if !s.cancel_request(rid) {
                    tracing::debug!(session = %s.id, %rid, "cancellation for a request that is not in flight");
                }
            }
        }
        _ => {
            let req = modernize(s, req);
            if let Err(e) = mount.upstream.notify(&req, &ctx).await {
                tracing::warn!(error = %e, method = %req.method, "could not forward a notification");
            }
        }
    }
    accepted()
}

/// Relay the upstream's change notifications (list changes, subscribed resources) to
/// the session's GET stream; `restart` re-reads the subscriptions.
pub fn listen(mount: &Mount, s: &Arc<ClientSession>, ctx: &CallContext, restart: bool) {
    let mut slot = s.listener.lock().expect("lock");
    // A listener whose task ended (the upstream stream broke) is started again.
    if slot.as_ref().is_some_and(|h| !h.is_finished()) && !restart {
        return;
    }
    if let Some(old) = slot.take() {
        old.abort();
    }
    let mut filter = Map::new();
    for k in [
        "toolsListChanged",
        "promptsListChanged",
        "resourcesListChanged",
    ] {
        filter.insert(k.into(), json!(true));
    }
    let subs = s.subscriptions();
    if !subs.is_empty() {
        filter.insert("resourceSubscriptions".into(), json!(subs));
    }
    let up = mount.upstream.clone();
    let ses = s.clone();
    let ctx = ctx.clone();
    let task = tokio::spawn(async move {
        let req = modernize(
            &ses,
            Request {
                id: Some(json!(format!("tasklift-listen-{}", ses.id))),
                method: "subscriptions/listen".into(),
                params: Default::default(),
            },
        );
        let mut l = match up.listen(&filter, &req, &ctx).await {
            Ok(l) => l,
            Err(e) => {
                tracing::info!(error = %e, "no change notifications from the upstream for a legacy session");
                return;
            }
        };
        while let Some(n) = l.events.recv().await {
            if crate::upstream::notification_wanted(&filter, &n) {
                ses.notify(legacy_shape("", n)).await;
            }
        }
    });
    *slot = Some(task.abort_handle());
}

/// GET in a session: the standalone stream, or a stream resumed after `Last-Event-ID`.
pub fn get(
    mount: &Mount,
    s: Arc<ClientSession>,
    headers: &Fields,
    ctx: CallContext,
) -> Response<RespBody> {
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|a| a.contains("text/event-stream") || a.contains("*/*"));
    if !accepts_sse {
        return Rejected::NotAcceptable.response(None);
    }
    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let mut ctx = ctx;
    ctx.session = Some(s.peer());
    listen(mount, &s, &ctx, false);
    let rx = s.open_stream(last);
    // Keep-alives while the stream is open, so proxies in between keep it.
    let (tx, out) = mpsc::channel(64);
    let busy = s.busy();
    let mut closed = s.closed();
    tokio::spawn(async move {
        let _busy = busy;
        let mut rx = rx;
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(15));
        tick.tick().await;
        loop {
            let item = tokio::select! {
                i = rx.recv() => match i { Some(i) => i, None => return },
                _ = tick.tick() => StreamItem::KeepAlive,
                _ = session::ended(&mut closed) => return,
            };
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    sse_response(out, None)
}
