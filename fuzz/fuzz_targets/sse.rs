//! The SSE parser on an upstream's stream, cut into arbitrary chunks. The first
//! byte picks the chunk size; fed whole or in chunks, the same events come out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklift_protocol::sse::SseParser;

fn run(data: &[u8], chunk: usize) -> (Vec<String>, Option<String>, Option<u64>) {
    let mut p = SseParser::default();
    let mut events = Vec::new();
    for c in data.chunks(chunk) {
        events.extend(p.feed(c));
    }
    events.extend(p.finish());
    (events, p.last_event_id.clone(), p.retry_ms)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first % 16) + 1;
    let whole = run(rest, rest.len().max(1));
    let chunked = run(rest, chunk);
    assert_eq!(
        whole, chunked,
        "chunking changed the events (chunk size {chunk})"
    );
});
