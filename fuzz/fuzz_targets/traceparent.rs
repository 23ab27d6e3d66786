//! W3C trace context from the client (`traceparent`/`tracestate`/`baggage`
//! headers and `_meta` keys) through `trace::propagate`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklift::observe::spans::Tracer;
use tasklift::observe::trace;
use tasklift::upstream::CallContext;
use tasklift_fuzz::headers_and_body;
use tasklift_protocol::jsonrpc::Request;

fuzz_target!(|data: &[u8]| {
    let (h, body) = headers_and_body(data);
    let req = match serde_json::from_slice(body).ok().map(Request::from_value) {
        Some(Ok(r)) => r,
        _ => Request::from_value(serde_json::json!({"jsonrpc": "2.0", "method": "ping"}))
            .expect("a valid request"),
    };
    let mut req = req;
    let mut ctx = CallContext {
        forward_headers: h.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ..CallContext::default()
    };
    trace::propagate(&h, &mut req, &mut ctx, &Tracer::off());
    if let Some(hop) = &ctx.trace {
        let trace_id = hop.trace_hex();
        assert_eq!(trace_id.len(), 32);
        let tp = req
            .meta()
            .and_then(|m| m.get("traceparent"))
            .and_then(|v| v.as_str());
        let tp = tp.expect("a continued trace has a traceparent in _meta");
        assert!(tp.starts_with(&format!("00-{trace_id}-")), "{tp}");
    }
});
