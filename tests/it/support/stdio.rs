//! tasklift in front of one stdio upstream (the stdio fixture or any command), and
//! what tests of stdio children check with: call results, task ids, hang guards
//! and following a task to its end.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tasklift::app::Running;
use tasklift::cli::client::{Client, ClientError};
use tasklift::config::{RawConfig, RawUpstream};
use tasklift_protocol::jsonrpc::RpcError;

use crate::support::harness::*;

/// The upstream's name, which error messages must mention.
pub const NAME: &str = "kid";

/// Generous bound for anything that should take a few seconds: a hang guard only.
pub const LIMIT: Duration = Duration::from_secs(30);

/// tasklift in front of one stdio upstream, with no HTTP fixture.
pub struct StdioHarness {
    /// The proxy.
    pub proxy: Option<Running>,
    /// The proxy's MCP endpoint.
    pub url: String,
    /// The fixture's event log.
    pub log: PathBuf,
    /// Store and log directory (deleted at drop).
    _dir: tempfile::TempDir,
}

/// The fixture's command line with these flags, logging to `log`.
pub fn fixture_command(flags: &[&str], log: &Path) -> Vec<String> {
    let mut c: Vec<String> = vec![crate::support::harness::fixture_bin(), "--stdio".into()];
    c.extend(flags.iter().map(|f| f.to_string()));
    c.extend(["--log".to_string(), log.display().to_string()]);
    c
}

impl StdioHarness {
    /// The fixture with `flags` behind tasklift; `tweak` adjusts the config.
    pub async fn start(flags: &[&str], tweak: impl FnOnce(&mut RawConfig)) -> Self {
        Self::start_command(|log| fixture_command(flags, log), tweak).await
    }

    /// Any command (given the log path) behind tasklift.
    pub async fn start_command(
        command: impl FnOnce(&Path) -> Vec<String>,
        tweak: impl FnOnce(&mut RawConfig),
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("fixture.log");
        let mut raw = RawConfig::default();
        raw.server.listen = "127.0.0.1:0".into();
        raw.store.data_dir = dir.path().join("store").display().to_string();
        raw.tasks.threshold = "300ms".into();
        raw.tasks.poll_interval = "50ms".into();
        raw.upstreams.push(RawUpstream {
            name: NAME.into(),
            command: command(&log),
            shutdown_grace: "500ms".into(),
            ..RawUpstream::default()
        });
        tweak(&mut raw);
        let proxy = tasklift::app::start(raw.validate().expect("valid config"))
            .await
            .expect("tasklift starts");
        let url = format!("http://{}/mcp", proxy.addr);
        Self {
            proxy: Some(proxy),
            url,
            log,
            _dir: dir,
        }
    }

    /// A client declaring the tasks extension.
    pub fn client(&self) -> Client {
        Client::new(&self.url).unwrap()
    }

    /// A client that does not declare the tasks extension (calls stay synchronous).
    pub fn plain_client(&self) -> Client {
        let mut c = self.client();
        c.tasks = false;
        c
    }

    /// The fixture's log lines so far.
    pub fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The PIDs of the children started so far.
    pub fn pids(&self) -> Vec<u32> {
        self.log_lines()
            .iter()
            .filter_map(|l| l.strip_prefix("start ")?.parse().ok())
            .collect()
    }

    /// Wait until the log satisfies `cond`.
    pub async fn wait_log(&self, what: &str, cond: impl Fn(&[String]) -> bool) {
        let log = self.log.clone();
        let read = move || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        eventually(what, LIMIT, || cond(&read())).await;
    }

    /// Stop the proxy (and its children).
    pub async fn stop(mut self) {
        if let Some(p) = self.proxy.take() {
            p.shutdown().await;
        }
    }
}

/// The JSON-RPC error of a failed call (panics on success or transport failure).
pub fn rpc_error(r: Result<tasklift::cli::client::Answer, ClientError>) -> RpcError {
    match r {
        Err(ClientError::Rpc(e)) => e,
        Ok(a) => panic!("expected a JSON-RPC error, got {}", a.result),
        Err(e) => panic!("expected a JSON-RPC error, got a transport error: {e}"),
    }
}

/// The text of a tool result.
pub fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// The id of the task a call became (panics if it was answered directly).
pub fn task_id(result: &Value) -> String {
    assert_eq!(result["resultType"], "task", "expected a task: {result}");
    result["taskId"].as_str().unwrap().to_string()
}

/// Run `f` under a hang guard.
pub async fn guard<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("hang: {what} took longer than {LIMIT:?}"))
}

/// Poll a task until it is terminal, collecting every `statusMessage` seen on the way.
pub async fn follow(c: &Client, id: &str) -> (Value, Vec<String>) {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let t = c.get_task(id).await.expect("tasks/get");
        if let Some(m) = t["statusMessage"].as_str() {
            if seen.last().map(String::as_str) != Some(m) {
                seen.push(m.to_string());
            }
        }
        if matches!(
            t["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return (t, seen);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} not terminal in time: {t}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
