//! The baseline upstream: a minimal 2026-07-28 MCP server over plain HTTP/1.1.
//!
//! `POST /mcp` answers `server/discover`, `tools/list` and `tools/call` for three
//! tools: `fast` (a small fixed result at once), `sleep` (`{"ms": N}`, answers after N
//! ms) and `hold` (answers when `POST /release` is called, or after `{"max_ms": N}`,
//! default 10 minutes). `GET /stats` reports calls, held requests and open
//! connections as JSON. It is stateless and answers every request with one JSON
//! body, as a modern server may.

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
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

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
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
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

fn rpc_result(id: &Value, result: Value) -> Response<Full<Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).expect("serializes"),
    )
}

fn rpc_error(status: StatusCode, id: &Value, code: i64, message: &str) -> Response<Full<Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    json_response(status, serde_json::to_vec(&body).expect("serializes"))
}

fn text_result(text: &str) -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": false})
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
                    return rpc_error(StatusCode::BAD_REQUEST, &Value::Null, -32700, "bad body")
                }
            };
            let Ok(msg) = serde_json::from_slice::<Value>(&bytes) else {
                return rpc_error(StatusCode::BAD_REQUEST, &Value::Null, -32700, "Parse error");
            };
            let Some(id) = msg.get("id").cloned() else {
                // A notification.
                let mut r = Response::new(Full::new(Bytes::new()));
                *r.status_mut() = StatusCode::ACCEPTED;
                return r;
            };
            let method = msg["method"].as_str().unwrap_or_default();
            match method {
                "server/discover" => rpc_result(
                    &id,
                    json!({
                        "resultType": "complete",
                        "supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {}},
                        "ttlMs": 0,
                        "cacheScope": "public",
                        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "tasklift-bench-upstream", "version": env!("CARGO_PKG_VERSION")}},
                    }),
                ),
                "ping" => rpc_result(&id, json!({"resultType": "complete"})),
                "tools/list" => rpc_result(&id, tools_list()),
                "tools/call" => call(state, &id, &msg["params"]).await,
                _ => rpc_error(
                    StatusCode::NOT_FOUND,
                    &id,
                    -32601,
                    &format!("Method not found: {method}"),
                ),
            }
        }
        _ => {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    }
}

fn tools_list() -> Value {
    let obj = |props: Value| json!({"type": "object", "properties": props});
    json!({
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "public",
        "tools": [
            {"name": "fast", "description": "A small fixed result at once", "inputSchema": obj(json!({}))},
            {"name": "sleep", "description": "Answers after `ms` milliseconds", "inputSchema": obj(json!({"ms": {"type": "integer"}}))},
            {"name": "hold", "description": "Answers when the harness releases it", "inputSchema": obj(json!({"max_ms": {"type": "integer"}}))},
        ]
    })
}

async fn call(state: &State, id: &Value, params: &Value) -> Response<Full<Bytes>> {
    state.stats.calls.fetch_add(1, Ordering::Relaxed);
    let args = &params["arguments"];
    match params["name"].as_str().unwrap_or_default() {
        "fast" => rpc_result(id, text_result("ok")),
        "sleep" => {
            let ms = args["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            rpc_result(id, text_result("slept"))
        }
        "hold" => {
            let max = Duration::from_millis(args["max_ms"].as_u64().unwrap_or(600_000));
            let mut rx = state.release.subscribe();
            let _held = Gauge::up(&state.stats.held, &state.stats.held_peak);
            let released = tokio::time::timeout(max, rx.changed()).await.is_ok();
            rpc_result(
                id,
                text_result(if released {
                    "released"
                } else {
                    "held until max_ms"
                }),
            )
        }
        other => rpc_error(
            StatusCode::OK,
            id,
            -32602,
            &format!("Unknown tool: {other}"),
        ),
    }
}
