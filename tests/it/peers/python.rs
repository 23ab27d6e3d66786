//! Python SDK peers on both sides of tasklift (tests/peers/python, installed by
//! scripts/install-peers-python into virtual environments under target/tools/py-*):
//!
//! - upstreams: `v1_server.py` (mcp==1.30 FastMCP, a legacy server) in each of its
//!   modes (stateful Streamable HTTP, `stateless_http`, `json_response`, stdio), and
//!   `v2_server.py` (mcp==2.3 MCPServer, a 2026-07-28 server) over HTTP and stdio,
//!   each driven by tasklift's own raw 2026-07-28 client;
//! - clients: `v1_client.py` (mcp==1.30 `ClientSession`, a legacy client) and
//!   `fastmcp_client.py` (fastmcp 4.1.4 + fastmcp-tasks, a tasks client), each in
//!   front of the v1 server.
//!
//! Each test starts its own Python server (on a free port, or as tasklift's stdio
//! child) and tasklift in-process in front of it, and asserts what a user sees: the
//! tool list, a fast call, a slow call as a task (or a plain wait with progress),
//! cancel and the upstream call really stopping (the servers count their calls),
//! elicitation before the handle (MRTR) and after it (`input_required`,
//! `tasks/update`), sampling, a tool error against a protocol error, a 2 MB result.
//! Limitations of the peers themselves are asserted as such (see the `*_limitation`
//! tests), so a peer release that lifts one shows up here.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::{Client, ClientError};
use tasklift::config::RawConfig;
use tasklift_fixture::FixtureServer;

use crate::support::harness::*;
use crate::support::input::{caps, key_for, result, threshold, update, wait_for, Caller};
use crate::support::proc::Proc;
use crate::support::python::{peers_dir, python, Mode, PyServer};
use crate::support::relay::Relay;
use crate::support::stdio::follow;

/// The SDK a server is written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sdk {
    /// mcp==1.30 FastMCP: a legacy (2025-11-25) server.
    V1,
    /// mcp==2.3 MCPServer: a modern (2026-07-28) server.
    V2,
}

use Mode::*;
use Sdk::*;

impl Sdk {
    fn venv(self) -> &'static str {
        match self {
            V1 => "mcp130",
            V2 => "mcp23",
        }
    }

    fn script(self) -> &'static str {
        match self {
            V1 => "v1_server.py",
            V2 => "v2_server.py",
        }
    }

    /// The tools its server lists.
    fn tools(self) -> &'static [&'static str] {
        match self {
            V1 => &[
                "echo",
                "slow",
                "stats",
                "ask",
                "ask_again",
                "sample",
                "sample_again",
                "fail",
                "reject",
                "big",
            ],
            V2 => &[
                "echo",
                "slow",
                "stats",
                "ask",
                "ask_again",
                "fail",
                "reject",
                "big",
            ],
        }
    }
}

/// A Python server with tasklift in front of it.
struct Bed {
    h: Harness,
    /// The HTTP server (none for stdio: tasklift runs the child).
    server: Option<PyServer>,
    sdk: Sdk,
    mode: Mode,
}

/// The server of `sdk` served in `mode` behind tasklift (threshold 300 ms); `tweak`
/// adjusts the configuration. `None` when the peer is not installed.
async fn bed(sdk: Sdk, mode: Mode, tweak: impl FnOnce(&mut RawConfig)) -> Option<Bed> {
    let python = python(sdk.venv())?;
    let dir = tempfile::tempdir().unwrap();
    if mode == Stdio {
        let command = vec![
            python.display().to_string(),
            peers_dir().join(sdk.script()).display().to_string(),
            "--mode".into(),
            "stdio".into(),
        ];
        let h = Harness::front(FixtureServer::new(), "", dir, |c| {
            c.upstreams[0].url = String::new();
            c.upstreams[0].command = command;
            c.upstreams[0].shutdown_grace = "500ms".into();
            // A hang guard: a Python SDK takes a second or two to import, more on
            // a busy machine (see v2_stdio_child_slower_than_the_probe_timeout).
            c.upstreams[0].probe_timeout = "30s".into();
            tweak(c)
        })
        .await;
        return Some(Bed {
            h,
            server: None,
            sdk,
            mode,
        });
    }
    let server = PyServer::start(&python, sdk.script(), mode).await;
    let h = Harness::front(FixtureServer::new(), &server.url, dir, |c| {
        c.upstreams[0].http2 = mode == H2;
        tweak(c)
    })
    .await;
    Some(Bed {
        h,
        server: Some(server),
        sdk,
        mode,
    })
}

impl Bed {
    /// What the HTTP server logged (empty for stdio: its stderr is in tasklift's log).
    fn server_log(&self) -> String {
        self.server.as_ref().map(PyServer::log).unwrap_or_default()
    }

    /// The server's counters of `slow` calls: started, cancelled, completed.
    async fn stats(&self) -> Value {
        let a = self
            .h
            .plain_client()
            .call_tool("stats", json!({}))
            .await
            .expect("stats");
        serde_json::from_str(text(&a.result)).unwrap_or_else(|e| panic!("stats ({e}): {a:?}"))
    }

    /// Wait until the counters satisfy `cond`.
    async fn wait_stats(&self, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            let s = self.stats().await;
            if cond(&s) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{:?}/{:?}: timed out waiting for {what}: {s}",
                self.sdk,
                self.mode
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        self.h.stop().await;
    }
}

/// A tweak giving tools these rules.
fn rules(list: &[(&str, tasklift::config::RawToolRule)]) -> impl FnOnce(&mut RawConfig) {
    let list: Vec<_> = list
        .iter()
        .map(|(t, r)| (t.to_string(), r.clone()))
        .collect();
    move |c| {
        for (t, r) in list {
            c.upstreams[0].tools.insert(t, r);
        }
    }
}

/// The text of a tool result.
fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// The id of a task handle (panics on anything else).
fn handle(r: &Value) -> String {
    assert_eq!(r["resultType"], "task", "expected a task handle: {r}");
    assert_eq!(r["status"], "working", "{r}");
    r["taskId"].as_str().unwrap().to_string()
}

/// The 2 MB text of `big`: 250,000 numbered lines.
fn check_big(t: &str, how: &str) {
    assert_eq!(t.len(), 2_000_000, "{how}: the whole 2 MB result");
    assert!(t.starts_with("0000000\n0000001\n"), "{how}: {}", &t[..32]);
    assert!(t.ends_with("0249998\n0249999\n"), "{how}");
}

// ---------------------------------------------------------------------------
// The behaviours, per server
// ---------------------------------------------------------------------------

/// The tool list, a fast call, a tool error against a protocol error (inline and as
/// a task), and a 2 MB result (inline and as a task).
async fn basics(sdk: Sdk, mode: Mode) {
    let Some(b) = bed(
        sdk,
        mode,
        rules(&[("reject", rule("always")), ("big", rule("always"))]),
    )
    .await
    else {
        return;
    };
    let c = b.h.client();
    let plain = b.h.plain_client();

    let list = c
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
    let names: Vec<&str> = list.result["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {}", list.result))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for t in sdk.tools() {
        assert!(names.contains(t), "{t} is listed: {names:?}");
    }

    let echo = c
        .call_tool("echo", json!({"text": "hello"}))
        .await
        .expect("echo")
        .result;
    assert_eq!(echo["resultType"], "complete", "{echo}");
    assert_eq!(text(&echo), "hello", "{echo}");
    assert_eq!(echo["isError"], false, "{echo}");

    // A tool error is a result with isError, a protocol error a JSON-RPC error.
    let fail = plain
        .call_tool("fail", json!({}))
        .await
        .expect("a tool error is a result")
        .result;
    assert_eq!(fail["isError"], true, "{fail}");
    assert!(text(&fail).contains("always fails"), "{fail}");
    match plain.call_tool("reject", json!({})).await {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, -32602, "{e:?}");
            assert!(e.message.contains("reject"), "{e:?}");
        }
        other => panic!("reject: expected a JSON-RPC error, got {other:?}"),
    }
    // The same as a task: completed with the tool error, failed with the protocol error.
    let r = c
        .call_tool("reject", json!({"seconds": 0.5}))
        .await
        .expect("a task")
        .result;
    let (t, _) = follow(&c, &handle(&r)).await;
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(t["error"]["code"], -32602, "{t}");

    // 2 MB: streamed to a caller that waits, stored and served by tasks/get.
    let inline = plain.call_tool("big", json!({})).await.expect("big").result;
    check_big(text(&inline), "inline");
    let r = c.call_tool("big", json!({})).await.expect("big").result;
    let (t, _) = follow(&c, &handle(&r)).await;
    assert_eq!(t["status"], "completed", "{}", t["status"]);
    check_big(text(&t["result"]), "the task's result");
    b.stop().await;
}

/// A slow call: a task for a tasks client, polled to completion with progress as
/// its status message; a plain wait with progress notifications for a client
/// without the extension. Then a cancelled task: `tasks/cancel` settles it as
/// cancelled and the upstream call stops (the server counts it). A json_response
/// server sends no progress (its SDK drops notifications on a JSON answer):
/// asserted as that peer's limitation.
async fn slow_and_cancel(sdk: Sdk, mode: Mode) {
    let Some(b) = bed(sdk, mode, |_| {}).await else {
        return;
    };
    let progress = mode != Json;
    let c = b.h.client();
    let r = c
        .call_tool("slow", json!({"seconds": 1.2}))
        .await
        .expect("slow")
        .result;
    let (t, seen) = follow(&c, &handle(&r)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(text(&t["result"]), "slept 1.2s", "{t}");
    assert_eq!(t["result"]["isError"], false, "{t}");
    let with_steps = seen.iter().filter(|m| m.contains("step ")).count();
    if progress {
        assert!(with_steps > 0, "progress as statusMessage: {seen:?}");
    } else {
        assert_eq!(with_steps, 0, "json_response sends no progress: {seen:?}");
    }

    // No extension: the caller waits, with progress when it asked for it.
    let a = b
        .h
        .plain_client()
        .request(
            "tools/call",
            json!({"name": "slow", "arguments": {"seconds": 0.8}, "_meta": {"progressToken": "p-1"}}),
        )
        .await
        .expect("slow, waited for");
    assert_eq!(a.result["resultType"], "complete", "{}", a.result);
    assert_eq!(text(&a.result), "slept 0.8s", "{}", a.result);
    let notes: Vec<&Value> = a
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    if progress {
        assert!(!notes.is_empty(), "progress relayed: {:?}", a.notifications);
        assert!(notes.iter().all(|n| n["params"]["progressToken"] == "p-1"));
    } else {
        assert!(
            notes.is_empty(),
            "json_response sends no progress: {notes:?}"
        );
    }

    // Cancel: the task is cancelled and the call stops upstream.
    let s = b.stats().await;
    assert_eq!(s, json!({"started": 2, "cancelled": 0, "completed": 2}));
    let r = c
        .call_tool("slow", json!({"seconds": 30.0}))
        .await
        .expect("slow")
        .result;
    let id = handle(&r);
    b.wait_stats("the call started upstream", |s| s["started"] == 3)
        .await;
    c.cancel_task(&id).await.expect("tasks/cancel");
    let (t, _) = follow(&c, &id).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let s = b
        .wait_stats("the upstream call is cancelled", |s| s["cancelled"] == 1)
        .await;
    assert_eq!(s["completed"], 2, "{s}");
    b.stop().await;
}

/// The answer to the server's name question.
fn ada() -> Value {
    json!({"action": "accept", "content": {"name": "Ada"}})
}

/// Rules for the elicitation and sampling tests: `ask` and `sample` stay inline
/// (their questions come before the handle), `ask_again` and `sample_again` are
/// tasks at once (their questions come after it). stdio children get one such call
/// at a time, so each question is attributed to its caller.
fn input_rules(c: &mut RawConfig) {
    c.upstreams[0].isolate_input = true;
    rules(&[
        ("ask", threshold("20s")),
        ("sample", threshold("20s")),
        ("ask_again", rule("always")),
        ("sample_again", rule("always")),
    ])(c)
}

/// Elicitation before the handle: an `InputRequiredResult` carrying the server's
/// question, and the retry with the answer gets the tool's result. After the
/// handle: the task goes `input_required` with the question, `tasks/update` answers
/// it, and the task completes.
async fn elicitation(sdk: Sdk, mode: Mode) {
    let Some(b) = bed(sdk, mode, input_rules).await else {
        return;
    };
    let caller = Caller::new(&b.h, "ask", json!({}));
    let r = result(&guarded("the first call", caller.call(1)).await);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let key = key_for(&r["inputRequests"], "What is your name?");
    let req = &r["inputRequests"][&key];
    assert_eq!(req["method"], "elicitation/create", "{r}");
    assert_eq!(
        req["params"]["requestedSchema"]["required"],
        json!(["name"]),
        "{r}"
    );
    let done = result(
        &guarded(
            "the retry",
            caller.retry(2, json!({key: ada()}), &r["requestState"]),
        )
        .await,
    );
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(text(&done), "hello Ada", "{done}");
    assert_eq!(stored_tasks(&b.h).await, 0, "no task was made");

    let c = b.h.client();
    let caller = caller.tool("ask_again", json!({}));
    let id = handle(&result(&caller.call(3).await));
    let t = wait_for(&c, &id, "input_required", |t| {
        t["status"] == "input_required"
    })
    .await;
    let key = key_for(&t["inputRequests"], "What is your name?");
    assert_eq!(
        t["inputRequests"][&key]["method"], "elicitation/create",
        "{t}"
    );
    update(&c, &id, json!({key: ada()})).await;
    let (done, _) = follow(&c, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text(&done["result"]), "hello Ada", "{done}");
    b.stop().await;
}

/// What the client's model answers to a sampling request.
fn model_answer() -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": "hi from the model"},
           "model": "test-model"})
}

fn sampling_request_key(reqs: &Value) -> String {
    let obj = reqs.as_object().unwrap_or_else(|| panic!("{reqs}"));
    assert_eq!(obj.len(), 1, "{reqs}");
    let (key, req) = obj.iter().next().unwrap();
    assert_eq!(req["method"], "sampling/createMessage", "{reqs}");
    assert_eq!(
        req["params"]["messages"][0]["content"]["text"], "Say hi",
        "{reqs}"
    );
    key.clone()
}

/// `ctx.session.create_message` has no related request id, so over HTTP the SDK
/// sends it on the session's GET stream. Before the handle: an
/// `InputRequiredResult`, and the retry's answer reaches the tool. After it:
/// `input_required`, answered with `tasks/update`.
async fn sampling(mode: Mode) {
    let Some(b) = bed(V1, mode, input_rules).await else {
        return;
    };
    let caller =
        Caller::new(&b.h, "sample", json!({"prompt": "Say hi"})).caps(caps(true, &["sampling"]));
    let r = result(&guarded("the first call", caller.call(1)).await);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let key = sampling_request_key(&r["inputRequests"]);
    let done = result(
        &guarded(
            "the retry",
            caller.retry(2, json!({key: model_answer()}), &r["requestState"]),
        )
        .await,
    );
    assert_eq!(text(&done), "sampled: hi from the model", "{done}");

    let c = b.h.client();
    let caller = caller.tool("sample_again", json!({"prompt": "Say hi"}));
    let id = handle(&result(&caller.call(3).await));
    let t = wait_for(&c, &id, "input_required", |t| {
        t["status"] == "input_required"
    })
    .await;
    let key = sampling_request_key(&t["inputRequests"]);
    update(&c, &id, json!({key: model_answer()})).await;
    let (done, _) = follow(&c, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        text(&done["result"]),
        "sampled: hi from the model",
        "{done}"
    );
    b.stop().await;
}

/// Checks that a task never asks for input: a later call on the same server
/// completes while the task is still `working` with no `inputRequests`.
async fn never_asks(b: &Bed, id: &str) {
    let c = b.h.client();
    let later =
        b.h.plain_client()
            .call_tool("slow", json!({"seconds": 0.6}))
            .await
            .expect("a later call");
    assert_eq!(text(&later.result), "slept 0.6s");
    let t = c.get_task(id).await.unwrap();
    assert_eq!(t["status"], "working", "{t}");
    assert!(t.get("inputRequests").is_none(), "{t}");
    c.cancel_task(id).await.unwrap();
}

// ---------------------------------------------------------------------------
// mcp 1.30 FastMCP, stateful Streamable HTTP
// ---------------------------------------------------------------------------

#[tokio::test]
async fn v1_http_list_fast_call_errors_and_a_2mb_result() {
    basics(V1, Http).await
}

/// FastMCP answers each call as a chunked SSE stream whose last chunk often
/// comes in a later read than the response: the calls still share one upstream
/// connection (they each opened one while tasklift dropped the rest unread).
#[tokio::test]
async fn v1_http_calls_reuse_their_upstream_connection() {
    let Some(python) = python(V1.venv()) else {
        return;
    };
    let server = PyServer::start(&python, V1.script(), Http).await;
    let relay = Relay::start(&server.url).await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &relay.url, dir, |c| {
        c.server.workers = 1;
    })
    .await;
    let c = h.client();
    for i in 0..20 {
        let a = c
            .call_tool("echo", json!({"text": i.to_string()}))
            .await
            .expect("echo");
        assert_eq!(
            a.result["content"][0]["text"],
            i.to_string(),
            "{}",
            a.result
        );
        // Room for a last chunk that comes after the response to arrive.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The session's POSTs share one connection; its GET stream has another.
    let accepted = relay.accepted();
    assert!(accepted <= 3, "20 calls over {accepted} connections");
    h.stop().await;
}

#[tokio::test]
async fn v1_http_slow_call_progress_and_cancel() {
    slow_and_cancel(V1, Http).await
}

#[tokio::test]
async fn v1_http_elicitation_before_and_after_the_handle() {
    elicitation(V1, Http).await
}

#[tokio::test]
async fn v1_http_sampling_on_the_get_stream_before_and_after_the_handle() {
    sampling(Http).await
}

// ---------------------------------------------------------------------------
// mcp 1.30 FastMCP, stateful Streamable HTTP served by Hypercorn over HTTP/2
// (h2c with prior knowledge: a call that fell back to HTTP/1.1 would fail)
// ---------------------------------------------------------------------------

#[tokio::test]
async fn v1_h2_list_fast_call_errors_and_a_2mb_result() {
    basics(V1, H2).await
}

#[tokio::test]
async fn v1_h2_slow_call_progress_and_cancel() {
    slow_and_cancel(V1, H2).await
}

#[tokio::test]
async fn v1_h2_elicitation_before_and_after_the_handle() {
    elicitation(V1, H2).await
}

#[tokio::test]
async fn v1_h2_sampling_on_the_get_stream_before_and_after_the_handle() {
    sampling(H2).await
}

// ---------------------------------------------------------------------------
// mcp 1.30 FastMCP, stateless_http=True
// ---------------------------------------------------------------------------

#[tokio::test]
async fn v1_stateless_list_fast_call_errors_and_a_2mb_result() {
    basics(V1, Stateless).await
}

#[tokio::test]
async fn v1_stateless_slow_call_progress_and_cancel() {
    slow_and_cancel(V1, Stateless).await
}

/// Peer limitations of a stateless mcp 1.x server. Elicitation: it asks, but the
/// answer comes back in a new HTTP request, which its SDK serves with a fresh
/// transport that knows nothing of the question ("unknown request ID"), so the call
/// can never complete; the question does reach the client and the task stays
/// `working`. Sampling: it has no standalone stream, and `ctx.session.create_message`
/// (no related request id) goes nowhere: the call never asks and never ends.
#[tokio::test]
async fn v1_stateless_cannot_complete_elicitation_or_sampling_limitation() {
    let Some(b) = bed(V1, Stateless, input_rules).await else {
        return;
    };
    let c = b.h.client();
    let caller = Caller::new(&b.h, "ask_again", json!({}));
    let id = handle(&result(&caller.call(1).await));
    let t = wait_for(&c, &id, "input_required", |t| {
        t["status"] == "input_required"
    })
    .await;
    let key = key_for(&t["inputRequests"], "What is your name?");
    update(&c, &id, json!({key: ada()})).await;
    eventually("the server drops the answer", GUARD, || {
        b.server_log().contains("unknown request ID")
    })
    .await;
    let t = c.get_task(&id).await.unwrap();
    assert_eq!(t["status"], "working", "{t}");
    c.cancel_task(&id).await.unwrap();

    let caller = Caller::new(&b.h, "sample_again", json!({"prompt": "Say hi"}))
        .caps(caps(true, &["sampling"]));
    let id = handle(&result(&caller.call(2).await));
    never_asks(&b, &id).await;
    b.stop().await;
}

// ---------------------------------------------------------------------------
// mcp 1.30 FastMCP, json_response=True
// ---------------------------------------------------------------------------

#[tokio::test]
async fn v1_json_list_fast_call_errors_and_a_2mb_result() {
    basics(V1, Json).await
}

#[tokio::test]
async fn v1_json_slow_call_without_progress_limitation_and_cancel() {
    slow_and_cancel(V1, Json).await
}

/// Peer limitation: with json_response the mcp 1.x SDK discards every message a
/// tool sends in relation to its request before the answer, `ctx.elicit` included:
/// the question never leaves the server.
#[tokio::test]
async fn v1_json_elicitation_is_dropped_limitation() {
    let Some(b) = bed(V1, Json, input_rules).await else {
        return;
    };
    let caller = Caller::new(&b.h, "ask_again", json!({}));
    let id = handle(&result(&caller.call(1).await));
    never_asks(&b, &id).await;
    b.stop().await;
}

/// Sampling has no related request id, so it travels on the session's GET stream,
/// which json_response leaves alone.
#[tokio::test]
async fn v1_json_sampling_on_the_get_stream_before_and_after_the_handle() {
    sampling(Json).await
}

// ---------------------------------------------------------------------------
// mcp 1.30 FastMCP over stdio
// ---------------------------------------------------------------------------

#[tokio::test]
async fn v1_stdio_list_fast_call_errors_and_a_2mb_result() {
    basics(V1, Stdio).await
}

#[tokio::test]
async fn v1_stdio_slow_call_progress_and_cancel() {
    slow_and_cancel(V1, Stdio).await
}

#[tokio::test]
async fn v1_stdio_elicitation_before_and_after_the_handle() {
    elicitation(V1, Stdio).await
}

#[tokio::test]
async fn v1_stdio_sampling_before_and_after_the_handle() {
    sampling(Stdio).await
}

/// Poll a task to a terminal state, asserting it never asks for input (it is never
/// shown another caller's question).
async fn never_input_required(c: &Client, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let t = c.get_task(id).await.expect("tasks/get");
        assert_ne!(
            t["status"], "input_required",
            "another call's question: {t}"
        );
        assert!(t.get("inputRequests").is_none(), "{t}");
        if matches!(
            t["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return t;
        }
        assert!(tokio::time::Instant::now() < deadline, "{t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two callers (two principals) on one stdio server with `isolate_input`: B's tool
/// asks a second after A's slow call started. B gets its question and its answer
/// reaches its tool; A's task never sees it.
#[tokio::test]
async fn v1_stdio_a_question_reaches_only_its_caller_with_isolate_input() {
    let Some(b) = bed(V1, Stdio, |c| {
        input_rules(c);
        c.upstreams[0].max_processes = 2;
        c.auth.mode = "bearer".into();
    })
    .await
    else {
        return;
    };
    let asker = Caller::new(&b.h, "ask_again", json!({"delay": 1.0})).token("b");
    let cb = b.h.client_with(true, &[("authorization", "Bearer b")]);
    let ca = b.h.client_with(true, &[("authorization", "Bearer a")]);
    let id_b = handle(&result(&asker.call(1).await));
    let r = ca
        .call_tool("slow", json!({"seconds": 2.0}))
        .await
        .expect("slow")
        .result;
    let id_a = handle(&r);
    let a = never_input_required(&ca, &id_a);
    let answered = async {
        let t = wait_for(&cb, &id_b, "B's question", |t| {
            t["status"] == "input_required"
        })
        .await;
        let key = key_for(&t["inputRequests"], "What is your name?");
        update(&cb, &id_b, json!({key: ada()})).await;
        follow(&cb, &id_b).await.0
    };
    let (ta, tb) = tokio::join!(a, answered);
    assert_eq!(ta["status"], "completed", "{ta}");
    assert_eq!(text(&ta["result"]), "slept 2.0s", "{ta}");
    assert_eq!(tb["status"], "completed", "{tb}");
    assert_eq!(text(&tb["result"]), "hello Ada", "{tb}");
    b.stop().await;
}

/// Two calls on one child without `isolate_input`: A's slow call is running when
/// B's tool asks. The child's question names no call and two are in flight, so
/// nobody may be shown it: A's task never sees it, and B's call ends (its question
/// refused) instead of hanging.
#[tokio::test]
async fn v1_stdio_an_ambiguous_question_is_refused_not_misdelivered() {
    let Some(b) = bed(V1, Stdio, rules(&[("ask_again", rule("always"))])).await else {
        return;
    };
    let c = b.h.client();
    let r = c
        .call_tool("slow", json!({"seconds": 30.0}))
        .await
        .expect("slow")
        .result;
    let id_a = handle(&r);
    b.wait_stats("A's call is running", |s| s["started"] == 1)
        .await;
    let asker = Caller::new(&b.h, "ask_again", json!({}));
    let id_b = handle(&result(&asker.call(1).await));
    // Until B's call ends, A's task must never show a question.
    let deadline = tokio::time::Instant::now() + GUARD;
    let tb = loop {
        let ta = c.get_task(&id_a).await.expect("tasks/get");
        assert_eq!(ta["status"], "working", "A: {ta}");
        assert!(ta.get("inputRequests").is_none(), "A: {ta}");
        let tb = c.get_task(&id_b).await.expect("tasks/get");
        assert_ne!(tb["status"], "input_required", "B: {tb}");
        if matches!(tb["status"].as_str(), Some("completed" | "failed")) {
            break tb;
        }
        assert!(tokio::time::Instant::now() < deadline, "B: {tb}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let refused = tb["status"] == "failed" || tb["result"]["isError"] == true;
    assert!(refused, "B's call ends with its question refused: {tb}");
    c.cancel_task(&id_a).await.expect("tasks/cancel");
    b.stop().await;
}

/// A mcp 1.x stdio child starts quietly: tasklift's era probe must not make it log
/// pages of validation errors (they end up in tasklift's log as the child's stderr).
#[tokio::test]
async fn v1_stdio_child_starts_without_log_noise() {
    let Some(python) = python(V1.venv()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = peers_dir().join(V1.script());
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--",
        python.to_str().unwrap(),
        script.to_str().unwrap(),
        "--mode",
        "stdio",
    ];
    let p = Proc::start(&args, "in front of the mcp 1.30 stdio server").await;
    let mut c = Client::new(&p.url).unwrap();
    c.tasks = false;
    let r = guarded("echo", c.call_tool("echo", json!({"text": "hi"})))
        .await
        .expect("echo");
    assert_eq!(text(&r.result), "hi");
    let logs = p.logs();
    let noise: Vec<&str> = logs.lines().filter(|l| l.contains("stderr: ")).collect();
    assert!(
        noise.len() < 5,
        "{} lines of the child's stderr logged at start:\n{}",
        noise.len(),
        noise.join("\n")
    );
}

// ---------------------------------------------------------------------------
// mcp 2.3 MCPServer (2026-07-28)
// ---------------------------------------------------------------------------

#[tokio::test]
async fn v2_http_list_fast_call_errors_and_a_2mb_result() {
    basics(V2, Http).await
}

/// A plain result from the SDK server reaches the caller as the server's own
/// bytes, only the id changed: its key order is the server's (`content` first,
/// `_meta` last), where a result parsed and serialized again by tasklift would
/// have its keys sorted (`_meta` first). The SDK puts its serverInfo in `_meta` on
/// every result, which passes too.
/// A 2025 session gets results as the server gives a 2025 client: the SDK's
/// per-result serverInfo (`_meta`, a 2026-07-28 field it sends only to 2026
/// clients) is not on them, while the content is the server's.
#[tokio::test]
async fn v2_http_a_2025_session_gets_no_per_result_server_info() {
    let Some(b) = bed(V2, Http, |_| {}).await else {
        return;
    };
    let (c, init) =
        crate::support::wire::LegacyClient::start(&b.h.url, "2025-11-25", json!({})).await;
    assert!(init["serverInfo"].is_object(), "{init}");
    for (id, method, params) in [
        (
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "old"}}),
        ),
        (3, "tools/list", json!({})),
    ] {
        let r = c.request(id, method, params).await;
        let v = crate::support::wire::all_messages(&r)
            .into_iter()
            .find(|m| m.get("id") == Some(&json!(id)))
            .unwrap_or_else(|| panic!("{method}: no answer: {}", r.body));
        let result = &v["result"];
        assert!(result.is_object(), "{method}: {v}");
        assert!(result.get("resultType").is_none(), "{method}: {v}");
        assert!(
            result
                .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
                .is_none(),
            "{method}: {v}"
        );
        if method == "tools/call" {
            assert_eq!(result["content"][0]["text"], "old", "{v}");
        }
    }
    b.stop().await;
}

#[tokio::test]
async fn v2_http_a_plain_result_passes_as_the_servers_bytes() {
    let Some(b) = bed(V2, Http, |_| {}).await else {
        return;
    };
    let r = crate::support::wire::post(
        &b.h.url,
        41,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "untouched"}}),
        true,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["id"], 41, "{v}");
    assert_eq!(v["result"]["content"][0]["text"], "untouched", "{v}");
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert!(
        v["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object(),
        "{v}"
    );
    let (content, meta) = (
        r.body.find("\"content\"").unwrap(),
        r.body.find("\"_meta\"").unwrap(),
    );
    assert!(
        content < meta,
        "the server's key order, so its bytes: {}",
        r.body
    );
    b.stop().await;
}

#[tokio::test]
async fn v2_http_slow_call_progress_and_cancel() {
    slow_and_cancel(V2, Http).await
}

#[tokio::test]
async fn v2_http_elicitation_before_and_after_the_handle() {
    elicitation(V2, Http).await
}

#[tokio::test]
async fn v2_stdio_list_fast_call_errors_and_a_2mb_result() {
    basics(V2, Stdio).await
}

#[tokio::test]
async fn v2_stdio_slow_call_progress_and_cancel() {
    slow_and_cancel(V2, Stdio).await
}

#[tokio::test]
async fn v2_stdio_elicitation_before_and_after_the_handle() {
    elicitation(V2, Stdio).await
}

/// A modern stdio child that answers the era probe later than `probe_timeout` is
/// taken for a legacy one and sent `initialize`, which a 2026-07-28-only server
/// refuses (-32022, "the initialize handshake is not accepted"): that refusal says
/// what the child is, and it is served as modern, not restarted as crashing.
#[tokio::test]
async fn v2_stdio_child_slower_than_the_probe_timeout_is_still_served() {
    let Some(b) = bed(V2, Stdio, |c| c.upstreams[0].probe_timeout = "100ms".into()).await else {
        return;
    };
    let r = guarded(
        "echo",
        b.h.plain_client().call_tool("echo", json!({"text": "hi"})),
    )
    .await
    .expect("echo");
    assert_eq!(text(&r.result), "hi", "{}", r.result);
    b.stop().await;
}

// ---------------------------------------------------------------------------
// Python clients
// ---------------------------------------------------------------------------

/// Run a client script against `url`: its exit status, and its JSON check lines
/// and other output.
async fn run_client(python: &Path, script: &str, url: &str) -> (bool, Vec<Value>, String) {
    let child = tokio::process::Command::new(python)
        .arg(peers_dir().join(script))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
    let out = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish in 150 s"))
        .expect("script output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let checks = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let all = format!("--- stdout\n{stdout}--- stderr\n{stderr}");
    println!("{all}");
    (out.status.success(), checks, all)
}

/// The checks that failed, one line each.
fn failed(checks: &[Value]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| c["ok"] != true)
        .map(|c| format!("{}: {}", c["check"], c["detail"]))
        .collect()
}

/// The mcp 1.30 `ClientSession` (a legacy client) through tasklift: every check of
/// v1_client.py passes (list, echo, slow waited for with progress, elicitation and
/// sampling answered by its callbacks, tool error, protocol error, 2 MB).
async fn v1_client(mode: Mode) {
    let Some(client_py) = python(V1.venv()) else {
        return;
    };
    let Some(b) = bed(V1, mode, |c| c.upstreams[0].isolate_input = true).await else {
        return;
    };
    let (ok, checks, out) = run_client(&client_py, "v1_client.py", &b.h.url).await;
    let bad = failed(&checks);
    assert!(
        ok && bad.is_empty() && checks.len() == 8,
        "v1_client.py against {mode:?}: failed checks:\n{}\n{out}",
        bad.join("\n")
    );
    b.stop().await;
}

#[tokio::test]
async fn v1_client_through_tasklift_to_v1_http() {
    v1_client(Http).await
}

#[tokio::test]
async fn v1_client_through_tasklift_to_v1_stdio() {
    v1_client(Stdio).await
}

/// fastmcp 4.1.4 + fastmcp-tasks against the v1 server through tasklift, with or
/// without `server.lenient_task_name_header`.
async fn fastmcp(lenient: bool) -> Option<(bool, Vec<Value>, String)> {
    let client_py = python("fastmcp")?;
    let b = bed(V1, Http, |c| {
        c.server.lenient_task_name_header = lenient;
    })
    .await?;
    let out = run_client(&client_py, "fastmcp_client.py", &b.h.url).await;
    b.stop().await;
    Some(out)
}

/// fastmcp-tasks 4.1.4 sends `tasks/get` without `Mcp-Name`: tasklift's strict
/// default refuses it, and the client reports that header as the reason.
#[tokio::test]
async fn fastmcp_tasks_client_is_refused_without_mcp_name_by_default() {
    let Some((ok, checks, out)) = fastmcp(false).await else {
        return;
    };
    assert!(!ok, "{out}");
    let by = |name: &str| checks.iter().find(|c| c["check"] == name).cloned();
    assert_eq!(
        by("echo").map(|c| c["ok"].clone()),
        Some(json!(true)),
        "{out}"
    );
    for name in ["task", "transparent"] {
        let check = by(name).unwrap_or_else(|| panic!("no {name} check: {out}"));
        assert_eq!(check["ok"], false, "{out}");
        assert!(
            check["detail"].as_str().unwrap_or("").contains("Mcp-Name"),
            "the error names the header: {check}"
        );
    }
}

/// With `server.lenient_task_name_header = true` the same client's tasks complete:
/// a slow call as a task polled to its result, explicitly and under the hood.
#[tokio::test]
async fn fastmcp_tasks_client_completes_with_lenient_task_name_header() {
    let Some((ok, checks, out)) = fastmcp(true).await else {
        return;
    };
    let bad = failed(&checks);
    assert!(
        ok && bad.is_empty() && checks.len() == 3,
        "failed checks:\n{}\n{out}",
        bad.join("\n")
    );
    let task = checks.iter().find(|c| c["check"] == "task").unwrap();
    assert_eq!(task["detail"]["handle status"], "working", "{task}");
}

/// The fault matrix's proxy in front of a server written by others (mcp 2.3 over
/// Streamable HTTP): a 502 and a reset mid-call reach a synchronous caller and a
/// task as errors naming the upstream and the fault, and the SDK server's next
/// call works once the fault clears.
#[tokio::test]
async fn v2_http_behind_the_fault_proxy() {
    use crate::support::fault_proxy::{Fault, FaultProxy};
    let Some(python) = python(V2.venv()) else {
        return;
    };
    let server = PyServer::start(&python, V2.script(), Http).await;
    let proxy = FaultProxy::start(&server.url).await;
    let h = Harness::front(
        FixtureServer::new(),
        &proxy.url(),
        tempfile::tempdir().unwrap(),
        |c| c.upstreams[0].name = "pyv2".into(),
    )
    .await;
    let echo = |h: &Harness| {
        let c = h.plain_client();
        async move { c.call_tool("echo", json!({"text": "still here"})).await }
    };
    let r = guarded("echo", echo(&h))
        .await
        .expect("echo before any fault");
    assert_eq!(text(&r.result), "still here");
    for (fault, words) in [
        (Fault::Status(502, None), "HTTP 502"),
        (Fault::ResetMidBody, "broke"),
    ] {
        let what = format!("{fault:?}");
        proxy.set(fault.clone()).await;
        let e = guarded("a sync call", echo(&h)).await.unwrap_err();
        let ClientError::Rpc(e) = e else {
            panic!("{what}: {e}")
        };
        assert_eq!(e.code, -32010, "{what}: {e:?}");
        assert!(
            e.message.contains("pyv2") && e.message.contains(words),
            "{what}: {}",
            e.message
        );
        // A call that became a task ends failed with the same kind of error.
        proxy.set_held(fault).await;
        let before = proxy.faulted();
        let a = guarded(
            "a task",
            h.client().call_tool("slow", json!({"seconds": 5})),
        )
        .await
        .expect("a handle");
        assert_eq!(a.result["resultType"], "task", "{what}: {}", a.result);
        let id = a.result["taskId"].as_str().unwrap().to_string();
        proxy.wait_faulted(before + 1).await;
        proxy.release();
        let t = wait_terminal(&h.client(), &id, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "failed", "{what}: {t}");
        let m = t["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("pyv2") && m.contains(words), "{what}: {t}");
        proxy.set(Fault::Pass).await;
        let r = guarded("echo", echo(&h)).await;
        let r = r.unwrap_or_else(|e| panic!("after {what} cleared: {e}"));
        assert_eq!(text(&r.result), "still here", "after {what}");
    }
    h.stop().await;
}
