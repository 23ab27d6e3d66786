//! Bridging bugs seen with servers and clients written by others, each pinned
//! down against a scripted upstream that behaves the way the foreign peer did
//! (the foreign peers themselves run in `peers::node`, `peers::python`,
//! `peers::stdio`).

use serde_json::{json, Value};
use tasklift_fixture::FixtureServer;

use crate::support::harness::*;
use crate::support::mock::{MockReply, MockUpstream};

/// A legacy (2025-11-25) upstream answering `handler` for everything after the
/// handshake; like the TypeScript SDK v1, it refuses a `tools/call` carrying
/// `params.task` when it has no task support.
async fn legacy_mock(
    handler: impl Fn(&Value) -> MockReply + Send + Sync + 'static,
) -> MockUpstream {
    MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "server/discover" => {
            MockReply::Error(400, -32600, "Bad Request: No valid session ID".into())
        }
        "initialize" => MockReply::Result(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "legacy-mock", "version": "1"},
        })),
        "tools/call" if m["params"].get("task").is_some() => {
            MockReply::Error(200, -32603, "Server does not support task creation".into())
        }
        _ => handler(m),
    })
    .await
}

#[tokio::test]
async fn a_modern_calls_legacy_params_task_never_reaches_the_upstream() {
    let mock = legacy_mock(|m| match m["method"].as_str().unwrap_or("") {
        "tools/call" => MockReply::Result(json!({"content": [{"type": "text", "text": "ran"}]})),
        _ => MockReply::Result(json!({})),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |_| {}).await;
    // A 2026-07-28 request that also carries a 2025-11-25 `params.task` (as clients
    // written for both eras send): the extension says servers MUST ignore it.
    let r = Post::new(
        &h.url,
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {}, "task": {"ttl": 60000}}),
        true,
    )
    .send()
    .await;
    let resp = r.response();
    assert_eq!(resp["result"]["content"][0]["text"], "ran", "{resp}");
    let calls = mock.received("tools/call");
    assert_eq!(calls.len(), 1);
    assert!(calls[0]["params"].get("task").is_none(), "{}", calls[0]);
    h.stop().await;
}

#[tokio::test]
async fn a_legacy_session_declaring_the_2026_extension_waits_for_a_plain_result() {
    // MCP Inspector's legacy mode: protocolVersion 2025-11-25 plus the 2026-07-28
    // tasks extension in its capabilities. Under 2025-11-25 that capability MUST NOT
    // enable tasks: a slow call past the threshold is still a plain CallToolResult.
    let up = FixtureServer::new()
        .tool(tasklift_fixture::Tool::new("slow").sleep(std::time::Duration::from_millis(900)));
    let h = Harness::start(up, |_| {}).await;
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}});
    let (c, _) = LegacyClient::start(&h.url, "2025-11-25", caps).await;
    let r = c
        .request(2, "tools/call", json!({"name": "slow", "arguments": {}}))
        .await;
    let msgs = crate::support::wire::all_messages(&r);
    let resp = msgs
        .iter()
        .find(|m| m["id"] == 2)
        .unwrap_or_else(|| panic!("no response: {r:?}"));
    let result = &resp["result"];
    assert!(result.get("taskId").is_none(), "{resp}");
    assert!(result.get("resultType").is_none(), "{resp}");
    assert!(result.get("task").is_none(), "{resp}");
    assert!(result["content"].is_array(), "{resp}");
    assert_eq!(stored_tasks(&h).await, 0, "no task was created");
    h.stop().await;
}

// ---- A stdio child's requests to the client carry no link to their call ----

/// A client for `url` with a bearer token (its principal), declaring the tasks
/// extension and elicitation.
fn caller(url: &str, token: &str) -> tasklift::cli::client::Client {
    let mut c = tasklift::cli::client::Client::new(url).unwrap();
    c.headers.push((
        http::header::AUTHORIZATION,
        http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    ));
    c.capabilities.insert("elicitation".into(), json!({}));
    c
}

/// Poll `id` until it is terminal (or `input_required`, when `stop_at_input`);
/// every status seen on the way, and the last task.
async fn follow_until(
    c: &tasklift::cli::client::Client,
    id: &str,
    stop_at_input: bool,
) -> (Vec<Value>, Value) {
    guarded("the task settles", async {
        let mut seen = Vec::new();
        loop {
            let t = c.get_task(id).await.expect("tasks/get");
            seen.push(t.clone());
            let s = t["status"].as_str().unwrap_or_default();
            if matches!(s, "completed" | "failed" | "cancelled") {
                return (seen, t);
            }
            if s == "input_required" && stop_at_input {
                return (seen, t);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Poll `id` until it is terminal or asks for input.
async fn follow(c: &tasklift::cli::client::Client, id: &str) -> (Vec<Value>, Value) {
    follow_until(c, id, true).await
}

/// The task id of a call answered with a handle.
fn task_id(a: &tasklift::cli::client::Answer) -> String {
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    a.result["taskId"].as_str().unwrap().to_string()
}

/// tasklift with `tests/data/stdio/asker.py` as its stdio upstream.
async fn asker(
    tweak: impl FnOnce(&mut tasklift::config::RawUpstream),
) -> crate::support::stdio::StdioHarness {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/stdio/asker.py");
    crate::support::stdio::StdioHarness::start_command(
        |_| vec!["python3".into(), script.into()],
        |raw| {
            raw.auth.mode = "bearer".into();
            tweak(&mut raw.upstreams[0]);
        },
    )
    .await
}

/// B calls a tool that asks its question 1 s in; A calls a slow tool meanwhile.
/// Returns (B's client and task, A's client and task).
async fn two_callers(
    url: &str,
    a_token: &str,
    b_token: &str,
) -> (
    (tasklift::cli::client::Client, String),
    (tasklift::cli::client::Client, String),
) {
    let (b, a) = (caller(url, b_token), caller(url, a_token));
    let bt = task_id(
        &b.call_tool("ask_later", json!({"delay": 1.0, "who": "B"}))
            .await
            .unwrap(),
    );
    let at = task_id(&a.call_tool("slow", json!({"seconds": 2.5})).await.unwrap());
    ((b, bt), (a, at))
}

/// A's task never showed B's question, and finished with its own result.
async fn a_saw_nothing(a: &tasklift::cli::client::Client, at: &str) {
    a_saw_nothing_as(a, at, "secret question").await
}

/// The slow task `at` never showed a question containing `secret`, and finished
/// with its own result.
async fn a_saw_nothing_as(a: &tasklift::cli::client::Client, at: &str, secret: &str) {
    let (seen, last) = follow(a, at).await;
    for t in &seen {
        assert!(
            !t.to_string().contains(secret),
            "a caller was shown another's question: {t}"
        );
        assert_ne!(t["status"], "input_required", "{t}");
    }
    assert_eq!(last["status"], "completed", "{last}");
    let r = a.get_task(at).await.unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "slow done", "{r}");
}

#[tokio::test]
async fn a_stdio_childs_question_is_never_shown_to_another_caller() {
    let h = asker(|_| {}).await;
    for (a_token, b_token) in [("alice", "bob"), ("carol", "carol")] {
        // Across principals, and between two calls of one principal alike: with two
        // calls in flight on one child, the question names neither, so no caller is
        // asked; B's tool gets an error for it and says so.
        let ((b, bt), (a, at)) = two_callers(&h.url, a_token, b_token).await;
        a_saw_nothing(&a, &at).await;
        let (seen, last) = follow(&b, &bt).await;
        assert!(
            seen.iter().all(|t| t["status"] != "input_required"),
            "{seen:?}"
        );
        assert_eq!(last["status"], "completed", "{last}");
        let r = b.get_task(&bt).await.unwrap();
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert!(
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("cannot tell which"),
            "{r}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn with_isolate_input_each_caller_gets_its_own_question_and_answer() {
    let h = asker(|u| {
        u.isolate_input = true;
        u.max_processes = 3;
    })
    .await;
    let ((b, bt), (a, at)) = two_callers(&h.url, "alice", "bob").await;
    let (_, t) = follow(&b, &bt).await;
    assert_eq!(t["status"], "input_required", "{t}");
    let (key, req) = t["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert!(req.to_string().contains("secret question for B"), "{req}");
    b.update_task(
        &bt,
        json!({key: {"action": "accept", "content": {"word": "bob's word"}}}),
    )
    .await
    .unwrap();
    let (_, last) = follow_until(&b, &bt, false).await;
    assert_eq!(last["status"], "completed", "{last}");
    let r = b.get_task(&bt).await.unwrap();
    assert_eq!(
        r["result"]["content"][0]["text"], "B got: bob's word",
        "{r}"
    );
    a_saw_nothing(&a, &at).await;
    h.stop().await;
}

// ---- fastmcp-tasks omits Mcp-Name on tasks/* ----

#[tokio::test]
async fn tasks_without_mcp_name_are_refused_unless_the_operator_opts_in() {
    let up = || {
        FixtureServer::new()
            .tool(tasklift_fixture::Tool::new("slow").sleep(std::time::Duration::from_millis(600)))
    };
    for lenient in [false, true] {
        let h = Harness::start(up(), |c| c.server.lenient_task_name_header = lenient).await;
        let a = h.client().call_tool("slow", json!({})).await.unwrap();
        let id = task_id(&a);
        // tasks/get as fastmcp-tasks sends it: no Mcp-Name header.
        let get = Post::new(&h.url, 2, "tasks/get", json!({"taskId": id}), true)
            .without("mcp-name")
            .send()
            .await;
        if lenient {
            assert_eq!(get.status, 200, "{get:?}");
            assert_eq!(get.response()["result"]["taskId"], id.as_str(), "{get:?}");
        } else {
            assert_eq!(get.status, 400, "{get:?}");
            let e = get.error();
            assert!(e["message"].as_str().unwrap().contains("Mcp-Name"), "{e}");
        }
        // Only tasks/* is let through: a tools/call without it is still refused.
        let call = Post::new(
            &h.url,
            3,
            "tools/call",
            json!({"name": "slow", "arguments": {}}),
            true,
        )
        .without("mcp-name")
        .send()
        .await;
        assert_eq!(call.status, 400, "{call:?}");
        // A header that is there must still match the body.
        let wrong = Post::new(&h.url, 4, "tasks/get", json!({"taskId": id}), true)
            .header("mcp-name", "another-task")
            .send()
            .await;
        assert_eq!(wrong.status, 400, "{wrong:?}");
        h.stop().await;
    }
}

#[tokio::test]
async fn two_callers_with_the_same_progress_token_each_get_their_own_progress() {
    // SDK clients number progress tokens from 1 (the TypeScript SDK v1 uses the
    // request id): on one stdio child, two callers' tokens are often the same.
    let h = asker(|_| {}).await;
    let count = |token: &str, label: &str, n: u64| {
        Post::new(
            &h.url,
            7,
            "tools/call",
            json!({"name": "count", "arguments": {"n": n, "label": label},
                   "_meta": {"progressToken": 1}}),
            false,
        )
        .header("authorization", &format!("Bearer {token}"))
        .send()
    };
    let (a, b) = tokio::join!(count("alice", "A", 12), async {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        count("bob", "B", 3).await
    });
    for (r, mine, other, n) in [(&a, "A", "B", 12), (&b, "B", "A", 3)] {
        let msgs = r.sse_messages();
        let progress: Vec<&Value> = msgs
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), n, "{mine}: {msgs:?}");
        for p in &progress {
            assert_eq!(p["params"]["progressToken"], 1, "{p}");
            let m = p["params"]["message"].as_str().unwrap();
            assert!(
                m.starts_with(mine) && !m.starts_with(other),
                "{mine} got {p}"
            );
        }
        let done = msgs.iter().find(|m| m["id"] == 7).expect("the result");
        assert_eq!(
            done["result"]["content"][0]["text"],
            format!("{mine} counted {n}")
        );
    }
    h.stop().await;
}

// ---- An upstream's 2025-11-25 tasks live in the session that created them ----

#[tokio::test]
async fn an_upstream_tasks_requests_go_to_the_session_that_created_it() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    // A legacy server with sessions and task-only tools, which (like the TypeScript
    // SDK v1's task store) knows a task only in the session that created it.
    let sessions = Arc::new(Mutex::new(0u32));
    let homes: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let streams: Arc<Mutex<Vec<crate::support::mock::StreamTx>>> = Arc::default();
    // The first call's answer, held back until the test releases it.
    let held: Arc<Mutex<Option<(crate::support::mock::StreamTx, Value)>>> = Arc::default();
    let (s2, h2, st2, held2) = (
        sessions.clone(),
        homes.clone(),
        streams.clone(),
        held.clone(),
    );
    let mock = MockUpstream::start_with_headers(move |h, m| {
        let sid = h
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let task = m["params"]["taskId"].as_str().unwrap_or("").to_string();
        let known = || h2.lock().unwrap().get(&task) == Some(&sid);
        match m["method"].as_str().unwrap_or("") {
            "" => MockReply::Status(405), // no GET stream
            "server/discover" => MockReply::Error(400, -32600, "Bad Request".into()),
            "initialize" => {
                let mut n = s2.lock().unwrap();
                *n += 1;
                MockReply::WithHeaders(
                    vec![("mcp-session-id".into(), format!("s{n}"))],
                    Box::new(MockReply::Result(json!({
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}},
                        "serverInfo": {"name": "sessions-mock", "version": "1"},
                    }))),
                )
            }
            "tools/list" => MockReply::Result(json!({"tools": [{
                "name": "research", "inputSchema": {"type": "object"},
                "execution": {"taskSupport": "required"}}]})),
            "tools/call" => {
                let t = format!("task-of-{sid}-{}", m["id"]);
                h2.lock().unwrap().insert(t.clone(), sid);
                let created = json!({"task": {"taskId": t, "status": "working",
                    "createdAt": "2026-12-01T00:00:00Z", "lastUpdatedAt": "2026-12-01T00:00:00Z",
                    "ttl": 60000, "pollInterval": 100}});
                if m["params"]["arguments"]["q"] == 1 {
                    // Slow to create its task: the call holds its session meanwhile.
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    let msg = json!({"jsonrpc": "2.0", "id": m["id"], "result": created});
                    *held2.lock().unwrap() = Some((tx, msg));
                    MockReply::Stream(rx)
                } else {
                    MockReply::Result(created)
                }
            }
            "tasks/get" | "tasks/result" | "tasks/cancel" if !known() => {
                MockReply::Error(200, -32602, format!("Task not found: {task}"))
            }
            "tasks/get" => MockReply::Result(json!({"taskId": task, "status": "working",
                "statusMessage": "researching", "createdAt": "2026-12-01T00:00:00Z",
                "lastUpdatedAt": "2026-12-01T00:00:00Z", "ttl": 60000, "pollInterval": 100})),
            "tasks/result" => {
                // Held open: the research never ends by itself.
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                st2.lock().unwrap().push(tx);
                MockReply::Stream(rx)
            }
            "tasks/cancel" => MockReply::Result(json!({"taskId": task, "status": "cancelled",
                "createdAt": "2026-12-01T00:00:00Z", "lastUpdatedAt": "2026-12-01T00:00:00Z",
                "ttl": 60000})),
            _ => MockReply::Result(json!({})),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |_| {}).await;
    let c = h.client();
    // Two calls at once: while the first one waits for its task to be created, the
    // second gets a session of its own, and its task lives there.
    let (a, b) = tokio::join!(
        async { task_id(&c.call_tool("research", json!({"q": 1})).await.unwrap()) },
        async {
            crate::support::harness::eventually("the first call is in flight", GUARD, || {
                held.lock().unwrap().is_some()
            })
            .await;
            let b = task_id(&c.call_tool("research", json!({"q": 2})).await.unwrap());
            let (tx, msg) = held.lock().unwrap().take().unwrap();
            tx.send(Ok(crate::support::mock::sse_event(&msg)))
                .await
                .unwrap();
            b
        }
    );
    crate::support::harness::eventually("both tasks are followed", GUARD, || {
        mock.received("tasks/result").len() >= 2 && mock.received("tasks/get").len() >= 4
    })
    .await;
    assert!(
        *sessions.lock().unwrap() >= 2,
        "a second session was opened"
    );
    for id in [&a, &b] {
        c.cancel_task(id).await.unwrap();
    }
    crate::support::harness::eventually("both upstream tasks are cancelled", GUARD, || {
        mock.received("tasks/cancel").len() >= 2
    })
    .await;
    // Every request about an upstream task went to the session that created it.
    let homes = homes.lock().unwrap().clone();
    let reqs = mock.requests.lock().unwrap().clone();
    for (hdrs, m) in reqs.iter() {
        let method = m["method"].as_str().unwrap_or("");
        if !matches!(method, "tasks/get" | "tasks/result" | "tasks/cancel") {
            continue;
        }
        let task = m["params"]["taskId"].as_str().unwrap();
        let sid = hdrs.get("mcp-session-id").unwrap().to_str().unwrap();
        assert_eq!(
            homes.get(task).map(String::as_str),
            Some(sid),
            "{method} for {task} went to {sid}"
        );
    }
    let cancelled: Vec<String> = mock
        .received("tasks/cancel")
        .iter()
        .map(|m| m["params"]["taskId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(cancelled.len(), 2, "{cancelled:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_question_about_an_upstream_task_never_goes_to_a_bystanders_call() {
    // A asks about a task (related-task) after its own call ended; B's call is the
    // only one in flight that may ask. The question is A's, not B's: refused.
    let h = asker(|_| {}).await;
    let b = caller(&h.url, "bob");
    let bt = task_id(&b.call_tool("slow", json!({"seconds": 1.5})).await.unwrap());
    let a = caller(&h.url, "alice");
    let r = a.call_tool("tagged", json!({})).await.unwrap();
    assert_eq!(
        r.result["content"][0]["text"], "tagged done",
        "{}",
        r.result
    );
    a_saw_nothing_as(&b, &bt, "secret follow-up").await;
    h.stop().await;
}
