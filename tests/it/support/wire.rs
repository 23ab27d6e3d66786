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
        let mut p = tasklift_protocol::sse::SseParser::default();
        let mut out: Vec<String> = p.feed(self.body.as_bytes());
        out.extend(p.finish());
        out.iter()
            // A priming event (an id and empty data) carries no message.
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("bad event ({e}): {d}")))
            .collect()
    }

    /// The complete SSE events of the body, with their ids.
    pub fn events(&self) -> Vec<SseEvent> {
        sse_events(&self.body)
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
        let name = tasklift_protocol::mcp::name_param(method)
            .and_then(|p| params.get(p))
            .and_then(Value::as_str)
            .map(tasklift_protocol::mcp::encode_header_value);
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

    /// Add a header, keeping any other value it already has (a repeated header).
    pub fn also_header(mut self, k: &str, v: &str) -> Self {
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

/// Hang guard for a single step of a test (never a timing assertion).
pub const GUARD: std::time::Duration = std::time::Duration::from_secs(30);

/// Run `fut`, panicking if it takes longer than [`GUARD`].
pub async fn guarded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .unwrap_or_else(|_| panic!("hung for {GUARD:?}: {what}"))
}

/// One SSE event as it was sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseEvent {
    /// Its `id` field.
    pub id: Option<String>,
    /// Its `retry` field.
    pub retry: Option<u64>,
    /// Its data (empty for a priming event).
    pub data: String,
}

impl SseEvent {
    /// The JSON-RPC message it carries; none for a priming event.
    pub fn message(&self) -> Option<Value> {
        if self.data.trim().is_empty() {
            return None;
        }
        Some(
            serde_json::from_str(&self.data)
                .unwrap_or_else(|e| panic!("bad event ({e}): {}", self.data)),
        )
    }
}

/// The complete events in an SSE text (comments such as keep-alives skipped; a
/// trailing event without its blank line is not complete yet).
pub fn sse_events(text: &str) -> Vec<SseEvent> {
    let mut out = Vec::new();
    let mut cur = SseEvent::default();
    let mut data: Vec<&str> = Vec::new();
    let mut any = false;
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            break; // incomplete line
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if any {
                cur.data = data.join("\n");
                out.push(std::mem::take(&mut cur));
            }
            data.clear();
            any = false;
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "" => {} // a comment
            "id" => {
                cur.id = Some(value.to_string());
                any = true;
            }
            "retry" => {
                cur.retry = value.trim().parse().ok();
                any = true;
            }
            "data" => {
                data.push(value);
                any = true;
            }
            _ => any = true,
        }
    }
    out
}

/// The JSON-RPC messages of some events, in order.
pub fn messages(events: &[SseEvent]) -> Vec<Value> {
    events.iter().filter_map(SseEvent::message).collect()
}

impl Streaming {
    /// Read until the complete events include one matching `pred` (panics if the
    /// body ends first, or after [`GUARD`]); returns every complete event so far.
    pub async fn events_until(
        &mut self,
        what: &str,
        pred: impl Fn(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        loop {
            let events = sse_events(&self.seen);
            if events.iter().any(&pred) {
                return events;
            }
            let frame = tokio::time::timeout(GUARD, self.body.frame())
                .await
                .unwrap_or_else(|_| {
                    panic!("hung for {GUARD:?} waiting for {what}; read: {}", self.seen)
                });
            match frame {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        self.seen.push_str(&String::from_utf8_lossy(&d));
                    }
                }
                other => panic!("body ended before {what}: {other:?}; read: {}", self.seen),
            }
        }
    }

    /// Read until an event carries a message matching `pred`; returns that message.
    pub async fn message_where(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let is = |e: &SseEvent| e.message().is_some_and(|m| pred(&m));
        let events = self.events_until(what, is).await;
        events
            .iter()
            .filter_map(SseEvent::message)
            .find(|m| pred(m))
            .expect("matched")
    }

    /// Read the rest (at most [`GUARD`]) and return the whole response.
    pub async fn finish_guarded(self, what: &str) -> Raw {
        guarded(what, self.finish()).await
    }
}

/// A legacy (2025-era) client of tasklift's front door: `initialize` opened a
/// session, and every request carries its `Mcp-Session-Id`.
#[derive(Clone, Debug)]
pub struct LegacyClient {
    /// The MCP endpoint.
    pub url: String,
    /// The session id tasklift issued.
    pub sid: String,
    /// The negotiated protocol version (sent as `MCP-Protocol-Version`).
    pub version: String,
    /// Extra headers on every request (e.g. `authorization`).
    pub extra: Vec<(String, String)>,
}

/// The body of a legacy `initialize` request.
pub fn initialize_body(id: u64, version: &str, caps: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": caps,
        "clientInfo": {"name": "legacy-test-client", "version": "9.9"},
    }})
}

/// POST a legacy `initialize` (no session yet) with these extra headers.
pub async fn legacy_initialize(
    url: &str,
    version: &str,
    caps: Value,
    extra: &[(&str, &str)],
) -> Raw {
    let mut h = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    h.extend_from_slice(extra);
    let body = initialize_body(1, version, caps).to_string();
    guarded("initialize", raw("POST", url, &h, &body)).await
}

impl LegacyClient {
    /// `initialize` with `version` and `caps`, then `notifications/initialized`, as
    /// a legacy client does; also returns the initialize result.
    pub async fn start(url: &str, version: &str, caps: Value) -> (Self, Value) {
        Self::start_with(url, version, caps, &[]).await
    }

    /// Like `start`, with extra headers on every request.
    pub async fn start_with(
        url: &str,
        version: &str,
        caps: Value,
        extra: &[(&str, &str)],
    ) -> (Self, Value) {
        let r = legacy_initialize(url, version, caps, extra).await;
        assert_eq!(r.status, 200, "initialize: {r:?}");
        let sid = r
            .headers
            .get("mcp-session-id")
            .unwrap_or_else(|| panic!("initialize answered without Mcp-Session-Id: {r:?}"))
            .to_str()
            .unwrap()
            .to_string();
        // JSON from tasklift; a server asked directly may answer on a stream.
        let result = r.response()["result"].clone();
        let c = Self {
            url: url.to_string(),
            sid,
            version: result["protocolVersion"]
                .as_str()
                .unwrap_or(version)
                .to_string(),
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let ack = c.notify("notifications/initialized", json!({})).await;
        assert_eq!(ack.status, 202, "notifications/initialized: {ack:?}");
        (c, result)
    }

    /// The same client, using another session id (a foreign, stale or made-up one).
    pub fn with_sid(&self, sid: &str) -> Self {
        Self {
            sid: sid.to_string(),
            ..self.clone()
        }
    }

    /// The same session, with other extra headers (another caller's credentials).
    pub fn with_extra(&self, extra: &[(&str, &str)]) -> Self {
        Self {
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..self.clone()
        }
    }

    fn headers(&self, post: bool) -> Vec<(String, String)> {
        let mut h = vec![
            ("mcp-session-id".to_string(), self.sid.clone()),
            ("mcp-protocol-version".to_string(), self.version.clone()),
        ];
        if post {
            h.push(("content-type".into(), "application/json".into()));
            h.push((
                "accept".into(),
                "application/json, text/event-stream".into(),
            ));
        } else {
            h.push(("accept".into(), "text/event-stream".into()));
        }
        h.extend(self.extra.iter().cloned());
        h
    }

    async fn send_raw(&self, method: &str, extra: &[(&str, &str)], body: &str) -> Streaming {
        let mut h = self.headers(method == "POST");
        h.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        guarded(
            &format!("{method} response headers"),
            open(method, &self.url, &h, body),
        )
        .await
    }

    /// POST any JSON message in the session and read the whole answer.
    pub async fn send(&self, msg: Value) -> Raw {
        let s = self.send_raw("POST", &[], &msg.to_string()).await;
        s.finish_guarded(&format!("the answer to {msg}")).await
    }

    /// The body of a request.
    pub fn body(id: u64, method: &str, params: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// A request, its whole answer.
    pub async fn request(&self, id: u64, method: &str, params: Value) -> Raw {
        self.send(Self::body(id, method, params)).await
    }

    /// A request whose answer is read as it arrives.
    pub async fn open(&self, id: u64, method: &str, params: Value) -> Streaming {
        let body = Self::body(id, method, params).to_string();
        self.send_raw("POST", &[], &body).await
    }

    /// A notification.
    pub async fn notify(&self, method: &str, params: Value) -> Raw {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    /// Answer one of the server's requests.
    pub async fn respond(&self, id: &Value, result: Value) -> Raw {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await
    }

    /// GET: the standalone stream, or a stream resumed after `last_event_id`.
    pub async fn get(&self, last_event_id: Option<&str>) -> Streaming {
        match last_event_id {
            Some(l) => self.send_raw("GET", &[("last-event-id", l)], "").await,
            None => self.send_raw("GET", &[], "").await,
        }
    }

    /// DELETE the session.
    pub async fn delete(&self) -> Raw {
        self.send_raw("DELETE", &[], "")
            .await
            .finish_guarded("the DELETE answer")
            .await
    }
}

/// Every JSON-RPC message of an answer, JSON or SSE.
pub fn all_messages(r: &Raw) -> Vec<Value> {
    if r.content_type().starts_with("text/event-stream") {
        r.sse_messages()
    } else if r.body.trim().is_empty() {
        vec![]
    } else {
        vec![r.json()]
    }
}
