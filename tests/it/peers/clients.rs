//! Two more clients of the foreign-peer test bed, each through tasklift to the
//! TypeScript SDK v1 server `ts-v1-server.mjs` (see node.rs):
//! - `ts-v2-tasks-client.mjs`: `@modelcontextprotocol/client` v2 with
//!   `@modelcontextprotocol/ext-tasks` (from tests/clients, installed by
//!   scripts/install-test-tools), a task-aware 2026-07-28 client;
//! - `tasklift call` (the binary), as a script runs it (no terminal).
//!
//! Each test starts its own server and tasklift and asserts what the client's user
//! sees.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::call::call;
use crate::support::harness::*;
use crate::support::node::{front, node, or_skip, peers_dir, run_node, ts_v1_server};

/// tests/clients, if the v2 client and ext-tasks are installed there.
fn v2_clients_or_skip() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    let installed = ["client", "ext-tasks"].iter().all(|p| {
        dir.join("node_modules/@modelcontextprotocol")
            .join(p)
            .join("package.json")
            .is_file()
    });
    or_skip(
        installed.then_some(dir),
        "tests/clients is not installed: run scripts/install-test-tools",
    )
}

/// The TS v2 client with ext-tasks: list, a fast call, a slow call as a task with
/// the server's progress, elicitation after the handle answered with tasks/update,
/// and a cancel that stops the server's call (the script checks each).
#[tokio::test]
async fn ts_v2_tasks_client_through_tasklift_to_the_ts_v1_server() {
    if v2_clients_or_skip().is_none() {
        return;
    }
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |c| {
        let tools = &mut c.upstreams[0].tools;
        // A task at once, so the server's question turns the task input_required.
        tools.insert("ask".into(), rule("always"));
        // Inline however slow a loaded machine makes them.
        tools.insert("echo".into(), rule("never"));
        tools.insert("stats".into(), rule("never"));
    })
    .await;
    let home = tempfile::tempdir().unwrap();
    let dir = peers_dir().unwrap();
    let (code, out, err) = run_node(
        &node(),
        &dir,
        home.path(),
        &["ts-v2-tasks-client.mjs", &h.url],
    )
    .await;
    println!("{out}");
    assert!(
        code == 0 && out.contains("ts-v2-tasks-client: all checks passed"),
        "ts-v2-tasks-client.mjs {} failed (exit {code}):\n--- stdout\n{out}--- stderr\n{err}\
         --- server log\n{}",
        h.url,
        up.logs()
    );
    // tasklift's side of it: the two slow calls and `ask` were tasks, nothing else.
    assert_eq!(stored_tasks(&h).await, 3, "{out}");
    h.stop().await;
}

/// Output as text.
fn out_text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `tasklift call` follows a slow call's task to its result: `--json` prints only
/// the result; without it, plain status lines show the task and the server's
/// progress, then the text.
#[tokio::test]
async fn tasklift_call_follows_a_slow_ts_v1_call_as_a_task() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;

    let out = call(&[&h.url, "slow", "--arg", "seconds=2", "--json"]).await;
    let (stdout, stderr) = (out_text(&out.stdout), out_text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(
        r["content"][0],
        json!({"type": "text", "text": "slept 2s"}),
        "{r}"
    );
    assert!(r.get("isError").is_none_or(|e| e == false), "{r}");
    assert!(stderr.is_empty(), "--json keeps stderr quiet: {stderr}");
    assert_eq!(stored_tasks(&h).await, 1, "the slow call became a task");

    let out = call(&[&h.url, "slow", "--arg", "seconds=1.6"]).await;
    let (stdout, stderr) = (out_text(&out.stdout), out_text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(stdout, "slept 1.6s\n", "{stderr}");
    assert!(
        stderr.contains("tasklift call: task ") && stderr.contains("(working)"),
        "{stderr}"
    );
    // The server reports "step N" of 8 every 200 ms: "working: N/8 – step N".
    assert!(
        stderr.contains("tasklift call: working: ") && stderr.contains("/8 – step "),
        "the server's progress was not shown: {stderr}"
    );
    assert!(stderr.contains("completed after"), "{stderr}");
    assert!(
        !stderr.contains('\r'),
        "no spinner off a terminal: {stderr:?}"
    );
    h.stop().await;
}

/// A tool that throws on the SDK v1 server is a tool error: exit 1, its text
/// printed (or its `isError` result with `--json`), and stderr says so; an unknown
/// tool too, as the SDK answers it.
#[tokio::test]
async fn tasklift_call_reports_a_ts_v1_tool_error_with_exit_1() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;

    let out = call(&[&h.url, "fail"]).await;
    let (stdout, stderr) = (out_text(&out.stdout), out_text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert_eq!(stdout, "the fail tool failed on purpose\n", "{stderr}");
    assert!(
        stderr.contains("tasklift call: fail reported an error (isError)"),
        "{stderr}"
    );

    let out = call(&[&h.url, "fail", "--json"]).await;
    let (stdout, stderr) = (out_text(&out.stdout), out_text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(
        r["content"][0]["text"], "the fail tool failed on purpose",
        "{r}"
    );

    // The SDK v1 answers an unknown tool with an isError result, not a JSON-RPC
    // error (the peer's choice; it reaches the client as it was sent), so this is
    // exit 1 rather than the usage exit 2 a rejecting server gets.
    let out = call(&[&h.url, "no_such_tool"]).await;
    let (stdout, stderr) = (out_text(&out.stdout), out_text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("Tool no_such_tool not found"),
        "{stdout}{stderr}"
    );
    h.stop().await;
}
