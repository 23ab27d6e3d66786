//! Streamable HTTP upstreams, both eras.
//!
//! - Era: detected once per upstream by a modern `server/discover` probe, as the
//!   spec's backward-compatibility section says (a result or a recognised modern
//!   error means modern; any other 4xx means legacy), then cached.
//! - Modern: every request is one POST with its `_meta` and the mirrored headers.
//! - Legacy: tasklift performs `initialize` itself, keeps the `Mcp-Session-Id`,
//!   re-initialises when the session expires (404), and reads JSON or SSE bodies.
//!   One session per (upstream, principal, forwarded credentials): a legacy server
//!   may bind a session to whoever opened it. Idle sessions are closed with DELETE.
//!
//! This file holds the upstream's state and the `Upstream` impl; each concern is
//! a file of its own: `era.rs` (the probe), `session.rs` (legacy sessions: opening,
//! choosing, closing), `request.rs` (running one request and cancelling it),
//! `response.rs` (reading a response stream, resuming it), `get_stream.rs` (a
//! session's standalone GET stream and its change notifications).

mod clients;
mod connect;
mod era;
mod failure;
mod get_stream;
mod http1;
mod http2;
mod request;
mod response;
mod session;

use crate::headers::Fields;
use clients::{Clients, Head, ResponseBody};
use failure::retry_after;
use http2::Http2Failure;

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::hashing::FastDashMap;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{
    discover_from_initialize, listen_modern, tool_tasks_by_discover, wire_message, CallContext,
    CallEvent, Era, Listening, Upstream, UpstreamCall, UpstreamError, UpstreamFuture,
};
use crate::config::{EraSetting, UpstreamConfig};
use tasklift_protocol::jsonrpc::{self, Outcome, Request};
use tasklift_protocol::mcp::{self, MODERN_VERSION};

/// Largest non-streamed upstream body tasklift reads (error bodies, JSON answers).
const MAX_JSON_BODY: usize = 256 * 1024 * 1024;

/// Longest `retry:` delay honoured before resuming a stream.
const MAX_RESUME_DELAY_MS: u64 = 5_000;

/// Longest `Retry-After` (of a 429 or 503) tasklift waits out before sending a
/// request again; a longer one is passed on to the caller.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// How many times one request is sent again after a 429 or 503 with `Retry-After`.
const MAX_RETRIES: u32 = 2;

use crate::headers::{
    METHOD as METHOD_HEADER, NAME as NAME_HEADER, PROTOCOL_VERSION as VERSION_HEADER,
    SESSION_ID as SESSION_HEADER,
};

/// A Streamable HTTP upstream.
#[derive(Clone)]
pub struct HttpUpstream {
    inner: Arc<Shared>,
}

struct Shared {
    /// Why the last reachability check failed, if it did.
    unreachable: Mutex<Option<String>>,
    /// Configuration (URL, headers, era setting).
    cfg: UpstreamConfig,
    /// The endpoint.
    url: http::Uri,
    /// The clients, one per front-door worker.
    clients: Clients,
    /// The era, once known (configured, or detected once and kept): read
    /// without a lock on every call.
    era: OnceLock<Era>,
    /// Serialises era detection so one probe runs at a time.
    detecting: tokio::sync::Mutex<()>,
    /// Whether a modern upstream also serves 2025 clients, once known (`era_for`).
    legacy_too: OnceLock<bool>,
    /// Legacy sessions by (principal, credentials).
    sessions: FastDashMap<String, Arc<SessionSlot>>,
    /// The session each upstream (2025-11-25) task was created on, by task id.
    task_homes: FastDashMap<String, std::sync::Weak<Session>>,
    /// Reference point for idle times.
    epoch: Instant,
}

/// Holds the sessions for one key. `current` is the caller's main session (lists,
/// notifications, subscriptions, session-wide settings); `extra` are further
/// sessions for calls that may ask the client for input while another such call
/// runs (see `Shared::call_session`). Both are read under plain locks, held for a
/// few instructions and never across an await, so a call on a session that is
/// open never waits for another; `opening` is held while a session is opened (one
/// at a time per key) and while the slot is emptied.
#[derive(Default)]
struct SessionSlot {
    current: Mutex<Option<Arc<Session>>>,
    extra: Mutex<Vec<Arc<Session>>>,
    opening: tokio::sync::Mutex<()>,
}

/// One legacy session.
struct Session {
    /// `Mcp-Session-Id`, if the server assigned one.
    id: Option<HeaderValue>,
    /// The negotiated protocol version.
    version: HeaderValue,
    /// The `initialize` result (capabilities, serverInfo, instructions).
    init: Value,
    /// Whether `init`'s capabilities include `tasks.requests.tools.call`.
    tool_tasks: bool,
    /// Milliseconds since `epoch` of the last use.
    last_used: AtomicU64,
    /// Requests currently using the session (an in-use session is never closed).
    in_flight: AtomicUsize,
    /// The credentials of whoever opened it, for the requests tasklift makes on the
    /// session by itself (answers to the server's requests, the closing DELETE): an
    /// upstream that authenticates every request would refuse them otherwise.
    opener: CallContext,
    /// The calls in flight on this session that may ask the client for input, by
    /// upstream request id. A request on the session's GET stream names no call: it
    /// goes to the only one of these, and is refused when there are several.
    askers: Mutex<Vec<Asking>>,
    /// The session's notifications that belong to no call (list changes, resource
    /// updates), from its GET stream, for `subscriptions/listen` streams.
    changes: tokio::sync::broadcast::Sender<Value>,
    /// Reads the session's GET stream; stopped when the session is dropped.
    get_stream: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(h) = self.get_stream.get_mut().ok().and_then(Option::take) {
            h.abort();
        }
    }
}

/// A call that may ask the client for input, as its session knows it.
struct Asking {
    /// Its upstream request id.
    id: Value,
    /// Where its events go.
    tx: mpsc::Sender<CallEvent>,
    /// For a 2025-11-25 `tasks/result`, the upstream task it waits on: a request
    /// whose `related-task` names that task belongs to this call.
    task: Option<String>,
}

impl HttpUpstream {
    /// Build the clients for an upstream: a connection pool for each of `pools`
    /// front-door workers (`crate::workers`). Fails if a configured CA file is
    /// unreadable.
    pub fn new(cfg: UpstreamConfig, pools: usize) -> Result<Self, UpstreamError> {
        let url = cfg
            .url()
            .cloned()
            .ok_or_else(|| UpstreamError::Unreachable {
                name: cfg.name.clone(),
                message: "not an HTTP upstream".into(),
            })?;
        let clients = Clients::new(&cfg, &url, pools)?;
        let era = match cfg.era {
            EraSetting::Auto => None,
            EraSetting::Modern => Some(Era::Modern),
            EraSetting::Legacy => Some(Era::Legacy),
        };
        Ok(Self {
            inner: Arc::new(Shared {
                unreachable: Mutex::new(None),
                cfg,
                url,
                clients,
                era: era.map(OnceLock::from).unwrap_or_default(),
                detecting: tokio::sync::Mutex::new(()),
                legacy_too: OnceLock::new(),
                sessions: FastDashMap::default(),
                task_homes: FastDashMap::default(),
                epoch: Instant::now(),
            }),
        })
    }
}

/// A response as read: status, headers and the body still streaming.
struct Answer {
    status: StatusCode,
    headers: Fields,
    body: ResponseBody,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The id of a request tasklift sends: unique in the process, so in every
    /// session and on every connection to this upstream.
    fn upstream_id(&self) -> Value {
        json!(crate::sequence::next())
    }

    /// POST a JSON-RPC message with the configured and per-call headers.
    async fn post(
        &self,
        body: impl Into<Bytes>,
        headers: Fields,
        ctx: &CallContext,
    ) -> Result<Answer, UpstreamError> {
        let body = body.into();
        self.send(&Method::POST, Some(&body), &headers, ctx).await
    }

    /// Send one request. A `429` or `503` whose `Retry-After` asks for a wait of at
    /// most [`MAX_RETRY_AFTER`] is sent again after that wait, up to [`MAX_RETRIES`]
    /// times: the server said it did not take the request, so nothing ran twice.
    /// Any other answer, and the last refusal, is the caller's to see.
    ///
    /// A slow call waits here for its answer's headers as long as it runs, so what
    /// it sends is borrowed (a future keeps its arguments, and a moved argument
    /// twice), and each attempt builds its headers anew.
    async fn send(
        &self,
        method: &Method,
        body: Option<&Bytes>,
        extra: &Fields,
        ctx: &CallContext,
    ) -> Result<Answer, UpstreamError> {
        static NO_BODY: Bytes = Bytes::new();
        let mut retries = 0;
        loop {
            let headers = self.request_headers(body.is_some(), extra, ctx);
            let (parts, body_in) = self
                .exchange(method, headers, body.unwrap_or(&NO_BODY))
                .await?;
            match retry_after(parts.status, &parts.headers) {
                Some(wait) if retries < MAX_RETRIES => {
                    retries += 1;
                    tracing::info!(upstream = %self.cfg.name, status = %parts.status,
                        wait_s = wait.as_secs(), attempt = retries,
                        "the upstream asked to retry later; sending the request again");
                    drop(body_in);
                    tokio::time::sleep(wait).await;
                }
                _ => {
                    return Ok(Answer {
                        status: parts.status,
                        headers: parts.headers,
                        body: body_in,
                    })
                }
            }
        }
    }

    /// A request's headers: the content type for a body, the configured headers,
    /// the caller's credentials and forwarded headers, then `extra`.
    fn request_headers(&self, has_body: bool, extra: &Fields, ctx: &CallContext) -> Fields {
        let mut h = Fields::with_capacity(
            2 + self.cfg.headers.len() + ctx.forward_headers.len() + extra.len() + 1,
        );
        if has_body {
            h.append(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            h.append(
                header::ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            );
        }
        for (k, v) in &self.cfg.headers {
            h.insert(k.clone(), v.clone());
        }
        if let Some(a) = &ctx.authorization {
            h.insert(header::AUTHORIZATION, a.clone());
        }
        for (k, v) in &ctx.forward_headers {
            h.append(k.clone(), v.clone());
        }
        for (k, v) in extra.iter() {
            h.insert(k.clone(), v.clone());
        }
        h
    }

    /// One attempt: the request out on this worker's client, the answer's head
    /// and its body still streaming.
    async fn exchange(
        &self,
        method: &Method,
        headers: Fields,
        body: &Bytes,
    ) -> Result<(Head, ResponseBody), UpstreamError> {
        // A slow call waits here as long as it runs, so the requests are built
        // in the calls that take them: no moved-from request keeps room here.
        let worker = crate::workers::current();
        match &self.clients {
            Clients::Http1(pools) => {
                let pool = &pools[worker % pools.len()];
                let (parts, body) = pool
                    .send(method, &headers, body)
                    .await
                    .map_err(|e| self.http1_failed(e))?;
                Ok((parts, ResponseBody::Http1(body)))
            }
            Clients::Http2(pools) => {
                let headers = http2::without_connection_headers(headers.into_map());
                // Boxed: sending (and, rarely, connecting) is brief; the wait for
                // the answer then holds h2's response future alone.
                let pool = &pools[worker % pools.len()];
                let response = Box::pin(pool.send(self.request(method, headers, ()), body.clone()))
                    .await
                    .map_err(|e| self.http2_failed(&e))?;
                let resp = response
                    .await
                    .map_err(|e| self.http2_failed(&Http2Failure::Stream(e)))?;
                let (parts, body) = resp.into_parts();
                Ok((Head::from(parts), ResponseBody::Http2(body)))
            }
        }
    }

    /// A request to the upstream's URL.
    fn request<B>(&self, method: &Method, headers: HeaderMap, body: B) -> http::Request<B> {
        let mut req = http::Request::new(body);
        *req.method_mut() = method.clone();
        *req.uri_mut() = self.url.clone();
        *req.headers_mut() = headers;
        req
    }

    /// Read a whole (non-streamed) body, bounded.
    async fn read_all(&self, body: ResponseBody) -> Result<Bytes, UpstreamError> {
        let limited = http_body_util::Limited::new(body, MAX_JSON_BODY);
        limited.collect().await.map(|c| c.to_bytes()).map_err(|e| {
            let name = self.cfg.name.clone();
            match e.is::<http_body_util::LengthLimitError>() {
                true => UpstreamError::BadResponse {
                    name,
                    status: 200,
                    message: format!("a response body larger than {MAX_JSON_BODY} bytes"),
                },
                false => UpstreamError::BrokeOff {
                    name,
                    message: super::chain(&*e),
                },
            }
        })
    }

    /// A responder that POSTs the answer to a server-to-client request on the session.
    fn responder(
        self: &Arc<Self>,
        headers: Fields,
        ctx: CallContext,
        id: Value,
    ) -> Box<dyn FnOnce(Outcome) + Send> {
        let me = self.clone();
        Box::new(move |outcome| {
            tokio::spawn(async move {
                let body = serde_json::to_vec(&jsonrpc::response(Some(&id), &outcome))
                    .expect("serializes");
                match me.post(body, headers, &ctx).await {
                    Ok(ans) => {
                        let _ = me.read_all(ans.body).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not deliver an answer to the upstream's request")
                    }
                }
            });
        })
    }
}

impl Session {
    fn headers(&self) -> Fields {
        let mut h = Fields::with_capacity(4);
        if let Some(id) = &self.id {
            h.append(SESSION_HEADER.clone(), id.clone());
        }
        h.append(VERSION_HEADER.clone(), self.version.clone());
        h
    }
}

/// Headers mirrored from a modern request's body. Sized to fit: a slow call keeps
/// them (for a retry) as long as it runs.
fn modern_headers(req: &Request) -> Fields {
    let mut h = Fields::with_capacity(3);
    let version = req
        .meta_str(mcp::META_PROTOCOL_VERSION)
        .unwrap_or(MODERN_VERSION);
    if let Some(v) = header_value(version, &[MODERN_VERSION]) {
        h.append(VERSION_HEADER.clone(), v);
    }
    let methods = [
        mcp::method::TOOLS_CALL,
        mcp::method::DISCOVER,
        mcp::method::TASKS_GET,
        mcp::method::TASKS_UPDATE,
        mcp::method::TASKS_CANCEL,
    ];
    if let Some(v) = header_value(&req.method, &methods) {
        h.append(METHOD_HEADER.clone(), v);
    }
    if let Some(name) = mcp::name_param(&req.method).and_then(|p| req.str_param(p)) {
        if let Ok(v) = HeaderValue::try_from(mcp::encode_header_value(name)) {
            h.append(NAME_HEADER.clone(), v);
        }
    }
    h.fitted()
}

/// `text` as a header value: one of `known` without allocating (most requests
/// carry one of them), any other copied and checked.
fn header_value(text: &str, known: &[&'static str]) -> Option<HeaderValue> {
    match known.iter().find(|k| **k == text) {
        Some(k) => Some(HeaderValue::from_static(k)),
        None => HeaderValue::from_str(text).ok(),
    }
}

impl Upstream for HttpUpstream {
    fn listen<'a>(
        &'a self,
        filter: &'a serde_json::Map<String, Value>,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Listening> {
        Box::pin(async move {
            match self.inner.era_for(ctx).await? {
                Era::Modern => listen_modern(self, filter, req, ctx).await,
                Era::Legacy => self.inner.listen_legacy(filter, ctx).await,
            }
        })
    }

    fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    fn era<'a>(&'a self, ctx: &'a CallContext) -> UpstreamFuture<'a, Era> {
        // Known (every call after the first): a ready future, not the detection's,
        // which is large and was copied into its box on every `tools/call`.
        match self.inner.known_era_for(ctx) {
            Some(era) => Box::pin(std::future::ready(Ok(era))),
            None => Box::pin(self.inner.era_for(ctx)),
        }
    }

    fn known_era(&self) -> Option<Era> {
        self.inner.era.get().cloned()
    }

    fn call<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, UpstreamCall> {
        Box::pin(async move { Ok(self.inner.start(req, ctx)) })
    }

    fn notify<'a>(&'a self, req: &'a Request, ctx: &'a CallContext) -> UpstreamFuture<'a, ()> {
        Box::pin(async move {
            let inner = &self.inner;
            let (body, headers) = match inner.era_for(ctx).await? {
                Era::Modern => (wire_message(req, &Era::Modern, None), modern_headers(req)),
                Era::Legacy => {
                    let s = inner.session(ctx, None).await?;
                    (wire_message(req, &Era::Legacy, None), s.headers())
                }
            };
            let ans = inner
                .post(serde_json::to_vec(&body).expect("serializes"), headers, ctx)
                .await?;
            let _ = inner.read_all(ans.body).await;
            Ok(())
        })
    }

    fn discover<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Outcome> {
        Box::pin(async move {
            let inner = &self.inner;
            match inner.era_for(ctx).await? {
                Era::Modern => Ok(self.call(req, ctx).await?.outcome(&inner.cfg.name).await),
                Era::Legacy => {
                    let s = inner.session(ctx, None).await?;
                    Ok(Ok(discover_from_initialize(&s.init)))
                }
            }
        })
    }

    fn offers_tool_tasks<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> super::Plain<'a, bool> {
        // Every call to a legacy upstream asks; once the era is known and the
        // caller's session open, the answer is at hand, without the detection's
        // and the session's futures (large, and copied into their box).
        if self.inner.known_era_for(ctx) == Some(Era::Legacy) {
            if let Some(s) = self.inner.open_session(ctx) {
                return Box::pin(std::future::ready(s.tool_tasks));
            }
        }
        Box::pin(async move {
            let inner = &self.inner;
            match inner.era_for(ctx).await {
                // Read from the caller's session, as it was initialized: no
                // discover result is built for it.
                Ok(Era::Legacy) => inner.session(ctx, None).await.is_ok_and(|s| s.tool_tasks),
                Ok(Era::Modern) => tool_tasks_by_discover(self, req, ctx).await,
                Err(_) => false,
            }
        })
    }

    fn legacy_initialize<'a>(&'a self, ctx: &'a CallContext) -> UpstreamFuture<'a, Option<Value>> {
        Box::pin(self.inner.legacy_initialize(ctx))
    }

    fn session_per_client(&self) -> bool {
        true
    }

    fn check_health<'a>(&'a self) -> super::Plain<'a, ()> {
        Box::pin(async move {
            let inner = &self.inner;
            let host = inner
                .url
                .host()
                .unwrap_or("localhost")
                .trim_matches(['[', ']']);
            let port = inner
                .url
                .port_u16()
                .unwrap_or(if inner.url.scheme_str() == Some("https") {
                    443
                } else {
                    80
                });
            let connect = tokio::net::TcpStream::connect((host, port));
            let verdict = match tokio::time::timeout(inner.cfg.connect_timeout, connect).await {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(format!("upstream {} is unreachable: {e}", inner.cfg.name)),
                Err(_) => Some(format!(
                    "upstream {} is unreachable: no connection within {:?}",
                    inner.cfg.name, inner.cfg.connect_timeout
                )),
            };
            *inner.unreachable.lock().expect("health lock") = verdict;
        })
    }

    fn health(&self) -> Result<(), String> {
        match self.inner.unreachable.lock().expect("health lock").clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn end_session<'a>(&'a self, ctx: &'a CallContext) -> super::Plain<'a, ()> {
        Box::pin(self.inner.end_session(ctx))
    }

    fn close_idle<'a>(&'a self, all: bool) -> super::Plain<'a, ()> {
        Box::pin(self.inner.close_idle(all))
    }
}
