//! JSON-RPC messages from clients (`Request::from_value`) and from peers
//! (`Incoming::classify`), on arbitrary bytes parsed as JSON; and a body read the
//! front door's way (`Envelope::from_slice`: scanned, params kept as text), which
//! must be the request parsing it gives, read and written alike.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tasklift_protocol::jsonrpc::{Envelope, Incoming, Request, RpcError};

/// What an upstream gets of `req`'s params: as they are, and without `_meta`'s
/// protocol fields (a legacy upstream).
fn written(req: &Request) -> (Value, Value) {
    let (mut plain, mut legacy) = (Vec::new(), Vec::new());
    req.params.write(&mut plain);
    req.params
        .write_without_meta(&mut legacy, &["io.modelcontextprotocol/protocolVersion"]);
    let read = |b: &[u8]| serde_json::from_slice(b).expect("written params are JSON");
    (read(&plain), read(&legacy))
}

fuzz_target!(|data: &[u8]| {
    let read = Envelope::from_slice(data).map(Request::from_envelope);
    let parsed = serde_json::from_slice::<Value>(data).map(Request::from_value);
    match (read, parsed) {
        (Ok(Ok(mut a)), Ok(Ok(mut b))) => {
            assert_eq!((&a.id, &a.method), (&b.id, &b.method));
            assert_eq!(a.str_param("name"), b.str_param("name"));
            assert_eq!(a.params.contains_key("task"), b.params.contains_key("task"));
            for key in ["progressToken", "io.modelcontextprotocol/protocolVersion"] {
                assert_eq!(a.meta_value(key), b.meta_value(key));
                assert_eq!(a.meta_str(key), b.meta_str(key));
            }
            assert_eq!(written(&a), written(&b));
            a.params.insert_meta("progressToken", json!("t"));
            b.params.insert_meta("progressToken", json!("t"));
            assert_eq!(written(&a), written(&b));
            assert_eq!(*a.params, *b.params);
            assert_eq!(written(&a), written(&b));
        }
        (Ok(Err(a)), Ok(Err(b))) => assert_eq!(a.message, b.message),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("read: {:?}, parsed: {:?}", a.map(|r| r.is_ok()), b.map(|r| r.is_ok())),
    }
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(req) = Request::from_value(v.clone()) {
        let _ = req.meta();
        let _ = req.str_param("name");
        // What tasklift forwards must parse back to the same request.
        let again = Request::from_value(req.to_value_with_id(req.id.as_ref()))
            .expect("a re-serialized request is valid");
        assert_eq!(again.method, req.method);
        assert_eq!(again.params, req.params);
    }
    if let Some(Incoming::Response {
        outcome: Err(e), ..
    }) = Incoming::classify(v.clone())
    {
        let _ = RpcError::from_value(&e.to_value());
    }
    let _ = RpcError::from_value(&v);
});
