//! 2025-11-25 tasks for legacy clients: `tools/call` with `params.task` answers with
//! a `CreateTaskResult` at once; `tasks/get`, blocking `tasks/result`, `tasks/list`
//! and `tasks/cancel`; a task waiting for input asks on the `tasks/result` stream;
//! and older sessions, where `params.task` means nothing.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::input::{answers_upstream_got, result};

const V25: &str = "2025-11-25";
const RELATED: &str = "io.modelcontextprotocol/related-task";

fn gated_job() -> (Arc<Notify>, FixtureServer) {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(Tool::new("echo"))
        .tool(Tool::new("job").gate(gate.clone()));
    (gate, up)
}

/// `tools/call` `name` as a task; the `task` of the `CreateTaskResult`.
async fn create(c: &LegacyClient, id: u64, name: &str, args: Value) -> Value {
    let params = json!({"name": name, "arguments": args, "task": {"ttl": 60000}});
    let r = c.request(id, "tools/call", params).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.content_type().starts_with("application/json"),
        "at once: {r:?}"
    );
    let res = result(&r);
    let keys: Vec<&String> = res.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["task"], "a CreateTaskResult: {res}");
    res["task"].clone()
}

async fn task_call(c: &LegacyClient, id: u64, method: &str, task: &Value) -> Raw {
    c.request(id, method, json!({"taskId": task["taskId"]}))
        .await
}

/// Poll `tasks/get` until the task has `status`.
async fn wait_status(c: &LegacyClient, task: &Value, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let t = result(&task_call(c, 90, "tasks/get", task).await);
        if t["status"] == status {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {status}: {t}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_task_answers_at_once_and_tasks_result_blocks_until_the_result() {
    let (gate, up) = gated_job();
    let h = Harness::start(up, |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let t = create(&c, 2, "job", json!({"x": 1})).await;
    let keys: BTreeSet<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
    let allowed = [
        "taskId",
        "status",
        "statusMessage",
        "createdAt",
        "lastUpdatedAt",
        "ttl",
        "pollInterval",
    ];
    assert!(
        keys.iter().all(|k| allowed.contains(k)),
        "a 2025-11-25 Task: {t}"
    );
    for k in [
        "taskId",
        "createdAt",
        "lastUpdatedAt",
        "ttl",
        "pollInterval",
    ] {
        assert!(keys.contains(k), "{k}: {t}");
    }
    assert_eq!(t["status"], "working");
    assert_eq!(t["ttl"], 60000, "the requested ttl: {t}");
    assert_eq!(t["pollInterval"], 50, "tasks.poll_interval: {t}");
    assert!(
        t["createdAt"].as_str().unwrap().contains('T'),
        "ISO 8601: {t}"
    );
    // The call runs upstream, without the task field.
    let stats = h.upstream.stats();
    let running = || stats.running.load(Ordering::Relaxed) == 1;
    eventually("the call runs upstream", Duration::from_secs(10), running).await;
    let sent = &h.received("tools/call")[0]["params"];
    assert!(sent.get("task").is_none(), "{sent}");
    assert_eq!(sent["arguments"], json!({"x": 1}));

    let got = result(&task_call(&c, 3, "tasks/get", &t).await);
    assert_eq!(
        (&got["taskId"], &got["status"]),
        (&t["taskId"], &json!("working"))
    );
    assert!(
        got.get("_meta").is_none(),
        "no related-task on tasks/get: {got}"
    );

    // tasks/result waits: its stream opens, and nothing comes while the job is held.
    let mut s = c
        .open(4, "tasks/result", json!({"taskId": t["taskId"]}))
        .await;
    let primed = s
        .events_until("the priming event", |e| e.id.is_some())
        .await;
    assert!(messages(&primed).is_empty(), "{primed:?}");
    gate.notify_one();
    let done = s.finish_guarded("the task's result").await.response();
    assert_eq!(done["id"], 4, "{done}");
    let r = &done["result"];
    assert_eq!(r["content"][0]["text"], "job done", "{done}");
    assert_eq!(
        r["_meta"][RELATED],
        json!({"taskId": t["taskId"]}),
        "{done}"
    );
    assert!(r.get("resultType").is_none(), "{done}");

    let got = result(&task_call(&c, 5, "tasks/get", &t).await);
    assert_eq!(got["status"], "completed", "{got}");
    // Once terminal, tasks/result answers at once, the same.
    let again = task_call(&c, 6, "tasks/result", &t).await;
    assert_eq!(&result(&again), r);
    h.stop().await;
}

#[tokio::test]
async fn tasks_result_returns_what_the_call_would_have_returned() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let failing = create(&c, 2, "failing_job", json!({})).await;
    let broken = create(&c, 3, "protocol_error_job", json!({})).await;
    let r = result(&task_call(&c, 4, "tasks/result", &failing).await);
    assert_eq!(r["isError"], true, "a tool error is a result: {r}");
    assert_eq!(
        r["content"][0]["text"],
        "the job failed: disk quota exceeded"
    );
    assert_eq!(r["_meta"][RELATED]["taskId"], failing["taskId"]);
    let e = task_call(&c, 5, "tasks/result", &broken).await.error();
    assert_eq!(e["code"], -32603, "the upstream's JSON-RPC error: {e}");
    let got = result(&task_call(&c, 6, "tasks/get", &broken).await);
    assert_eq!(got["status"], "failed", "{got}");
    h.stop().await;
}

#[tokio::test]
async fn tasks_list_pages_through_the_callers_own_tasks_only() {
    let h = Harness::start(gated_job().1, |c| c.auth.mode = "bearer".into()).await;
    let auth = |t: &'static str| [("authorization", t)];
    let (alice, _) = LegacyClient::start_with(&h.url, V25, json!({}), &auth("Bearer alice")).await;
    let (bob, _) = LegacyClient::start_with(&h.url, V25, json!({}), &auth("Bearer bob")).await;
    let mut mine = HashSet::new();
    for i in 0..51 {
        let t = create(&alice, 100 + i, "echo", json!({})).await;
        mine.insert(t["taskId"].as_str().unwrap().to_string());
    }
    let theirs = create(&bob, 2, "echo", json!({})).await;

    let mut listed = Vec::new();
    let mut cursor: Option<Value> = None;
    for page in 0.. {
        assert!(page < 5, "too many pages");
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = result(&alice.request(200 + page, "tasks/list", params).await);
        let tasks = r["tasks"].as_array().unwrap();
        assert!(!tasks.is_empty() && tasks.len() <= 50, "{r}");
        listed.extend(
            tasks
                .iter()
                .map(|t| t["taskId"].as_str().unwrap().to_string()),
        );
        assert!(tasks.iter().all(|t| t.get("ttl").is_some()), "Tasks: {r}");
        match r.get("nextCursor") {
            Some(c) => cursor = Some(c.clone()),
            None => break,
        }
    }
    assert_eq!(listed.len(), 51, "each once, over more than one page");
    assert_eq!(listed.iter().cloned().collect::<HashSet<_>>(), mine);
    let bobs = result(&bob.request(3, "tasks/list", json!({})).await);
    assert_eq!(bobs["tasks"].as_array().unwrap().len(), 1, "{bobs}");
    assert_eq!(bobs["tasks"][0]["taskId"], theirs["taskId"]);
    assert!(bobs.get("nextCursor").is_none());
    // Nor can bob see alice's task any other way.
    let foreign = json!({"taskId": listed[0]});
    assert_eq!(
        bob.request(4, "tasks/get", foreign).await.error()["code"],
        -32602
    );
    h.stop().await;
}

#[tokio::test]
async fn tasks_cancel_cancels_once_then_refuses_a_finished_task() {
    let (_gate, up) = gated_job();
    let h = Harness::start(up, |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let t = create(&c, 2, "job", json!({})).await;
    let stats = h.upstream.stats();
    let running = || stats.running.load(Ordering::Relaxed) == 1;
    eventually("the call runs upstream", Duration::from_secs(10), running).await;

    let cancelled = result(&task_call(&c, 3, "tasks/cancel", &t).await);
    assert_eq!(cancelled["taskId"], t["taskId"], "{cancelled}");
    assert_eq!(
        cancelled["status"], "cancelled",
        "before the answer: {cancelled}"
    );
    upstream_call_cancelled(&stats).await;
    let again = task_call(&c, 4, "tasks/cancel", &t).await;
    assert_eq!(again.error()["code"], -32602, "{again:?}");
    let got = result(&task_call(&c, 5, "tasks/get", &t).await);
    assert_eq!(got["status"], "cancelled");
    h.stop().await;
}

#[tokio::test]
async fn a_task_asking_for_input_is_answered_on_the_tasks_result_stream() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({"elicitation": {}})).await;
    let t = create(&c, 2, "confirm_delete", json!({"filename": "b.txt"})).await;
    wait_status(&c, &t, "input_required").await;

    let mut s = c
        .open(3, "tasks/result", json!({"taskId": t["taskId"]}))
        .await;
    let is_ask = |m: &Value| m["method"] == "elicitation/create";
    let ask = s.message_where("the task's elicitation", is_ask).await;
    assert_eq!(ask["params"]["message"], "Delete b.txt?", "{ask}");
    let related = &ask["params"]["_meta"][RELATED];
    assert_eq!(related, &json!({"taskId": t["taskId"]}), "{ask}");
    let yes = json!({"action": "accept", "content": {"confirm": true}});
    assert_eq!(c.respond(&ask["id"], yes.clone()).await.status, 202);

    let done = s.finish_guarded("the task's result").await.response();
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted b.txt.",
        "{done}"
    );
    assert_eq!(done["result"]["_meta"][RELATED]["taskId"], t["taskId"]);
    let got = result(&task_call(&c, 4, "tasks/get", &t).await);
    assert_eq!(got["status"], "completed", "{got}");
    let answers = answers_upstream_got(&h);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["result"], yes);
    h.stop().await;
}

#[tokio::test]
async fn task_support_follows_the_tool_rules() {
    let up = FixtureServer::new()
        .tool(Tool::new("quick"))
        .tool(Tool::new("must"))
        .tool(Tool::new("any"));
    let h = Harness::start(up, |c| {
        c.upstreams[0].tools.insert("quick".into(), rule("never"));
        c.upstreams[0].tools.insert("must".into(), rule("required"));
    })
    .await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let list = result(&c.request(2, "tools/list", json!({})).await);
    let support: Vec<(String, Value)> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["execution"]["taskSupport"].clone(),
            )
        })
        .collect();
    let expected = [
        ("quick", "forbidden"),
        ("must", "required"),
        ("any", "optional"),
    ]
    .map(|(n, s)| (n.to_string(), json!(s)));
    assert_eq!(support, expected, "{list}");

    let p = json!({"name": "quick", "task": {}});
    let e = c.request(3, "tools/call", p).await.error();
    assert_eq!(e["code"], -32601, "{e}");
    let plain = c.request(4, "tools/call", json!({"name": "quick"})).await;
    assert_eq!(result(&plain)["content"][0]["text"], "quick done");
    let e = c
        .request(5, "tools/call", json!({"name": "must"}))
        .await
        .error();
    assert_eq!(
        e["code"], -32601,
        "a required tool called without a task: {e}"
    );
    let t = create(&c, 6, "must", json!({})).await;
    let done = result(&task_call(&c, 7, "tasks/result", &t).await);
    assert_eq!(done["content"][0]["text"], "must done");
    let calls = h.received("tools/call");
    let quick = calls
        .iter()
        .filter(|m| m["params"]["name"] == "quick")
        .count();
    assert_eq!(
        quick, 1,
        "the refused task never reached the upstream: {calls:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn before_2025_11_25_params_task_is_ignored() {
    let h = Harness::start(gated_job().1, |_| {}).await;
    let (c, init) = LegacyClient::start(&h.url, "2025-06-18", json!({})).await;
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    let list = result(&c.request(2, "tools/list", json!({})).await);
    assert!(list["tools"][0].get("execution").is_none(), "{list}");
    let p = json!({"name": "echo", "arguments": {}, "task": {"ttl": 60000}});
    let r = result(&c.request(3, "tools/call", p).await);
    assert_eq!(
        r,
        json!({"content": [{"type": "text", "text": "echo done"}]})
    );
    assert!(h.received("tools/call")[0]["params"].get("task").is_none());
    assert_eq!(stored_tasks(&h).await, 0, "no task was made");
    h.stop().await;
}
