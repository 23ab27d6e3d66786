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
    declared(params).tasks()
}

/// The capabilities of a client a server may ask (each a bit of [`Declared`]).
const ASKED: [&str; 3] = ["elicitation", "sampling", "roots"];
/// [`Declared`]'s bit for the Tasks extension.
const TASKS_BIT: u8 = 1 << ASKED.len();

/// What a request's clientCapabilities declare that tasklift acts on: the Tasks
/// extension, and which requests the client may be shown (a member present and
/// not `null`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared(u8);

impl Declared {
    /// The Tasks extension (`extensions["io.modelcontextprotocol/tasks"]`).
    pub fn tasks(self) -> bool {
        self.0 & TASKS_BIT != 0
    }

    /// `capability` (`elicitation`, `sampling` or `roots`; any other: false).
    pub fn has(self, capability: &str) -> bool {
        let i = ASKED.iter().position(|c| *c == capability);
        i.is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// What a clientCapabilities value declares.
    pub fn of_value(caps: Option<&Value>) -> Self {
        let declared = |v: Option<&Value>| v.is_some_and(|v| !v.is_null());
        let caps = caps.filter(|c| c.is_object());
        let mut bits = bits_where(|cap| declared(caps.and_then(|c| c.get(cap))));
        let ext = caps.and_then(|c| c.get("extensions"));
        if declared(ext.and_then(|e| e.get(TASKS_EXTENSION))) {
            bits |= TASKS_BIT;
        }
        Self(bits)
    }

    /// What the clientCapabilities text declares, when the scan is sure of
    /// each object read (`None` leaves it to `serde_json`). Read member by
    /// member, nothing noted: a repeated name counts as its last, as in
    /// `serde_json`'s map.
    fn of_text(caps: &str) -> Option<Self> {
        if !caps.starts_with('{') {
            return Some(Self(0));
        }
        let declared = |v: &str| v != "null";
        let mut bits = 0u8;
        let mut ext = None;
        crate::scan::each_member(caps, |name, value| {
            match ASKED.iter().position(|c| *c == name) {
                Some(i) if declared(value) => bits |= 1 << i,
                Some(i) => bits &= !(1 << i),
                None if name == "extensions" => ext = Some(value),
                None => {}
            }
        })?;
        if let Some(ext) = ext.filter(|e| e.starts_with('{')) {
            let mut tasks = false;
            crate::scan::each_member(ext, |name, value| {
                if name == TASKS_EXTENSION {
                    tasks = declared(value);
                }
            })?;
            if tasks {
                bits |= TASKS_BIT;
            }
        }
        Some(Self(bits))
    }
}

fn bits_where(declared: impl Fn(&str) -> bool) -> u8 {
    let asked = ASKED.iter().enumerate();
    asked.fold(0, |b, (i, cap)| b | (u8::from(declared(cap)) << i))
}

/// What the request's clientCapabilities declare: read once per request, from
/// the client's text where the scan is sure of it, else from the parsed value.
pub fn declared(params: &crate::params::Params) -> Declared {
    Declared(params.meta_summary(META_CLIENT_CAPABILITIES, |p| {
        let text = p.meta_text(META_CLIENT_CAPABILITIES);
        match text.and_then(Declared::of_text) {
            Some(d) => d.0,
            None => Declared::of_value(p.meta_value(META_CLIENT_CAPABILITIES)).0,
        }
    }))
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

    /// Capabilities read from the client's text answer as the parsed map does,
    /// for every shape a client may send: a repeated name counts as its last,
    /// and an escaped one is left to `serde_json`.
    #[test]
    fn declared_capabilities_read_from_text_agree_with_the_map() {
        let t = TASKS_EXTENSION;
        let caps = [
            format!(r#"{{"extensions":{{"{t}":{{}}}}}}"#),
            format!(r#"{{ "extensions" : {{ "{t}" : {{ "x" : [1, 2.5] }} }} }}"#),
            format!(r#"{{"extensions":{{"{t}":null}}}}"#),
            format!(r#"{{"extensions":{{"{t}":false,"other":{{}}}}}}"#),
            format!(r#"{{"extensions":{{"other":{{"{t}":{{}}}}}}}}"#),
            format!(r#"{{"extensions":[{{"{t}":{{}}}}]}}"#),
            r#"{"extensions":null,"sampling":{}}"#.into(),
            format!(r#"{{"extensions":{{"{t}":{{}}}},"extensions":{{}}}}"#),
            format!(r#"{{"extensions":{{"{t}":{{}},"{t}":null}}}}"#),
            format!(r#"{{"extension\u0073":{{"{t}":{{}}}}}}"#),
            r#"{"extensions":{"io.modelcontextprotocol\/tasks":{}}}"#.into(),
            r#"{"sampling":{},"roots":{"listChanged":true},"elicitation":null}"#.into(),
            r#"{"sampling":{},"sampling":null}"#.into(),
            r#"{"sampling":"yes","roots":0,"elicitation":[]}"#.into(),
            r#"[]"#.into(),
            r#""caps""#.into(),
            r#"null"#.into(),
            r#"{}"#.into(),
        ];
        let mut from_text = 0;
        for c in &caps {
            let text = format!(r#"{{"name":"x","_meta":{{"{META_CLIENT_CAPABILITIES}":{c}}}}}"#);
            let kept = crate::params::Params::from_text(&text).unwrap();
            let map: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
            let parsed = crate::params::Params::from(map);
            assert!(kept.is_text(), "{text}");
            assert_eq!(declared(&kept), declared(&parsed), "{c}");
            let object = |p: &crate::params::Params| p.meta_is_object(META_CLIENT_CAPABILITIES);
            assert_eq!(object(&kept), object(&parsed), "{c}");
            if let Some(d) = Declared::of_text(c) {
                let value = serde_json::from_str::<Value>(c).unwrap();
                assert_eq!(d, Declared::of_value(Some(&value)), "{c}");
                from_text += 1;
            }
        }
        assert_eq!(from_text, 16, "all but the two with an escaped name");
    }
}
