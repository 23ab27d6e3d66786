//! Foreign Node peers on both sides of tasklift (installed by
//! scripts/install-peers-node into tests/peers/node, and by scripts/install-test-tools
//! under target/tools):
//! - upstreams: `ts-v1-server.mjs`, a stateful Streamable HTTP server written with the
//!   TypeScript SDK v1 (`@modelcontextprotocol/sdk` 1.29) whose `ask` and `sample`
//!   tools send their requests with no related request id (so the SDK puts them on
//!   the session's GET stream), and `@modelcontextprotocol/server-everything` over its
//!   own Streamable HTTP transport;
//! - clients: tasklift's own 2026-07-28 client (and raw POSTs) declaring the tasks
//!   extension, `ts-v1-client.mjs` (the TypeScript SDK v1 client with sampling and
//!   elicitation handlers), and MCP Inspector 2.12's CLI in its modern and legacy
//!   protocol eras;
//! - and `kill -9` of a `tasklift serve` process mid-task, restarted on its data dir.
//!
//! Each test starts its own peer processes on free ports (killed when it ends) and
//! asserts what the user of the client sees.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::Client;

use crate::support::everything::everything_http;
use crate::support::harness::*;
use crate::support::input::{caps, key_for, result, threshold, update, wait_for, Caller};
use crate::support::node::{
    front, node, node22, or_skip, peers_dir, peers_or_skip, run_node, ts_v1_server, NodePeer,
};
use crate::support::proc::Proc;
use crate::support::relay::Relay;
use crate::support::stdio::{follow, guard, task_id, text};

const RESTART_MESSAGE: &str =
    "tasklift restarted while this task was running; the upstream outcome is unknown";

/// The tools `ts-v1-server.mjs` offers.
const TS_V1_TOOLS: [&str; 7] = ["echo", "slow", "stats", "ask", "sample", "fail", "big"];

/// The tool's text result, whether `c` is a client of tasklift or not.
async fn call_text(c: &Client, tool: &str, args: Value) -> String {
    let a = guard(tool, c.call_tool(tool, args))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    text(&a.result).to_string()
}

/// The ts-v1 server's counters of `slow` calls (asked through tasklift).
async fn stats(c: &Client) -> Value {
    let t = call_text(c, "stats", json!({})).await;
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("stats ({e}): {t}"))
}

/// Poll the ts-v1 server's counters until `cond` holds.
async fn stats_until(c: &Client, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = stats(c).await;
        if cond(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text `big` returns for `n` characters.
fn big_text(n: usize) -> String {
    "0123456789abcdef".repeat(n.div_ceil(16))[..n].to_string()
}

// ---------------------------------------------------------------------------
// A 2026-07-28 client with the tasks extension, TypeScript SDK v1 server.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn ts_v1_server_lists_answers_fast_calls_and_reports_tool_errors() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;
    let c = h.client();

    let list = guard("tools/list", c.request("tools/list", json!({})))
        .await
        .unwrap()
        .result;
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {list}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in TS_V1_TOOLS {
        assert!(names.contains(&want), "tools/list lacks {want}: {list}");
    }

    let a = guard("echo", c.call_tool("echo", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(a.result["resultType"], "complete", "{}", a.result);
    assert_eq!(text(&a.result), "echo: hi");

    // A tool that throws is a tool error (a result with isError), not a protocol error.
    let a = guard("fail", c.call_tool("fail", json!({})))
        .await
        .unwrap_or_else(|e| panic!("fail must be a result, not an error: {e}"));
    assert_eq!(a.result["isError"], true, "{}", a.result);
    assert!(
        text(&a.result).contains("the fail tool failed on purpose"),
        "{}",
        a.result
    );
    assert_eq!(stored_tasks(&h).await, 0, "fast calls leave nothing stored");
    h.stop().await;
}

/// The SDK answers every `tools/call` as an SSE stream, chunked, its last chunk
/// after the response: tasklift reads it to the end and keeps the connection, so
/// a run of calls rides one connection instead of opening one each (a TCP
/// handshake and a `TIME_WAIT` socket per call, what it did before).
#[tokio::test]
async fn ts_v1_server_calls_reuse_their_upstream_connection() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let relay = Relay::start(&up.url).await;
    let h = front(&relay.url, |c| c.server.workers = 1).await;
    let c = h.client();
    for i in 0..20 {
        let want = format!("echo: {i}");
        assert_eq!(
            call_text(&c, "echo", json!({"text": i.to_string()})).await,
            want
        );
    }
    // The session's POSTs share one connection; its GET stream has another.
    let accepted = relay.accepted();
    assert!(accepted <= 3, "20 calls over {accepted} connections");
    h.stop().await;
}

/// A modern request's legacy `params.task` must not reach the upstream: the SDK
/// 1.29 server would read it as a 2025-11-25 task request it does not support.
#[tokio::test]
async fn ts_v1_server_never_sees_a_modern_requests_params_task() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;
    let params = json!({"name": "echo", "arguments": {"text": "hi"}, "task": {"ttl": 60000}});
    let r = guarded(
        "echo with params.task",
        post(&h.url, 1, "tools/call", params, true),
    )
    .await;
    let r = result(&r);
    assert_eq!(r["resultType"], "complete", "{r}");
    assert_eq!(text(&r), "echo: hi", "{r}");
    h.stop().await;
}

#[tokio::test]
async fn ts_v1_slow_call_becomes_a_task_showing_the_servers_progress() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;
    let c = h.client();
    let a = guard("slow", c.call_tool("slow", json!({"seconds": 2})))
        .await
        .unwrap();
    let id = task_id(&a.result);
    let (t, seen) = follow(&c, &id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(text(&t["result"]), "slept 2s", "{t}");
    // The server reports "step N" of 10 every 200 ms: "N/10 – step N".
    assert!(
        seen.iter()
            .any(|m| m.contains("/10 – step ")
                && m.split('/').next().unwrap().parse::<u32>().is_ok()),
        "statusMessage never showed the server's progress; saw {seen:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn ts_v1_cancelled_task_stops_the_upstream_call() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;
    let c = h.client();
    let a = guard("slow", c.call_tool("slow", json!({"seconds": 30})))
        .await
        .unwrap();
    let id = task_id(&a.result);
    stats_until(&c, "the slow call running upstream", |s| s["running"] == 1).await;
    guard("tasks/cancel", c.cancel_task(&id)).await.unwrap();
    let t = wait_terminal(&c, &id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let s = stats_until(&c, "the upstream call stopped", |s| {
        s["running"] == 0 && s["cancelled"] == 1
    })
    .await;
    assert_eq!(
        s["completed"], 0,
        "the server finished the cancelled call: {s}"
    );
    h.stop().await;
}

#[tokio::test]
async fn ts_v1_big_result_comes_back_whole_directly_and_from_a_task() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;
    let c = h.client();
    let want = big_text(2_000_000);
    let a = guard("big", c.call_tool("big", json!({}))).await.unwrap();
    assert_eq!(a.result["resultType"], "complete");
    let got = text(&a.result);
    assert!(
        got == want,
        "the direct result has {} characters",
        got.len()
    );

    let a = guard("big as a task", c.call_tool("big", json!({"seconds": 1})))
        .await
        .unwrap();
    let id = task_id(&a.result);
    let t = wait_terminal(&c, &id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{}", t["status"]);
    let got = text(&t["result"]);
    assert!(
        got == want,
        "the task's result has {} characters",
        got.len()
    );
    h.stop().await;
}

/// `ask` (elicitation on the GET stream) before any handle: the client gets an
/// InputRequiredResult and its retry completes the call.
#[tokio::test]
async fn ts_v1_elicitation_before_the_handle_is_an_input_required_result() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    // A threshold no loaded machine reaches before the server asks.
    let h = front(&up.url, |c| {
        c.upstreams[0].tools.insert("ask".into(), threshold("10s"));
    })
    .await;
    let c = Caller::new(&h, "ask", json!({}));
    let r = result(&guarded("ask", c.call(1)).await);
    assert_eq!(
        r["resultType"],
        "input_required",
        "the server's elicitation (sent on its GET stream) never reached the caller: \
         {r}\n--- server log\n{}",
        up.logs()
    );
    let key = key_for(&r["inputRequests"], "What is your name?");
    assert_eq!(r["inputRequests"][&key]["method"], "elicitation/create");
    let ann = json!({key: {"action": "accept", "content": {"name": "Ann"}}});
    let done = result(&guarded("the retry", c.retry(2, ann, &r["requestState"])).await);
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(text(&done), r#"answer: accept {"name":"Ann"}"#, "{done}");
    h.stop().await;
}

/// `ask` after the handle: the task goes input_required, tasks/update answers it.
#[tokio::test]
async fn ts_v1_elicitation_after_the_handle_makes_the_task_input_required() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |c| {
        c.upstreams[0].tools.insert("ask".into(), rule("always"));
    })
    .await;
    let r = result(&guarded("ask", Caller::new(&h, "ask", json!({"delay": 0.5})).call(1)).await);
    let id = task_id(&r);
    let c = h.client();
    let t = wait_for(&c, &id, "input_required", |t| t["status"] != "working").await;
    assert_eq!(
        t["status"],
        "input_required",
        "{t}\n--- server log\n{}",
        up.logs()
    );
    let key = key_for(&t["inputRequests"], "What is your name?");
    update(
        &c,
        &id,
        json!({key: {"action": "accept", "content": {"name": "Ann"}}}),
    )
    .await;
    let done = wait_terminal(&c, &id, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text(&done["result"]), r#"answer: accept {"name":"Ann"}"#);
    h.stop().await;
}

/// The answer a client gives to the server's sampling request.
fn sampled() -> Value {
    json!({"role": "assistant", "model": "test-model",
           "content": {"type": "text", "text": "hello from the client"}})
}

/// The only key of `inputRequests`, checking it is a sampling request.
fn sampling_key(reqs: &Value) -> String {
    let obj = reqs
        .as_object()
        .unwrap_or_else(|| panic!("inputRequests: {reqs}"));
    assert_eq!(obj.len(), 1, "{reqs}");
    let (k, req) = obj.iter().next().unwrap();
    assert_eq!(req["method"], "sampling/createMessage", "{reqs}");
    assert_eq!(
        req["params"]["messages"][0]["content"]["text"], "Say hello",
        "{reqs}"
    );
    k.clone()
}

#[tokio::test]
async fn ts_v1_sampling_before_the_handle_is_an_input_required_result() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |c| {
        c.upstreams[0]
            .tools
            .insert("sample".into(), threshold("10s"));
    })
    .await;
    let c = Caller::new(&h, "sample", json!({})).caps(caps(true, &["sampling"]));
    let r = result(&guarded("sample", c.call(1)).await);
    assert_eq!(
        r["resultType"],
        "input_required",
        "the server's sampling request (sent on its GET stream) never reached the caller: \
         {r}\n--- server log\n{}",
        up.logs()
    );
    let key = sampling_key(&r["inputRequests"]);
    let answer = json!({key: sampled()});
    let done = result(&guarded("the retry", c.retry(2, answer, &r["requestState"])).await);
    assert_eq!(text(&done), "sampled: hello from the client", "{done}");
    h.stop().await;
}

#[tokio::test]
async fn ts_v1_sampling_after_the_handle_makes_the_task_input_required() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |c| {
        c.upstreams[0].tools.insert("sample".into(), rule("always"));
    })
    .await;
    let caller = Caller::new(&h, "sample", json!({"delay": 0.5})).caps(caps(true, &["sampling"]));
    let id = task_id(&result(&guarded("sample", caller.call(1)).await));
    let c = h.client();
    let t = wait_for(&c, &id, "input_required", |t| t["status"] != "working").await;
    assert_eq!(
        t["status"],
        "input_required",
        "{t}\n--- server log\n{}",
        up.logs()
    );
    let key = sampling_key(&t["inputRequests"]);
    update(&c, &id, json!({key: sampled()})).await;
    let done = wait_terminal(&c, &id, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text(&done["result"]), "sampled: hello from the client");
    h.stop().await;
}

// ---------------------------------------------------------------------------
// The TypeScript SDK v1 client (a 2025-era client) and MCP Inspector's CLI.
// ---------------------------------------------------------------------------

/// `ts-v1-client.mjs URL`: its checks, asserting it passed all of them.
async fn ts_v1_client(dir: &Path, url: &str, up: &NodePeer) {
    let home = tempfile::tempdir().unwrap();
    let (code, out, err) = run_node(&node(), dir, home.path(), &["ts-v1-client.mjs", url]).await;
    println!("{out}");
    assert!(
        code == 0 && out.contains("ts-v1-client: all checks passed"),
        "ts-v1-client.mjs {url} failed:\n--- stdout\n{out}--- stderr\n{err}--- server log\n{}",
        up.logs()
    );
}

/// The client straight against the server: keeps the script (and the server) honest.
#[tokio::test]
async fn ts_v1_client_against_the_ts_v1_server_directly() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    ts_v1_client(&peers_dir().unwrap(), &up.url, &up).await;
}

/// A legacy client through tasklift: a slow call is a plain wait with progress, a
/// cancel stops the upstream, the server's elicitation and sampling reach the
/// client's handlers, a tool error and a 2 MB result arrive as they were sent.
#[tokio::test]
async fn ts_v1_client_through_tasklift_to_the_ts_v1_server() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;
    ts_v1_client(&peers_dir().unwrap(), &h.url, &up).await;
    h.stop().await;
}

/// The Inspector CLI (its launcher's `--cli` mode) and the Node >= 22.19 it needs.
fn inspector_or_skip() -> Option<(String, PathBuf)> {
    let dir = peers_or_skip()?;
    let node = or_skip(
        node22(),
        "Node 22 is not installed under target/tools: run scripts/install-test-tools",
    )?;
    Some((node, dir))
}

/// `inspector --cli URL --protocol-era ERA --format json ARGS`: its exit code and
/// the JSON it printed on stdout.
async fn inspector(node: &str, dir: &Path, url: &str, era: &str, args: &[&str]) -> (i32, Value) {
    let home = tempfile::tempdir().unwrap();
    let launcher = "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js";
    let mut all = vec![
        launcher,
        "--cli",
        url,
        "--protocol-era",
        era,
        "--format",
        "json",
    ];
    all.extend_from_slice(args);
    let (code, out, err) = run_node(node, dir, home.path(), &all).await;
    let v = serde_json::from_str(out.trim()).unwrap_or_else(|e| {
        panic!("inspector {era} {args:?} printed no JSON ({e}, exit {code}):\n--- stdout\n{out}--- stderr\n{err}")
    });
    (code, v)
}

/// An Inspector `tools/call` of `tool` with `--tool-arg` pairs: exit code and result.
async fn inspector_call(
    (node, dir): (&str, &Path),
    url: &str,
    era: &str,
    tool: &str,
    args: &[&str],
) -> (i32, Value) {
    let mut all = vec!["--method", "tools/call", "--tool-name", tool];
    if !args.is_empty() {
        all.push("--tool-arg");
        all.extend_from_slice(args);
    }
    let (code, v) = inspector(node, dir, url, era, &all).await;
    (code, v["result"].clone())
}

/// tools/list, a fast call, a tool error and a slow call with the Inspector in
/// `era`; returns the slow call's result.
async fn inspector_session(era: &str, h: &Harness, node: &str, dir: &Path) -> Value {
    let (code, list) = inspector(node, dir, &h.url, era, &["--method", "tools/list"]).await;
    assert_eq!(code, 0, "{era} tools/list: {list}");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{era} tools/list: {list}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in TS_V1_TOOLS {
        assert!(
            names.contains(&want),
            "{era} tools/list lacks {want}: {list}"
        );
    }
    let peer = (node, dir);
    let (code, r) = inspector_call(peer, &h.url, era, "echo", &["text=hi"]).await;
    assert_eq!((code, text(&r)), (0, "echo: hi"), "{era} echo: {r}");
    // A tool error is shown as the tool's result (the CLI exits 5 for isError).
    let (code, r) = inspector_call(peer, &h.url, era, "fail", &[]).await;
    assert_eq!(r["isError"], true, "{era} fail: {r}");
    assert_eq!(
        text(&r),
        "the fail tool failed on purpose",
        "{era} fail: {r}"
    );
    assert_eq!(code, 5, "{era} fail: the exit code for a tool's isError");
    let (code, r) = inspector_call(peer, &h.url, era, "slow", &["seconds=1.5"]).await;
    assert_eq!(code, 0, "{era} slow: {r}");
    assert_eq!(
        text(&r),
        "slept 1.5s",
        "{era} slow: a proper CallToolResult: {r}"
    );
    assert!(
        r.get("isError").is_none_or(|e| e == false),
        "{era} slow: {r}"
    );
    r
}

/// Modern mode declares the tasks extension: the slow call becomes a task the
/// Inspector follows to its result.
#[tokio::test]
async fn inspector_cli_modern_mode_through_tasklift() {
    let Some((node, dir)) = inspector_or_skip() else {
        return;
    };
    let up = ts_v1_server().await.unwrap();
    let h = front(&up.url, |_| {}).await;
    inspector_session("modern", &h, &node, &dir).await;
    assert_eq!(
        stored_tasks(&h).await,
        1,
        "the slow call became a task the Inspector followed"
    );
    h.stop().await;
}

/// Legacy mode (2025-11-25, though the Inspector still lists the tasks extension
/// among its capabilities): a slow call is a plain wait for a plain CallToolResult,
/// never a task handle of either era.
#[tokio::test]
async fn inspector_cli_legacy_mode_through_tasklift() {
    let Some((node, dir)) = inspector_or_skip() else {
        return;
    };
    let up = ts_v1_server().await.unwrap();
    let h = front(&up.url, |_| {}).await;
    let r = inspector_session("legacy", &h, &node, &dir).await;
    for k in ["task", "taskId", "status", "resultType"] {
        assert!(
            r.get(k).is_none(),
            "legacy slow call answered with a task shape: {r}"
        );
    }
    h.stop().await;
}

// ---------------------------------------------------------------------------
// kill -9 of tasklift mid-task; server-everything over Streamable HTTP.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn kill9_of_tasklift_mid_task_then_tasks_get_tells_the_truth() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let args = [
        "serve",
        "--upstream",
        &up.url,
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--threshold",
        "300ms",
        "--poll-interval",
        "50ms",
    ];
    let mut first = Proc::start(&args, "at first").await;
    let c = Client::new(&first.url).unwrap();
    let done_id = task_id(
        &guard("slow", c.call_tool("slow", json!({"seconds": 0.8})))
            .await
            .unwrap()
            .result,
    );
    let done = wait_terminal(&c, &done_id, Duration::from_secs(20)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let running_id = task_id(
        &guard("slow", c.call_tool("slow", json!({"seconds": 20})))
            .await
            .unwrap()
            .result,
    );
    stats_until(&c, "the long call running upstream", |s| s["running"] == 1).await;
    first.kill9();

    let second = Proc::start(&args, "after kill -9").await;
    let c = Client::new(&second.url).unwrap();
    let t = guard("tasks/get", c.get_task(&running_id)).await.unwrap();
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(t["error"]["message"], RESTART_MESSAGE, "{t}");
    let t = guard("tasks/get", c.get_task(&done_id)).await.unwrap();
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"], done["result"], "the result survived the kill");
    drop(second);
}

/// server-everything's own Streamable HTTP transport behind tasklift.
#[tokio::test]
async fn server_everything_over_streamable_http() {
    let Some(up) = everything_http().await else {
        return;
    };
    let h = front(&up.url, |_| {}).await;
    let logs = || format!("\n--- server log\n{}", up.logs());
    crate::support::everything::everything_walkthrough(&h.client(), &logs).await;
    h.stop().await;
}

/// Three callers' `ask` calls in flight at once on the SDK v1 server, two of them
/// one principal's: each question goes on a session's GET stream, naming no call,
/// and each must reach its own caller, whose answer must reach its own tool.
#[tokio::test]
async fn ts_v1_concurrent_questions_each_reach_their_own_caller() {
    let Some(up) = ts_v1_server().await else {
        return;
    };
    let h = front(&up.url, |c| {
        c.auth.mode = "bearer".into();
        c.upstreams[0].tools.insert("ask".into(), rule("always"));
    })
    .await;
    let callers = [("ann", "p1"), ("bob", "p1"), ("cyd", "p2")];
    let mut tasks = Vec::new();
    for (name, principal) in callers {
        let r = result(
            &guarded(
                "ask",
                Caller::new(&h, "ask", json!({"delay": 0.8}))
                    .token(principal)
                    .call(1),
            )
            .await,
        );
        let c = h.client_with(true, &[("authorization", &format!("Bearer {principal}"))]);
        tasks.push((name, task_id(&r), c));
    }
    for (name, id, c) in &tasks {
        let t = wait_for(c, id, "input_required", |t| t["status"] != "working").await;
        assert_eq!(t["status"], "input_required", "{name}: {t}\n{}", up.logs());
        let reqs = t["inputRequests"].as_object().unwrap();
        assert_eq!(
            reqs.len(),
            1,
            "{name} was asked more than its own question: {t}"
        );
        let key = key_for(&t["inputRequests"], "What is your name?");
        update(
            c,
            id,
            json!({key: {"action": "accept", "content": {"name": name}}}),
        )
        .await;
    }
    for (name, id, c) in &tasks {
        let done = wait_terminal(c, id, Duration::from_secs(20)).await;
        assert_eq!(done["status"], "completed", "{name}: {done}");
        assert_eq!(
            text(&done["result"]),
            format!(r#"answer: accept {{"name":"{name}"}}"#),
            "{name}'s tool got another caller's answer"
        );
    }
    h.stop().await;
}
