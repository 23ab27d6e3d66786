//! JSON-RPC messages from clients (`Request::from_value`) and from peers
//! (`Incoming::classify`), on arbitrary bytes parsed as JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tasklift_protocol::jsonrpc::{Incoming, Request, RpcError};

fuzz_target!(|data: &[u8]| {
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
