//! Upstreams: the servers tasklift fronts, behind one small trait: "send this
//! request, give me its events (notifications, then the final response), let me
//! cancel it". `streamable_http/` implements it for Streamable HTTP servers of both
//! eras, `stdio/` for child processes; `router.rs` decides where a message they
//! receive goes; `task_bridge/` runs a call as a legacy upstream's own 2025-11-25 task.
//!
//! This file holds the trait and `listen_modern`; the types it speaks in are in leaf
//! files that import nothing of this one: `context.rs` (the caller), `call.rs` (a
//! request in flight and its events), `error.rs`, `era.rs` (the era and the
//! messages shaped for it), `listen.rs` (change notifications), `attribution.rs`
//! (which call or task a message is about).

mod attribution;
mod call;
mod client_request;
mod context;
mod era;
mod error;
mod listen;
mod raw_result;
mod router;
pub mod stdio;
pub mod streamable_http;
pub mod task_bridge;
pub mod tools;

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use tasklift_protocol::jsonrpc::Request;

pub use attribution::{attribute, related_task, unattributed, upstream_task_of};
pub use call::{
    log_level, progress_under, tag_meta, CallEvent, Canceller, Events, First, Next, ServerRequest,
    UpstreamCall,
};
pub use client_request::ClientRequest;
pub use context::{CallContext, ClientPeer};
pub use era::{
    cancelled_notification, discover_from_initialize, legacy_bytes, legacy_request, modern_meta,
    wire_message, Era,
};
pub use error::{broken, broken_by, chain, UpstreamError};
pub use listen::{agreed_by_capabilities, notification_wanted, Listening};
pub use raw_result::RawResult;
/// An upstream's answer to a request (its result, or its error as it came), and
/// that error: what the layers above carry unopened.
pub use tasklift_protocol::jsonrpc::{Outcome, RpcError};

/// A boxed future for upstream methods.
pub type UpstreamFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, UpstreamError>> + Send + 'a>>;

/// A boxed future for upstream methods that cannot fail (an answer read from
/// memory, an idle sweep, a shutdown).
pub type Plain<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
    /// Whether the upstream's capabilities for `ctx` include
    /// `tasks.requests.tools.call` (2025-11-25): without it none of its tools runs
    /// as its own task. Asked before a legacy upstream's `tools/call` of a tool not
    /// listed yet, so an upstream that keeps its capabilities answers from memory;
    /// the default reads them from `discover`.
    fn offers_tool_tasks<'a>(&'a self, req: &'a Request, ctx: &'a CallContext) -> Plain<'a, bool> {
        Box::pin(tool_tasks_by_discover(self, req, ctx))
    }
    /// What the upstream answers the `initialize` of the 2025 client of
    /// `ctx.session`, when tasklift speaks a 2025 version to it for that client: a
    /// legacy upstream, or a modern one that serves 2025 clients too (a dual-era
    /// server, which may describe itself to them otherwise than its
    /// `server/discover` does). `None` when tasklift speaks 2026-07-28 to it (the
    /// default): `discover` then describes it.
    fn legacy_initialize<'a>(&'a self, _ctx: &'a CallContext) -> UpstreamFuture<'a, Option<Value>> {
        Box::pin(async { Ok(None) })
    }
    /// Close idle sessions (legacy); called periodically and at shutdown (`all`).
    fn close_idle<'a>(&'a self, all: bool) -> Plain<'a, ()>;
    /// Stop for good: close sessions (HTTP) or stop child processes (stdio).
    fn shutdown<'a>(&'a self) -> Plain<'a, ()> {
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
    fn end_session<'a>(&'a self, _ctx: &'a CallContext) -> Plain<'a, ()> {
        Box::pin(async {})
    }
    /// Check now whether the upstream can be reached (what `health` then reports).
    fn check_health<'a>(&'a self) -> Plain<'a, ()> {
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

/// [`Upstream::offers_tool_tasks`] read from the upstream's `server/discover`
/// result, asked with the caller's `_meta`.
pub(crate) async fn tool_tasks_by_discover<U: Upstream + ?Sized>(
    up: &U,
    req: &Request,
    ctx: &CallContext,
) -> bool {
    let discover = Request {
        id: Some(Value::from("tasklift-task-support")),
        method: tasklift_protocol::mcp::method::DISCOVER.into(),
        params: req
            .meta()
            .map(|m| {
                [("_meta".to_string(), Value::Object(m.clone()))]
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default(),
    };
    match up.discover(&discover, ctx).await {
        Ok(Ok(d)) => offers_tool_tasks(&d),
        _ => false,
    }
}

/// Whether capabilities (at `capabilities` in a `server/discover` or `initialize`
/// result) include `tasks.requests.tools.call`.
pub fn offers_tool_tasks(result: &Value) -> bool {
    result
        .pointer("/capabilities/tasks/requests/tools/call")
        .is_some_and(|c| !c.is_null())
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
    let mut events = std::mem::replace(&mut call.events, mpsc::channel(1).1.into());
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
