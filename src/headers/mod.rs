//! The header fields tasklift reads and writes: the MCP names, built once
//! (`Fields::get("mcp-name")` would compare the text with every field's name; a
//! static `HeaderName` compares as a name), [`name`], a field's name read from
//! the wire, and [`Fields`], the fields of a request or an answer as a list.

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

/// The names requests and answers carry most often, with their text: the MCP
/// ones `http` does not know (read from the bytes, each would be a new
/// allocation per request), and standard ones, found here by length and text
/// where `http` lowers each name's case into a buffer and matches it against
/// all its names. The text is kept beside each name: a standard name's
/// `as_str` is a match over every standard name.
static KNOWN: [(&str, &HeaderName); 17] = [
    ("host", &http::header::HOST),
    ("content-type", &http::header::CONTENT_TYPE),
    ("content-length", &http::header::CONTENT_LENGTH),
    ("accept", &http::header::ACCEPT),
    ("user-agent", &http::header::USER_AGENT),
    ("authorization", &http::header::AUTHORIZATION),
    ("connection", &http::header::CONNECTION),
    ("accept-encoding", &http::header::ACCEPT_ENCODING),
    ("date", &http::header::DATE),
    ("transfer-encoding", &http::header::TRANSFER_ENCODING),
    ("cache-control", &http::header::CACHE_CONTROL),
    ("server", &http::header::SERVER),
    ("mcp-protocol-version", &PROTOCOL_VERSION),
    ("mcp-method", &METHOD),
    ("mcp-name", &NAME),
    ("mcp-session-id", &SESSION_ID),
    ("traceparent", &TRACEPARENT),
];

/// A field's name as read from the wire: one of the names fields carry most
/// often in any case, else as `http` reads it; `None` when it is not a name.
pub fn name(raw: &[u8]) -> Option<HeaderName> {
    let known = KNOWN
        .iter()
        .find(|(text, _)| text.len() == raw.len() && text.as_bytes().eq_ignore_ascii_case(raw));
    match known {
        Some((_, k)) => Some((*k).clone()),
        None => HeaderName::from_bytes(raw).ok(),
    }
}

mod fields;

pub use fields::{Fields, Name};

#[cfg(test)]
mod tests {
    use super::*;

    /// A name found among the known ones is the name `http` reads, in any case;
    /// any other is read by `http`.
    #[test]
    fn known_names_are_read_as_http_reads_them() {
        for (text, k) in KNOWN {
            let lower = k.as_str();
            assert_eq!(text, lower);
            let upper = lower.to_ascii_uppercase();
            let title: String = lower
                .split('-')
                .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
                .collect::<Vec<_>>()
                .join("-");
            for raw in [lower, upper.as_str(), title.as_str()] {
                assert_eq!(name(raw.as_bytes()).as_ref(), Some(k), "{raw}");
                assert_eq!(
                    name(raw.as_bytes()),
                    HeaderName::from_bytes(raw.as_bytes()).ok()
                );
            }
        }
        for raw in ["Mcp-Param-Region", "X-Custom", "hosts", "Accept-Language"] {
            let by_http = HeaderName::from_bytes(raw.as_bytes()).ok();
            assert_eq!(name(raw.as_bytes()), by_http, "{raw}");
        }
        assert_eq!(name(b"bad name"), None);
    }
}
