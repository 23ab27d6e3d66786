//! Which protocol era an upstream speaks (`Era`), and the messages tasklift shapes
//! for it: its own `_meta`, a request on the wire of either era, a cancellation, and
//! a `server/discover` result built from a legacy `initialize`.

use serde_json::{json, Map, Value};

use tasklift_protocol::compact;
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

/// The per-request protocol fields of `_meta`, which a legacy session carries
/// instead.
const SESSION_META: [&str; 3] = [
    mcp::META_PROTOCOL_VERSION,
    mcp::META_CLIENT_INFO,
    mcp::META_CLIENT_CAPABILITIES,
];

/// [`legacy_request`] with `id`, as bytes, serialized from the borrowed request:
/// nothing of it is copied on the way (a legacy call's hot path).
pub fn legacy_bytes(req: &Request, id: Option<&Value>) -> Vec<u8> {
    compact::collect(|out| {
        req.write_with(id, out, |out, params| {
            params.write_without_meta(out, &SESSION_META)
        })
    })
}

/// A modern request reshaped for a legacy session: the per-request protocol fields
/// live in the session there, so they are dropped; every other `_meta` key stays.
pub fn legacy_request(req: &Request) -> Request {
    let mut r = req.clone();
    if let Some(Value::Object(meta)) = r.params.get_mut("_meta") {
        for k in SESSION_META {
            meta.remove(k);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(params: Value) -> Request {
        Request {
            id: Some(json!(1)),
            method: "tools/call".into(),
            params: params.as_object().expect("an object").clone().into(),
        }
    }

    /// The same request read from a body, as the front door reads one: its
    /// params kept as the client's text.
    fn request_from_text(params: &Value) -> Request {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let e = tasklift_protocol::jsonrpc::Envelope::from_slice(body.to_string().as_bytes());
        let req = Request::from_envelope(e.expect("JSON")).expect("a request");
        assert!(req.params.is_text(), "{params}");
        req
    }

    #[test]
    fn legacy_bytes_are_the_legacy_request_without_copying_it() {
        let modern_meta = modern_meta();
        let with_progress = {
            let mut m = modern_meta.clone();
            m["progressToken"] = json!("p-1");
            m
        };
        for params in [
            json!({"name": "fast", "arguments": {"a": [1, {"b": null}]}, "_meta": modern_meta}),
            json!({"name": "fast", "_meta": with_progress}),
            json!({"name": "fast", "_meta": 7}),
            json!({"name": "q\"uoted", "arguments": {"text": "line\nbreak \\ é"}, "_meta": with_progress, "z": [true, 1.5]}),
            json!({"name": "fast"}),
            json!({}),
        ] {
            let id = json!("tasklift-3");
            let expected = wire_message(&request(params.clone()), &Era::Legacy, Some(&id));
            let mut with_token = request_from_text(&params);
            with_token.params.insert_meta("progressToken", json!("t-9"));
            for req in [
                request(params.clone()),
                request_from_text(&params),
                with_token,
            ] {
                let bytes = legacy_bytes(&req, Some(&id));
                let sent: Value = serde_json::from_slice(&bytes).expect("JSON");
                assert_eq!(
                    sent,
                    wire_message(&req, &Era::Legacy, Some(&id)),
                    "{params}"
                );
                if req.meta_value("progressToken") != Some(&json!("t-9")) {
                    assert_eq!(sent, expected, "{params}");
                }
                assert!(!String::from_utf8_lossy(&bytes).contains("protocolVersion"));
            }
        }
        let note = legacy_bytes(&request(json!({})), None);
        assert_eq!(
            serde_json::from_slice::<Value>(&note).unwrap(),
            json!({"jsonrpc": "2.0", "method": "tools/call", "params": {}})
        );
    }
}
