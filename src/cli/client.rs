//! A small 2026-07-28 MCP client over Streamable HTTP (http or https) that declares
//! the Tasks extension: what `tasklift demo` and `tasklift call` drive, and a helper
//! for tests.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{header, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::observe::error_chain as chain;
use tasklift_protocol::jsonrpc::{Incoming as Msg, RpcError};
use tasklift_protocol::mcp::{self, MODERN_VERSION, TASKS_EXTENSION};
use tasklift_protocol::sse::SseParser;

/// Client failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a JSON-RPC error.
    #[error("{0}")]
    Rpc(RpcError),
    /// Transport trouble.
    #[error("{0}")]
    Http(String),
}

/// A modern MCP client.
pub struct Client {
    url: http::Uri,
    http: crate::tls::Http1Client,
    next_id: AtomicU64,
    /// Declare the Tasks extension on every request.
    pub tasks: bool,
    /// Extra headers (e.g. Authorization).
    pub headers: Vec<(http::HeaderName, HeaderValue)>,
    /// Capabilities declared besides the Tasks extension (e.g. `elicitation`).
    pub capabilities: serde_json::Map<String, Value>,
}

/// A response: the result plus the notifications that came before it.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The result object.
    pub result: Value,
    /// Notifications received on the stream before the result.
    pub notifications: Vec<Value>,
}

impl Client {
    /// A client for `url` (`http://` or `https://`, with the system's roots) that
    /// declares the Tasks extension.
    pub fn new(url: &str) -> Result<Self, ClientError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| ClientError::Http(format!("{url}: not a URL ({e})")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(ClientError::Http(format!(
                    "{url}: not an http:// or https:// URL"
                )))
            }
        };
        if uri.host().is_none_or(str::is_empty) {
            return Err(ClientError::Http(format!("{url}: no host in the URL")));
        }
        Ok(Self {
            url: uri,
            http: crate::tls::http1_client(https).map_err(ClientError::Http)?,
            next_id: AtomicU64::new(1),
            tasks: true,
            headers: Vec::new(),
            capabilities: serde_json::Map::new(),
        })
    }

    /// Send a request and read its answer (JSON or SSE).
    pub async fn request(&self, method: &str, params: Value) -> Result<Answer, ClientError> {
        let mut notifications = Vec::new();
        let result = self
            .request_streaming(method, params, |n| notifications.push(n.clone()))
            .await?;
        Ok(Answer {
            result,
            notifications,
        })
    }

    /// Send a request and return its result, handing each notification that comes
    /// before it on an SSE stream to `on_notification` (`{"method", "params"}`) as it
    /// arrives.
    pub async fn request_streaming(
        &self,
        method: &str,
        params: Value,
        mut on_notification: impl FnMut(&Value),
    ) -> Result<Value, ClientError> {
        let body = self.envelope(method, params)?;
        let resp = self.post(method, &body).await?;
        let status = resp.status();
        let sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if sse {
            self.read_sse(resp.into_body(), status, &mut on_notification)
                .await
        } else {
            self.read_json(resp.into_body(), status, &mut on_notification)
                .await
        }
    }

    /// The JSON-RPC request: `params` with this client's `_meta` (protocol version,
    /// client info, capabilities), and the next id.
    fn envelope(&self, method: &str, mut params: Value) -> Result<Value, ClientError> {
        let mut caps = Value::Object(self.capabilities.clone());
        if self.tasks {
            caps["extensions"] = json!({TASKS_EXTENSION: {}});
        }
        let meta = params
            .as_object_mut()
            .map(mcp::meta_mut)
            .ok_or_else(|| ClientError::Http("params must be an object".into()))?;
        meta.insert(mcp::META_PROTOCOL_VERSION.into(), json!(MODERN_VERSION));
        meta.insert(
            mcp::META_CLIENT_INFO.into(),
            json!({"name": "tasklift-client", "version": env!("CARGO_PKG_VERSION")}),
        );
        meta.insert(mcp::META_CLIENT_CAPABILITIES.into(), caps);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    }

    /// POST the request with the headers Streamable HTTP asks for (and `mcp-name`
    /// when the method names a tool, prompt or resource) and this client's own.
    async fn post(
        &self,
        method: &str,
        body: &Value,
    ) -> Result<http::Response<Incoming>, ClientError> {
        let mut req = http::Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN_VERSION)
            .header("mcp-method", method);
        if let Some(name) = mcp::name_param(method)
            .and_then(|p| body["params"].get(p))
            .and_then(Value::as_str)
        {
            req = req.header("mcp-name", mcp::encode_header_value(name));
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| ClientError::Http(e.to_string()))?;
        self.http
            .request(req)
            .await
            .map_err(|e| ClientError::Http(format!("{}: {}", self.url, chain(&e))))
    }

    /// The answer on an SSE stream, handing on the notifications before it.
    async fn read_sse(
        &self,
        mut body: Incoming,
        status: http::StatusCode,
        on_notification: &mut impl FnMut(&Value),
    ) -> Result<Value, ClientError> {
        let mut p = SseParser::default();
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| ClientError::Http(format!("{}: {}", self.url, chain(&e))))?;
            if let Ok(d) = frame.into_data() {
                for m in p.feed(&d) {
                    if let Some(answer) = take(&m, on_notification) {
                        return answer;
                    }
                }
            }
        }
        if let Some(answer) = p.finish().and_then(|m| take(&m, on_notification)) {
            return answer;
        }
        Err(self.no_answer(status, ""))
    }

    /// The answer in a JSON body.
    async fn read_json(
        &self,
        body: Incoming,
        status: http::StatusCode,
        on_notification: &mut impl FnMut(&Value),
    ) -> Result<Value, ClientError> {
        let b = body
            .collect()
            .await
            .map_err(|e| ClientError::Http(format!("{}: {}", self.url, chain(&e))))?
            .to_bytes();
        let text = String::from_utf8_lossy(&b);
        if let Some(answer) = take(&text, on_notification) {
            return answer;
        }
        Err(self.no_answer(status, &text))
    }

    /// A body without the response, quoting its start (what a non-MCP endpoint said).
    fn no_answer(&self, status: http::StatusCode, text: &str) -> ClientError {
        let mut snippet: String = text.trim().chars().take(200).collect();
        if !snippet.is_empty() {
            snippet = format!(" ({snippet})");
        }
        ClientError::Http(format!(
            "{}: HTTP {status}: no JSON-RPC response in the body{snippet}",
            self.url
        ))
    }

    /// `tools/call`.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Answer, ClientError> {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// `tasks/get`.
    pub async fn get_task(&self, task_id: &str) -> Result<Value, ClientError> {
        Ok(self
            .request("tasks/get", json!({"taskId": task_id}))
            .await?
            .result)
    }

    /// `tasks/update` with answers to the task's `inputRequests`.
    pub async fn update_task(
        &self,
        task_id: &str,
        input_responses: Value,
    ) -> Result<Value, ClientError> {
        Ok(self
            .request(
                "tasks/update",
                json!({"taskId": task_id, "inputResponses": input_responses}),
            )
            .await?
            .result)
    }

    /// `tasks/cancel`.
    pub async fn cancel_task(&self, task_id: &str) -> Result<Value, ClientError> {
        Ok(self
            .request("tasks/cancel", json!({"taskId": task_id}))
            .await?
            .result)
    }
}

/// What one message means: the answer, or (`None`) a notification handed on or
/// something else skipped.
fn take(m: &str, on_notification: &mut impl FnMut(&Value)) -> Option<Result<Value, ClientError>> {
    match serde_json::from_str::<Value>(m)
        .ok()
        .and_then(Msg::classify)
    {
        Some(Msg::Response { outcome, .. }) => Some(outcome.map_err(ClientError::Rpc)),
        Some(Msg::Notification { method, params }) => {
            on_notification(&json!({"method": method, "params": params}));
            None
        }
        _ => None,
    }
}
