//! JSON values written compactly, byte for byte as `serde_json::to_vec` writes
//! them, with a faster path for strings.
//!
//! `serde_json` looks up every byte of every string in its escape table and
//! writes the string in pieces; a proxied request's strings (method names,
//! `_meta` keys, versions, tool names) almost never need an escape. Here a
//! string is checked eight bytes at a time and, when nothing in it needs
//! escaping, copied whole; one that does is written by `serde_json` itself, as
//! are numbers, so the output is the same bytes.

use serde_json::{Map, Value};

/// The bytes `write` appends, written into a buffer this thread keeps and
/// copied out at their length. Written straight into a new vector, a small
/// request grew it twice, and an upstream then shrank it to fit to keep it for
/// the call's retries.
pub fn collect(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    /// What a thread's buffer may keep between uses.
    const KEEP: usize = 64 * 1024;
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|buf| {
        buf.clear();
        write(buf);
        let out = buf.to_vec();
        if buf.capacity() > KEEP {
            *buf = Vec::new();
        }
        out
    })
}

/// `v` appended to `out`.
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => serde_json::to_writer(&mut *out, n).expect("numbers serialize"),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(m) => write_map(out, m),
    }
}

/// An object appended to `out`, its members in the map's order.
pub fn write_map(out: &mut Vec<u8>, m: &Map<String, Value>) {
    out.push(b'{');
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k);
        out.push(b':');
        write_value(out, v);
    }
    out.push(b'}');
}

/// A JSON string appended to `out`: copied whole when nothing in it needs an
/// escape, else written by `serde_json`.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    if needs_escape(s.as_bytes()) {
        serde_json::to_writer(&mut *out, s).expect("strings serialize");
    } else {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

/// Whether any byte is one JSON escapes: a control character, `"` or `\`.
fn needs_escape(bytes: &[u8]) -> bool {
    if bytes.len() < 8 {
        return bytes.iter().any(|&c| c < 0x20 || c == b'"' || c == b'\\');
    }
    let mut chunks = bytes.chunks_exact(8);
    if chunks.any(word_needs_escape) {
        return true;
    }
    // The last eight bytes, overlapping the last whole word: no byte-by-byte tail.
    word_needs_escape(&bytes[bytes.len() - 8..])
}

/// Whether any of eight bytes needs an escape: a byte below 0x20, or equal to
/// `"` or `\`, leaves its high bit set in one of these (Mycroft's zero-byte
/// test, exact for whether there is one).
fn word_needs_escape(chunk: &[u8]) -> bool {
    escape_bytes(u64::from_le_bytes(chunk.try_into().expect("eight bytes"))) != 0
}

/// The high bit of each byte of `w` (eight bytes, little-endian) that JSON
/// escapes in a string: below 0x20, `"` or `\`. A borrow sets bits only above a
/// byte that is one, so the lowest set bit is exact (the scan finds a string's
/// end by it).
pub(crate) fn escape_bytes(w: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let ctrl = w.wrapping_sub(ONES * 0x20) & !w;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let b = w ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b;
    (ctrl | quote | backslash) & HIGH
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        write_value(&mut out, v);
        out
    }

    #[test]
    fn values_are_the_bytes_serde_json_writes() {
        let values = [
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(-17),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1.5),
            json!(-0.0),
            json!(1e300),
            json!(""),
            json!("plain"),
            json!("exactly8"),
            json!("a \"quoted\" word"),
            json!("back\\slash"),
            json!("tab\there, newline\n, nul \u{0}, unit separator \u{1f}, delete \u{7f}"),
            json!("déjà vu 日本語 🦀"),
            json!("eight-by\"e"),
            json!("sixteen-bytes-ok\\"),
            json!([]),
            json!({}),
            json!([1, "two", [3.5, null], {"four": false}]),
            json!({"jsonrpc": "2.0", "id": "a-1", "method": "tools/call", "params": {
                "name": "report", "arguments": {"q": "x\"y", "n": [1, 2, {"deep": {}}]},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "progressToken": "tasklift-1f-2"}}}),
            json!({"key \"with\" quotes": 1, "ctrl\u{1}": 2, "": 3}),
        ];
        for v in values {
            assert_eq!(
                String::from_utf8(written(&v)).unwrap(),
                serde_json::to_string(&v).unwrap(),
                "{v}"
            );
        }
    }

    #[test]
    fn every_byte_that_needs_an_escape_is_found_wherever_it_is() {
        for c in (0u8..0x20).chain([b'"', b'\\']) {
            for len in 1..=20 {
                for at in 0..len {
                    let mut s = vec![b'a'; len];
                    s[at] = c;
                    assert!(needs_escape(&s), "byte {c:#x} at {at} of {len}");
                }
            }
        }
        for len in 0..=20 {
            assert!(!needs_escape(&vec![b'a'; len]), "{len} plain bytes");
        }
        for c in (0x20u8..0x80).filter(|c| *c != b'"' && *c != b'\\') {
            assert!(!needs_escape(&[c; 19]), "byte {c:#x}");
        }
        assert!(!needs_escape(
            "ünïcødé and more than eight bytes".as_bytes()
        ));
    }
}
