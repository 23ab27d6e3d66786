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

/// Equal, floats within a few units in the last place: the client's own text
/// of a float (which goes upstream as it is) and serde_json's writing of the
/// value it parsed from it (when the map goes) may parse back a unit apart, as
/// serde_json parses floats fast rather than correctly rounded.
fn same(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::Number(a), Value::Number(b)) if a.is_f64() || b.is_f64() => {
            let (a, b) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
            a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, x)| b.get(k).is_some_and(|y| same(x, y)))
        }
        _ => x == y,
    }
}

/// [`written`] of two requests, compared with [`same`].
fn same_written(a: &Request, b: &Request) {
    let ((a1, a2), (b1, b2)) = (written(a), written(b));
    assert!(same(&a1, &b1), "{a1} / {b1}");
    assert!(same(&a2, &b2), "{a2} / {b2}");
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
            same_written(&a, &b);
            a.params.insert_meta("progressToken", json!("t"));
            b.params.insert_meta("progressToken", json!("t"));
            same_written(&a, &b);
            assert_eq!(*a.params, *b.params);
            same_written(&a, &b);
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
