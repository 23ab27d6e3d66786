//! The fields of a log line or span, written as `tracing-subscriber`'s default
//! formatter writes them when the output has no colour (`name=value`, separated
//! by spaces), without its styling machinery.
//!
//! The default formatter wraps every field's name and `=` in a style, even an
//! empty one; for a request's span (method, client address, upstream) that was a
//! third of the instructions of opening it, on every proxied call. With colour on
//! (a terminal), the default formatter is used as it is.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// `FormatFields` for output without colour: the same text as the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainFields;

impl<'a> MakeVisitor<Writer<'a>> for PlainFields {
    type Visitor = PlainVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> PlainVisitor<'a> {
        PlainVisitor {
            writer: target,
            pending: Pending {
                buf: [0; PENDING],
                len: 0,
            },
            is_empty: true,
            result: Ok(()),
        }
    }
}

/// How much of a line's fields is gathered before it is written: a request
/// span's fields fit, and reach the span's text in one piece (written piece by
/// piece, its string grew five times).
const PENDING: usize = 192;

/// Text gathered for the writer, whole `str`s only.
struct Pending {
    buf: [u8; PENDING],
    len: usize,
}

/// Writes plain fields itself and hands the rest (the message, raw identifiers,
/// errors with their sources) to the default visitor, which escapes them.
pub struct PlainVisitor<'a> {
    writer: Writer<'a>,
    pending: Pending,
    is_empty: bool,
    result: fmt::Result,
}

/// The gathered text, and the writer it goes to when it is full.
struct Gather<'v, 'a> {
    pending: &'v mut Pending,
    writer: &'v mut Writer<'a>,
}

impl fmt::Write for Gather<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let p = &mut *self.pending;
        if p.len + s.len() > PENDING {
            flush(p, self.writer)?;
            if s.len() > PENDING {
                return self.writer.write_str(s);
            }
        }
        p.buf[p.len..p.len + s.len()].copy_from_slice(s.as_bytes());
        p.len += s.len();
        Ok(())
    }
}

/// What was gathered, written.
fn flush(p: &mut Pending, writer: &mut Writer<'_>) -> fmt::Result {
    let text = std::str::from_utf8(&p.buf[..p.len]).map_err(|_| fmt::Error)?;
    let r = writer.write_str(text);
    p.len = 0;
    r
}

impl PlainVisitor<'_> {
    /// The default visitor, for one field, continuing this line.
    fn delegate(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if let Err(e) = flush(&mut self.pending, &mut self.writer) {
            self.result = Err(e);
            return;
        }
        let mut d = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut d);
        self.result = d.finish();
        self.is_empty = false;
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if field.name() == "message" {
            self.delegate(|d| d.record_str(field, value));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_err() {
            return;
        }
        self.delegate(|d| d.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        use fmt::Write as _;
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // Metadata of records from the `log` crate, already on the line.
        if name.starts_with("log.") {
            return;
        }
        if name == "message" || name.starts_with("r#") {
            self.delegate(|d| d.record_debug(field, value));
            return;
        }
        let mut w = Gather {
            pending: &mut self.pending,
            writer: &mut self.writer,
        };
        let pad = !self.is_empty;
        self.result = (|| {
            if pad {
                w.write_char(' ')?;
            }
            w.write_str(name)?;
            w.write_char('=')?;
            write!(w, "{value:?}")
        })();
        self.is_empty = false;
    }
}

impl VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(mut self) -> fmt::Result {
        self.result?;
        flush(&mut self.pending, &mut self.writer)
    }
}

impl VisitFmt for PlainVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        if let Err(e) = flush(&mut self.pending, &mut self.writer) {
            self.result = Err(e);
        }
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::fmt::format::DefaultFields;

    use super::PlainFields;
    use crate::observe::CapturedLog;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the upstream failed")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Lines tasklift writes: spans with display and debug fields, events with
    /// messages (one with an escape sequence in it), numbers, strings, errors with
    /// and without sources, raw identifiers, a field recorded later.
    fn write_lines() {
        let addr: std::net::SocketAddr = "127.0.0.1:4100".parse().unwrap();
        let span = tracing::info_span!("request", method = %"tools/call", client.addr = %addr,
            upstream = %"reports", trace_id = tracing::field::Empty);
        let _g = span.enter();
        tracing::info!("a line with nothing else");
        span.record("trace_id", "0af7651916cd43dd8448eb211c80319c");
        tracing::warn!(
            status = 503,
            wait_s = 2u64,
            ok = true,
            ratio = 0.5,
            "retrying \x1b[31m later"
        );
        tracing::warn!(tool = "slow report", task.id = ?"t-1", "a quoted string and a debug one");
        let plain = std::io::Error::other("connection refused");
        tracing::error!(
            error = &plain as &(dyn std::error::Error + 'static),
            "no source"
        );
        let outer = Outer(std::io::Error::other("reset by peer"));
        tracing::error!(
            error = &outer as &(dyn std::error::Error + 'static),
            "with a source"
        );
        tracing::info!(r#type = "raw", "a raw identifier");
        tracing::info!(message = "a message given as a field", after = 1);
        tracing::info!(empty = "", "");
        let long = "x".repeat(300);
        tracing::info!(first = %long, second = %"y".repeat(150), third = 3, "{long}");
    }

    fn output<N>(fields: N) -> String
    where
        N: for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static,
    {
        let out = CapturedLog::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .fmt_fields(fields)
            .finish();
        tracing::subscriber::with_default(subscriber, write_lines);
        out.text()
    }

    #[test]
    fn lines_read_as_the_default_formatter_writes_them() {
        let plain = output(PlainFields);
        let default = output(DefaultFields::new());
        assert_eq!(plain, default);
        // The lines were written, fields and all.
        assert!(plain.contains(
            "request{method=tools/call client.addr=127.0.0.1:4100 upstream=reports trace_id=\"0af7651916cd43dd8448eb211c80319c\"}"
        ), "{plain}");
        assert!(
            plain.contains("status=503 wait_s=2 ok=true ratio=0.5"),
            "{plain}"
        );
        assert!(plain.contains("error.sources=[reset by peer]"), "{plain}");
        assert_eq!(plain.lines().count(), 9, "{plain}");
    }
}
