//! Front-door validation of a POST: arbitrary headers (`name: value` lines, a
//! blank line) and a JSON body through `Request::from_value` and
//! `validate::check_request`, plus the Origin check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklift::front::validate;
use tasklift_fuzz::headers_and_body;
use tasklift_protocol::jsonrpc::Request;

fuzz_target!(|data: &[u8]| {
    let (h, body) = headers_and_body(data);
    let _ = validate::origin_allowed(&h, &[]);
    let _ = validate::origin_allowed(&h, &["https://app.example".to_string()]);
    let Ok(v) = serde_json::from_slice(body) else {
        return;
    };
    let Ok(req) = Request::from_value(v) else {
        return;
    };
    if let Err(r) = validate::check_request(&h, &req) {
        assert!(r.status().is_client_error(), "a rejection is a 4xx: {r:?}");
    }
});
