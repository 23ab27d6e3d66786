//! Helpers shared by the fuzz targets: turn raw fuzzer bytes into the shapes
//! tasklift's parsers take.

use http::{HeaderName, HeaderValue};
use tasklift::headers::Fields;

/// Split `data` into a header block and a body at the first blank line
/// (`\n\n`). Each header line is `name: value`; lines that are not a valid header
/// name/value pair are dropped, as hyper would never hand them over. A header may
/// repeat. Without a blank line, everything is the body.
pub fn headers_and_body(data: &[u8]) -> (Fields, &[u8]) {
    let Some(pos) = data.windows(2).position(|w| w == b"\n\n") else {
        return (Fields::new(), data);
    };
    let (head, body) = (&data[..pos], &data[pos + 2..]);
    let mut h = Fields::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            h.append(n, v);
        }
    }
    (h, body)
}
