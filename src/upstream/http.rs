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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::router::{self, Channel, Route};
use super::upstream_task_of;
use super::{
    agreed_by_capabilities, broken, cancelled_notification, discover_from_initialize,
    listen_modern, modern_meta, wire_message, CallContext, CallEvent, Canceller, Era, Listening,
    Upstream, UpstreamCall, UpstreamError, UpstreamFuture,
};
use crate::config::{EraSetting, UpstreamConfig};
use tasklift_protocol::jsonrpc::{self, Incoming as Msg, Outcome, Request, RpcError};
use tasklift_protocol::mcp::{self, LEGACY_VERSIONS, MODERN_VERSION};
use tasklift_protocol::sse::SseParser;

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Largest non-streamed upstream body tasklift reads (error bodies, JSON answers).
const MAX_JSON_BODY: usize = 256 * 1024 * 1024;

/// How many times one response stream is resumed after the server closed it.
const MAX_RESUMES: u32 = 20;
/// Longest `retry:` delay honoured before resuming a stream.
const MAX_RESUME_DELAY_MS: u64 = 5_000;

/// `Mcp-Session-Id`.
static SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
static VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Method`.
static METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`.
static NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");

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
    /// Pooled HTTP/1 client (http and https).
    client: HttpClient,
    /// Cached era, once known.
    era: RwLock<Option<Era>>,
    /// Serialises era detection so one probe runs at a time.
    detecting: tokio::sync::Mutex<()>,
    /// Legacy sessions by (principal, credentials).
    sessions: DashMap<String, Arc<SessionSlot>>,
    /// The session each upstream (2025-11-25) task was created on, by task id.
    task_homes: DashMap<String, std::sync::Weak<Session>>,
    /// Upstream-side request ids.
    next_id: AtomicU64,
    /// Reference point for idle times.
    epoch: Instant,
}

/// Holds the sessions for one key. `current` is the caller's main session (lists,
/// notifications, subscriptions, session-wide settings); its mutex is held while
/// (re)opening it. `extra` are further sessions for calls that may ask the client
/// for input while another such call runs (see `Shared::call_session`).
#[derive(Default)]
struct SessionSlot {
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
    extra: tokio::sync::Mutex<Vec<Arc<Session>>>,
}

/// One legacy session.
struct Session {
    /// `Mcp-Session-Id`, if the server assigned one.
    id: Option<HeaderValue>,
    /// The negotiated protocol version.
    version: HeaderValue,
    /// The `initialize` result (capabilities, serverInfo, instructions).
    init: Value,
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

/// A call registered among its session's `askers`; unregisters on drop.
struct Asker {
    session: Arc<Session>,
    id: Value,
}

impl Drop for Asker {
    fn drop(&mut self) {
        self.session
            .askers
            .lock()
            .expect("askers lock")
            .retain(|a| a.id != self.id);
    }
}

impl HttpUpstream {
    /// Build the client for an upstream. Fails if a configured CA file is unreadable.
    pub fn new(cfg: UpstreamConfig) -> Result<Self, UpstreamError> {
        let url = cfg
            .url()
            .cloned()
            .ok_or_else(|| UpstreamError::Unreachable {
                name: cfg.name.clone(),
                message: "not an HTTP upstream".into(),
            })?;
        let client = build_client(&cfg)?;
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
                client,
                era: RwLock::new(era),
                detecting: tokio::sync::Mutex::new(()),
                sessions: DashMap::new(),
                task_homes: DashMap::new(),
                next_id: AtomicU64::new(1),
                epoch: Instant::now(),
            }),
        })
    }
}

fn build_client(cfg: &UpstreamConfig) -> Result<HttpClient, UpstreamError> {
    let tls = crate::tls::client_config(true, cfg.ca_file.as_deref()).map_err(|message| {
        UpstreamError::Unreachable {
            name: cfg.name.clone(),
            message,
        }
    })?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(cfg.connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(https))
}

/// A response as read: status, headers and the body still streaming.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Incoming,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> UpstreamError {
        UpstreamError::Unreachable {
            name: self.cfg.name.clone(),
            message: e.to_string(),
        }
    }

    fn upstream_id(&self) -> Value {
        json!(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// POST a JSON-RPC message with the configured and per-call headers.
    async fn post(
        &self,
        body: Vec<u8>,
        headers: HeaderMap,
        ctx: &CallContext,
    ) -> Result<Answer, UpstreamError> {
        self.send(Method::POST, Some(body), headers, ctx).await
    }

    async fn send(
        &self,
        method: Method,
        body: Option<Vec<u8>>,
        extra: HeaderMap,
        ctx: &CallContext,
    ) -> Result<Answer, UpstreamError> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(self.url.clone());
        let h = req.headers_mut().expect("builder is valid");
        if body.is_some() {
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            h.insert(
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
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.unreachable(e))?;
        let resp = self.client.request(req).await.map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            self.unreachable(msg)
        })?;
        let (parts, body) = resp.into_parts();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// Read a whole (non-streamed) body, bounded.
    async fn read_all(&self, body: Incoming) -> Result<Bytes, UpstreamError> {
        let limited = http_body_util::Limited::new(body, MAX_JSON_BODY);
        limited
            .collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(|e| self.unreachable(format!("reading the response: {e}")))
    }

    /// Read the single response to `id` from a JSON or SSE answer, ignoring notifications.
    async fn read_response(
        self: &Arc<Self>,
        ans: Answer,
        id: &Value,
    ) -> Result<Outcome, UpstreamError> {
        let (tx, mut rx) = mpsc::channel(16);
        self.pump(ans, id.clone(), tx, None).await;
        while let Some(ev) = rx.recv().await {
            if let CallEvent::Done(o) = ev {
                return Ok(o);
            }
        }
        Err(UpstreamError::BadResponse {
            name: self.cfg.name.clone(),
            status: 200,
            message: "no JSON-RPC response in the body".into(),
        })
    }

    /// Turn an answer into events on `tx`: notifications, then `Done`. Server-initiated
    /// requests on a legacy stream are answered so the upstream is not left waiting.
    async fn pump(
        self: &Arc<Self>,
        ans: Answer,
        id: Value,
        tx: mpsc::Sender<CallEvent>,
        session: Option<&Session>,
    ) {
        let name = &self.cfg.name;
        let is_sse = ans
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if !ans.status.is_success() {
            let status = ans.status;
            let body = self.read_all(ans.body).await.unwrap_or_default();
            let outcome = match serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(Msg::classify)
            {
                Some(Msg::Response {
                    outcome: Err(e), ..
                }) => Err(e),
                _ => Err(RpcError::new(
                    jsonrpc::UPSTREAM_ERROR,
                    format!(
                        "upstream {name} answered HTTP {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
                    ),
                )),
            };
            let _ = tx.send(CallEvent::Done(outcome)).await;
            return;
        }
        if !is_sse {
            let body = match self.read_all(ans.body).await {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                    return;
                }
            };
            let outcome = match serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(Msg::classify)
            {
                Some(Msg::Response { outcome, .. }) => outcome,
                _ => Err(RpcError::new(
                    jsonrpc::UPSTREAM_ERROR,
                    format!("upstream {name} answered with a body that is not a JSON-RPC response"),
                )),
            };
            let _ = tx.send(CallEvent::Done(outcome)).await;
            return;
        }
        let stream = OwnStream {
            shared: self,
            id: &id,
            tx: &tx,
            session,
        };
        let mut parser = SseParser::default();
        let mut body = ans.body;
        let mut resumes = 0;
        loop {
            let (events, ended) = match body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => (parser.feed(&data), false),
                    Err(_) => continue,
                },
                Some(Err(e)) => {
                    tracing::warn!(upstream = %name, error = %e, "upstream stream broke");
                    (Vec::new(), true)
                }
                None => (parser.finish().into_iter().collect(), true),
            };
            if events.iter().any(|d| !d.trim().is_empty()) {
                resumes = 0; // the server is making progress
            }
            for data in events {
                // A priming event (an id, no data) only sets the resumption point.
                if data.trim().is_empty() {
                    continue;
                }
                let Some(msg) = router::parse(&data) else {
                    tracing::warn!(upstream = %name, "skipping an SSE event that is not JSON-RPC");
                    continue;
                };
                match router::route(&stream, msg, name) {
                    Route::Call(to, ev) => {
                        let done = matches!(ev, CallEvent::Done(_));
                        let _ = to.send(ev).await;
                        if done {
                            return;
                        }
                    }
                    Route::Stray => {
                        tracing::warn!(upstream = %name, "response for another request on this stream; ignored")
                    }
                    Route::Forbidden(method) => tracing::warn!(upstream = %name, %method,
                        "a modern upstream sent a request on a response stream, which 2026-07-28 forbids; ignored"),
                    // Everything on a call's own stream is that call's.
                    Route::Unrelated(_) | Route::Ping(_) | Route::Refused => {}
                }
            }
            if ended {
                // A legacy server may close a response stream mid-call and expect the
                // client to resume it with `Last-Event-ID` on a GET (2025-11-25 SSE polling).
                match (session, parser.last_event_id.clone()) {
                    (Some(s), Some(last)) if resumes < MAX_RESUMES => {
                        resumes += 1;
                        let delay = parser.retry_ms.unwrap_or(0).min(MAX_RESUME_DELAY_MS);
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        match self.resume_stream(s, &last).await {
                            Some(b) => {
                                tracing::debug!(upstream = %name, last_event_id = %last, "resumed the upstream's response stream");
                                body = b;
                                let retry = parser.retry_ms;
                                parser = SseParser::default();
                                parser.last_event_id = Some(last);
                                parser.retry_ms = retry;
                                continue;
                            }
                            None => break,
                        }
                    }
                    _ => break,
                }
            }
        }
        let _ = tx.send(CallEvent::Done(Err(broken(name)))).await;
    }

    /// `pump` for a request that starts or ends an upstream task: a
    /// `CreateTaskResult` makes this session the task's home for this caller
    /// (`caller`: its session key), where its `tasks/*` requests must go; the
    /// answer to a `tasks/result` or `tasks/cancel` (`finishes`: the home's key)
    /// ends that, unless tasklift could not get one (it will ask again).
    async fn pump_task_call(
        self: &Arc<Self>,
        ans: Answer,
        id: Value,
        tx: mpsc::Sender<CallEvent>,
        session: &Arc<Session>,
        (caller, finishes): (&str, Option<String>),
    ) {
        let (itx, mut irx) = mpsc::channel(16);
        let forward = async {
            while let Some(ev) = irx.recv().await {
                if let CallEvent::Done(outcome) = &ev {
                    if let Some(t) = outcome
                        .as_ref()
                        .ok()
                        .and_then(|r| r.pointer("/task/taskId"))
                        .and_then(Value::as_str)
                    {
                        self.task_homes
                            .insert(format!("{caller}\n{t}"), Arc::downgrade(session));
                    }
                    let answered = outcome
                        .as_ref()
                        .map_or_else(|e| e.code != jsonrpc::UPSTREAM_ERROR, |_| true);
                    if let Some(k) = finishes.as_ref().filter(|_| answered) {
                        self.task_homes.remove(k);
                    }
                }
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        };
        tokio::join!(self.pump(ans, id, itx, Some(session)), forward);
    }

    /// Reopen a legacy response stream after `last` with a GET carrying `Last-Event-ID`.
    async fn resume_stream(self: &Arc<Self>, s: &Session, last: &str) -> Option<Incoming> {
        let mut h = s.headers();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(
            HeaderName::from_static("last-event-id"),
            HeaderValue::from_str(last).ok()?,
        );
        match self.send(Method::GET, None, h, &s.opener).await {
            Ok(ans) if ans.status.is_success() => Some(ans.body),
            Ok(ans) => {
                tracing::warn!(upstream = %self.cfg.name, status = %ans.status, "the upstream refused to resume a response stream");
                None
            }
            Err(e) => {
                tracing::warn!(upstream = %self.cfg.name, error = %e, "could not resume a response stream");
                None
            }
        }
    }

    /// A responder that POSTs the answer to a server-to-client request on the session.
    fn responder(
        self: &Arc<Self>,
        headers: HeaderMap,
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

    /// A legacy session's change notifications: `resources/subscribe` for the URIs,
    /// then the session's GET stream.
    async fn listen_legacy(
        self: &Arc<Self>,
        filter: &serde_json::Map<String, Value>,
        ctx: &CallContext,
    ) -> Result<Listening, UpstreamError> {
        let s = self.session(ctx, None).await?;
        let caps = s.init.get("capabilities").cloned().unwrap_or_default();
        let agreed = agreed_by_capabilities(&caps, filter);
        if agreed.is_empty() {
            return Ok(Listening::none());
        }
        let uris = agreed
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for uri in uris {
            let id = self.upstream_id();
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe", "params": {"uri": uri}});
            let ans = self
                .post(
                    serde_json::to_vec(&msg).expect("serializes"),
                    s.headers(),
                    ctx,
                )
                .await?;
            if let Ok(Err(e)) = self.read_response(ans, &id).await {
                tracing::warn!(upstream = %self.cfg.name, %uri, error = %e, "resources/subscribe failed");
            }
        }
        if s.id.is_none() {
            tracing::info!(upstream = %self.cfg.name, "the legacy upstream keeps no sessions, so it has no GET stream; no change notifications");
            return Ok(Listening::none());
        }
        // The session's one GET stream (opened with the session) carries them; a
        // second GET would be refused by servers that allow one per session.
        let mut changes = s.changes.subscribe();
        let (tx, rx) = mpsc::channel(64);
        let session = s.clone();
        session.in_flight.fetch_add(1, Ordering::Relaxed);
        let task = tokio::spawn(async move {
            let _busy = InFlight(&session);
            loop {
                match changes.recv().await {
                    Ok(n) => {
                        if tx.send(n).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(
                            skipped = n,
                            "a listener fell behind the upstream's change notifications"
                        );
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Listening {
            agreed,
            events: rx,
            canceller: Canceller::new(task.abort_handle(), None),
        })
    }

    /// Open `s`'s standalone GET stream and read it for as long as the session
    /// lives: requests to the client go to the call they belong to ([`SessionStream`]),
    /// other messages to the session's listeners. A stream the server ends is
    /// reopened (with `Last-Event-ID`); a server without one (405) is left alone.
    ///
    /// Resolves once the first GET has been answered (or could not be), so that a
    /// call sent on a new session finds the stream open: servers drop a request
    /// with no related request id when no GET stream is there to carry it.
    async fn open_get_stream(self: &Arc<Self>, s: &Arc<Session>) {
        if s.id.is_none() {
            return; // no session, no standalone stream
        }
        let me = self.clone();
        let weak = Arc::downgrade(s);
        let (opened, is_open) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let name = me.cfg.name.clone();
            let mut opened = Some(opened);
            let mut last: Option<String> = None;
            let mut retry_ms: Option<u64> = None;
            let mut failures = 0u32;
            loop {
                let Some(sess) = weak.upgrade() else { return };
                let mut h = sess.headers();
                h.insert(
                    header::ACCEPT,
                    HeaderValue::from_static("text/event-stream"),
                );
                if let Some(v) = last.as_deref().and_then(|l| HeaderValue::from_str(l).ok()) {
                    h.insert(HeaderName::from_static("last-event-id"), v);
                }
                let opener = sess.opener.clone();
                drop(sess);
                let sent = me.send(Method::GET, None, h, &opener).await;
                if let Some(o) = opened.take() {
                    let _ = o.send(());
                }
                let ans = match sent {
                    Ok(a) if a.status.is_success() => a,
                    // Gone (404), never offered (405), or refused (4xx): the
                    // session has no GET stream; nothing to retry.
                    Ok(a)
                        if a.status.is_client_error()
                            && a.status != StatusCode::CONFLICT
                            && a.status != StatusCode::TOO_MANY_REQUESTS =>
                    {
                        tracing::debug!(upstream = %name, status = %a.status, "the legacy upstream offers no GET stream on this session");
                        return;
                    }
                    Ok(a) => {
                        tracing::debug!(upstream = %name, status = %a.status, "the session's GET stream was refused for now; retrying");
                        failures += 1;
                        tokio::time::sleep(get_backoff(retry_ms, failures)).await;
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(upstream = %name, error = %e, "could not open the session's GET stream; retrying");
                        failures += 1;
                        tokio::time::sleep(get_backoff(retry_ms, failures)).await;
                        continue;
                    }
                };
                let mut parser = SseParser::default();
                parser.last_event_id = last.clone();
                let mut body = ans.body;
                let mut got_data = false;
                while let Some(Ok(frame)) = body.frame().await {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    got_data = true;
                    for ev in parser.feed(&data) {
                        let Some(msg) = router::parse(&ev) else {
                            continue;
                        };
                        let Some(sess) = weak.upgrade() else { return };
                        let stream = SessionStream {
                            shared: &me,
                            session: &sess,
                        };
                        match router::route(&stream, msg, &name) {
                            Route::Call(to, ev) => {
                                if let Err(e) = to.send(ev).await {
                                    drop(e); // the call just ended: dropping a request answers it
                                }
                            }
                            Route::Unrelated(message) => {
                                let _ = sess.changes.send(message);
                            }
                            Route::Ping(id) => {
                                if let Some(answer) = stream.responder(&id) {
                                    answer(Ok(json!({})));
                                }
                            }
                            Route::Stray | Route::Refused | Route::Forbidden(_) => {}
                        }
                    }
                }
                // The server ended it (idle timeouts, SSE polling): reopen where it
                // left off, after the `retry` it asked for.
                last = parser.last_event_id.clone();
                retry_ms = parser.retry_ms.or(retry_ms);
                if got_data {
                    failures = 0; // it was serving: a plain reopen
                }
                failures += 1;
                tokio::time::sleep(get_backoff(retry_ms, failures)).await;
            }
        });
        *s.get_stream.lock().expect("get stream lock") = Some(task.abort_handle());
        let _ = tokio::time::timeout(self.cfg.connect_timeout, is_open).await;
    }

    /// End a session upstream (DELETE), if the server gave it an id.
    async fn close(&self, s: &Session) {
        if let Some(h) = s.get_stream.lock().expect("get stream lock").take() {
            h.abort();
        }
        if s.id.is_some() {
            if let Ok(ans) = self
                .send(Method::DELETE, None, s.headers(), &s.opener)
                .await
            {
                let _ = self.read_all(ans.body).await;
            }
        }
    }

    /// Detect and cache the era.
    async fn era(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        if let Some(e) = self.era.read().expect("era lock").clone() {
            return Ok(e);
        }
        let _guard = self.detecting.lock().await;
        if let Some(e) = self.era.read().expect("era lock").clone() {
            return Ok(e);
        }
        let era = self.probe(ctx).await?;
        tracing::info!(upstream = %self.cfg.name, era = ?era, "detected upstream era");
        *self.era.write().expect("era lock") = Some(era.clone());
        Ok(era)
    }

    async fn probe(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        let id = self.upstream_id();
        let msg = json!({
            "jsonrpc": "2.0", "id": id, "method": mcp::method::DISCOVER,
            "params": {"_meta": modern_meta()},
        });
        let mut h = HeaderMap::new();
        h.insert(
            VERSION_HEADER.clone(),
            HeaderValue::from_static(MODERN_VERSION),
        );
        h.insert(
            METHOD_HEADER.clone(),
            HeaderValue::from_static(mcp::method::DISCOVER),
        );
        let ans = self
            .post(serde_json::to_vec(&msg).expect("serializes"), h, ctx)
            .await?;
        let status = ans.status;
        // Authentication, rate limits and timeouts say nothing about the era: report
        // them and probe again on the next request instead of caching "legacy".
        let not_an_era_signal = matches!(
            status,
            StatusCode::UNAUTHORIZED
                | StatusCode::FORBIDDEN
                | StatusCode::PROXY_AUTHENTICATION_REQUIRED
                | StatusCode::REQUEST_TIMEOUT
                | StatusCode::TOO_MANY_REQUESTS
        );
        if status.is_server_error() || not_an_era_signal {
            return Err(UpstreamError::BadResponse {
                name: self.cfg.name.clone(),
                status: status.as_u16(),
                message: "while detecting the protocol era".into(),
            });
        }
        if status.is_client_error() {
            let body = self.read_all(ans.body).await.unwrap_or_default();
            return Ok(
                match serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(Msg::classify)
                {
                    Some(Msg::Response {
                        outcome: Err(e), ..
                    }) if mcp::is_modern_error_code(e.code) => Era::Modern,
                    _ => Era::Legacy,
                },
            );
        }
        Ok(match self.read_response(ans, &id).await {
            Ok(Ok(r)) if r.get("supportedVersions").is_some() => Era::Modern,
            Ok(Err(e)) if mcp::is_modern_error_code(e.code) => Era::Modern,
            _ => Era::Legacy,
        })
    }

    fn session_key(&self, ctx: &CallContext) -> String {
        let mut h = Sha256::new();
        h.update(ctx.principal.as_bytes());
        h.update([0]);
        match &ctx.session {
            // A legacy client gets an upstream session of its own, like it would
            // have without tasklift in between (its credentials may be refreshed).
            Some(s) => h.update(s.id.as_bytes()),
            None => {
                if let Some(a) = &ctx.authorization {
                    h.update(a.as_bytes());
                }
            }
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The caller's session, opened if needed; `stale` is a session that just failed
    /// with 404 and must be replaced.
    async fn session(
        self: &Arc<Self>,
        ctx: &CallContext,
        stale: Option<&Arc<Session>>,
    ) -> Result<Arc<Session>, UpstreamError> {
        let key = self.session_key(ctx);
        loop {
            let slot = self.slot(ctx);
            let mut cur = slot.current.lock().await;
            // `close_idle` may have emptied this slot and dropped it from the map
            // while we waited: a session opened in it would never be closed.
            if !self
                .sessions
                .get(&key)
                .is_some_and(|e| Arc::ptr_eq(e.value(), &slot))
            {
                continue;
            }
            if let Some(s) = cur.as_ref() {
                if stale.is_none_or(|st| !Arc::ptr_eq(st, s)) {
                    s.last_used.store(self.now_ms(), Ordering::Relaxed);
                    return Ok(s.clone());
                }
                tracing::info!(upstream = %self.cfg.name, "legacy session expired; initializing a new one");
            }
            let s = self.open(ctx).await?;
            *cur = Some(s.clone());
            return Ok(s);
        }
    }

    /// A new session, its GET stream open before any call needs it.
    async fn open(self: &Arc<Self>, ctx: &CallContext) -> Result<Arc<Session>, UpstreamError> {
        let s = Arc::new(self.initialize(ctx).await?);
        self.open_get_stream(&s).await;
        Ok(s)
    }

    /// The session a request runs on, and, for a request that may ask the client for
    /// input, its registration among the session's askers (made before the request
    /// is sent, so a question on the GET stream finds it). Such a request gets a
    /// session with no other asker, opening one (up to `sessions_per_caller`) when
    /// the caller's are all busy; past that it shares the least busy one, and
    /// questions there are refused rather than guessed.
    async fn call_session(
        self: &Arc<Self>,
        ctx: &CallContext,
        stale: Option<&Arc<Session>>,
        asks: Option<(&Value, &mpsc::Sender<CallEvent>)>,
        task: Option<&str>,
    ) -> Result<(Arc<Session>, Option<Asker>), UpstreamError> {
        let register = |s: &Arc<Session>, (id, tx): (&Value, &mpsc::Sender<CallEvent>)| {
            s.askers.lock().expect("askers lock").push(Asking {
                id: id.clone(),
                tx: tx.clone(),
                task: task.map(str::to_string),
            });
            Asker {
                session: s.clone(),
                id: id.clone(),
            }
        };
        // A request about an upstream task goes to the session that created it: the
        // server keeps its tasks per session.
        let home_key = task.map(|t| format!("{}\n{t}", self.session_key(ctx)));
        if let Some(home) = home_key
            .as_ref()
            .and_then(|k| self.task_homes.get(k).and_then(|w| w.upgrade()))
            .filter(|h| stale.is_none_or(|st| !Arc::ptr_eq(st, h)))
        {
            home.last_used.store(self.now_ms(), Ordering::Relaxed);
            let asker = asks.map(|a| register(&home, a));
            return Ok((home, asker));
        }
        let main = self.session(ctx, stale).await?;
        let Some(asks) = asks else {
            return Ok((main, None));
        };
        let claim = |s: &Arc<Session>| register(s, asks);
        // A server without sessions answers every request on its own stream: its
        // questions always name their call.
        if main.id.is_none() {
            return Ok((main.clone(), Some(claim(&main))));
        }
        let slot = self.slot(ctx);
        let mut extra = slot.extra.lock().await;
        if let Some(st) = stale {
            extra.retain(|s| !Arc::ptr_eq(s, st));
        }
        let plain = |s: &Arc<Session>| {
            s.askers
                .lock()
                .expect("askers lock")
                .iter()
                .filter(|a| a.task.is_none())
                .count()
        };
        let idle = |s: &Arc<Session>| plain(s) == 0;
        let chosen = match std::iter::once(&main).chain(extra.iter()).find(|s| idle(s)) {
            Some(s) => s.clone(),
            None if extra.len() + 1 < self.cfg.sessions_per_caller => {
                let s = self.open(ctx).await?;
                tracing::debug!(upstream = %self.cfg.name, sessions = extra.len() + 2,
                    "opened another session for a caller whose calls may ask for input");
                extra.push(s.clone());
                s
            }
            None => std::iter::once(&main)
                .chain(extra.iter())
                .min_by_key(|s| plain(s))
                .cloned()
                .expect("the main session is there"),
        };
        chosen.last_used.store(self.now_ms(), Ordering::Relaxed);
        Ok((chosen.clone(), Some(claim(&chosen))))
    }

    /// The caller's slot of sessions.
    fn slot(&self, ctx: &CallContext) -> Arc<SessionSlot> {
        self.sessions
            .entry(self.session_key(ctx))
            .or_insert_with(|| Arc::new(SessionSlot::default()))
            .clone()
    }

    async fn initialize(self: &Arc<Self>, ctx: &CallContext) -> Result<Session, UpstreamError> {
        let fail = |m: String| UpstreamError::Handshake {
            name: self.cfg.name.clone(),
            message: m,
        };
        let id = self.upstream_id();
        // For a legacy client's own session: its version, capabilities and name.
        let (version, caps, info) = match &ctx.session {
            Some(s) if LEGACY_VERSIONS.contains(&s.protocol_version.as_str()) => (
                s.protocol_version.as_str(),
                s.capabilities.clone(),
                s.client_info.clone(),
            ),
            // Modern callers: offer what tasklift bridges; each request's own
            // capabilities decide what its caller is actually asked.
            _ => (
                LEGACY_VERSIONS[0],
                json!({"elicitation": {}, "sampling": {}, "roots": {}}),
                json!({"name": "tasklift", "version": env!("CARGO_PKG_VERSION")}),
            ),
        };
        let msg = json!({
            "jsonrpc": "2.0", "id": id, "method": mcp::method::INITIALIZE,
            "params": {"protocolVersion": version, "capabilities": caps, "clientInfo": info},
        });
        let ans = self
            .post(
                serde_json::to_vec(&msg).expect("serializes"),
                HeaderMap::new(),
                ctx,
            )
            .await?;
        let sid = ans.headers.get(&SESSION_HEADER).cloned();
        let init = match self.read_response(ans, &id).await? {
            Ok(r) => r,
            Err(e) => return Err(fail(e.to_string())),
        };
        let version = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !LEGACY_VERSIONS.contains(&version.as_str()) {
            return Err(fail(format!(
                "the server chose protocol version {version:?}; tasklift speaks {} to legacy servers",
                LEGACY_VERSIONS.join(", ")
            )));
        }
        let session = Session {
            id: sid,
            version: HeaderValue::from_str(&version).expect("known versions are header-safe"),
            init,
            last_used: AtomicU64::new(self.now_ms()),
            in_flight: AtomicUsize::new(0),
            opener: CallContext {
                principal: ctx.principal.clone(),
                authorization: ctx.authorization.clone(),
                ..CallContext::default()
            },
            askers: Mutex::new(Vec::new()),
            changes: tokio::sync::broadcast::channel(64).0,
            get_stream: Mutex::new(None),
        };
        let note = json!({"jsonrpc": "2.0", "method": mcp::method::INITIALIZED});
        let ans = self
            .post(
                serde_json::to_vec(&note).expect("serializes"),
                session.headers(),
                ctx,
            )
            .await?;
        let _ = self.read_all(ans.body).await;
        tracing::info!(upstream = %self.cfg.name, version = %version, "opened legacy session");
        Ok(session)
    }

    /// Run one request against the upstream, sending its events to `tx`.
    async fn run(
        self: Arc<Self>,
        req: Request,
        ctx: CallContext,
        tx: mpsc::Sender<CallEvent>,
        cancel_info: Arc<Mutex<Option<CancelInfo>>>,
    ) {
        let era = match self.era(&ctx).await {
            Ok(e) => e,
            Err(e) => {
                let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                return;
            }
        };
        let id = self.upstream_id();
        match era {
            Era::Modern => {
                let body = req.to_vec_with_id(Some(&id));
                match self.post(body, modern_headers(&req), &ctx).await {
                    Ok(ans) => self.pump(ans, id, tx, None).await,
                    Err(e) => {
                        let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                    }
                }
            }
            Era::Legacy => {
                let body = serde_json::to_vec(&wire_message(&req, &Era::Legacy, Some(&id)))
                    .expect("serializes");
                let mut stale = None;
                let asks = mcp::may_ask(&req.method).then_some((&id, &tx));
                let task = upstream_task_of(&req);
                for attempt in 0..2 {
                    let (session, _asker) =
                        match self.call_session(&ctx, stale.as_ref(), asks, task).await {
                            Ok(s) => s,
                            Err(e) => {
                                let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                                return;
                            }
                        };
                    *cancel_info.lock().expect("cancel lock") = Some(CancelInfo {
                        headers: session.headers(),
                        id: id.clone(),
                        ctx: ctx.clone(),
                    });
                    session.in_flight.fetch_add(1, Ordering::Relaxed);
                    let _busy = InFlight(&session);
                    let ans = match self.post(body.clone(), session.headers(), &ctx).await {
                        Ok(a) => a,
                        Err(e) => {
                            let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                            return;
                        }
                    };
                    if ans.status == StatusCode::NOT_FOUND && session.id.is_some() && attempt == 0 {
                        stale = Some(session.clone());
                        continue;
                    }
                    let finishes = task
                        .filter(|_| matches!(req.method.as_str(), "tasks/result" | "tasks/cancel"))
                        .map(|t| format!("{}\n{t}", self.session_key(&ctx)));
                    if req.params.contains_key("task") || finishes.is_some() {
                        let caller = self.session_key(&ctx);
                        self.pump_task_call(ans, id, tx, &session, (&caller, finishes))
                            .await;
                    } else {
                        self.pump(ans, id, tx, Some(&session)).await;
                    }
                    session.last_used.store(self.now_ms(), Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// Decrements a session's in-flight count when a request using it ends.
struct InFlight<'a>(&'a Session);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a legacy cancellation needs: the session headers and the upstream request id.
struct CancelInfo {
    headers: HeaderMap,
    id: Value,
    ctx: CallContext,
}

impl Session {
    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(id) = &self.id {
            h.insert(SESSION_HEADER.clone(), id.clone());
        }
        h.insert(VERSION_HEADER.clone(), self.version.clone());
        h
    }
}

/// A call's own response stream, for the router: everything on it is that call's.
struct OwnStream<'a> {
    shared: &'a Arc<Shared>,
    /// The call's upstream request id.
    id: &'a Value,
    /// Where its events go.
    tx: &'a mpsc::Sender<CallEvent>,
    /// The legacy session it runs on, where the server may ask the client; a
    /// modern response stream carries no requests.
    session: Option<&'a Session>,
}

impl Channel for OwnStream<'_> {
    type Call = mpsc::Sender<CallEvent>;

    fn events(&self, call: Self::Call) -> Option<mpsc::Sender<CallEvent>> {
        Some(call)
    }

    fn answered(&self, id: &Value, _: &Outcome) -> Option<mpsc::Sender<CallEvent>> {
        (id == self.id).then(|| self.tx.clone())
    }

    fn own(&self) -> Option<Self::Call> {
        Some(self.tx.clone())
    }

    fn responder(&self, id: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>> {
        self.session.map(|s| {
            self.shared
                .responder(s.headers(), s.opener.clone(), id.clone())
        })
    }
}

/// A legacy session's GET stream, for the router: it names no call, so a request
/// on it goes to the session's call it is proven to belong to, else is refused.
struct SessionStream<'a> {
    shared: &'a Arc<Shared>,
    session: &'a Session,
}

impl Channel for SessionStream<'_> {
    type Call = mpsc::Sender<CallEvent>;

    fn events(&self, call: Self::Call) -> Option<mpsc::Sender<CallEvent>> {
        Some(call)
    }

    /// The GET stream answers none of tasklift's requests.
    fn answered(&self, _: &Value, _: &Outcome) -> Option<mpsc::Sender<CallEvent>> {
        None
    }

    fn askers(&self) -> Vec<(Self::Call, Option<String>)> {
        let askers = self.session.askers.lock().expect("askers lock");
        askers
            .iter()
            .map(|a| (a.tx.clone(), a.task.clone()))
            .collect()
    }

    fn responder(&self, id: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>> {
        let s = self.session;
        Some(
            self.shared
                .responder(s.headers(), s.opener.clone(), id.clone()),
        )
    }
}

/// How long to wait before reopening a session's GET stream: the server's `retry`
/// (capped) after it ended the stream, else a backoff from 400 ms doubling to 30 s
/// over repeated failures.
fn get_backoff(retry_ms: Option<u64>, failures: u32) -> Duration {
    let backoff = 200u64.saturating_mul(1 << failures.min(8)).min(30_000);
    match retry_ms {
        Some(r) if failures <= 1 => Duration::from_millis(r.min(MAX_RESUME_DELAY_MS)),
        _ => Duration::from_millis(backoff),
    }
}

/// Headers mirrored from a modern request's body.
fn modern_headers(req: &Request) -> HeaderMap {
    let mut h = HeaderMap::new();
    let version = req
        .meta()
        .and_then(|m| m.get(mcp::META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        .unwrap_or(MODERN_VERSION);
    if let Ok(v) = HeaderValue::from_str(version) {
        h.insert(VERSION_HEADER.clone(), v);
    }
    if let Ok(v) = HeaderValue::from_str(&req.method) {
        h.insert(METHOD_HEADER.clone(), v);
    }
    if let Some(name) = mcp::name_param(&req.method).and_then(|p| req.str_param(p)) {
        if let Ok(v) = HeaderValue::from_str(&mcp::encode_header_value(name)) {
            h.insert(NAME_HEADER.clone(), v);
        }
    }
    h
}

impl Upstream for HttpUpstream {
    fn listen<'a>(
        &'a self,
        filter: &'a serde_json::Map<String, Value>,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Listening> {
        Box::pin(async move {
            match self.inner.era(ctx).await? {
                Era::Modern => listen_modern(self, filter, req, ctx).await,
                Era::Legacy => self.inner.listen_legacy(filter, ctx).await,
            }
        })
    }

    fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    fn era<'a>(&'a self, ctx: &'a CallContext) -> UpstreamFuture<'a, Era> {
        Box::pin(self.inner.era(ctx))
    }

    fn known_era(&self) -> Option<Era> {
        self.inner.era.read().expect("era lock").clone()
    }

    fn call<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, UpstreamCall> {
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(64);
            let info: Arc<Mutex<Option<CancelInfo>>> = Arc::default();
            let task = tokio::spawn(self.inner.clone().run(
                req.clone(),
                ctx.clone(),
                tx,
                info.clone(),
            ));
            let shared = self.inner.clone();
            let on_cancel: Box<dyn FnOnce() + Send> = Box::new(move || {
                let Some(ci) = info.lock().expect("cancel lock").take() else {
                    return;
                };
                tokio::spawn(async move {
                    let body =
                        serde_json::to_vec(&cancelled_notification(&ci.id)).expect("serializes");
                    match shared.post(body, ci.headers, &ci.ctx).await {
                        Ok(ans) => {
                            let _ = shared.read_all(ans.body).await;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not send notifications/cancelled upstream")
                        }
                    }
                });
            });
            Ok(UpstreamCall {
                events: rx,
                canceller: Canceller::new(task.abort_handle(), Some(on_cancel)),
            })
        })
    }

    fn notify<'a>(&'a self, req: &'a Request, ctx: &'a CallContext) -> UpstreamFuture<'a, ()> {
        Box::pin(async move {
            let inner = &self.inner;
            let (body, headers) = match inner.era(ctx).await? {
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
            match inner.era(ctx).await? {
                Era::Modern => Ok(self.call(req, ctx).await?.outcome(&inner.cfg.name).await),
                Era::Legacy => {
                    let s = inner.session(ctx, None).await?;
                    Ok(Ok(discover_from_initialize(&s.init)))
                }
            }
        })
    }

    fn session_per_client(&self) -> bool {
        true
    }

    fn check_health<'a>(
        &'a self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
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

    fn end_session<'a>(
        &'a self,
        ctx: &'a CallContext,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let inner = &self.inner;
            let Some((_, slot)) = inner.sessions.remove(&inner.session_key(ctx)) else {
                return;
            };
            let mut all: Vec<Arc<Session>> = std::mem::take(&mut *slot.extra.lock().await);
            all.extend(slot.current.lock().await.take());
            for s in all {
                inner.close(&s).await;
                tracing::debug!(upstream = %inner.cfg.name, "closed a legacy session of an ended client session");
            }
        })
    }

    fn close_idle<'a>(
        &'a self,
        all: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let inner = &self.inner;
            let idle_ms = inner.cfg.session_idle.as_millis() as u64;
            let now = inner.now_ms();
            let slots: Vec<(String, Arc<SessionSlot>)> = inner
                .sessions
                .iter()
                .map(|e| (e.key().clone(), e.value().clone()))
                .collect();
            inner.task_homes.retain(|_, w| w.strong_count() > 0);
            let closable = |s: &Session| {
                let idle = now.saturating_sub(s.last_used.load(Ordering::Relaxed)) >= idle_ms;
                s.in_flight.load(Ordering::Relaxed) == 0 && (all || idle)
            };
            for (key, slot) in slots {
                // Extra sessions first: the main one goes only once they are gone.
                let done: Vec<Arc<Session>> = match slot.extra.try_lock() {
                    Ok(mut extra) => {
                        let (done, keep) = std::mem::take(&mut *extra)
                            .into_iter()
                            .partition(|s| closable(s));
                        *extra = keep;
                        done
                    }
                    Err(_) => continue,
                };
                for s in done {
                    inner.close(&s).await;
                    tracing::debug!(upstream = %inner.cfg.name, "closed an idle extra legacy session");
                }
                if slot.extra.try_lock().map_or(true, |e| !e.is_empty()) {
                    continue;
                }
                let Ok(mut cur) = slot.current.try_lock() else {
                    continue;
                };
                let Some(s) = cur.as_ref() else { continue };
                if !closable(s) {
                    continue;
                }
                let s = cur.take().expect("checked");
                // Out of the map before the slot is unlocked: a caller waiting on it
                // then sees it is gone and makes a new one (see `session`).
                inner.sessions.remove(&key);
                drop(cur);
                inner.close(&s).await;
                tracing::debug!(upstream = %inner.cfg.name, "closed idle legacy session");
            }
        })
    }
}
