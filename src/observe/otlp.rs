//! OTLP over HTTP/protobuf: tasklift's spans, batched and POSTed to a collector as
//! an `ExportTraceServiceRequest` (opentelemetry-proto, `trace/v1`).
//!
//! The protobuf is written by hand: the export is one message of a few nested
//! fields, and an encoder of varints and length-delimited fields is smaller than a
//! protobuf runtime and generated code. Field numbers are those of
//! `opentelemetry/proto/trace/v1/trace.proto` and `common/v1/common.proto`.
//!
//! The exporter never slows a request: spans are queued without waiting
//! ([`super::spans::Span`]'s drop), sent in batches every second or every
//! [`MAX_BATCH`] spans, and an export that fails is retried twice (429, 502, 503,
//! 504 and connection errors, as the OTLP specification asks) and then counted in
//! `tasklift_trace_spans_total{outcome="failed"}` and logged once a minute.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;

use super::metrics::{Metrics, Spans};
use super::spans::{AttrValue, Export, SpanData, Tracer};
use crate::config::TelemetryConfig;

/// Most spans in one export.
pub const MAX_BATCH: usize = 512;
/// Spans waiting to be exported; beyond this, new ones are dropped (and counted).
pub const QUEUE: usize = 8192;
/// How often queued spans are sent.
const EVERY: Duration = Duration::from_secs(1);
/// How long one export may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Start exporting to `cfg.endpoint`: the tracer the rest of tasklift records with,
/// and the exporter's loop (at shutdown, [`Tracer::flush`] sends what is left, then
/// the loop is aborted). `None` when no endpoint is configured.
pub fn start(
    cfg: &TelemetryConfig,
    metrics: Arc<Metrics>,
) -> Result<Option<(Tracer, tokio::task::JoinHandle<()>)>, String> {
    let Some(endpoint) = cfg.endpoint.clone() else {
        return Ok(None);
    };
    let client = crate::tls::http1_client(endpoint.scheme_str() == Some("https"))?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let tracer = Tracer::new(tx, cfg.sample_ratio, metrics.clone());
    let exporter = Exporter {
        client,
        endpoint,
        headers: cfg.headers.clone(),
        resource: resource(&cfg.service_name),
        metrics,
        last_warned: None,
    };
    tracing::info!(endpoint = %exporter.endpoint, service = %cfg.service_name, sample_ratio = cfg.sample_ratio, "exporting traces over OTLP/HTTP");
    Ok(Some((tracer, tokio::spawn(exporter.run(rx)))))
}

struct Exporter {
    client: crate::tls::Http1Client,
    endpoint: http::Uri,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The encoded `Resource` message, the same in every export.
    resource: Vec<u8>,
    metrics: Arc<Metrics>,
    last_warned: Option<tokio::time::Instant>,
}

impl Exporter {
    async fn run(mut self, mut rx: mpsc::Receiver<Export>) {
        let mut batch: Vec<SpanData> = Vec::new();
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(Export::Span(s)) => {
                        batch.push(*s);
                        if batch.len() >= MAX_BATCH {
                            self.send(&mut batch).await;
                        }
                    }
                    Some(Export::Flush(done)) => {
                        while let Ok(m) = rx.try_recv() {
                            if let Export::Span(s) = m {
                                batch.push(*s);
                            }
                        }
                        self.send(&mut batch).await;
                        let _ = done.send(());
                    }
                    None => break,
                },
                _ = tick.tick() => self.send(&mut batch).await,
            }
        }
        self.send(&mut batch).await;
    }

    /// Export `batch` (in pieces of at most MAX_BATCH) and empty it.
    async fn send(&mut self, batch: &mut Vec<SpanData>) {
        while !batch.is_empty() {
            let n = batch.len().min(MAX_BATCH);
            let part: Vec<SpanData> = batch.drain(..n).collect();
            let body = Bytes::from(encode_request(&self.resource, &part));
            match self.post(body).await {
                Ok(()) => self.metrics.spans(Spans::Exported, n as u64),
                Err(e) => {
                    self.metrics.spans(Spans::Failed, n as u64);
                    let now = tokio::time::Instant::now();
                    if self
                        .last_warned
                        .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
                    {
                        self.last_warned = Some(now);
                        tracing::warn!(endpoint = %self.endpoint, error = %e, spans = n, "could not export spans to the OTLP collector (said at most once a minute; see tasklift_trace_spans_total)");
                    }
                }
            }
        }
    }

    /// POST one export, retried twice when the collector says to or cannot be reached.
    async fn post(&self, body: Bytes) -> Result<(), String> {
        let mut backoff = Duration::from_millis(500);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut req = http::Request::post(self.endpoint.clone())
                .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                .header(
                    http::header::USER_AGENT,
                    concat!("tasklift/", env!("CARGO_PKG_VERSION")),
                );
            for (k, v) in &self.headers {
                req = req.header(k, v);
            }
            let req = req
                .body(Full::new(body.clone()))
                .map_err(|e| e.to_string())?;
            let outcome = match tokio::time::timeout(TIMEOUT, self.client.request(req)).await {
                Err(_) => Err((true, format!("no answer within {TIMEOUT:?}"))),
                Ok(Err(e)) => Err((true, super::error_chain(&e))),
                Ok(Ok(resp)) => {
                    let status = resp.status();
                    // Read the body so the connection is reused.
                    let text = resp
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    if status.is_success() {
                        Ok(())
                    } else {
                        let retry = matches!(status.as_u16(), 429 | 502 | 503 | 504);
                        let said =
                            String::from_utf8_lossy(&text[..text.len().min(200)]).into_owned();
                        Err((retry, format!("the collector answered {status} {said}")))
                    }
                }
            };
            match outcome {
                Ok(()) => return Ok(()),
                Err((true, _)) if attempt < 3 => {
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err((_, e)) => return Err(e),
            }
        }
    }
}

/// The `Resource` of tasklift's spans: `service.name`, `service.version` and the
/// SDK attributes a backend groups by.
fn resource(service_name: &str) -> Vec<u8> {
    let mut r = Vec::new();
    for (k, v) in [
        ("service.name", service_name),
        ("service.version", crate::VERSION),
        ("telemetry.sdk.name", "tasklift"),
        ("telemetry.sdk.language", "rust"),
    ] {
        key_value(&mut r, 1, k, &AttrValue::Str(v.to_string()));
    }
    r
}

/// `ExportTraceServiceRequest { resource_spans: [ResourceSpans { resource,
/// scope_spans: [ScopeSpans { scope: {name: "tasklift", version}, spans }] }] }`.
pub fn encode_request(resource: &[u8], spans: &[SpanData]) -> Vec<u8> {
    let mut scope = Vec::new();
    string(&mut scope, 1, "tasklift");
    string(&mut scope, 2, crate::VERSION);
    let mut scope_spans = Vec::new();
    message(&mut scope_spans, 1, &scope);
    let mut one = Vec::new();
    for s in spans {
        one.clear();
        encode_span(&mut one, s);
        message(&mut scope_spans, 2, &one);
    }
    let mut resource_spans = Vec::new();
    message(&mut resource_spans, 1, resource);
    message(&mut resource_spans, 2, &scope_spans);
    let mut out = Vec::with_capacity(resource_spans.len() + 8);
    message(&mut out, 1, &resource_spans);
    out
}

/// One `Span`.
fn encode_span(out: &mut Vec<u8>, s: &SpanData) {
    bytes_field(out, 1, &s.trace_id);
    bytes_field(out, 2, &s.span_id);
    if let Some(ts) = &s.trace_state {
        string(out, 3, ts);
    }
    if let Some(p) = &s.parent {
        bytes_field(out, 4, p);
    }
    string(out, 5, &s.name);
    tag(out, 6, 0);
    varint(out, s.kind as u64);
    fixed64(out, 7, s.start_ns);
    fixed64(out, 8, s.end_ns);
    for (k, v) in &s.attrs {
        key_value(out, 9, k, v);
    }
    let mut status = Vec::new();
    // STATUS_CODE_UNSET (an empty message) unless the span ended in an error.
    if let Some(m) = &s.error {
        string(&mut status, 2, m);
        tag(&mut status, 3, 0);
        varint(&mut status, 2); // STATUS_CODE_ERROR
    }
    message(out, 15, &status);
    // SpanFlags: the W3C trace flags (sampled), and that the parent's
    // remoteness is known (bit 8) and whether it is remote (bit 9).
    let mut flags: u32 = u32::from(s.flags) | 0x100;
    if s.parent.is_some() && s.kind == super::spans::Kind::Server {
        flags |= 0x200;
    }
    tag(out, 16, 5);
    out.extend_from_slice(&flags.to_le_bytes());
}

/// A `KeyValue { key = 1; AnyValue value = 2 }` as field `field`.
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, v: &AttrValue) {
    let mut any = Vec::new();
    match v {
        AttrValue::Str(s) => string(&mut any, 1, s),
        AttrValue::Int(i) => {
            tag(&mut any, 3, 0);
            varint(&mut any, *i as u64);
        }
    }
    let mut kv = Vec::new();
    string(&mut kv, 1, key);
    message(&mut kv, 2, &any);
    message(out, field, &kv);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes_field(out, field, s.as_bytes());
}

fn message(out: &mut Vec<u8>, field: u32, m: &[u8]) {
    bytes_field(out, field, m);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut v = Vec::new();
        varint(&mut v, 1);
        varint(&mut v, 300);
        varint(&mut v, u64::MAX);
        assert_eq!(&v[..3], &[0x01, 0xac, 0x02]);
        assert_eq!(v.len(), 3 + 10);
        // A negative int64 attribute is ten bytes, as protobuf writes it.
        let mut kv = Vec::new();
        key_value(&mut kv, 9, "n", &AttrValue::Int(-1));
        assert!(kv.ends_with(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]));
    }
}
