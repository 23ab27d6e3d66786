//! The front door: a hyper HTTP/1.1 server speaking 2026-07-28 Streamable HTTP.
//!
//! Per request, in order: route by path (each upstream at its own path, plus
//! `/healthz` and `/readyz`), POST only, Origin, Content-Type, body limit, JSON,
//! JSON-RPC shape, headers against the body, principal; then dispatch. Every
//! error's HTTP status and JSON-RPC error come from one map, [`errors`].

pub mod errors;
pub mod legacy;
pub mod params;
pub mod render;
mod state;
pub mod validate;

pub use state::{LegacyClients, Lenient, Responding, State};

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use tokio::sync::watch;
use tracing::Instrument;

use self::errors::Rejected;
use crate::dispatch::{dispatch, Mount};
use crate::headers::Fields;
use crate::reply::Reply;
use crate::serving::body::{self, RespBody};
use crate::serving::Request as HttpRequest;
use crate::serving::{accept_loop, json_bytes, json_response, Limits, Peer, ReqBody};
use crate::upstream::CallContext;
use crate::workers::Doorway;
use tasklift_protocol::jsonrpc::{Envelope, Request};

/// Accept connections until `shutdown` turns true, then stop accepting and let open
/// connections finish their in-flight requests.
pub async fn serve(doorway: Doorway, state: Arc<State>, shutdown: watch::Receiver<bool>) {
    let limits = Limits {
        grace: state.cfg.shutdown_grace,
        header_timeout: state.cfg.header_read_timeout,
        max_body: state.cfg.max_body_bytes,
    };
    let metrics = Some(state.metrics.clone());
    accept_loop(
        doorway,
        shutdown,
        limits,
        "front door",
        metrics,
        move |req, peer| handle(state.clone(), req, peer),
    )
    .await
}

/// One request, as the steps it goes through: health endpoints, route, a legacy
/// session's GET or DELETE, method, Origin, Content-Type, body; then the 2025-era
/// door or the modern path. The order decides which error a bad request gets.
async fn handle(state: Arc<State>, req: HttpRequest, client: Peer) -> Response<RespBody> {
    let peer = client.addr;
    let path = req.uri().path().to_string();
    if let Some(resp) = health_endpoint(&state, &path).await {
        return resp;
    }
    let Some(mount) = state.mounts.get(&path) else {
        return Rejected::NoEndpoint(path).response(None);
    };
    let session_id = state.legacy.session_id(req.headers());
    if let Some(sid) = session_id
        .as_deref()
        .filter(|_| in_session_only(req.method()))
    {
        return state.legacy.stream(&state, mount, req, sid, peer).await;
    }
    if req.method() != Method::POST {
        return Rejected::MethodNotAllowed(req.method().clone()).response(None);
    }
    if let Some(r) = forbidden_origin(&state, req.headers(), peer) {
        return r;
    }
    if !declares_json(req.headers()) {
        return Rejected::NotJson.response(None);
    }
    let HttpRequest { headers, body, .. } = req;
    let body = match read_body(&state, body).await {
        Ok(b) => b,
        Err(r) => return r.response(None),
    };
    // The 2025-era door takes a request in a session, or one opening a session;
    // it reads the whole object. Every other request is read as an envelope.
    let envelope = if session_id.is_some() {
        let value = match tasklift_protocol::json::from_bytes::<Value>(&body) {
            Ok(v) => v,
            Err(e) => return Rejected::Parse(e.to_string()).response(None),
        };
        if state.legacy.takes(session_id.as_deref(), &value) {
            return state
                .legacy
                .post(&state, mount, &headers, value, session_id, peer)
                .await;
        }
        Envelope::from_value(value)
    } else {
        let envelope = match Envelope::from_slice(&body) {
            Ok(e) => e,
            Err(e) => return Rejected::Parse(e.to_string()).response(None),
        };
        if envelope.method() != Some(tasklift_protocol::mcp::method::INITIALIZE) {
            envelope
        } else {
            let value = envelope.into_value();
            if state.legacy.takes(None, &value) {
                return state
                    .legacy
                    .post(&state, mount, &headers, value, None, peer)
                    .await;
            }
            Envelope::from_value(value)
        }
    };
    modern(&state, mount, &headers, envelope, client).await
}

/// `/healthz`, `/readyz` and (when enabled) `/metrics`, which no mount may shadow.
async fn health_endpoint(state: &State, path: &str) -> Option<Response<RespBody>> {
    match path {
        "/healthz" => Some(json_response(StatusCode::OK, &json!({"status": "ok"}))),
        "/readyz" => Some(crate::health::readyz(state.health()).await),
        "/metrics" if state.cfg.metrics => Some(crate::health::metrics(state.health()).await),
        _ => None,
    }
}

/// GET and DELETE, which the endpoint serves only within a legacy session.
fn in_session_only(method: &Method) -> bool {
    method == Method::GET || method == Method::DELETE
}

/// Whether the body is declared as JSON.
fn declares_json(headers: &Fields) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.get(..16)
                .is_some_and(|p| p.eq_ignore_ascii_case("application/json"))
        })
}

/// The body, read up to `server.max_body_bytes`.
async fn read_body(state: &State, body: ReqBody) -> Result<Bytes, Rejected> {
    let limit = state.cfg.max_body_bytes;
    // Read whole already (the front door reads at most the limit whole).
    let body = match body {
        ReqBody::Whole(Some(b)) if b.len() <= limit => return Ok(b),
        other => other,
    };
    let bytes: Bytes = match Limited::new(body, limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            state.metrics.limit_hit("max_body_bytes");
            return Err(Rejected::TooLarge { limit });
        }
        Err(e) => return Err(Rejected::Unreadable(e.to_string())),
    };
    Ok(bytes)
}

/// A 2026-07-28 request: a JSON-RPC message, served within its `request` span.
async fn modern(
    state: &State,
    mount: &Mount,
    headers: &Fields,
    envelope: Envelope,
    client: Peer,
) -> Response<RespBody> {
    let raw_id = envelope.id.clone();
    let msg = match Request::from_envelope(envelope) {
        Ok(m) => m,
        Err(e) => return Rejected::Malformed(e).response(raw_id.as_ref()),
    };
    let span = tracing::info_span!("request", method = %msg.method, client.addr = %client, upstream = %mount.cfg.name, trace_id = tracing::field::Empty);
    serve_modern(state, mount, headers, msg, client.addr)
        .instrument(span)
        .await
}

/// The modern path's steps: headers against the body, the caller, trace context,
/// a `tools/call`'s parameter headers, dispatch, and the answer as HTTP.
async fn serve_modern(
    state: &State,
    mount: &Mount,
    headers: &Fields,
    mut msg: Request,
    peer: SocketAddr,
) -> Response<RespBody> {
    if let Some(refused) = check_headers(state, headers, &msg, peer) {
        return refused;
    }
    let mut ctx = match context(state, mount, headers, msg.id.as_ref()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let mut traced = start_trace(state, headers, &mut msg, &mut ctx, mount, peer);
    if msg.method == tasklift_protocol::mcp::method::TOOLS_CALL {
        let upstream = mount.upstream.as_ref();
        let checked = params::check(&mount.tools, upstream, headers, &msg, &ctx).await;
        if let Err(r) = checked {
            state.metrics.request(&msg.method, "rejected");
            tracing::debug!(error = %r.rpc(), "rejected at the front door");
            traced.set("tasklift.outcome", "rejected");
            traced.fail(r.rpc().message.clone());
            return body::with_span(r.response(msg.id.as_ref()), traced);
        }
    }
    let method = msg.method.clone();
    let reply = dispatch(&state.engine, mount, msg, ctx).await;
    record_outcome(state, &method, &reply, &mut traced);
    respond(reply, traced)
}

/// A request with an id: its headers against its body (`validate::check_request_with`);
/// the refusal, if any. A client let through leniently is noted.
fn check_headers(
    state: &State,
    headers: &Fields,
    msg: &Request,
    peer: SocketAddr,
) -> Option<Response<RespBody>> {
    msg.id.as_ref()?;
    match validate::check_request_with(headers, msg, state.cfg.lenient_task_name_header) {
        Err(r) => {
            state.metrics.request(&msg.method, "rejected");
            tracing::debug!(error = %r.rpc(), "rejected at the front door");
            Some(r.response(msg.id.as_ref()))
        }
        Ok(true) => {
            state.lenient.note(headers, peer, &msg.method);
            None
        }
        Ok(false) => None,
    }
}

/// The request's trace context settled (`observe::trace::propagate`), its id on the
/// log span, and tasklift's span for it opened.
fn start_trace(
    state: &State,
    headers: &Fields,
    msg: &mut Request,
    ctx: &mut CallContext,
    mount: &Mount,
    peer: SocketAddr,
) -> crate::observe::spans::Span {
    let tracer = state.engine.tracer();
    crate::observe::trace::propagate(headers, msg, ctx, tracer);
    if let Some(h) = &ctx.trace {
        tracing::Span::current().record("trace_id", h.trace_hex().as_str());
    }
    request_span(tracer, ctx.trace.as_ref(), msg, mount, peer, None)
}

/// The reply counted in `tasklift_requests_total` and written on the request's span.
fn record_outcome(
    state: &State,
    method: &str,
    reply: &Reply,
    traced: &mut crate::observe::spans::Span,
) {
    let outcome = outcome_of(reply);
    state.metrics.request(method, outcome);
    if traced.is_recording() {
        traced.set("tasklift.outcome", outcome);
        match reply {
            Reply::Json(v) | Reply::UpstreamError(_, v) => traced.record_answer(v),
            Reply::Raw(b) => traced.record_answer_bytes(b),
            _ => {}
        }
    }
}

/// The reply as HTTP: JSON with the status its error calls for, 202, or SSE; the
/// span ends when the body has been sent.
fn respond(reply: Reply, mut traced: crate::observe::spans::Span) -> Response<RespBody> {
    let resp = match reply {
        Reply::Json(v) => json_response(errors::status_of(&v), &v),
        Reply::UpstreamError(status, v) => {
            json_response(errors::upstream_status_of(status, &v), &v)
        }
        Reply::Raw(b) => json_bytes(StatusCode::OK, b),
        Reply::Accepted => Response::builder()
            .status(StatusCode::ACCEPTED)
            .body(body::full(Bytes::new()))
            .expect("valid response"),
        Reply::Stream(rx) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .header("x-accel-buffering", "no")
            .body(body::sse_traced(rx, std::mem::take(&mut traced)))
            .expect("valid response"),
    };
    body::with_span(resp, traced)
}

/// tasklift's span for one request at the front door, named after its method
/// (and tool, for `tools/call`), with the attributes of OpenTelemetry's MCP
/// conventions; `session` is a 2025-era client's session on tasklift.
pub(crate) fn request_span(
    tracer: &crate::observe::spans::Tracer,
    hop: Option<&crate::observe::spans::Hop>,
    msg: &Request,
    mount: &Mount,
    peer: SocketAddr,
    session: Option<&str>,
) -> crate::observe::spans::Span {
    let tool = (msg.method == tasklift_protocol::mcp::method::TOOLS_CALL)
        .then(|| msg.str_param("name"))
        .flatten();
    let mut s = tracer.server_span(hop, || match tool {
        Some(t) => format!("{} {t}", msg.method),
        None => msg.method.clone(),
    });
    if !s.is_recording() {
        return s;
    }
    s.set("mcp.method.name", msg.method.clone());
    if let Some(id) = &msg.id {
        s.set(
            "jsonrpc.request.id",
            match id {
                Value::String(t) => t.clone(),
                other => other.to_string(),
            },
        );
    }
    if let Some(t) = tool {
        s.set("gen_ai.tool.name", t.to_string());
    }
    if let Some(t) = msg.str_param("taskId") {
        s.set("tasklift.task.id", t.to_string());
    }
    if let Some(sid) = session {
        s.set("mcp.session.id", sid.to_string());
    }
    s.set("tasklift.upstream", mount.cfg.name.clone());
    s.set("client.address", peer.ip().to_string());
    s
}

/// The 403 for a request from an Origin that is not allowed (DNS rebinding).
fn forbidden_origin(
    state: &State,
    headers: &Fields,
    peer: SocketAddr,
) -> Option<Response<RespBody>> {
    if validate::origin_allowed(headers, &state.cfg.allowed_origins) {
        return None;
    }
    tracing::warn!(client.addr = %peer, origin = ?headers.get(header::ORIGIN), "rejected a request from a disallowed Origin");
    Some(Rejected::ForbiddenOrigin.response(None))
}

/// Who is calling (or the 401), and what goes upstream with their calls.
fn context(
    state: &State,
    mount: &Mount,
    headers: &Fields,
    id: Option<&Value>,
) -> Result<CallContext, Box<Response<RespBody>>> {
    let principal = match state.auth.principal(headers) {
        Ok(p) => p,
        Err(e) => return Err(Box::new(Rejected::Unauthorized(e.to_string()).response(id))),
    };
    Ok(CallContext {
        principal,
        authorization: mount
            .cfg
            .forward_authorization
            .then(|| headers.get(header::AUTHORIZATION).cloned())
            .flatten(),
        forward_headers: forwarded_headers(headers),
        session: None,
        trace: None,
    })
}

/// Client headers passed upstream as they are: `Mcp-Param-*` and trace context.
fn forwarded_headers(h: &Fields) -> Vec<(HeaderName, HeaderValue)> {
    h.iter()
        .filter(|(k, _)| {
            let k = k.as_str();
            k.starts_with("mcp-param-") || k == "traceparent" || k == "tracestate" || k == "baggage"
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The `outcome` label of `tasklift_requests_total` for a reply.
fn outcome_of(reply: &Reply) -> &'static str {
    match reply {
        Reply::Json(v) if v.get("error").is_some() => "error",
        Reply::UpstreamError(..) => "error",
        Reply::Json(v) => match v
            .get("result")
            .and_then(|r| r.get("resultType"))
            .and_then(Value::as_str)
        {
            Some("task") => "task",
            Some("input_required") => "input_required",
            _ => "ok",
        },
        Reply::Raw(_) => "ok",
        Reply::Stream(_) => "stream",
        Reply::Accepted => "accepted",
    }
}
