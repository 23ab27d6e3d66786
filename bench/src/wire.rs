//! MCP requests as the harness sends them: one keep-alive HTTP/1.1 connection per
//! client (`hyper::client::conn::http1`, no pool), 2026-07-28 headers and `_meta`
//! (or, for a 2025-11-25 client, a session opened with `initialize` per
//! connection), answers read as JSON or as an SSE stream.

use std::net::SocketAddr;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpStream;

/// The protocol revision the harness speaks.
pub const VERSION: &str = "2026-07-28";
/// The protocol revision of a legacy client.
pub const LEGACY_VERSION: &str = "2025-11-25";
/// The Tasks extension's identifier.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// Where requests go: an address and the MCP path.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// TCP address.
    pub addr: SocketAddr,
    /// Path of the MCP endpoint, e.g. `/mcp`.
    pub path: String,
    host: HeaderValue,
}

impl Endpoint {
    /// An endpoint at `addr` + `path`.
    pub fn new(addr: SocketAddr, path: &str) -> Self {
        Self {
            addr,
            path: path.to_string(),
            host: HeaderValue::from_str(&addr.to_string()).expect("an address is a valid header"),
        }
    }

    /// `http://addr/path`.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.path)
    }
}

/// One prepared request: its JSON-RPC body and `Mcp-Name` header.
#[derive(Clone)]
pub struct Prepared {
    /// `Mcp-Method`.
    pub method: &'static str,
    /// `Mcp-Name`.
    pub name: HeaderValue,
    /// The JSON body.
    pub body: Bytes,
    /// A 2025-11-25 request: sent on the connection's session, without the
    /// 2026-07-28 headers.
    pub legacy: bool,
}

/// A request's `params._meta`: protocol version, client info, and (when `tasks`) the
/// Tasks extension among the client's capabilities.
fn meta(tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "tasklift-bench", "version": env!("CARGO_PKG_VERSION")},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A `tools/call` of `tool` with `arguments`.
pub fn tool_call(tool: &str, arguments: Value, tasks: bool) -> Prepared {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta(tasks)},
    });
    Prepared {
        method: "tools/call",
        name: HeaderValue::from_str(tool).expect("tool names are header-safe"),
        body: Bytes::from(body.to_string()),
        legacy: false,
    }
}

/// A 2025-11-25 `tools/call` of `tool` with `arguments` (no `_meta`).
pub fn legacy_tool_call(tool: &str, arguments: Value) -> Prepared {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    });
    Prepared {
        legacy: true,
        body: Bytes::from(body.to_string()),
        ..tool_call(tool, Value::Null, false)
    }
}

/// A `tasks/get` of `task_id` (declaring the extension, which `tasks/*` requires).
pub fn tasks_get(task_id: &str) -> Prepared {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tasks/get",
        "params": {"taskId": task_id, "_meta": meta(true)},
    });
    Prepared {
        method: "tasks/get",
        name: HeaderValue::from_str(task_id).expect("task ids are header-safe"),
        body: Bytes::from(body.to_string()),
        legacy: false,
    }
}

/// A keep-alive HTTP/1.1 connection to an endpoint.
pub struct Conn {
    ep: Endpoint,
    send: SendRequest<Full<Bytes>>,
    /// The legacy session legacy requests are sent on.
    session: Option<HeaderValue>,
}

/// An HTTP answer: status, whether it was SSE, and the whole body.
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type: text/event-stream`.
    pub sse: bool,
    /// The body.
    pub body: Bytes,
}

impl Conn {
    /// Connect (TCP_NODELAY) and handshake.
    pub async fn connect(ep: &Endpoint) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(ep.addr)
            .await
            .with_context(|| format!("connecting to {}", ep.addr))?;
        stream.set_nodelay(true)?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self {
            ep: ep.clone(),
            send,
            session: None,
        })
    }

    /// Connect and open a 2025-11-25 session on the connection, as a legacy client
    /// does: `initialize`, then `notifications/initialized`.
    pub async fn connect_legacy(ep: &Endpoint) -> anyhow::Result<Self> {
        let mut c = Self::connect(ep).await?;
        let init = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "tasklift-bench", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let req = c.request(Bytes::from(init.to_string()), &[])?;
        c.send.ready().await?;
        let resp = c.send.send_request(req).await?;
        let sid = resp.headers().get("mcp-session-id").cloned();
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        let Some(sid) = sid.filter(|_| status == StatusCode::OK) else {
            bail!("initialize: HTTP {status}, no session: {}", snippet(&body));
        };
        c.session = Some(sid);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let req = c.request(Bytes::from(note.to_string()), &[])?;
        c.send.ready().await?;
        let resp = c.send.send_request(req).await?;
        let status = resp.status();
        resp.into_body().collect().await?;
        if !status.is_success() {
            bail!("notifications/initialized: HTTP {status}");
        }
        Ok(c)
    }

    /// A POST of `body` with the headers of the connection's era: a 2025-11-25
    /// request on its session when it has one, else `extra` (2026-07-28 headers).
    fn request(
        &self,
        body: Bytes,
        extra: &[(&'static str, HeaderValue)],
    ) -> anyhow::Result<Request<Full<Bytes>>> {
        let mut b = Request::post(self.ep.path.as_str())
            .header(HOST, self.ep.host.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(sid) = &self.session {
            b = b
                .header("mcp-protocol-version", LEGACY_VERSION)
                .header("mcp-session-id", sid.clone());
        }
        for (k, v) in extra {
            b = b.header(*k, v.clone());
        }
        Ok(b.body(Full::new(body))?)
    }

    /// Whether the connection can still take requests.
    pub fn is_closed(&self) -> bool {
        self.send.is_closed()
    }

    /// Send a prepared request and read the whole answer.
    pub async fn send(&mut self, p: &Prepared) -> anyhow::Result<Answer> {
        let req = if p.legacy {
            if self.session.is_none() {
                bail!("a 2025-11-25 request on a connection without a session");
            }
            self.request(p.body.clone(), &[])?
        } else {
            let modern = [
                ("mcp-protocol-version", HeaderValue::from_static(VERSION)),
                ("mcp-method", HeaderValue::from_static(p.method)),
                ("mcp-name", p.name.clone()),
            ];
            self.request(p.body.clone(), &modern)?
        };
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        let status = resp.status();
        let sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Answer { status, sse, body })
    }

    /// A plain request (GET or POST without MCP headers), for the upstream's
    /// `/stats` and `/release` and tasklift's `/readyz`.
    pub async fn plain(&mut self, method: &str, path: &str) -> anyhow::Result<(StatusCode, Bytes)> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.ep.host.clone())
            .body(Full::new(Bytes::new()))?;
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        let status = resp.status();
        Ok((status, resp.into_body().collect().await?.to_bytes()))
    }

    /// Send a request and return its JSON-RPC result (an error if there is none).
    pub async fn result(&mut self, p: &Prepared) -> anyhow::Result<Value> {
        let a = self.send(p).await?;
        let msg = a.message().ok_or_else(|| {
            anyhow!(
                "HTTP {}: no JSON-RPC response in {}",
                a.status,
                snippet(&a.body)
            )
        })?;
        if let Some(e) = msg.get("error") {
            bail!("JSON-RPC error {e} (HTTP {})", a.status);
        }
        if a.status != StatusCode::OK {
            bail!("HTTP {}: {}", a.status, snippet(&a.body));
        }
        Ok(msg["result"].clone())
    }
}

impl Answer {
    /// The JSON-RPC response in the body (the last SSE event that has an `id`).
    pub fn message(&self) -> Option<Value> {
        if !self.sse {
            return serde_json::from_slice(&self.body).ok();
        }
        sse_messages(&self.body).into_iter().rev().find(|m| {
            m.get("id").is_some() && (m.get("result").is_some() || m.get("error").is_some())
        })
    }

    /// The JSON-RPC response as the bytes it came in: the body, or the `data` of
    /// the last SSE event that is a response.
    pub fn message_text(&self) -> Option<String> {
        if !self.sse {
            return Some(String::from_utf8_lossy(&self.body).into_owned());
        }
        sse_data(&self.body).into_iter().rev().find(|d| {
            serde_json::from_str::<Value>(d).is_ok_and(|m| {
                m.get("id").is_some() && (m.get("result").is_some() || m.get("error").is_some())
            })
        })
    }

    /// Whether the answer is a success that contains `expect`: HTTP 200, a JSON-RPC
    /// response without `"error"`, and the expected bytes.
    pub fn check(&self, expect: &[u8]) -> Result<(), String> {
        if self.status != StatusCode::OK {
            return Err(format!("HTTP {}: {}", self.status, snippet(&self.body)));
        }
        if find(&self.body, b"\"error\"") {
            return Err(format!("JSON-RPC error: {}", snippet(&self.body)));
        }
        if !find(&self.body, expect) {
            return Err(format!(
                "unexpected body (wanted {}): {}",
                String::from_utf8_lossy(expect),
                snippet(&self.body)
            ));
        }
        Ok(())
    }
}

/// Whether `needle` occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// The start of a body, for error messages.
pub fn snippet(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s = s.trim();
    if s.len() > 300 {
        let mut end = 300;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    } else {
        s.to_string()
    }
}

/// The JSON messages of an SSE body (`data:` lines joined per event).
fn sse_messages(body: &[u8]) -> Vec<Value> {
    sse_data(body)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// The `data` of each event of an SSE body (its `data:` lines joined).
fn sse_data(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    let mut data = String::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !data.is_empty() {
                out.push(std::mem::take(&mut data));
            }
        } else if let Some(d) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    if !data.is_empty() {
        out.push(data);
    }
    out
}
