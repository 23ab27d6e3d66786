//! The baseline upstream over plain HTTP/1.1: `POST /mcp` answers the MCP
//! methods, `POST /release` releases every held call, `GET /stats` reports calls,
//! held requests and open connections as JSON. It is stateless and answers every
//! request with one JSON body, as a modern server may.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{answer_of, call_of, response, text_result, Call};

#[derive(Default)]
struct Stats {
    calls: AtomicU64,
    held: AtomicU64,
    held_peak: AtomicU64,
    connections: AtomicU64,
    connections_peak: AtomicU64,
}

struct State {
    stats: Stats,
    release: watch::Sender<u64>,
}

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
pub fn run(listen: SocketAddr, threads: usize) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(serve(listen))
}

async fn serve(listen: SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    use std::io::Write;
    std::io::stdout().flush()?;
    let (release, _) = watch::channel(0u64);
    let state = Arc::new(State {
        stats: Stats::default(),
        release,
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

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
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
) -> Response<Full<Bytes>> {
    let status = if outcome.is_ok() {
        StatusCode::OK
    } else {
        error_status
    };
    let body = serde_json::to_vec(&response(id, outcome)).expect("serializes");
    json_response(status, body)
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/stats") => {
            let s = &state.stats;
            let body = json!({
                "calls": s.calls.load(Ordering::Relaxed),
                "held": s.held.load(Ordering::Relaxed),
                "heldPeak": s.held_peak.load(Ordering::Relaxed),
                "connections": s.connections.load(Ordering::Relaxed),
                "connectionsPeak": s.connections_peak.load(Ordering::Relaxed),
            });
            json_response(StatusCode::OK, body.to_string().into_bytes())
        }
        (&Method::POST, "/release") => {
            state.release.send_modify(|g| *g += 1);
            json_response(StatusCode::OK, b"{}".to_vec())
        }
        (&Method::POST, "/mcp") => {
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
            let Some(id) = msg.get("id").cloned() else {
                // A notification.
                let mut r = Response::new(Full::new(Bytes::new()));
                *r.status_mut() = StatusCode::ACCEPTED;
                return r;
            };
            let method = msg["method"].as_str().unwrap_or_default();
            match answer_of(method) {
                Some(outcome) => rpc(StatusCode::NOT_FOUND, &id, outcome),
                None => call(state, &id, &msg["params"]).await,
            }
        }
        _ => {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    }
}

async fn call(state: &State, id: &Value, params: &Value) -> Response<Full<Bytes>> {
    state.stats.calls.fetch_add(1, Ordering::Relaxed);
    let outcome = match call_of(params) {
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
    rpc(StatusCode::OK, id, outcome)
}
