//! Raw HTTP for tests: well-formed 2026-07-28 POSTs a test can break on purpose,
//! and answers read whole (JSON or SSE) or as they arrive.

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

/// A raw HTTP response.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Raw {
    /// The body as JSON (panics if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

impl Raw {
    /// The JSON-RPC messages of an SSE body, in order.
    pub fn sse_messages(&self) -> Vec<Value> {
        let mut p = tasklift::upstream::sse::SseParser::default();
        let mut out: Vec<String> = p.feed(self.body.as_bytes());
        out.extend(p.finish());
        out.iter()
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("bad event ({e}): {d}")))
            .collect()
    }

    /// How many SSE comment lines (keep-alives) the body holds.
    pub fn keepalives(&self) -> usize {
        self.body.lines().filter(|l| l.starts_with(':')).count()
    }

    /// The content type.
    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The final JSON-RPC response, whether the body is JSON or SSE.
    pub fn response(&self) -> Value {
        if self.content_type().starts_with("text/event-stream") {
            let last = self.sse_messages().pop().expect("an SSE message");
            assert!(
                last.get("method").is_none(),
                "stream ended on a notification"
            );
            last
        } else {
            self.json()
        }
    }

    /// The JSON-RPC error object (panics if the answer is not an error).
    pub fn error(&self) -> Value {
        let r = self.response();
        r.get("error")
            .cloned()
            .unwrap_or_else(|| panic!("expected an error, got {r}"))
    }
}

/// Send a raw request with exactly these headers and body.
pub async fn raw(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let resp = open(method, url, headers, body).await;
    let status = resp.status;
    let headers = resp.headers.clone();
    let body = String::from_utf8_lossy(&resp.body.collect().await.unwrap().to_bytes()).into_owned();
    Raw {
        status,
        headers,
        body,
    }
}

/// A response whose body is read as it arrives.
pub struct Streaming {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: hyper::body::Incoming,
    /// Everything read so far.
    pub seen: String,
}

impl Streaming {
    /// Read until `cond(seen)` holds; panics if the body ends first.
    pub async fn read_until(&mut self, what: &str, cond: impl Fn(&str) -> bool) {
        while !cond(&self.seen) {
            match self.body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        self.seen.push_str(&String::from_utf8_lossy(&d));
                    }
                }
                other => panic!("body ended before {what}: {other:?}; read: {}", self.seen),
            }
        }
    }

    /// Read the rest and return the whole response.
    pub async fn finish(mut self) -> Raw {
        let rest = self.body.collect().await.unwrap().to_bytes();
        self.seen.push_str(&String::from_utf8_lossy(&rest));
        Raw {
            status: self.status,
            headers: self.headers,
            body: self.seen,
        }
    }
}

/// Send a request and return once the response headers arrive.
pub async fn open(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Streaming {
    let client = HyperClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .expect("request sent");
    Streaming {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.into_body(),
        seen: String::new(),
    }
}

/// The `_meta` of a modern request, with or without the tasks extension.
pub fn meta(tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// POST a well-formed modern request with matching headers.
pub async fn post(url: &str, id: u64, method: &str, params: Value, tasks: bool) -> Raw {
    Post::new(url, id, method, params, tasks).send().await
}

/// A modern POST, well-formed unless a test changes it.
pub struct Post {
    url: String,
    /// The JSON-RPC message.
    pub body: Value,
    /// Request headers (lower-case names).
    pub headers: Vec<(String, String)>,
}

impl Post {
    /// A request with `_meta` (declaring the tasks extension or not) and matching headers.
    /// `params._meta` keys given by the test are kept.
    pub fn new(url: &str, id: u64, method: &str, mut params: Value, tasks: bool) -> Self {
        let mut m = meta(tasks);
        if let Some(Value::Object(given)) = params.get("_meta") {
            for (k, v) in given {
                m[k] = v.clone();
            }
        }
        params["_meta"] = m;
        let name = tasklift::mcp::name_param(method)
            .and_then(|p| params.get(p))
            .and_then(Value::as_str)
            .map(tasklift::mcp::encode_header_value);
        let mut headers = vec![
            ("content-type".into(), "application/json".into()),
            (
                "accept".into(),
                "application/json, text/event-stream".into(),
            ),
            ("mcp-protocol-version".into(), "2026-07-28".into()),
            ("mcp-method".into(), method.to_string()),
        ];
        if let Some(n) = name {
            headers.push(("mcp-name".into(), n));
        }
        Self {
            url: url.to_string(),
            body: json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            headers,
        }
    }

    /// Set (or replace) a header.
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self = self.without(k);
        self.headers.push((k.to_ascii_lowercase(), v.to_string()));
        self
    }

    /// Send it to another URL.
    pub fn into_url(mut self, url: &str) -> Self {
        self.url = url.to_string();
        self
    }

    /// Remove a header.
    pub fn without(mut self, k: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self
    }

    /// Change the body.
    pub fn edit(mut self, f: impl FnOnce(&mut Value)) -> Self {
        f(&mut self.body);
        self
    }

    fn parts(&self) -> (Vec<(&str, &str)>, String) {
        let h = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        (h, self.body.to_string())
    }

    /// Send it and read the whole answer.
    pub async fn send(self) -> Raw {
        let (h, b) = self.parts();
        raw("POST", &self.url, &h, &b).await
    }

    /// Send it and return once the response headers arrive.
    pub async fn open(self) -> Streaming {
        let (h, b) = self.parts();
        open("POST", &self.url, &h, &b).await
    }
}
