//! `Mcp-Name` / `Mcp-Param-*` header values: decoding arbitrary text, and the
//! encode/decode round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklift_protocol::mcp::{decode_header_value, encode_header_value};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = decode_header_value(s);
    let encoded = encode_header_value(s);
    assert!(
        http::HeaderValue::from_str(&encoded).is_ok() || s.is_empty(),
        "an encoded value is a valid header value: {encoded:?}"
    );
    assert_eq!(
        decode_header_value(&encoded).as_deref(),
        Some(s),
        "round trip"
    );
});
