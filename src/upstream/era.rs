//! Which protocol era an upstream speaks (`Era`), and the messages tasklift shapes
//! for it: its own `_meta`, a request on the wire of either era, a cancellation, and
//! a `server/discover` result built from a legacy `initialize`.

use serde_json::{json, Map, Value};

use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp::{self, MODERN_VERSION};

/// Which protocol era an upstream speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// Per-request `_meta`, no sessions (2026-07-28 and later).
    Modern,
    /// `initialize` handshake and sessions; the negotiated version is per session.
    Legacy,
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
