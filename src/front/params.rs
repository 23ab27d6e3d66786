//! `Mcp-Param-{Name}` headers (2026-07-28, SEP-2243): a tool may mark parameters
//! with `x-mcp-header` so clients mirror their values into headers, and every server
//! that processes the body must check the two agree. tasklift learns each tool's
//! annotations from the `tools/list` results it relays (a client lists tools to know
//! which headers to send), or, for a call that carries `Mcp-Param-*` headers for a
//! tool it has not seen, by asking the upstream's `tools/list` itself. It checks
//! `tools/call` against them before anything goes upstream: a missing, undecodable or
//! different header is a 400 with `-32020`, like the standard headers.
//! The annotations come from the mount's [`ToolCatalog`].

use crate::headers::Fields;
use serde_json::Value;

use super::errors::Rejected;
use crate::upstream::tools::{Known, ToolCatalog};
use crate::upstream::{CallContext, Upstream};
use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp;

/// Whether a header value equals the body value (integers compare numerically).
fn same(header: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => header == s,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (header.parse::<f64>(), n.as_f64()) {
            (Ok(h), Some(b)) => h == b,
            _ => false,
        },
        _ => false,
    }
}

/// Check a `tools/call`'s `Mcp-Param-*` headers against the tool's annotations in
/// `catalog`.
pub async fn check(
    catalog: &ToolCatalog,
    up: &dyn Upstream,
    h: &Fields,
    req: &Request,
    ctx: &CallContext,
) -> Result<(), Rejected> {
    let tool = req.str_param("name").unwrap_or_default();
    let (mut known, may_ask) = catalog.lookup(tool);
    let has_params = h.names().any(|k| k.as_str().starts_with("mcp-param-"));
    if known.is_none() && has_params && may_ask {
        let meta = req.meta().cloned().unwrap_or_default();
        catalog.learn(up, &meta, ctx).await;
        known = catalog.lookup(tool).0;
    }
    // A tool the upstream does not list: nothing is recognized, headers pass.
    let Some(Known {
        headers: annotated, ..
    }) = known
    else {
        return Ok(());
    };
    let args = req.params.get("arguments");
    for a in &annotated {
        let name = format!("mcp-param-{}", a.header);
        let mut body = args;
        for k in &a.path {
            body = body.and_then(|b| b.get(k));
        }
        let body = body.filter(|v| !v.is_null());
        if h.get_all(name.as_str()).count() > 1 {
            return Err(Rejected::HeaderMismatch(format!(
                "{name} header is repeated; send it once"
            )));
        }
        let header = match h.get(name.as_str()) {
            None => None,
            Some(v) => Some(v.to_str().map_err(|_| {
                Rejected::HeaderMismatch(format!("{name} header contains invalid characters"))
            })?),
        };
        match (header, body) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(Rejected::HeaderMismatch(format!(
                    "the {name} header is required: the body has a value for parameter '{}'",
                    a.path.join(".")
                )))
            }
            (Some(_), None) => {
                return Err(Rejected::HeaderMismatch(format!(
                    "{name} header is present but the body has no value for parameter '{}'",
                    a.path.join(".")
                )))
            }
            (Some(raw), Some(b)) => {
                let raw = raw.trim_matches([' ', '\t']);
                let Some(decoded) = mcp::decode_header_value(raw) else {
                    return Err(Rejected::HeaderMismatch(format!(
                        "{name} header value '{raw}' is not valid base64 UTF-8"
                    )));
                };
                if !same(&decoded, b) {
                    return Err(Rejected::HeaderMismatch(format!(
                        "{name} header value '{decoded}' does not match body value {b}"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_compare_by_type() {
        assert!(same("us-west1", &json!("us-west1")));
        assert!(same("42.0", &json!(42)));
        assert!(same("true", &json!(true)));
        assert!(!same("43", &json!(42)));
        assert!(!same("x", &json!({"a": 1})));
    }
}
