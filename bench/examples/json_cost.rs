//! What JSON handling costs a proxied `tools/call`, and what an envelope-only
//! parse would save: the ceiling of the "forward bytes untouched" lever.
//!
//! `cargo run --release -p tasklift-bench --example json_cost`
//!
//! Per call, tasklift today parses the client's body into a `serde_json::Value`,
//! validates it into a `Request`, adds its progress token to `_meta`, serializes
//! the request upstream with its own id; then parses the upstream's answer into a
//! `Value`, marks it complete and serializes the response with the client's id.
//! The envelope path reads only `id`, `method`, `params.name` and `params._meta`
//! (borrowed, `RawValue`) and splices the same changes into the bytes. Both are
//! timed on one thread over the benchmark's own request and answer, and over a
//! 2 MB answer; the figures are per call, in µs, beside the CPU per proxied call
//! that `tasklift-bench` reports.

use std::hint::black_box;
use std::time::Instant;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tasklift_protocol::jsonrpc::{response_from, Incoming, Request};
use tasklift_protocol::mcp;

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fast","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"tasklift-bench","version":"0.1.0"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}"#;

fn answer(text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": "tasklift-7",
        "result": {"content": [{"type": "text", "text": text}], "resultType": "complete"}})
    .to_string()
}

/// Today's path, request and answer.
fn today(body: &[u8], ans: &[u8]) -> (Vec<u8>, String) {
    let v: Value = serde_json::from_slice(body).unwrap();
    let mut req = Request::from_value(v).unwrap();
    let client_id = req.id.clone();
    mcp::meta_mut(&mut req.params).insert(
        mcp::META_PROGRESS_TOKEN.into(),
        json!("tasklift-0123456789ab-7"),
    );
    let up = req.to_vec_with_id(Some(&json!("tasklift-7")));
    let a: Value = serde_json::from_slice(ans).unwrap();
    let Some(Incoming::Response { outcome, .. }) = Incoming::classify(a) else {
        panic!("an answer")
    };
    let outcome = outcome.map(|mut r| {
        mcp::mark_complete(&mut r);
        r
    });
    (up, response_from(client_id.as_ref(), outcome).to_string())
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow)]
    name: Option<&'a str>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AnswerEnvelope<'a> {
    #[serde(borrow)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ResultEnvelope<'a> {
    #[serde(borrow, rename = "resultType")]
    result_type: Option<&'a str>,
}

/// Where `inner` (a slice of `outer`) starts in it.
fn offset(outer: &str, inner: &str) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

/// The envelope path: the same request upstream and response back, by splicing.
fn envelope(body: &[u8], ans: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let body = std::str::from_utf8(body).unwrap();
    let env: Envelope = serde_json::from_str(body).unwrap();
    let params = env.params.unwrap();
    let p: Params = serde_json::from_str(params.get()).unwrap();
    black_box((env.method, p.name));
    let meta = p.meta.unwrap().get();
    let at = offset(body, meta) + 1; // just inside the `_meta` object
    let mut up = Vec::with_capacity(body.len() + 64);
    up.extend_from_slice(br#"{"jsonrpc":"2.0","id":"tasklift-7","method":"#);
    serde_json::to_writer(&mut up, env.method).unwrap();
    up.extend_from_slice(br#","params":"#);
    up.extend_from_slice(&body.as_bytes()[offset(body, params.get())..at]);
    up.extend_from_slice(br#""progressToken":"tasklift-0123456789ab-7","#);
    let params_end = offset(body, params.get()) + params.get().len();
    up.extend_from_slice(&body.as_bytes()[at..params_end]);
    up.push(b'}');
    let ans = std::str::from_utf8(ans).unwrap();
    let a: AnswerEnvelope = serde_json::from_str(ans).unwrap();
    let result = a.result.unwrap().get();
    let r: ResultEnvelope = serde_json::from_str(result).unwrap();
    let mut out = Vec::with_capacity(result.len() + 48);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(env.id.map(|i| i.get()).unwrap_or("null").as_bytes());
    out.extend_from_slice(br#","result":"#);
    if r.result_type.is_none() {
        out.extend_from_slice(br#"{"resultType":"complete","#);
        out.extend_from_slice(&result.as_bytes()[1..]);
    } else {
        out.extend_from_slice(result.as_bytes());
    }
    out.push(b'}');
    (up, out)
}

fn per_call_us(n: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() {
    // The two paths must agree on what goes upstream and back.
    let small = answer("ok");
    let (u1, r1) = today(BODY.as_bytes(), small.as_bytes());
    let (u2, r2) = envelope(BODY.as_bytes(), small.as_bytes());
    let parse = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap();
    assert_eq!(parse(&u1), parse(&u2), "the same request upstream");
    assert_eq!(parse(r1.as_bytes()), parse(&r2), "the same response");

    let big = answer(&"x".repeat(2 << 20));
    println!("JSON work per proxied tools/call, one thread (µs per call)");
    println!(
        "{:<34} {:>10} {:>14} {:>8}",
        "answer", "today", "envelope only", "saved"
    );
    for (label, ans, n) in [
        ("the benchmark's", &small, 200_000),
        ("2 MiB of text", &big, 200),
    ] {
        let a = per_call_us(n, || {
            black_box(today(black_box(BODY.as_bytes()), black_box(ans.as_bytes())));
        });
        let b = per_call_us(n, || {
            black_box(envelope(
                black_box(BODY.as_bytes()),
                black_box(ans.as_bytes()),
            ));
        });
        println!("{label:<34} {a:>10.2} {b:>14.2} {:>8.2}", a - b);
    }
    // The request alone: parsed, validated, token added, serialized upstream.
    let a = per_call_us(200_000, || {
        let v: Value = serde_json::from_slice(black_box(BODY.as_bytes())).unwrap();
        let mut req = Request::from_value(v).unwrap();
        mcp::meta_mut(&mut req.params).insert(
            mcp::META_PROGRESS_TOKEN.into(),
            json!("tasklift-0123456789ab-7"),
        );
        black_box(req.to_vec_with_id(Some(&json!("tasklift-7"))));
    });
    println!("{:<34} {a:>10.2}", "of which the request");
}
