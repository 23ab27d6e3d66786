//! The MCP headers tasklift reads and writes, by name, built once; and
//! [`Fields`], a request's header fields as a list.
//!
//! `HeaderMap::get("mcp-name")` checks and hashes the text of the name on every
//! lookup (about 370 instructions each, a dozen lookups per proxied call); a
//! `HeaderName` built from a static string is looked up by its hash alone.

use http::HeaderName;

/// `Mcp-Session-Id`: a 2025-era session, on either side.
pub static SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
pub static PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Method`.
pub static METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`.
pub static NAME: HeaderName = HeaderName::from_static("mcp-name");
/// W3C trace context: `traceparent`.
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// W3C trace context: `tracestate`.
pub static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
/// W3C baggage.
pub static BAGGAGE: HeaderName = HeaderName::from_static("baggage");

/// Whether a comma-separated field value (`Connection`, say) lists `token`, in
/// any case.
pub fn lists_token(value: &[u8], token: &str) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

mod fields;

pub use fields::{Fields, Name};
