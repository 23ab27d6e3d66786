//! What an operator sees of tasklift at work: the Prometheus counters behind
//! `/metrics` ([`metrics`]), the W3C trace context carried from a client to its
//! upstream ([`trace`]), tasklift's own spans ([`spans`]) and their export over
//! OTLP (`otlp`, the default feature of that name), log fields written without
//! colour ([`fields`]), the log filter ([`log_filter`]), and how an error is told
//! ([`error_chain`]).

pub mod fields;
pub mod log_filter;
pub mod metrics;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod spans;
pub mod trace;

/// Log lines written into a shared buffer, for tests that read what tasklift
/// logs (`.with_writer(move || lines.clone())`).
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl CapturedLog {
    /// What was written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[cfg(test)]
impl std::io::Write for CapturedLog {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

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
