//! A small 2026-07-28 MCP client over Streamable HTTP that declares the Tasks
//! extension: what `tasklift demo` drives, and a helper for tests.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{header, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client as HyperClient};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use crate::jsonrpc::{Incoming as Msg, RpcError};
use crate::mcp::{self, MODERN_VERSION, TASKS_EXTENSION};
use crate::upstream::sse::SseParser;

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
    http: HyperClient<HttpConnector, Full<Bytes>>,
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
    /// A client for `url` that declares the Tasks extension.
    pub fn new(url: &str) -> Result<Self, ClientError> {
        Ok(Self {
            url: url
                .parse()
                .map_err(|e| ClientError::Http(format!("{url}: {e}")))?,
            http: HyperClient::builder(TokioExecutor::new()).build_http(),
            next_id: AtomicU64::new(1),
            tasks: true,
            headers: Vec::new(),
            capabilities: serde_json::Map::new(),
        })
    }

    /// Send a request and read its answer (JSON or SSE).
    pub async fn request(&self, method: &str, mut params: Value) -> Result<Answer, ClientError> {
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
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
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
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| ClientError::Http(format!("{}: {e}", self.url)))?;
        let sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let status = resp.status();
        let mut body = resp.into_body();
        let mut messages = Vec::new();
        if sse {
            let mut p = SseParser::default();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| ClientError::Http(e.to_string()))?;
                if let Ok(d) = frame.into_data() {
                    messages.extend(p.feed(&d));
                }
            }
            messages.extend(p.finish());
        } else {
            let b = body
                .collect()
                .await
                .map_err(|e| ClientError::Http(e.to_string()))?
                .to_bytes();
            messages.push(String::from_utf8_lossy(&b).into_owned());
        }
        let mut notifications = Vec::new();
        for m in messages {
            match serde_json::from_str::<Value>(&m)
                .ok()
                .and_then(Msg::classify)
            {
                Some(Msg::Response {
                    outcome: Ok(result),
                    ..
                }) => {
                    return Ok(Answer {
                        result,
                        notifications,
                    })
                }
                Some(Msg::Response {
                    outcome: Err(e), ..
                }) => return Err(ClientError::Rpc(e)),
                Some(Msg::Notification { method, params }) => {
                    notifications.push(json!({"method": method, "params": params}))
                }
                _ => {}
            }
        }
        Err(ClientError::Http(format!(
            "HTTP {status}: no JSON-RPC response in the body"
        )))
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

    /// `tasks/cancel`.
    pub async fn cancel_task(&self, task_id: &str) -> Result<Value, ClientError> {
        Ok(self
            .request("tasks/cancel", json!({"taskId": task_id}))
            .await?
            .result)
    }
}
