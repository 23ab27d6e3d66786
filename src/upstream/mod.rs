//! Upstreams: the servers tasklift fronts, behind one small trait: "send this
//! request, give me its events (notifications, then the final response), let me
//! cancel it". `streamable_http/` implements it for Streamable HTTP servers of both
//! eras, `stdio/` for child processes; `router.rs` decides where a message they
//! receive goes; `task_bridge.rs` runs a call as a legacy upstream's own 2025-11-25 task.

mod router;
pub mod stdio;
pub mod streamable_http;
pub mod task_bridge;
pub mod tools;

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use tasklift_protocol::jsonrpc::{Outcome, Request, RpcError, UPSTREAM_ERROR};
use tasklift_protocol::mcp::{self, MODERN_VERSION};

/// Which protocol era an upstream speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// Per-request `_meta`, no sessions (2026-07-28 and later).
    Modern,
    /// `initialize` handshake and sessions; the negotiated version is per session.
    Legacy,
}

/// Who is calling, as far as an upstream needs to know.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The caller's principal (keyed hash); legacy sessions are never shared across principals.
    pub principal: String,
    /// The caller's `Authorization` header, when the upstream is configured to receive it.
    pub authorization: Option<::http::HeaderValue>,
    /// Headers from the client that are forwarded as they are (`Mcp-Param-*`, trace context).
    pub forward_headers: Vec<(::http::HeaderName, ::http::HeaderValue)>,
    /// The caller's own session on tasklift, when it is a client of an era with
    /// sessions. A legacy upstream then gets a session of its own for it, opened
    /// with the client's capabilities, and its requests to the client are relayed
    /// as requests.
    pub session: Option<std::sync::Arc<ClientPeer>>,
}

/// Sends a request to a client on its response stream: the message to send, and
/// the way its answer is delivered.
type AskClient = Box<dyn Fn(&str, Value, Box<dyn FnOnce(Outcome) + Send>) -> Value + Send + Sync>;

/// A client with a session of its own on tasklift (a 2025-era client), as far as
/// the engine and upstreams need to know: who it said it is at `initialize`, and
/// how a request from the upstream reaches it mid-call. The front door that keeps
/// the session builds it; nothing below the front door knows that session.
pub struct ClientPeer {
    /// The session's id (callers of two sessions are two callers).
    pub id: String,
    /// The protocol version it negotiated.
    pub protocol_version: String,
    /// The capabilities it declared.
    pub capabilities: Value,
    /// Its `clientInfo`.
    pub client_info: Value,
    ask: AskClient,
}

impl ClientPeer {
    /// A client peer; `ask` turns a request into the message for its stream.
    pub fn new(
        id: String,
        protocol_version: String,
        capabilities: Value,
        client_info: Value,
        ask: impl Fn(&str, Value, Box<dyn FnOnce(Outcome) + Send>) -> Value + Send + Sync + 'static,
    ) -> Self {
        Self {
            id,
            protocol_version,
            capabilities,
            client_info,
            ask: Box::new(ask),
        }
    }

    /// Ask the client `method`: returns the request message to stream to it, and
    /// `answer` gets its response.
    pub fn ask(
        &self,
        method: &str,
        params: Value,
        answer: Box<dyn FnOnce(Outcome) + Send>,
    ) -> Value {
        (self.ask)(method, params, answer)
    }
}

impl std::fmt::Debug for ClientPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPeer")
            .field("id", &self.id)
            .field("protocol_version", &self.protocol_version)
            .finish()
    }
}

/// Something an upstream sent about an in-flight request.
#[derive(Debug)]
pub enum CallEvent {
    /// A notification related to the request (progress, log message), as a full message.
    Notification(Value),
    /// A legacy server asked the client something mid-call (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`) and waits for the answer.
    Input(ServerRequest),
    /// The final response.
    Done(Outcome),
}

/// A request from a legacy upstream to the client, with the way to answer it on the
/// upstream's channel. Dropping it unanswered answers with an error, so the upstream
/// never waits forever.
pub struct ServerRequest {
    /// The method (`elicitation/create`, …).
    pub method: String,
    /// Its params.
    pub params: Value,
    /// The upstream's own request id when it is a short string: it names the
    /// request, and tasklift uses it as the `inputRequests` key (else `input-N`).
    pub key: Option<String>,
    /// Sends the JSON-RPC response upstream.
    responder: Option<Box<dyn FnOnce(Outcome) + Send>>,
}

impl std::fmt::Debug for ServerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerRequest")
            .field("method", &self.method)
            .finish()
    }
}

impl ServerRequest {
    /// A request answered by `responder`.
    pub fn new(method: String, params: Value, responder: Box<dyn FnOnce(Outcome) + Send>) -> Self {
        Self {
            method,
            params,
            key: None,
            responder: Some(responder),
        }
    }

    /// Name the request after the upstream's request id, if that is a short string of
    /// letters, digits, `_`, `-`, `.` or `:`.
    pub fn keyed_by(mut self, id: &Value) -> Self {
        self.key = id
            .as_str()
            .filter(|s| {
                !s.is_empty()
                    && s.len() <= 64
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
            })
            .map(str::to_string);
        self
    }

    /// The request as an MRTR `inputRequests` entry.
    pub fn as_input_request(&self) -> Value {
        let mut params = self.params.clone();
        if let Some(Value::Object(m)) = params.get_mut("_meta") {
            m.remove("io.modelcontextprotocol/related-task");
        }
        json!({"method": self.method, "params": params})
    }

    /// Answer it.
    pub fn answer(mut self, outcome: Outcome) {
        if let Some(r) = self.responder.take() {
            r(outcome);
        }
    }
}

impl Drop for ServerRequest {
    fn drop(&mut self) {
        if let Some(r) = self.responder.take() {
            r(Err(RpcError::new(
                tasklift_protocol::jsonrpc::INTERNAL_ERROR,
                "the client did not answer this request (the call was cancelled or its state expired)",
            )));
        }
    }
}

/// Failures reaching an upstream. They become JSON-RPC errors naming the upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Connecting or sending failed.
    #[error("upstream {name} is unreachable: {message}")]
    Unreachable {
        /// Upstream name.
        name: String,
        /// Cause.
        message: String,
    },
    /// The upstream answered with something that is not MCP.
    #[error("upstream {name} answered HTTP {status}: {message}")]
    BadResponse {
        /// Upstream name.
        name: String,
        /// HTTP status.
        status: u16,
        /// What was wrong.
        message: String,
    },
    /// The legacy handshake failed.
    #[error("upstream {name}: initialize failed: {message}")]
    Handshake {
        /// Upstream name.
        name: String,
        /// Cause.
        message: String,
    },
}

impl UpstreamError {
    /// The JSON-RPC error a client sees.
    pub fn to_rpc(&self) -> RpcError {
        RpcError::new(UPSTREAM_ERROR, self.to_string())
    }
}

/// An in-flight upstream request. Dropping it cancels the request upstream.
pub struct UpstreamCall {
    /// Events in order; the last is `Done`. A channel that closes without `Done`
    /// means the upstream broke mid-call.
    pub events: mpsc::Receiver<CallEvent>,
    /// Cancels the request when dropped (or when `cancel` is called).
    pub canceller: Canceller,
}

/// Cancels an upstream request: aborts the reader (closing the HTTP stream, which
/// is cancellation on modern HTTP) and runs the transport's extra step (a
/// `notifications/cancelled` for legacy sessions).
pub struct Canceller {
    /// The task reading the response.
    reader: Option<tokio::task::AbortHandle>,
    /// Extra cancellation step, run at most once.
    on_cancel: Option<Box<dyn FnOnce() + Send>>,
}

impl Canceller {
    /// A canceller for a reader task and an optional extra step.
    pub fn new(
        reader: tokio::task::AbortHandle,
        on_cancel: Option<Box<dyn FnOnce() + Send>>,
    ) -> Self {
        Self {
            reader: Some(reader),
            on_cancel,
        }
    }

    /// A canceller that runs `f` when the call is cancelled.
    pub fn on_cancel(f: Box<dyn FnOnce() + Send>) -> Self {
        Self {
            reader: None,
            on_cancel: Some(f),
        }
    }

    /// A canceller with nothing to cancel.
    pub fn none() -> Self {
        Self {
            reader: None,
            on_cancel: None,
        }
    }

    /// The request finished: nothing to cancel any more.
    pub fn disarm(&mut self) {
        self.reader = None;
        self.on_cancel = None;
    }

    /// Cancel now.
    pub fn cancel(&mut self) {
        if let Some(r) = self.reader.take() {
            r.abort();
        }
        if let Some(f) = self.on_cancel.take() {
            f();
        }
    }
}

impl Drop for Canceller {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A boxed future for upstream methods.
pub type UpstreamFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, UpstreamError>> + Send + 'a>>;

/// A server tasklift forwards to.
pub trait Upstream: Send + Sync + 'static {
    /// The configured name.
    fn name(&self) -> &str;
    /// The era, detecting it on first use.
    fn era<'a>(&'a self, ctx: &'a CallContext) -> UpstreamFuture<'a, Era>;
    /// The era if it is already known (configured or detected), without probing.
    fn known_era(&self) -> Option<Era> {
        None
    }
    /// Start a request. `req.id` is replaced by an upstream-side id.
    fn call<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, UpstreamCall>;
    /// Send a notification (no response expected).
    fn notify<'a>(&'a self, req: &'a Request, ctx: &'a CallContext) -> UpstreamFuture<'a, ()>;
    /// What `server/discover` should say about this upstream (before tasklift adds its
    /// extension): a modern upstream's discover result, or one built from a legacy
    /// upstream's `initialize` result.
    fn discover<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Outcome>;
    /// Close idle sessions (legacy); called periodically and at shutdown (`all`).
    fn close_idle<'a>(&'a self, all: bool) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
    /// Stop for good: close sessions (HTTP) or stop child processes (stdio).
    fn shutdown<'a>(&'a self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.close_idle(true)
    }
    /// The upstream's own change notifications (list changes, resource updates) for a
    /// `subscriptions/listen` stream: `filter` is the caller's SubscriptionFilter
    /// without `taskIds`. The default offers none.
    fn listen<'a>(
        &'a self,
        _filter: &'a Map<String, Value>,
        _req: &'a Request,
        _ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Listening> {
        Box::pin(async { Ok(Listening::none()) })
    }
    /// Whether a legacy client gets an upstream session of its own (HTTP), so its
    /// session-wide requests (`logging/setLevel`) may go upstream. A stdio child has
    /// one session every client shares.
    fn session_per_client(&self) -> bool {
        false
    }
    /// A legacy client's session ended: release what the upstream kept for it.
    fn end_session<'a>(
        &'a self,
        _ctx: &'a CallContext,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
    /// Check now whether the upstream can be reached (what `health` then reports).
    fn check_health<'a>(&'a self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
    /// How many times a stdio upstream's children were restarted (`None`: not stdio).
    fn restarts(&self) -> Option<u64> {
        None
    }
    /// `Err(reason)` when the upstream cannot take calls now (reported by `/readyz`).
    fn health(&self) -> Result<(), String> {
        Ok(())
    }
}

/// An upstream's change notifications for one `subscriptions/listen` stream.
pub struct Listening {
    /// The filter fields the upstream agreed to honour.
    pub agreed: Map<String, Value>,
    /// Notifications as they arrive (full messages).
    pub events: mpsc::Receiver<Value>,
    /// Ends the upstream side when dropped.
    pub canceller: Canceller,
}

impl Listening {
    /// Nothing agreed, nothing to receive.
    pub fn none() -> Self {
        Self {
            agreed: Map::new(),
            events: mpsc::channel(1).1,
            canceller: Canceller::none(),
        }
    }
}

/// Which SubscriptionFilter field a change notification belongs to, and whether
/// `filter` asked for it.
pub fn notification_wanted(filter: &Map<String, Value>, n: &Value) -> bool {
    let flag = |k: &str| filter.get(k).and_then(Value::as_bool).unwrap_or(false);
    match n.get("method").and_then(Value::as_str) {
        Some("notifications/tools/list_changed") => flag("toolsListChanged"),
        Some("notifications/prompts/list_changed") => flag("promptsListChanged"),
        Some("notifications/resources/list_changed") => flag("resourcesListChanged"),
        Some("notifications/resources/updated") => {
            let uri = n.get("params").and_then(|p| p.get("uri"));
            filter
                .get("resourceSubscriptions")
                .and_then(Value::as_array)
                .is_some_and(|a| uri.is_some_and(|u| a.contains(u)))
        }
        _ => false,
    }
}

/// The part of `filter` a legacy server's capabilities can honour.
pub fn agreed_by_capabilities(caps: &Value, filter: &Map<String, Value>) -> Map<String, Value> {
    let cap = |a: &str, b: &str| {
        caps.get(a)
            .and_then(|c| c.get(b))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let mut agreed = Map::new();
    for (field, (a, b)) in [
        ("toolsListChanged", ("tools", "listChanged")),
        ("promptsListChanged", ("prompts", "listChanged")),
        ("resourcesListChanged", ("resources", "listChanged")),
    ] {
        if filter.get(field).and_then(Value::as_bool) == Some(true) && cap(a, b) {
            agreed.insert(field.into(), json!(true));
        }
    }
    if let Some(uris) = filter
        .get("resourceSubscriptions")
        .filter(|_| cap("resources", "subscribe"))
    {
        agreed.insert("resourceSubscriptions".into(), uris.clone());
    }
    agreed
}

/// Listen through a modern upstream's own `subscriptions/listen`: forward the filter,
/// wait for its acknowledgement, then pass its notifications on.
pub async fn listen_modern(
    up: &dyn Upstream,
    filter: &Map<String, Value>,
    req: &Request,
    ctx: &CallContext,
) -> Result<Listening, UpstreamError> {
    let mut r = req.clone();
    r.params
        .insert("notifications".into(), Value::Object(filter.clone()));
    let mut call = up.call(&r, ctx).await?;
    let ack = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(ev) = call.events.recv().await {
            if let CallEvent::Notification(n) = ev {
                if n.get("method").and_then(Value::as_str)
                    == Some("notifications/subscriptions/acknowledged")
                {
                    return Some(n);
                }
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    let Some(ack) = ack else {
        return Ok(Listening::none());
    };
    let agreed = ack
        .get("params")
        .and_then(|p| p.get("notifications"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let (tx, rx) = mpsc::channel(64);
    let mut events = std::mem::replace(&mut call.events, mpsc::channel(1).1);
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            if let CallEvent::Notification(n) = ev {
                if tx.send(n).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(Listening {
        agreed,
        events: rx,
        canceller: std::mem::replace(&mut call.canceller, Canceller::none()),
    })
}

impl UpstreamCall {
    /// A call that failed before it started.
    pub fn failed(e: RpcError) -> Self {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(CallEvent::Done(Err(e)));
        Self {
            events: rx,
            canceller: Canceller::none(),
        }
    }

    /// Wait for the final outcome, ignoring notifications.
    pub async fn outcome(mut self, upstream: &str) -> Outcome {
        while let Some(ev) = self.events.recv().await {
            if let CallEvent::Done(o) = ev {
                self.canceller.disarm();
                return o;
            }
        }
        self.canceller.disarm();
        Err(broken(upstream))
    }
}

/// The error for a call whose upstream stream ended without a response.
pub fn broken(upstream: &str) -> RpcError {
    RpcError::new(
        UPSTREAM_ERROR,
        format!("upstream {upstream} closed the connection before answering"),
    )
}

/// The `_meta` tasklift puts on requests it makes itself.
pub fn modern_meta() -> Value {
    json!({
        mcp::META_PROTOCOL_VERSION: MODERN_VERSION,
        mcp::META_CLIENT_INFO: {"name": "tasklift", "version": env!("CARGO_PKG_VERSION")},
        mcp::META_CLIENT_CAPABILITIES: {},
    })
}

/// A request (or, with no id, a notification) as sent to an upstream of `era`.
pub fn wire_message(req: &Request, era: &Era, id: Option<&Value>) -> Value {
    match era {
        Era::Modern => req.to_value_with_id(id),
        Era::Legacy => legacy_request(req).to_value_with_id(id),
    }
}

/// The `notifications/cancelled` tasklift sends for its upstream request `id`
/// (legacy sessions and stdio; modern HTTP closes the stream instead).
pub fn cancelled_notification(id: &Value) -> Value {
    json!({
        "jsonrpc": "2.0", "method": mcp::method::CANCELLED,
        "params": {"requestId": id, "reason": "cancelled by the client"},
    })
}

/// A modern request reshaped for a legacy session: the per-request protocol fields
/// live in the session there, so they are dropped; every other `_meta` key stays.
pub fn legacy_request(req: &Request) -> Request {
    let mut r = req.clone();
    if let Some(Value::Object(meta)) = r.params.get_mut("_meta") {
        meta.remove(mcp::META_PROTOCOL_VERSION);
        meta.remove(mcp::META_CLIENT_INFO);
        meta.remove(mcp::META_CLIENT_CAPABILITIES);
        if meta.is_empty() {
            r.params.remove("_meta");
        }
    }
    r
}

/// A `server/discover` result built from a legacy `initialize` result.
pub fn discover_from_initialize(init: &Value) -> Value {
    let mut r = Map::new();
    r.insert("resultType".into(), json!("complete"));
    r.insert("supportedVersions".into(), json!(mcp::SUPPORTED_VERSIONS));
    r.insert(
        "capabilities".into(),
        init.get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    if let Some(info) = init.get("serverInfo") {
        r.insert("_meta".into(), json!({ mcp::META_SERVER_INFO: info }));
    }
    if let Some(i) = init.get("instructions") {
        r.insert("instructions".into(), i.clone());
    }
    Value::Object(r)
}

/// The upstream task a `tasks/get`, `tasks/result` or `tasks/cancel` is about.
pub fn upstream_task_of(req: &Request) -> Option<&str> {
    matches!(
        req.method.as_str(),
        "tasks/get" | "tasks/result" | "tasks/cancel"
    )
    .then(|| req.str_param("taskId"))
    .flatten()
}

/// The task a server-to-client request says it belongs to (`related-task`).
pub fn related_task(params: &Value) -> Option<&str> {
    params
        .get("_meta")?
        .get("io.modelcontextprotocol/related-task")?
        .get("taskId")?
        .as_str()
}

/// Which call in flight a server-to-client request that arrived with no link of its
/// own belongs to (a stdio child's request, or one on a legacy session's GET stream).
/// `calls` are the calls on that session or child that may ask, each with the
/// upstream task it follows, if any. A request about a task (`related-task`) is
/// that task's follower's and no other's; one naming no task (2025-11-25 says a
/// task's requests MUST name it) is the only plain call's. `Err(n)`: it cannot be
/// proven, with `n` plain candidates; the caller refuses it ([`unattributed`]), as
/// guessing could show one caller's prompt to another and hand back their answer.
pub fn attribute<'a, K>(
    params: &Value,
    calls: impl IntoIterator<Item = (K, Option<&'a str>)>,
) -> Result<K, usize> {
    let related = related_task(params);
    let mut plain = None;
    let mut n = 0;
    for (k, task) in calls {
        match (related, task) {
            (Some(t), Some(f)) if t == f => return Ok(k),
            (None, None) => {
                n += 1;
                plain.get_or_insert(k);
            }
            _ => {}
        }
    }
    match plain {
        Some(k) if n == 1 => Ok(k),
        _ if related.is_some() => Err(0),
        _ => Err(n),
    }
}

/// Refuse a server-to-client request [`attribute`] could not place (`n` candidates),
/// saying why in the log and to the server.
pub fn unattributed(upstream: &str, req: ServerRequest, n: usize) {
    let method = req.method.clone();
    let why = if n == 0 {
        tracing::warn!(%upstream, %method, "the upstream asked the client something with no call in flight that it could belong to; refused");
        format!("no client is waiting to answer {method}")
    } else {
        tracing::warn!(%upstream, %method, calls = n,
            "the upstream asked the client something naming none of the calls in flight; refused (for stdio, set isolate_input)");
        format!("tasklift cannot tell which of the calls in flight this {method} belongs to, so it asks no client")
    };
    req.answer(Err(RpcError::new(
        tasklift_protocol::jsonrpc::METHOD_NOT_FOUND,
        why,
    )));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_only_to_a_call_it_can_be_proven_to_belong_to() {
        let tagged = json!({"_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t1"}}});
        let plain = json!({});
        // Naming no task: the only call that follows none, or nobody.
        assert_eq!(attribute(&plain, [(1, None), (2, Some("t1"))]), Ok(1));
        assert_eq!(attribute(&plain, [(1, None), (2, None)]), Err(2));
        assert_eq!(attribute(&plain, [(2, Some("t1"))]), Err(0));
        // Naming a task: its follower, never a bystander.
        assert_eq!(attribute(&tagged, [(1, None), (2, Some("t1"))]), Ok(2));
        assert_eq!(attribute(&tagged, [(1, None)]), Err(0));
        assert_eq!(attribute(&tagged, [(1, None), (3, Some("t2"))]), Err(0));
    }
}
