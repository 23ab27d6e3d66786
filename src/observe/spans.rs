//! tasklift's own spans: one per request at the front door (kind SERVER, a child of
//! the caller's span when it sent a `traceparent`) and one per task (from the
//! threshold to the task's end, a child of the `tools/call` that became it). They
//! are handed to the OTLP exporter ([`super::otlp`]) as they end; with no endpoint
//! configured (or tasklift built without the `otlp` feature) a [`Tracer`] is off and
//! a [`Span`] is an empty value that records nothing.
//!
//! Attribute names follow OpenTelemetry's semantic conventions for MCP where there
//! is one (`mcp.method.name`, `jsonrpc.request.id`, `gen_ai.tool.name`,
//! `mcp.session.id`, `client.address`) and are `tasklift.*` otherwise.

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

/// Where a span sits in its trace: tasklift's hop as it continues upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The trace (the caller's, or a new one tasklift started).
    pub trace_id: [u8; 16],
    /// tasklift's span for this request; the upstream sees it as its parent.
    pub span_id: [u8; 8],
    /// The caller's span, when the trace came from the caller.
    pub parent: Option<[u8; 8]>,
    /// The W3C trace flags, passed on as they came; bit 0 (sampled) says whether
    /// the trace is recorded (the caller's decision, or tasklift's sampling of a
    /// new trace).
    pub flags: u8,
    /// The caller's `tracestate`, kept on tasklift's spans.
    pub trace_state: Option<String>,
}

impl Hop {
    /// A hop continuing the caller's span `parent` of `trace_id`.
    pub fn child_of(trace_id: [u8; 16], parent: [u8; 8], flags: u8) -> Self {
        Self {
            trace_id,
            span_id: new_span_id(),
            parent: Some(parent),
            flags,
            trace_state: None,
        }
    }

    /// Whether the trace is recorded.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The `traceparent` the upstream gets: this trace, tasklift's span.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            self.flags
        )
    }

    /// The trace id as 32 hex digits (logs, tests).
    pub fn trace_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Bytes of `text` in hex (`N` bytes, `2N` digits), if it is that.
pub fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let t = text.as_bytes();
    if t.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in t.chunks(2).enumerate() {
        let d = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        out[i] = d(pair[0])? * 16 + d(pair[1])?;
    }
    Some(out)
}

fn new_span_id() -> [u8; 8] {
    loop {
        let b = uuid::Uuid::new_v4().into_bytes();
        let id: [u8; 8] = b[..8].try_into().expect("8 of 16 bytes");
        if id != [0; 8] {
            return id;
        }
    }
}

fn new_trace_id() -> [u8; 16] {
    // A v4 UUID has 122 random bits; the version and variant bits are as good
    // as any for a trace id, which only needs to be unique.
    uuid::Uuid::new_v4().into_bytes()
}

/// What kind of span (OTLP `SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Work inside tasklift (a task).
    Internal = 1,
    /// A request tasklift answers.
    Server = 2,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// Text.
    Str(String),
    /// A whole number.
    Int(i64),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        Self::Str(s.to_string())
    }
}
impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}
impl From<i64> for AttrValue {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

/// A finished span, as exported.
#[derive(Debug, Clone)]
pub struct SpanData {
    /// Its trace.
    pub trace_id: [u8; 16],
    /// Its id.
    pub span_id: [u8; 8],
    /// Its parent's id (none for a trace's root).
    pub parent: Option<[u8; 8]>,
    /// The caller's `tracestate`.
    pub trace_state: Option<String>,
    /// The W3C trace flags.
    pub flags: u8,
    /// Its name (`tools/call slow`, `task slow`).
    pub name: Cow<'static, str>,
    /// Its kind.
    pub kind: Kind,
    /// Start, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// End, nanoseconds since the Unix epoch.
    pub end_ns: u64,
    /// Attributes.
    pub attrs: Vec<(&'static str, AttrValue)>,
    /// `Some(message)` when the span ended in an error.
    pub error: Option<String>,
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the exporter receives.
pub enum Export {
    /// A span that ended.
    Span(Box<SpanData>),
    /// Send what is queued now, then answer.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Starts tasklift's spans and hands them to the exporter when they end. Cheap to
/// clone; off (and free) when traces are not exported.
#[derive(Clone, Default)]
pub struct Tracer {
    inner: Option<std::sync::Arc<On>>,
}

struct On {
    tx: mpsc::Sender<Export>,
    sample_ratio: f64,
    metrics: std::sync::Arc<super::metrics::Metrics>,
}

impl Tracer {
    /// A tracer that records nothing.
    pub fn off() -> Self {
        Self::default()
    }

    /// A tracer that sends ended spans on `tx` (the exporter's queue).
    pub fn new(
        tx: mpsc::Sender<Export>,
        sample_ratio: f64,
        metrics: std::sync::Arc<super::metrics::Metrics>,
    ) -> Self {
        Self {
            inner: Some(std::sync::Arc::new(On {
                tx,
                sample_ratio,
                metrics,
            })),
        }
    }

    /// A hop for a request that came without a trace: a new trace when spans are
    /// exported (sampled at `sample_ratio`), none otherwise (nothing is passed
    /// upstream, as before tasklift exported traces).
    pub fn new_trace(&self) -> Option<Hop> {
        let on = self.inner.as_ref()?;
        let sampled = match on.sample_ratio {
            r if r >= 1.0 => true,
            r if r <= 0.0 => false,
            r => {
                let b = uuid::Uuid::new_v4().into_bytes();
                let x = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
                (x as f64 / u64::MAX as f64) < r
            }
        };
        Some(Hop {
            trace_id: new_trace_id(),
            span_id: new_span_id(),
            parent: None,
            flags: u8::from(sampled),
            trace_state: None,
        })
    }

    /// tasklift's span for a request of `hop` (its id is the hop's own, the one
    /// the upstream sees as its parent), named by `name`, which is called only
    /// when the span records: nothing is recorded, built or allocated when the
    /// tracer is off or the trace not sampled.
    pub fn server_span(&self, hop: Option<&Hop>, name: impl FnOnce() -> String) -> Span {
        self.start(hop, Kind::Server, name)
    }

    /// A span for a task created by the request of `hop`: a child of that request's
    /// span, in its trace.
    pub fn task_span(&self, hop: Option<&Hop>, name: impl FnOnce() -> String) -> Span {
        self.start(hop, Kind::Internal, name)
    }

    fn start(&self, hop: Option<&Hop>, kind: Kind, name: impl FnOnce() -> String) -> Span {
        let (Some(on), Some(hop)) = (&self.inner, hop) else {
            return Span::none();
        };
        if !hop.sampled() {
            return Span::none();
        }
        let (span_id, parent) = match kind {
            Kind::Server => (hop.span_id, hop.parent),
            Kind::Internal => (new_span_id(), Some(hop.span_id)),
        };
        Span {
            data: Some(Box::new(SpanData {
                trace_id: hop.trace_id,
                span_id,
                parent,
                trace_state: hop.trace_state.clone(),
                flags: hop.flags,
                name: Cow::Owned(name()),
                kind,
                start_ns: now_ns(),
                end_ns: 0,
                attrs: Vec::new(),
                error: None,
            })),
            to: Some(on.clone()),
        }
    }

    /// Send what is queued and wait (at most `within`) for the exporter to take it.
    pub async fn flush(&self, within: std::time::Duration) {
        let Some(on) = &self.inner else { return };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = tokio::time::timeout(within, async {
            if on.tx.send(Export::Flush(tx)).await.is_ok() {
                let _ = rx.await;
            }
        })
        .await;
    }
}

/// A span being recorded; it is exported when dropped. `Span::none()` (the tracer
/// off, or the trace not sampled) ignores everything.
#[derive(Default)]
pub struct Span {
    data: Option<Box<SpanData>>,
    to: Option<std::sync::Arc<On>>,
}

impl Span {
    /// A span that records nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether anything is recorded (attributes worth computing).
    pub fn is_recording(&self) -> bool {
        self.data.is_some()
    }

    /// Set an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<AttrValue>) {
        if let Some(d) = &mut self.data {
            match d.attrs.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => *v = value.into(),
                None => d.attrs.push((key, value.into())),
            }
        }
    }

    /// Mark the span as ended in an error.
    pub fn fail(&mut self, message: impl Into<String>) {
        if let Some(d) = &mut self.data {
            d.error = Some(message.into());
        }
    }

    /// What a JSON-RPC answer tells the span: an error (its code and message),
    /// a tool error (`isError`), or the task the call became.
    pub fn record_answer(&mut self, v: &serde_json::Value) {
        use serde_json::Value;
        if !self.is_recording() {
            return;
        }
        if let Some(e) = v.get("error") {
            if let Some(code) = e.get("code").and_then(Value::as_i64) {
                self.set("rpc.response.status_code", code.to_string());
            }
            let message = e.get("message").and_then(Value::as_str).unwrap_or("error");
            self.fail(message.to_string());
            return;
        }
        let Some(r) = v.get("result") else { return };
        if r.get("isError").and_then(Value::as_bool) == Some(true) {
            self.set("error.type", "tool_error");
            self.fail("the tool answered isError: true");
        }
        if let Some(t) = r.get("taskId").and_then(Value::as_str) {
            self.set("tasklift.task.id", t.to_string());
        }
    }

    /// [`Span::record_answer`] for an answer passed on as the bytes it came in
    /// (read only when the span records).
    pub fn record_answer_bytes(&mut self, b: &[u8]) {
        if self.is_recording() {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(b) {
                self.record_answer(&v);
            }
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let (Some(mut d), Some(on)) = (self.data.take(), self.to.take()) else {
            return;
        };
        d.end_ns = now_ns().max(d.start_ns);
        // Never wait here: a full queue (the collector slow or down) drops the span.
        match on.tx.try_send(Export::Span(d)) {
            Ok(()) => {}
            Err(_) => on.metrics.spans(super::metrics::Spans::Dropped, 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_garbage() {
        let id = [0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd];
        assert_eq!(hex(&id), "0af7651916cd43dd");
        assert_eq!(unhex::<8>("0af7651916cd43dd"), Some(id));
        assert_eq!(unhex::<8>("0af7651916cd43d"), None);
        assert_eq!(unhex::<8>("0af7651916cd43dz"), None);
    }

    #[tokio::test]
    async fn an_off_tracer_records_nothing_and_an_on_one_sends_at_drop() {
        let off = Tracer::off();
        assert!(off.new_trace().is_none());
        let hop = Hop::child_of([1; 16], [2; 8], 1);
        assert!(!off.server_span(Some(&hop), || "x".into()).is_recording());

        let (tx, mut rx) = mpsc::channel(4);
        let metrics = std::sync::Arc::new(super::super::metrics::Metrics::default());
        let on = Tracer::new(tx, 1.0, metrics);
        let mut s = on.server_span(Some(&hop), || "tools/call slow".into());
        s.set("gen_ai.tool.name", "slow");
        s.fail("boom");
        let t = on.task_span(Some(&hop), || "task slow".into());
        drop(s);
        let Some(Export::Span(d)) = rx.recv().await else {
            panic!("a span")
        };
        assert_eq!(d.span_id, hop.span_id);
        assert_eq!(d.parent, Some([2; 8]));
        assert_eq!(d.error.as_deref(), Some("boom"));
        assert!(d.end_ns >= d.start_ns);
        drop(t);
        let Some(Export::Span(d)) = rx.recv().await else {
            panic!("a span")
        };
        assert_eq!(d.parent, Some(hop.span_id), "a task is the request's child");
        assert_eq!(d.kind, Kind::Internal);

        let unsampled = Hop::child_of([1; 16], [2; 8], 0);
        assert!(!on
            .server_span(Some(&unsampled), || unreachable!("not built"))
            .is_recording());
        let (tx, _rx) = mpsc::channel(4);
        let m = std::sync::Arc::new(super::super::metrics::Metrics::default());
        let never = Tracer::new(tx, 0.0, m);
        assert!(!never.new_trace().unwrap().sampled());
    }
}
