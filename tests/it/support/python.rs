//! Python peers (tests/peers/python, run from the virtual environments that
//! scripts/install-peers-python makes under target/tools/py-*): finding an
//! environment's Python, and a Python server on a free port in one of its modes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::support::harness::*;

/// How the server is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Stateful Streamable HTTP (the SDKs' default).
    Http,
    /// mcp 1.x `stateless_http=True`.
    Stateless,
    /// mcp 1.x `json_response=True`.
    Json,
    /// A command tasklift runs, over stdin/stdout.
    Stdio,
    /// Stateful Streamable HTTP served by Hypercorn, which tasklift speaks HTTP/2
    /// to (`http2 = true`: h2c, prior knowledge).
    H2,
}

use Mode::*;

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Http => "http",
            Stateless => "stateless",
            Json => "json",
            Stdio => "stdio",
            H2 => "h2",
        }
    }
}

pub(crate) fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/python")
}

/// The Python of an installed environment (`target/tools/py-NAME`), or `None` after
/// saying why the test is skipped (a failure under CI).
pub(crate) fn python(venv: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/tools")
        .join(format!("py-{venv}"));
    let python = dir.join("bin/python");
    if python.is_file() && dir.join(".tasklift-installed-requirements.txt").is_file() {
        return Some(python);
    }
    let msg = format!(
        "{} is not installed: run scripts/install-peers-python",
        dir.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}

/// A Python server on a free port, killed when dropped; its stderr goes to a file.
pub(crate) struct PyServer {
    _child: tokio::process::Child,
    stderr: PathBuf,
    pub(crate) url: String,
    _dir: tempfile::TempDir,
}

impl PyServer {
    pub(crate) async fn start(python: &Path, script: &str, mode: Mode) -> Self {
        Self::start_with_env(python, script, mode, &[]).await
    }

    /// `start`, with environment variables for the server.
    pub(crate) async fn start_with_env(
        python: &Path,
        script: &str,
        mode: Mode,
        env: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr.log");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut child = tokio::process::Command::new(python)
            .arg(peers_dir().join(script))
            .args(["--mode", mode.arg(), "--port", &port.to_string()])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} {script}: {e}", python.display()));
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let deadline = tokio::time::Instant::now() + GUARD;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{script} exited ({status}):\n{}", read(&stderr));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{script} did not listen on {port} in {GUARD:?}:\n{}",
                read(&stderr)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            _child: child,
            stderr,
            url: format!("http://127.0.0.1:{port}/mcp"),
            _dir: dir,
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}
