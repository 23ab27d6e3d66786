//! The shared harness: start a fixture upstream and tasklift in front of it, and
//! talk to it with the bundled client or with raw HTTP requests.

#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tasklift::app::Running;
use tasklift::client::Client;
use tasklift::config::{RawConfig, RawToolRule, RawUpstream};
use tasklift::fixture::FixtureServer;

/// A running proxy and its upstream.
pub struct Harness {
    /// The proxy.
    pub proxy: Option<Running>,
    /// The fixture upstream.
    pub upstream: FixtureServer,
    /// The proxy's MCP endpoint.
    pub url: String,
    /// The configuration it was started with.
    pub raw: RawConfig,
    /// The store directory (deleted at drop).
    pub dir: tempfile::TempDir,
}

/// A configuration for one upstream at /mcp with a short threshold.
pub fn config(upstream_url: &str, dir: &std::path::Path) -> RawConfig {
    let mut raw = RawConfig::default();
    raw.server.listen = "127.0.0.1:0".into();
    raw.store.data_dir = dir.display().to_string();
    raw.tasks.threshold = "300ms".into();
    raw.tasks.poll_interval = "50ms".into();
    raw.upstreams.push(RawUpstream {
        url: upstream_url.to_string(),
        ..RawUpstream::default()
    });
    raw
}

/// A tool rule with a mode.
pub fn rule(mode: &str) -> RawToolRule {
    RawToolRule {
        mode: Some(mode.into()),
        ..Default::default()
    }
}

impl Harness {
    /// Start `upstream`, then tasklift in front of it; `tweak` adjusts the config.
    pub async fn start(upstream: FixtureServer, tweak: impl FnOnce(&mut RawConfig)) -> Self {
        let upstream = upstream
            .start("127.0.0.1:0".parse().unwrap())
            .await
            .expect("fixture starts");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut raw = config(&upstream.url(), dir.path());
        tweak(&mut raw);
        let proxy = tasklift::app::start(raw.validate().expect("valid config"))
            .await
            .expect("tasklift starts");
        let url = format!("http://{}/mcp", proxy.addr);
        Self {
            proxy: Some(proxy),
            upstream,
            url,
            raw,
            dir,
        }
    }

    /// Restart the proxy on the same store (e.g. after a simulated crash).
    pub async fn restart(&mut self) {
        if let Some(p) = self.proxy.take() {
            p.shutdown().await;
        }
        let proxy = tasklift::app::start(self.raw.validate().unwrap())
            .await
            .expect("tasklift restarts");
        self.url = format!("http://{}/mcp", proxy.addr);
        self.proxy = Some(proxy);
    }

    /// A client declaring the tasks extension.
    pub fn client(&self) -> Client {
        Client::new(&self.url).unwrap()
    }

    /// A client that does not declare the tasks extension.
    pub fn plain_client(&self) -> Client {
        let mut c = Client::new(&self.url).unwrap();
        c.tasks = false;
        c
    }

    /// Stop the proxy cleanly.
    pub async fn stop(mut self) {
        if let Some(p) = self.proxy.take() {
            p.shutdown().await;
        }
        self.upstream.stop().await;
    }
}

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

/// Send a raw request with exactly these headers and body.
pub async fn raw(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let client = HyperClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body =
        String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
    Raw {
        status,
        headers,
        body,
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
pub async fn post(url: &str, id: u64, method: &str, mut params: Value, tasks: bool) -> Raw {
    params["_meta"] = meta(tasks);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let name = tasklift::mcp::name_param(method)
        .and_then(|p| params.get(p))
        .and_then(Value::as_str)
        .map(tasklift::mcp::encode_header_value);
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        ("accept", "application/json, text/event-stream".to_string()),
        ("mcp-protocol-version", "2026-07-28".to_string()),
        ("mcp-method", method.to_string()),
    ];
    if let Some(n) = name {
        headers.push(("mcp-name", n));
    }
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    raw("POST", url, &h, &body.to_string()).await
}

/// Poll `tasks/get` until the task is terminal (or panic after `limit`).
pub async fn wait_terminal(c: &Client, id: &str, limit: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let t = c.get_task(id).await.expect("tasks/get");
        if matches!(
            t["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} not terminal in time: {t}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until `cond` holds (polling), or panic.
pub async fn eventually(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
