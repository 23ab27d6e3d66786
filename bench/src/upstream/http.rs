//! The baseline upstream over plain HTTP/1.1: `POST /mcp` answers the MCP
//! methods, `POST /release` releases every held call, `GET /stats` reports calls,
//! held requests and open connections as JSON. As a modern server it is stateless
//! and answers every request with one JSON body.
//!
//! With `--legacy` it is a 2025-11-25 server instead, as most deployed MCP servers
//! are (the official SDKs' Streamable HTTP servers): `initialize` opens a session
//! (`Mcp-Session-Id`), every other request must carry a live one (400 without, 404
//! for an unknown one), `DELETE` closes it, `GET` streams are refused with 405, and
//! results carry no `resultType`. With `--sse` too, a `tools/call` is answered as
//! an SSE stream holding the one response, as those SDKs answer by default: with
//! `Transfer-Encoding: chunked` (no length), its last chunk after the event.
//!
//! `/stats` counts connections accepted since the start (`connectionsAccepted`), so
//! a scenario can tell a proxy that reuses its upstream connections from one that
//! opens one per call.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{answer_of, call_of, legacy_answer_of, response, text_result, Call, Mode};

#[derive(Default)]
struct Stats {
    calls: AtomicU64,
    held: AtomicU64,
    held_peak: AtomicU64,
    connections: AtomicU64,
    connections_peak: AtomicU64,
    connections_accepted: AtomicU64,
    sessions: AtomicU64,
}

struct State {
    stats: Stats,
    release: watch::Sender<u64>,
    mode: Mode,
    /// Live legacy sessions.
    sessions: Mutex<HashSet<String>>,
}

/// The legacy session header.
const SESSION: &str = "mcp-session-id";

/// Decrements a gauge when dropped (a held call whose client went away too).
struct Gauge<'a>(&'a AtomicU64);

impl<'a> Gauge<'a> {
    fn up(g: &'a AtomicU64, peak: &AtomicU64) -> Self {
        let now = g.fetch_add(1, Ordering::Relaxed) + 1;
        peak.fetch_max(now, Ordering::Relaxed);
        Gauge(g)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Run the server until killed; prints `listening on ADDR` first.
pub fn run(listen: SocketAddr, threads: usize, mode: Mode) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(serve(listen, mode))
}

async fn serve(listen: SocketAddr, mode: Mode) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    use std::io::Write;
    std::io::stdout().flush()?;
    let (release, _) = watch::channel(0u64);
    let state = Arc::new(State {
        stats: Stats::default(),
        release,
        mode,
        sessions: Mutex::new(HashSet::new()),
    });
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        state
            .stats
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        let state = state.clone();
        tokio::spawn(async move {
            let _conn = Gauge::up(&state.stats.connections, &state.stats.connections_peak);
            let svc = service_fn(|req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            // HTTP/1.1, or HTTP/2 with prior knowledge (tasklift's `http2 = true`),
            // with no cap on concurrent streams: the memory scenario holds 10,000.
            let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            b.http2().max_concurrent_streams(None);
            let _ = b.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

/// A response body of one piece: with its length (`whole`), or chunked, as a
/// stream whose length nobody knows in advance (`chunked`: an SDK's SSE answer).
struct Reply {
    data: Option<Bytes>,
    chunked: bool,
}

impl Reply {
    fn whole(data: Bytes) -> Self {
        Self {
            data: Some(data),
            chunked: false,
        }
    }

    fn chunked(data: Bytes) -> Self {
        Self {
            data: Some(data),
            chunked: true,
        }
    }
}

impl http_body::Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.data, self.chunked) {
            (_, true) => SizeHint::default(),
            (Some(d), false) => SizeHint::with_exact(d.len() as u64),
            (None, false) => SizeHint::with_exact(0),
        }
    }
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Reply> {
    let mut r = Response::new(Reply::whole(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A JSON-RPC answer as an HTTP response: 200, or `error_status` for an error.
fn rpc(
    error_status: StatusCode,
    id: &Value,
    outcome: Result<Value, (i64, String)>,
) -> Response<Reply> {
    let status = if outcome.is_ok() {
        StatusCode::OK
    } else {
        error_status
    };
    let body = serde_json::to_vec(&response(id, outcome)).expect("serializes");
    json_response(status, body)
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Reply> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/stats") => {
            let s = &state.stats;
            let body = json!({
                "calls": s.calls.load(Ordering::Relaxed),
                "held": s.held.load(Ordering::Relaxed),
                "heldPeak": s.held_peak.load(Ordering::Relaxed),
                "connections": s.connections.load(Ordering::Relaxed),
                "connectionsPeak": s.connections_peak.load(Ordering::Relaxed),
                "connectionsAccepted": s.connections_accepted.load(Ordering::Relaxed),
                "sessionsOpened": s.sessions.load(Ordering::Relaxed),
            });
            json_response(StatusCode::OK, body.to_string().into_bytes())
        }
        (&Method::POST, "/release") => {
            state.release.send_modify(|g| *g += 1);
            json_response(StatusCode::OK, b"{}".to_vec())
        }
        (&Method::GET, "/mcp") if state.mode.legacy => empty(StatusCode::METHOD_NOT_ALLOWED),
        (&Method::DELETE, "/mcp") if state.mode.legacy => {
            let sid = session_of(&req).unwrap_or_default();
            match state.sessions.lock().expect("sessions").remove(&sid) {
                true => empty(StatusCode::OK),
                false => empty(StatusCode::NOT_FOUND),
            }
        }
        (&Method::POST, "/mcp") => {
            let sid = session_of(&req);
            let bytes = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return rpc(
                        StatusCode::BAD_REQUEST,
                        &Value::Null,
                        Err((-32700, "bad body".into())),
                    )
                }
            };
            let Ok(msg) = serde_json::from_slice::<Value>(&bytes) else {
                return rpc(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    Err((-32700, "Parse error".into())),
                );
            };
            let method = msg["method"].as_str().unwrap_or_default();
            if state.mode.legacy {
                if method == "initialize" {
                    return initialize(state, msg.get("id").unwrap_or(&Value::Null));
                }
                if let Some(refused) = state.refused(sid.as_deref()) {
                    return refused;
                }
            }
            let Some(id) = msg.get("id").cloned() else {
                // A notification.
                return empty(StatusCode::ACCEPTED);
            };
            let answer = match state.mode.legacy {
                true => legacy_answer_of(method),
                false => answer_of(method),
            };
            match answer {
                Some(outcome) => rpc(StatusCode::NOT_FOUND, &id, outcome),
                None => call(state, &id, &msg["params"]).await,
            }
        }
        _ => empty(StatusCode::NOT_FOUND),
    }
}

fn empty(status: StatusCode) -> Response<Reply> {
    let mut r = Response::new(Reply::whole(Bytes::new()));
    *r.status_mut() = status;
    r
}

fn session_of(req: &Request<Incoming>) -> Option<String> {
    let v = req.headers().get(SESSION)?;
    v.to_str().ok().map(str::to_string)
}

impl State {
    /// A legacy request without a live session: 400 without one (as the SDKs
    /// answer, which is also how tasklift's era probe tells a legacy server), 404
    /// for one that is unknown or closed.
    fn refused(&self, sid: Option<&str>) -> Option<Response<Reply>> {
        let (status, message) = match sid {
            None => (
                StatusCode::BAD_REQUEST,
                "Bad Request: No valid session ID provided",
            ),
            Some(s) if self.sessions.lock().expect("sessions").contains(s) => return None,
            Some(_) => (StatusCode::NOT_FOUND, "Session not found"),
        };
        Some(rpc(status, &Value::Null, Err((-32000, message.into()))))
    }
}

/// A legacy `initialize`: a new session, its id in `Mcp-Session-Id`.
fn initialize(state: &State, id: &Value) -> Response<Reply> {
    let n = state.stats.sessions.fetch_add(1, Ordering::Relaxed);
    let sid = format!("bench-{}-{n}", std::process::id());
    state.sessions.lock().expect("sessions").insert(sid.clone());
    let result = json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "tasklift-bench-upstream", "version": env!("CARGO_PKG_VERSION")},
    });
    let mut r = rpc(StatusCode::OK, id, Ok(result));
    r.headers_mut()
        .insert(SESSION, HeaderValue::from_str(&sid).expect("header-safe"));
    r
}

async fn call(state: &State, id: &Value, params: &Value) -> Response<Reply> {
    state.stats.calls.fetch_add(1, Ordering::Relaxed);
    let mut outcome = match call_of(params) {
        Call::Now(outcome) => outcome,
        Call::Sleep(d) => {
            tokio::time::sleep(d).await;
            Ok(text_result("slept"))
        }
        Call::Hold(max) => {
            let mut rx = state.release.subscribe();
            let _held = Gauge::up(&state.stats.held, &state.stats.held_peak);
            let released = tokio::time::timeout(max, rx.changed()).await.is_ok();
            Ok(text_result(if released {
                "released"
            } else {
                "held until max_ms"
            }))
        }
    };
    if state.mode.legacy {
        if let Ok(Value::Object(r)) = &mut outcome {
            r.remove("resultType");
        }
    }
    if state.mode.sse {
        let body = serde_json::to_string(&response(id, outcome)).expect("serializes");
        let mut r = Response::new(Reply::chunked(Bytes::from(format!(
            "event: message\ndata: {body}\n\n"
        ))));
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        return r;
    }
    rpc(StatusCode::OK, id, outcome)
}
