//! W3C Trace Context across tasklift: a client's `traceparent` (HTTP header, or the
//! `_meta` key 2026-07-28 reserves for it) continues upstream with tasklift as a hop
//! of its own: same trace id, a new parent id for tasklift's span, the flags and
//! `tracestate`/`baggage` kept. The upstream gets it both ways, as a header (HTTP
//! upstreams) and in `_meta` (every upstream, stdio too), so a trace crosses tasklift
//! whichever one the server reads. Logs carry the trace id for correlation. When
//! tasklift exports spans, a request without a trace starts one, so the upstream's
//! spans join tasklift's.

use http::{HeaderName, HeaderValue};

use crate::headers::Fields;
use serde_json::{json, Map, Value};

use super::spans::{unhex, Hop, Tracer};
use crate::headers as names;
use crate::upstream::CallContext;
use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp;
use tasklift_protocol::traceparent::parse;

/// The keys and headers of trace context.
const KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// Continue the caller's trace, if it sent one, or start one when tasklift exports
/// spans (`tracer` on): rewrite the request's `_meta` and the headers that go
/// upstream to carry tasklift's hop, and keep that hop in `ctx.trace`: the
/// request's span is tasklift's hop, and a task the request becomes its child.
pub fn propagate(headers: &Fields, req: &mut Request, ctx: &mut CallContext, tracer: &Tracer) {
    let from_header = |k: &HeaderName| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let from_meta = |k: &str| req.meta_str(k).map(str::to_string);
    // The header wins: it is what the HTTP hop in front of tasklift saw.
    let incoming = from_header(&names::TRACEPARENT)
        .and_then(|t| continued(&t))
        .map(|h| (h, true))
        .or_else(|| {
            from_meta("traceparent")
                .and_then(|t| continued(&t))
                .map(|h| (h, false))
        });
    let mut values: Map<String, Value> = Map::new();
    let hop = match incoming {
        Some((mut hop, in_header)) => {
            for name in [&names::TRACESTATE, &names::BAGGAGE] {
                let k = name.as_str();
                let v = if in_header {
                    from_header(name)
                } else {
                    from_meta(k)
                };
                if let Some(v) = v.or_else(|| from_meta(k)).or_else(|| from_header(name)) {
                    if k == "tracestate" {
                        hop.trace_state = Some(v.clone());
                    }
                    values.insert(k.into(), json!(v));
                }
            }
            hop
        }
        None => match tracer.new_trace() {
            Some(hop) => {
                // A new trace: whatever trace state came with an invalid
                // traceparent belongs to no trace; baggage is not trace state.
                if let Some(v) = from_header(&names::BAGGAGE).or_else(|| from_meta("baggage")) {
                    values.insert("baggage".into(), json!(v));
                }
                hop
            }
            None => {
                // No valid trace: an invalid traceparent header (and its state) is not passed on.
                ctx.forward_headers
                    .retain(|(k, _)| k.as_str() != "traceparent" && k.as_str() != "tracestate");
                ctx.trace = None;
                return;
            }
        },
    };
    values.insert("traceparent".into(), json!(hop.traceparent()));
    let meta = mcp::meta_mut(&mut req.params);
    for k in KEYS {
        meta.remove(k);
    }
    ctx.forward_headers
        .retain(|(k, _)| !KEYS.contains(&k.as_str()));
    for (k, v) in values {
        let text = v.as_str().unwrap_or_default().to_string();
        if let Ok(hv) = HeaderValue::from_str(&text) {
            ctx.forward_headers.push((key_name(&k), hv));
        }
        meta.insert(k, v);
    }
    ctx.trace = Some(hop);
}

/// tasklift's hop continuing a valid `traceparent`, parsed once.
fn continued(tp: &str) -> Option<Hop> {
    let t = parse(tp)?;
    Some(Hop::child_of(
        unhex::<16>(t.trace_id)?,
        unhex::<8>(t.parent_id)?,
        unhex::<1>(t.flags)?[0],
    ))
}

/// The trace-context header named `k` (one of [`KEYS`]).
fn key_name(k: &str) -> HeaderName {
    match k {
        "traceparent" => names::TRACEPARENT.clone(),
        "tracestate" => names::TRACESTATE.clone(),
        _ => names::BAGGAGE.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

    fn req(meta: Value) -> Request {
        Request::from_value(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "x", "_meta": meta}}))
        .unwrap()
    }

    #[test]
    fn the_trace_continues_with_a_new_parent() {
        let mut h = Fields::new();
        h.insert(
            crate::headers::TRACEPARENT.clone(),
            HeaderValue::from_static(TP),
        );
        h.insert(
            crate::headers::TRACESTATE.clone(),
            HeaderValue::from_static("vendor=1"),
        );
        let mut r = req(json!({}));
        let mut ctx = CallContext::default();
        propagate(&h, &mut r, &mut ctx, &Tracer::off());
        let hop = ctx.trace.clone().expect("the trace continues");
        assert_eq!(hop.trace_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(hop.parent, unhex::<8>("00f067aa0ba902b7"));
        let out = r.meta().unwrap()["traceparent"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            out.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{out}"
        );
        assert!(out.ends_with("-01"));
        assert_ne!(out, TP, "tasklift is a hop of its own");
        assert_eq!(r.meta().unwrap()["tracestate"], "vendor=1");
        let sent: Vec<_> = ctx
            .forward_headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert!(sent.contains(&("traceparent", out.as_str())));
        assert!(sent.contains(&("tracestate", "vendor=1")));
    }

    #[test]
    fn meta_alone_is_enough_and_garbage_is_ignored() {
        let mut r = req(json!({"traceparent": TP}));
        let mut ctx = CallContext::default();
        propagate(&Fields::new(), &mut r, &mut ctx, &Tracer::off());
        assert!(ctx.trace.is_some());
        assert!(ctx.forward_headers.iter().any(|(k, _)| k == "traceparent"));
        for bad in [
            "",
            "00-xyz",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
        ] {
            let mut r = req(json!({"traceparent": bad}));
            let mut ctx = CallContext::default();
            propagate(&Fields::new(), &mut r, &mut ctx, &Tracer::off());
            assert!(ctx.trace.is_none(), "{bad}");
            assert_eq!(r.meta().unwrap()["traceparent"], bad, "left as it was");
        }
    }
}
