//! Between a legacy session and the modern pipeline: a session's request gains the
//! per-request `_meta` its session implies, and a message going back loses what a
//! legacy client cannot read (and an upstream's HTTP status it would not get from
//! the server); legacy SSE responses.

use http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::super::errors::legacy_upstream_status_of;
use super::session::ClientSession;
use crate::dispatch::Mount;
use crate::reply::StreamItem;
use crate::serving::body::{self, RespBody};
use crate::serving::json_response;
use crate::upstream::{CallContext, Era};
use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp::{self, MODERN_VERSION};

/// The header carrying a legacy session id.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The `_meta` a request in `s` carries through the modern pipeline.
fn session_meta(s: &ClientSession) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(mcp::META_PROTOCOL_VERSION.into(), json!(MODERN_VERSION));
    m.insert(mcp::META_CLIENT_INFO.into(), s.client_info.clone());
    m.insert(
        mcp::META_CLIENT_CAPABILITIES.into(),
        era_capabilities(&s.capabilities),
    );
    // Without logging/setLevel a legacy server may send any log message.
    m.insert(
        "io.modelcontextprotocol/logLevel".into(),
        json!(s.log_level().unwrap_or_else(|| "debug".into())),
    );
    m
}

/// A legacy session's capabilities as the modern pipeline should read them. Under
/// 2025-11-25 a declared `io.modelcontextprotocol/tasks` extension MUST NOT enable
/// tasks (SEP-2663, versioning): such a client cannot read a 2026-07-28 task handle,
/// so it waits for the result like any legacy client (its own `params.task` asks
/// for a task of its era instead).
pub(super) fn era_capabilities(caps: &Value) -> Value {
    let mut caps = caps.clone();
    if let Some(Value::Object(ext)) = caps.get_mut("extensions") {
        ext.remove(mcp::TASKS_EXTENSION);
    }
    caps
}

/// A request from a session, reshaped for the modern pipeline: the session's state
/// becomes per-request `_meta` (the client's own `_meta` keys, like `progressToken`, stay).
pub fn modernize(s: &ClientSession, mut req: Request) -> Request {
    let meta = mcp::meta_mut(&mut req.params);
    for (k, v) in session_meta(s) {
        meta.insert(k, v);
    }
    req
}

/// A message as a legacy client should see it: no `resultType`, no cache hints
/// on the results of list and read methods, and no per-result serverInfo (a
/// 2026-07-28 server puts it in every result's `_meta`; a 2025 client learned it
/// from `initialize`, and the server itself sends it only to 2026 clients).
pub fn legacy_shape(method: &str, mut msg: Value) -> Value {
    if let Some(Value::Object(r)) = msg.get_mut("result") {
        r.remove("resultType");
        if mcp::is_cacheable_method(method) {
            r.remove("ttlMs");
            r.remove("cacheScope");
        }
        if let Some(Value::Object(m)) = r.get_mut("_meta") {
            m.remove(mcp::META_SERVER_INFO);
            if m.is_empty() {
                r.remove("_meta");
            }
        }
    }
    if let Some(Value::Object(p)) = msg.get_mut("params") {
        if let Some(Value::Object(m)) = p.get_mut("_meta") {
            m.remove("io.modelcontextprotocol/subscriptionId");
            if m.is_empty() {
                p.remove("_meta");
            }
        }
    }
    msg
}

/// An upstream's error answer `msg` that came with HTTP `status`, answered to the
/// 2025 client of `ctx`: with that status only when tasklift asked the upstream as
/// a 2025 client, on a 2025 session of the upstream's (`legacy_upstream_status_of`).
pub(super) async fn upstream_error(
    mount: &Mount,
    ctx: &CallContext,
    status: u16,
    msg: &Value,
) -> Response<RespBody> {
    let as_legacy = matches!(mount.upstream.era(ctx).await, Ok(Era::Legacy));
    json_response(legacy_upstream_status_of(status, as_legacy), msg)
}

/// An SSE response.
pub fn sse(rx: mpsc::Receiver<StreamItem>) -> Response<RespBody> {
    sse_response(rx, None)
}

pub(super) fn sse_response(
    rx: mpsc::Receiver<StreamItem>,
    session: Option<&str>,
) -> Response<RespBody> {
    let mut r = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(body::sse(rx))
        .expect("valid response");
    if let Some(id) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        r.headers_mut().insert(SESSION_HEADER, id);
    }
    r
}
