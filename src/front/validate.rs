//! Front-door validation of a 2026-07-28 POST: the mirrored headers against the
//! body, the required `_meta` fields, the protocol version, and Origin.

use http::HeaderName;

use crate::headers::Fields;

use super::errors::Rejected;
use crate::headers as names;
use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp::{self, SUPPORTED_VERSIONS};

/// A header as text, or a mismatch error for a value with invalid characters.
fn header<'a>(h: &'a Fields, name: &HeaderName) -> Result<Option<&'a str>, Rejected> {
    match h.get(name) {
        None => Ok(None),
        // Optional whitespace around a field value is not part of it (RFC 9110 §5.5).
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim_matches([' ', '\t'])))
            .map_err(|_| {
                Rejected::HeaderMismatch(format!("{name} header contains invalid characters"))
            }),
    }
}

/// Validate a request's headers and protocol fields, strictly.
pub fn check_request(h: &Fields, req: &Request) -> Result<(), Rejected> {
    check_request_with(h, req, false).map(|_| ())
}

/// Validate a request's headers and protocol fields. With `lenient_task_name`, a
/// `tasks/*` request without `Mcp-Name` passes (the body's `taskId` is what is
/// used); `Ok(true)` says that leniency was needed. The order of the checks
/// decides which error a request with several faults gets.
pub fn check_request_with(
    h: &Fields,
    req: &Request,
    lenient_task_name: bool,
) -> Result<bool, Rejected> {
    check_version(h, req)?;
    check_capabilities(req)?;
    check_method(h, req)?;
    check_name(h, req, lenient_task_name)
}

/// The protocol version: `_meta`'s (required, a string), the same in the
/// `MCP-Protocol-Version` header, and one tasklift speaks. An unreadable header
/// is reported before anything else.
fn check_version(h: &Fields, req: &Request) -> Result<(), Rejected> {
    let version_h = header(h, &names::PROTOCOL_VERSION)?;
    // Required `_meta` fields (-32602).
    let Some(version_b) = req.meta_str(mcp::META_PROTOCOL_VERSION) else {
        if req.meta_value(mcp::META_PROTOCOL_VERSION).is_none() {
            return Err(Rejected::InvalidParams(format!(
                "Invalid params: _meta[\"{}\"] is required",
                mcp::META_PROTOCOL_VERSION
            )));
        }
        return Err(Rejected::InvalidParams(format!(
            "Invalid params: _meta[\"{}\"] must be a string",
            mcp::META_PROTOCOL_VERSION
        )));
    };
    let Some(version_h) = version_h else {
        return Err(Rejected::HeaderMismatch(
            "the MCP-Protocol-Version header is required".into(),
        ));
    };
    if version_h != version_b {
        return Err(Rejected::HeaderMismatch(format!(
            "MCP-Protocol-Version header value '{version_h}' does not match body value '{version_b}'"
        )));
    }
    if !SUPPORTED_VERSIONS.contains(&version_b) {
        return Err(Rejected::UnsupportedVersion {
            requested: version_b.to_string(),
        });
    }
    Ok(())
}

/// `_meta`'s client capabilities: required, an object.
fn check_capabilities(req: &Request) -> Result<(), Rejected> {
    match req.params.meta_is_object(mcp::META_CLIENT_CAPABILITIES) {
        true => Ok(()),
        false => Err(Rejected::InvalidParams(format!(
            "Invalid params: _meta[\"{}\"] is required and must be an object",
            mcp::META_CLIENT_CAPABILITIES
        ))),
    }
}

/// The `Mcp-Method` header: required, the body's method.
fn check_method(h: &Fields, req: &Request) -> Result<(), Rejected> {
    match header(h, &names::METHOD)? {
        None => Err(Rejected::HeaderMismatch(
            "the Mcp-Method header is required".into(),
        )),
        Some(m) if m != req.method => Err(Rejected::HeaderMismatch(format!(
            "Mcp-Method header value '{m}' does not match body value '{}'",
            req.method
        ))),
        Some(_) => Ok(()),
    }
}

/// The `Mcp-Name` header, for a method that names something (a tool, a task, …):
/// required, base64 UTF-8 when encoded, the body's name. `Ok(true)`: a `tasks/*`
/// request let through without it by `lenient_task_name`.
fn check_name(h: &Fields, req: &Request, lenient_task_name: bool) -> Result<bool, Rejected> {
    let Some(param) = mcp::name_param(&req.method) else {
        return Ok(false);
    };
    let body = req.str_param(param);
    match (header(h, &names::NAME)?, body) {
        (None, Some(_)) if lenient_task_name && req.method.starts_with("tasks/") => Ok(true),
        (None, _) => Err(Rejected::HeaderMismatch(
            "the Mcp-Name header is required for this method".into(),
        )),
        (Some(raw), body) => {
            let Some(decoded) = mcp::decode_header_value(raw) else {
                return Err(Rejected::HeaderMismatch(format!(
                    "Mcp-Name header value '{raw}' is not valid base64 UTF-8"
                )));
            };
            if Some(&*decoded) != body {
                return Err(Rejected::HeaderMismatch(format!(
                    "Mcp-Name header value '{decoded}' does not match body value '{}'",
                    body.unwrap_or("")
                )));
            }
            Ok(false)
        }
    }
}

/// Whether an `Origin` header is acceptable: absent, a loopback origin, or listed.
pub fn origin_allowed(h: &Fields, allowed: &[String]) -> bool {
    let Some(origin) = h.get(http::header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    if allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(origin))
    {
        return true;
    }
    let host = origin
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or("")
        .trim_end_matches('/');
    let host = if let Some(h6) = host.strip_prefix('[') {
        h6.split(']')
            .next()
            .map(|h| format!("[{h}]"))
            .unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or("").to_string()
    };
    matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use tasklift_protocol::jsonrpc::{HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION};

    fn req(v: Value) -> Request {
        Request::from_value(v).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> Fields {
        let mut h = Fields::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn call(name: &str) -> Request {
        req(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name,"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":{}}}}),
        )
    }

    #[test]
    fn base64_names_are_decoded_before_comparison() {
        let r = call("Hello, 世界");
        let h = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        ]);
        assert!(check_request(&h, &r).is_ok());
        let h = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "other"),
        ]);
        assert_eq!(
            check_request(&h, &r).unwrap_err().rpc().code,
            HEADER_MISMATCH
        );
    }

    #[test]
    fn unsupported_versions_list_what_is_supported() {
        let r = req(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
            "io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}),
        );
        let h = headers(&[
            ("mcp-protocol-version", "1900-01-01"),
            ("mcp-method", "tools/list"),
        ]);
        let e = check_request(&h, &r).unwrap_err().rpc();
        assert_eq!(e.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(e.data.unwrap()["supported"], json!(["2026-07-28"]));
    }

    #[test]
    fn origins() {
        let allowed = vec!["https://app.example.com".to_string()];
        assert!(origin_allowed(&Fields::new(), &allowed));
        assert!(origin_allowed(
            &headers(&[("origin", "http://localhost:3000")]),
            &allowed
        ));
        assert!(origin_allowed(
            &headers(&[("origin", "http://[::1]:3000")]),
            &allowed
        ));
        assert!(origin_allowed(
            &headers(&[("origin", "https://app.example.com")]),
            &allowed
        ));
        assert!(!origin_allowed(
            &headers(&[("origin", "https://evil.example")]),
            &allowed
        ));
        assert!(!origin_allowed(
            &headers(&[("origin", "http://localhost.evil.example")]),
            &allowed
        ));
    }
}
