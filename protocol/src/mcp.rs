//! MCP vocabulary: method names, `_meta` keys, versions, and the few params and
//! results tasklift reads or writes. No I/O.

use serde_json::{json, Value};

use crate::jsonrpc::{RpcError, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY};

/// The modern protocol revision tasklift serves on its front door.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Versions tasklift accepts from clients.
pub const SUPPORTED_VERSIONS: &[&str] = &[MODERN_VERSION];
/// Legacy revisions tasklift can speak to upstreams, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The Tasks extension identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// `_meta` key: protocol version of a request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: client name and version.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: per-request client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: server name and version on results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key: progress token.
pub const META_PROGRESS_TOKEN: &str = "progressToken";

/// Methods tasklift interprets.
pub mod method {
    /// Discovery.
    pub const DISCOVER: &str = "server/discover";
    /// Tool invocation: the request tasks can augment.
    pub const TOOLS_CALL: &str = "tools/call";
    /// Task polling.
    pub const TASKS_GET: &str = "tasks/get";
    /// Task input responses.
    pub const TASKS_UPDATE: &str = "tasks/update";
    /// Task cancellation.
    pub const TASKS_CANCEL: &str = "tasks/cancel";
    /// Legacy handshake.
    pub const INITIALIZE: &str = "initialize";
    /// Legacy handshake completion.
    pub const INITIALIZED: &str = "notifications/initialized";
    /// Progress notification.
    pub const PROGRESS: &str = "notifications/progress";
    /// Cancellation notification (stdio, legacy HTTP).
    pub const CANCELLED: &str = "notifications/cancelled";
}

/// Whether a method takes `Mcp-Name` and from which param.
pub fn name_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Whether a method's 2026-07-28 result is cacheable (`ttlMs` and `cacheScope` required).
pub fn is_cacheable_method(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "resources/list"
            | "resources/templates/list"
            | "prompts/list"
            | "resources/read"
            | "server/discover"
    )
}

/// Whether a request may make the server ask the client something while it runs
/// (elicitation, sampling, roots): anything but listings, pings and session plumbing.
/// A server's request that names no call is attributed only among these.
pub fn may_ask(method: &str) -> bool {
    !matches!(
        method,
        "tools/list"
            | "resources/list"
            | "resources/templates/list"
            | "prompts/list"
            | "ping"
            | "initialize"
            | "server/discover"
            | "logging/setLevel"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "completion/complete"
            | "tasks/get"
            | "tasks/list"
            | "tasks/cancel"
            | "subscriptions/listen"
    )
}

/// Whether this request declared the Tasks extension in its per-request capabilities.
pub fn declares_tasks(params: &crate::params::Params) -> bool {
    params
        .meta_value(META_CLIENT_CAPABILITIES)
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some_and(|v| !v.is_null())
}

/// The `-32021` error naming the Tasks extension.
pub fn missing_tasks_capability(what: &str) -> RpcError {
    RpcError::new(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!("Missing required client capability: {what} requires the {TASKS_EXTENSION} extension in the request's clientCapabilities"),
    )
    .with_data(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}))
}

/// The `-32602` error for an unknown, expired or foreign task (indistinguishable on purpose).
pub fn task_not_found() -> RpcError {
    RpcError::new(INVALID_PARAMS, "Failed to retrieve task: Task not found")
}

/// Whether a JSON-RPC error code is one a modern (2026-07-28) server uses to reject a
/// request it understood: the signal that an upstream is modern during era detection.
pub fn is_modern_error_code(code: i64) -> bool {
    matches!(code, -32022..=-32020)
}

/// Set `resultType: "complete"` on a result object that lacks a `resultType`.
pub fn mark_complete(result: &mut Value) {
    if let Value::Object(o) = result {
        o.entry("resultType").or_insert_with(|| json!("complete"));
    }
}

pub use crate::params::meta_mut;

/// Decode an `Mcp-Name`/`Mcp-Param-*` header value (plain or `=?base64?…?=`).
pub fn decode_header_value(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    use base64::Engine;
    if let Some(inner) = raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .ok()?;
        String::from_utf8(bytes).ok().map(std::borrow::Cow::Owned)
    } else {
        // A plain value is itself: borrowed, not copied.
        Some(std::borrow::Cow::Borrowed(raw))
    }
}

/// Encode a value for an `Mcp-Name` header, using base64 when it is not header-safe.
pub fn encode_header_value(v: &str) -> String {
    use base64::Engine;
    let safe = !v.is_empty()
        && v.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !v.starts_with(' ')
        && !v.ends_with(' ')
        && (!v.starts_with("=?base64?") || !v.ends_with("?="));
    if safe {
        v.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v.as_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_round_trip() {
        for v in [
            "get_weather",
            "Hello, 世界",
            " padded ",
            "=?base64?literal?=",
        ] {
            assert_eq!(decode_header_value(&encode_header_value(v)).unwrap(), v);
        }
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(),
            "Hello, 世界"
        );
        assert_eq!(decode_header_value("=?base64?!!?="), None);
    }

    #[test]
    fn detects_tasks_extension() {
        let p = json!({"_meta": {META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}}}});
        assert!(declares_tasks(&p.as_object().unwrap().clone().into()));
        let p = json!({"_meta": {META_CLIENT_CAPABILITIES: {}}});
        assert!(!declares_tasks(&p.as_object().unwrap().clone().into()));
    }
}
