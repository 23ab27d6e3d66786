//! A line from a stdio child's stdout, handled as `upstream::stdio` does: blank
//! lines skipped, the rest parsed as JSON and classified (`Incoming::classify`).
//! Arbitrary bytes are split into lines like `BufReader::lines` (UTF-8 only).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tasklift_protocol::jsonrpc::Incoming;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let Some(msg) = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(Incoming::classify)
        else {
            continue;
        };
        if let Incoming::Notification { params, .. } = &msg {
            let _ = params.get("progressToken").map(Value::to_string);
        }
        if let Incoming::Response { id, .. } = &msg {
            let _ = id.as_u64();
        }
    }
});
