//! W3C Trace Context: parsing a `traceparent` header value.

/// The fields of a valid `traceparent`, as the hex text they came as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traceparent<'a> {
    /// 32 hex digits, not all zero.
    pub trace_id: &'a str,
    /// The caller's span: 16 hex digits, not all zero.
    pub parent_id: &'a str,
    /// 2 hex digits (bit 0: sampled).
    pub flags: &'a str,
}

/// A parsed `traceparent`: version 00, 32 hex trace id, 16 hex parent id, 2 hex
/// flags; all-zero ids are invalid.
pub fn parse(tp: &str) -> Option<Traceparent<'_>> {
    let mut parts = tp.trim().split('-');
    let (v, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let ok = hex(v, 2)
        && v != "ff"
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && parent.bytes().any(|b| b != b'0')
        && (v != "00" || parts.next().is_none());
    ok.then_some(Traceparent {
        trace_id: trace,
        parent_id: parent,
        flags,
    })
}
