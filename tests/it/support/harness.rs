//! The shared harness: start a fixture upstream and tasklift in front of it, and
//! talk to it with the bundled client or with raw HTTP requests (`wire.rs`).

#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;
use tasklift::app::Running;
use tasklift::cli::client::Client;
use tasklift::config::{RawConfig, RawToolRule, RawUpstream};
use tasklift_fixture::FixtureServer;

pub use crate::support::wire::*;

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
/// The `tasklift-fixture` binary (the bundled server with its fault knobs), built
/// beside tasklift's by `cargo test` at the workspace root.
pub fn fixture_bin() -> String {
    let bin =
        std::path::Path::new(env!("CARGO_BIN_EXE_tasklift")).with_file_name("tasklift-fixture");
    assert!(
        bin.is_file(),
        "no tasklift-fixture binary at {} (run cargo test at the workspace root, or cargo build -p tasklift-fixture)",
        bin.display()
    );
    bin.display().to_string()
}

pub fn rule(mode: &str) -> RawToolRule {
    RawToolRule {
        mode: Some(mode.into()),
        ..Default::default()
    }
}

/// Start tasklift on `raw`. A store directory just let go of in this process (an
/// earlier instance, or a test's own `SledStore`) may still be locked for a
/// moment: sled's background flusher outlives the last handle briefly, where a
/// new process would only start after the old one exited. So "in use" is retried.
async fn start_proxy(raw: &RawConfig) -> Running {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tasklift::app::start(raw.validate().expect("valid config")).await {
            Ok(p) => return p,
            Err(e) if e.to_string().contains("in use") => {
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("tasklift starts: {e}"),
        }
    }
}

impl Harness {
    /// Start `upstream`, then tasklift in front of it; `tweak` adjusts the config.
    pub async fn start(upstream: FixtureServer, tweak: impl FnOnce(&mut RawConfig)) -> Self {
        Self::start_in(upstream, tempfile::tempdir().expect("tempdir"), tweak).await
    }

    /// Like `start`, on a store directory the test prepared.
    pub async fn start_in(
        upstream: FixtureServer,
        dir: tempfile::TempDir,
        tweak: impl FnOnce(&mut RawConfig),
    ) -> Self {
        let upstream = upstream
            .start("127.0.0.1:0".parse().unwrap())
            .await
            .expect("fixture starts");
        let url = upstream.url();
        Self::front(upstream, &url, dir, tweak).await
    }

    /// tasklift in front of any upstream URL (a mock, a TLS front, a closed port).
    /// `upstream` is only kept for its stats and stopped at the end.
    pub async fn front(
        upstream: FixtureServer,
        upstream_url: &str,
        dir: tempfile::TempDir,
        tweak: impl FnOnce(&mut RawConfig),
    ) -> Self {
        let mut raw = config(upstream_url, dir.path());
        tweak(&mut raw);
        let proxy = start_proxy(&raw).await;
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
        let proxy = start_proxy(&self.raw).await;
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

    /// A client with extra headers (e.g. `authorization`), declaring the extension or not.
    pub fn client_with(&self, tasks: bool, headers: &[(&str, &str)]) -> Client {
        let mut c = Client::new(&self.url).unwrap();
        c.tasks = tasks;
        for (k, v) in headers {
            c.headers
                .push((k.parse().unwrap(), http::HeaderValue::from_str(v).unwrap()));
        }
        c
    }

    /// What the fixture received, as JSON messages, with this method.
    pub fn received(&self, method: &str) -> Vec<Value> {
        let bodies = self.upstream.stats();
        let all = bodies.bodies.lock().unwrap();
        all.iter()
            .filter(|b| b["method"] == method)
            .cloned()
            .collect()
    }

    /// Stop the proxy cleanly.
    pub async fn stop(mut self) {
        if let Some(p) = self.proxy.take() {
            p.shutdown().await;
        }
        self.upstream.stop().await;
    }
}

/// Number of records in the proxy's store.
pub async fn stored_tasks(h: &Harness) -> u64 {
    let p = h.proxy.as_ref().expect("running");
    p.engine.health().await.expect("store stats").tasks
}

/// An address on 127.0.0.1 where nothing listens.
pub fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/mcp")
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

/// Wait until the fixture saw exactly one call cancelled and none still running.
pub async fn upstream_call_cancelled(stats: &tasklift_fixture::Stats) {
    use std::sync::atomic::Ordering;
    eventually(
        "the upstream call is cancelled",
        Duration::from_secs(10),
        || {
            stats.cancelled.load(Ordering::Relaxed) == 1
                && stats.running.load(Ordering::Relaxed) == 0
        },
    )
    .await;
}
