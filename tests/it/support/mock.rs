//! Upstreams the fixture cannot play: a scriptable modern MCP server (for upstreams
//! that hand out their own task handles or break mid-answer) and a TLS front that
//! puts any plain-HTTP upstream behind `https://` with a freshly generated certificate.

#![allow(dead_code)]

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The test's end of a streamed body (see `MockReply::Stream`).
pub type StreamTx = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// What the mock answers to one request.
pub enum MockReply {
    /// `{"result": ...}` as `application/json`.
    Result(Value),
    /// `{"error": {code, message}}` with this HTTP status.
    Error(u16, i64, String),
    /// This HTTP status with an empty body.
    Status(u16),
    /// An SSE body fed by the test: `Ok` chunks are written as they are, an `Err`
    /// breaks the connection mid-body, and dropping the sender ends the body.
    Stream(mpsc::Receiver<Result<Bytes, std::io::Error>>),
    /// Another reply with these response headers added (e.g. `mcp-session-id`).
    WithHeaders(Vec<(String, String)>, Box<MockReply>),
}

/// The handler: sees each request's headers and JSON-RPC message, answers it.
pub type Handler = Arc<dyn Fn(&HeaderMap, &Value) -> MockReply + Send + Sync>;

/// A running scriptable upstream.
pub struct MockUpstream {
    /// Its endpoint.
    pub url: String,
    /// Every request received: headers and JSON body.
    pub requests: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
}

impl MockUpstream {
    /// Serve `handler` on 127.0.0.1 in the background (for the test's lifetime).
    pub async fn start(handler: impl Fn(&Value) -> MockReply + Send + Sync + 'static) -> Self {
        Self::start_with_headers(move |_, m| handler(m)).await
    }

    /// Like `start`, with a handler that also sees the request headers.
    pub async fn start_with_headers(
        handler: impl Fn(&HeaderMap, &Value) -> MockReply + Send + Sync + 'static,
    ) -> Self {
        let handler: Handler = Arc::new(handler);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let requests: Arc<Mutex<Vec<(HeaderMap, Value)>>> = Arc::default();
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (handler, seen) = (handler.clone(), seen.clone());
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (handler, seen) = (handler.clone(), seen.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let bytes = body.collect().await.unwrap().to_bytes();
                        let msg: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        let reply = handler(&parts.headers, &msg);
                        seen.lock().unwrap().push((parts.headers, msg.clone()));
                        Ok::<_, Infallible>(answer(&msg, reply))
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc),
                );
            }
        });
        Self { url, requests }
    }

    /// The bodies of the requests received with this method.
    pub fn received(&self, method: &str) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, b)| b["method"] == method)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

type MockBody = BoxBody<Bytes, std::io::Error>;

fn answer(msg: &Value, reply: MockReply) -> Response<MockBody> {
    if let MockReply::WithHeaders(headers, inner) = reply {
        let mut r = answer(msg, *inner);
        for (k, v) in headers {
            r.headers_mut().insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(&v).unwrap(),
            );
        }
        return r;
    }
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let json = |status: u16, v: Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(
                Full::new(Bytes::from(v.to_string()))
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .unwrap()
    };
    if let MockReply::Status(status) = reply {
        return Response::builder()
            .status(status)
            .body(
                Full::new(Bytes::new())
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .unwrap();
    }
    if msg.get("id").is_none() {
        return json(202, Value::Null);
    }
    match reply {
        MockReply::Status(_) | MockReply::WithHeaders(..) => unreachable!("answered above"),
        MockReply::Result(r) => json(200, json!({"jsonrpc": "2.0", "id": id, "result": r})),
        MockReply::Error(status, code, message) => json(
            status,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        ),
        MockReply::Stream(rx) => Response::builder()
            .header("content-type", "text/event-stream")
            .body(ChannelBody { rx }.boxed())
            .unwrap(),
    }
}

struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

/// A modern `server/discover` result.
pub fn discover_result(extra_caps: Value) -> Value {
    let mut caps = json!({"tools": {}});
    if let (Value::Object(c), Value::Object(e)) = (&mut caps, extra_caps) {
        c.extend(e);
    }
    json!({
        "resultType": "complete", "supportedVersions": ["2026-07-28"],
        "capabilities": caps, "ttlMs": 0, "cacheScope": "public",
    })
}

/// One SSE event carrying a JSON-RPC message.
pub fn sse_event(msg: &Value) -> Bytes {
    Bytes::from(format!("data: {msg}\n\n"))
}

/// A TLS front for a plain upstream: accepts TLS on 127.0.0.1 and pipes each
/// connection to `backend` (host:port). Returns the `https://` URL of `/mcp` and
/// the PEM of the self-signed certificate it presents (for 127.0.0.1).
pub async fn tls_front(backend: String) -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let pem = cert.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(&backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (url, pem)
}
