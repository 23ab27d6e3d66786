//! Slow calls from real 2025-era SDK clients whose request timeout is shorter than
//! the tool: the TypeScript SDK v1 (`tests/peers/node/ts-v1-slow-calls.mjs`) and
//! the Python SDK mcp==1.30 (`tests/peers/python/v1_slow_client.py`), each with a
//! 3 s timeout on `tools/call`, against the Python v1 server's `slow {seconds: 10}`
//! (`v1_server.py`, whose `stats` tool counts the `slow` calls it started,
//! cancelled and completed: the proof of how often the tool really ran).
//!
//! - without tasklift the call fails with the SDK's timeout error;
//! - `non_task_clients = "tool_handles"`: the call answers before the timeout with
//!   a "still running" result; a scripted model follows its text to
//!   `tasklift_wait` and gets the real result; the server ran the tool once;
//! - `on_disconnect = "detach"`: the call times out (the TypeScript SDK then sends
//!   `notifications/cancelled`); its identical retry returns the result and the
//!   server ran the tool once, cancelling nothing;
//! - the defaults (`wait`, `cancel`), as the contrast: a retry runs the tool again.
//!
//! Each runs with the server over Streamable HTTP and as tasklift's stdio child,
//! with tasklift in-process in front (`[tasks] threshold = "1s"`), and once on the
//! PostgreSQL store. The scripts print one JSON line per check; each test asserts
//! that all of them passed. Skipped (failing under `CI`) when the Node or Python
//! peers are not installed (scripts/install-test-tools).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tasklift::config::RawConfig;
use tasklift_fixture::FixtureServer;

use crate::support::harness::*;
use crate::support::node::{node, peers_or_skip};
use crate::support::python::{self as py, PyServer};

/// The client SDK.
#[derive(Clone, Copy, Debug)]
enum Peer {
    /// `@modelcontextprotocol/sdk` 1.29 (`ts-v1-slow-calls.mjs`).
    Ts,
    /// mcp==1.30 `ClientSession` (`v1_slow_client.py`).
    Py,
}

/// What is in front of the server, and what the client must see (the scripts'
/// MODE argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// No tasklift: the call times out.
    Direct,
    /// `non_task_clients = "tool_handles"`.
    Handles,
    /// `on_disconnect = "detach"`.
    Detach,
    /// The defaults: `wait` and `cancel`.
    Cancel,
}

/// How tasklift reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Http,
    Stdio,
}

use Mode::*;
use Peer::*;
use Transport::*;

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Direct => "direct",
            Handles => "handles",
            Detach => "detach",
            Cancel => "cancel",
        }
    }

    /// The checks its run must report (besides `init`).
    fn checks(self) -> &'static [&'static str] {
        match self {
            Direct => &["direct: slow times out"],
            Handles => &["handles: tools listed", "handles: model loop"],
            Detach => &["detach: retry joins"],
            Cancel => &["cancel: retry runs again"],
        }
    }

    /// The upstream's keys for this mode.
    fn configure(self, c: &mut RawConfig) {
        let u = &mut c.upstreams[0];
        (u.non_task_clients, u.on_disconnect) = match self {
            Handles => ("tool_handles".into(), "cancel".into()),
            Detach => ("wait".into(), "detach".into()),
            Direct | Cancel => ("wait".into(), "cancel".into()),
        };
    }
}

/// The Python server, over HTTP (the test runs it) or as tasklift's stdio child,
/// with tasklift in front (`None` for `Direct`).
struct Bed {
    h: Option<Harness>,
    server: Option<PyServer>,
    /// What the client script talks to.
    url: String,
}

/// The server for `mode` over `transport`, tasklift in front of it unless `Direct`,
/// on the PostgreSQL database at `pg` when given. `None` when the Python peer is
/// not installed.
async fn bed(mode: Mode, transport: Transport, pg: Option<&str>) -> Option<Bed> {
    let python = py::python("mcp130")?;
    let script = py::peers_dir().join("v1_server.py");
    let server = match transport {
        Http => Some(PyServer::start(&python, "v1_server.py", py::Mode::Http).await),
        Stdio => None,
    };
    if mode == Direct {
        let server = server.expect("direct runs the server over HTTP");
        let url = server.url.clone();
        return Some(Bed {
            h: None,
            server: Some(server),
            url,
        });
    }
    let upstream_url = server.as_ref().map(|s| s.url.clone()).unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &upstream_url, dir, |c| {
        c.tasks.threshold = "1s".into();
        if let Some(url) = pg {
            c.store.url = url.into();
            c.store.pool_size = 4;
        }
        if transport == Stdio {
            let u = &mut c.upstreams[0];
            u.url = String::new();
            u.command = vec![
                python.display().to_string(),
                script.display().to_string(),
                "--mode".into(),
                "stdio".into(),
            ];
            u.shutdown_grace = "500ms".into();
            // A hang guard: a Python SDK takes a second or two to import.
            u.probe_timeout = "30s".into();
        }
        mode.configure(c);
    })
    .await;
    let url = h.url.clone();
    Some(Bed {
        h: Some(h),
        server,
        url,
    })
}

impl Bed {
    async fn stop(self) {
        if let Some(h) = self.h {
            h.stop().await;
        }
    }
}

/// Run `program ARGS` in `dir` (HOME in a fresh directory): exit status, stdout,
/// stderr.
async fn run(program: &Path, dir: &Path, args: &[&str]) -> (bool, String, String) {
    let home = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {} {args:?}: {e}", program.display()));
    let out = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} did not finish in 150 s"))
        .expect("output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run `peer`'s script against `b` in `mode`; assert that it reported every check
/// of the mode and that all passed. Returns its check lines.
async fn client(peer: Peer, b: &Bed, mode: Mode) -> Option<Vec<Value>> {
    let (ok, out, err) = match peer {
        Ts => {
            let dir = peers_or_skip()?;
            let node = node();
            let args = ["ts-v1-slow-calls.mjs", &b.url, mode.arg()];
            run(Path::new(&node), &dir, &args).await
        }
        Py => {
            let python = py::python("mcp130")?;
            let args = ["v1_slow_client.py", &b.url, mode.arg()];
            run(&python, &py::peers_dir(), &args).await
        }
    };
    let checks: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("check").is_some())
        .collect();
    let server_log = b.server.as_ref().map(PyServer::log).unwrap_or_default();
    let all = format!("--- stdout\n{out}--- stderr\n{err}--- server log\n{server_log}");
    println!("{peer:?} {mode:?}:\n{all}");
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c["ok"] != true)
        .map(|c| format!("{}: {}", c["check"], c["detail"]))
        .collect();
    let missing: Vec<&str> = mode
        .checks()
        .iter()
        .copied()
        .filter(|name| !checks.iter().any(|c| c["check"] == *name))
        .collect();
    assert!(
        ok && failed.is_empty() && missing.is_empty() && out.contains("all checks passed"),
        "{peer:?} in mode {mode:?} against {}: failed {failed:#?}, missing {missing:?}\n{all}",
        b.url
    );
    Some(checks)
}

/// One script in one mode against the server over one transport.
async fn case(peer: Peer, mode: Mode, transport: Transport) {
    if matches!(peer, Ts) && peers_or_skip().is_none() {
        return;
    }
    let Some(b) = bed(mode, transport, None).await else {
        return;
    };
    client(peer, &b, mode).await;
    b.stop().await;
}

// ---------------------------------------------------------------------------
// Without tasklift: the problem.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn ts_v1_client_times_out_on_the_server_directly() {
    case(Ts, Direct, Http).await
}

#[tokio::test]
async fn py_v1_client_times_out_on_the_server_directly() {
    case(Py, Direct, Http).await
}

// ---------------------------------------------------------------------------
// non_task_clients = "tool_handles": the model follows the text to tasklift_wait.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn ts_v1_client_follows_tool_handles_over_http() {
    case(Ts, Handles, Http).await
}

#[tokio::test]
async fn ts_v1_client_follows_tool_handles_over_stdio() {
    case(Ts, Handles, Stdio).await
}

#[tokio::test]
async fn py_v1_client_follows_tool_handles_over_http() {
    case(Py, Handles, Http).await
}

#[tokio::test]
async fn py_v1_client_follows_tool_handles_over_stdio() {
    case(Py, Handles, Stdio).await
}

// ---------------------------------------------------------------------------
// on_disconnect = "detach": the retry after the timeout joins the running call.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn ts_v1_client_retry_joins_the_detached_call_over_http() {
    case(Ts, Detach, Http).await
}

#[tokio::test]
async fn ts_v1_client_retry_joins_the_detached_call_over_stdio() {
    case(Ts, Detach, Stdio).await
}

#[tokio::test]
async fn py_v1_client_retry_joins_the_detached_call_over_http() {
    case(Py, Detach, Http).await
}

#[tokio::test]
async fn py_v1_client_retry_joins_the_detached_call_over_stdio() {
    case(Py, Detach, Stdio).await
}

// ---------------------------------------------------------------------------
// The defaults (wait, cancel): a retry runs the tool again.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn ts_v1_client_retry_runs_the_tool_again_by_default_over_http() {
    case(Ts, Cancel, Http).await
}

#[tokio::test]
async fn ts_v1_client_retry_runs_the_tool_again_by_default_over_stdio() {
    case(Ts, Cancel, Stdio).await
}

#[tokio::test]
async fn py_v1_client_retry_runs_the_tool_again_by_default_over_http() {
    case(Py, Cancel, Http).await
}

#[tokio::test]
async fn py_v1_client_retry_runs_the_tool_again_by_default_over_stdio() {
    case(Py, Cancel, Stdio).await
}

// ---------------------------------------------------------------------------
// The PostgreSQL store.
// ---------------------------------------------------------------------------

/// Tool handles and detach with the tasks in PostgreSQL (a database of the test's
/// own; see store/replicas.rs for when PostgreSQL is required): both clients, each mode
/// on a tasklift of its own, over HTTP.
#[tokio::test]
async fn both_clients_follow_handles_and_join_detached_calls_on_postgres() {
    if peers_or_skip().is_none() || py::python("mcp130").is_none() {
        return;
    }
    let Some(db) = crate::support::pg::Db::create().await else {
        return;
    };
    for mode in [Handles, Detach] {
        for peer in [Ts, Py] {
            let b = bed(mode, Http, Some(&db.url)).await.expect("installed");
            client(peer, &b, mode).await;
            b.stop().await;
        }
    }
}
