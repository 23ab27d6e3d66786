//! What an operator sees of tasklift at work: the Prometheus counters behind
//! `/metrics` ([`metrics`]), the W3C trace context carried from a client to its
//! upstream ([`trace`]), tasklift's own spans ([`spans`]) and their export over
//! OTLP (`otlp`, the default feature of that name), log fields written without
//! colour ([`fields`]), and how an error is told
//! ([`error_chain`]).

pub mod fields;
pub mod metrics;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod spans;
pub mod trace;

/// An error and its causes as one line ("error performing TLS handshake: invalid
/// peer certificate: UnknownIssuer"): a client library's outermost error often says
/// only which step failed, and the cause is further in. A cause whose text is
/// already there (wrappers often repeat it) is said once.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        next = s.source();
    }
    out
}
