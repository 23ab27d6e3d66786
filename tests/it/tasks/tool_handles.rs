//! Slow calls for clients without the tasks extension: tool-level handles
//! (`non_task_clients = "tool_handles"`: the still-running answer, `tasklift_wait`,
//! `tasklift_cancel`, the extra tools listed only to such clients, the same owner
//! check as `tasks/get`) and detach and replay (`on_disconnect = "detach"`: a call
//! whose client left runs on, and the identical retry gets its result while the
//! upstream ran the tool once). Against the bundled fixture over HTTP; the real SDK
//! clients are in `front/slow_clients.rs`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::config::RawConfig;
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;

fn slow_server(gate: Option<Arc<Notify>>) -> FixtureServer {
    let mut slow = Tool::new("slow")
        .schema(json!({"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}))
        .sleep_arg("seconds", 2.0)
        .reply(|a| format!("slow {} done", a.get("label").and_then(Value::as_str).unwrap_or("job")));
    if let Some(g) = gate {
        slow = slow.gate(g);
    }
    FixtureServer::new()
        .tool(slow)
        .tool(
            Tool::new("typed")
                .schema(json!({"type": "object"}))
                .reply(|_| "typed".into()),
        )
        .tool(
            Tool::new("broken")
                .sleep_arg("seconds", 1.0)
                .rpc_error(-32050, "quota exhausted"),
        )
}

fn handles(c: &mut RawConfig) {
    c.upstreams[0].non_task_clients = "tool_handles".into();
}

fn detach(c: &mut RawConfig) {
    c.upstreams[0].on_disconnect = "detach".into();
}

/// Callers told apart by their bearer token: replays by arguments are per caller
/// (without authentication only within a legacy session, or by idempotency key).
fn bearer(c: &mut RawConfig) {
    c.auth.mode = "bearer".into();
}

/// A client without the extension, as `who`.
fn plain_as(h: &Harness, who: &str) -> tasklift::cli::client::Client {
    h.client_with(false, &[("authorization", &format!("Bearer {who}"))])
}

fn text(r: &Value) -> String {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// How many `tools/call` of `tool` reached the upstream.
fn runs(h: &Harness, tool: &str) -> usize {
    h.received("tools/call")
        .iter()
        .filter(|b| b["params"]["name"] == tool)
        .count()
}

/// The task id a still-running answer names, read from its text the way a model
/// would (and checked against its structuredContent).
fn followed(r: &Value) -> String {
    let t = text(r);
    assert!(t.contains("tasklift_wait"), "{r}");
    assert_eq!(r["isError"], false, "{r}");
    let sc = &r["structuredContent"];
    assert_eq!(sc["status"], "working", "{r}");
    assert_eq!(sc["pollWith"], "tasklift_wait", "{r}");
    let id = sc["taskId"].as_str().expect("taskId").to_string();
    assert!(t.contains(&id), "the text names the task: {t}");
    id
}

/// Follow `tasklift_wait` for task `id` until it stops answering still-running
/// (each wait lasts as long as the client is known to wait: the threshold here).
async fn wait_result(c: &tasklift::cli::client::Client, id: &str) -> Value {
    for _ in 0..60 {
        let r = c
            .call_tool("tasklift_wait", json!({"taskId": id}))
            .await
            .unwrap()
            .result;
        if r["structuredContent"]["status"] != "working" {
            return r;
        }
    }
    panic!("task {id} still running after 60 waits");
}

async fn names(c: &tasklift::cli::client::Client) -> Vec<String> {
    let a = c.request("tools/list", json!({})).await.unwrap();
    a.result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn only_clients_without_the_extension_are_offered_the_wait_tools() {
    let h = Harness::start(slow_server(None), handles).await;
    let plain = names(&h.plain_client()).await;
    assert!(plain.contains(&"tasklift_wait".to_string()), "{plain:?}");
    assert!(plain.contains(&"tasklift_cancel".to_string()), "{plain:?}");
    assert!(plain.contains(&"slow".to_string()), "{plain:?}");
    let declaring = names(&h.client()).await;
    assert!(
        !declaring.iter().any(|n| n.starts_with("tasklift_")),
        "{declaring:?}"
    );
    h.stop().await;
    // With the default (wait), nobody sees them.
    let h = Harness::start(slow_server(None), |_| {}).await;
    let plain = names(&h.plain_client()).await;
    assert!(
        !plain.iter().any(|n| n.starts_with("tasklift_")),
        "{plain:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_slow_call_answers_still_running_and_tasklift_wait_returns_its_real_result() {
    let gate = Arc::new(Notify::new());
    let h = Harness::start(slow_server(Some(gate.clone())), handles).await;
    let c = h.plain_client();
    let first = c
        .call_tool("slow", json!({"seconds": 0, "label": "report"}))
        .await
        .unwrap();
    assert_ne!(
        first.result["resultType"], "task",
        "never a CreateTaskResult: {}",
        first.result
    );
    let id = followed(&first.result);
    // Still running: the same answer again, after waiting as long as asked.
    let again = c
        .call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 0.2}))
        .await
        .unwrap();
    assert_eq!(followed(&again.result), id);
    h.stop().await;
    drop(gate);
}

#[tokio::test]
async fn tasklift_wait_gets_the_result_once_done_and_the_upstream_ran_once() {
    let gate = Arc::new(Notify::new());
    let h = Harness::start(slow_server(Some(gate.clone())), |c| {
        handles(c);
        c.auth.mode = "bearer".into();
    })
    .await;
    let c = h.client_with(false, &[("authorization", "Bearer alice")]);
    let first = c
        .call_tool("slow", json!({"seconds": 0, "label": "report"}))
        .await
        .unwrap();
    let id = followed(&first.result);
    let mallory = h.client_with(false, &[("authorization", "Bearer mallory")]);
    let theirs = mallory
        .call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 0}))
        .await
        .unwrap();
    assert_eq!(theirs.result["isError"], true, "{}", theirs.result);
    assert!(
        text(&theirs.result).contains("Unknown taskId"),
        "{}",
        theirs.result
    );
    let cancel = mallory
        .call_tool("tasklift_cancel", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(cancel.result["isError"], true, "{}", cancel.result);
    // The owner waits; the job finishes meanwhile.
    let waiting = {
        let c = h.client_with(false, &[("authorization", "Bearer alice")]);
        let id = id.clone();
        tokio::spawn(async move {
            c.call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 30}))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    gate.notify_one();
    let done = waiting.await.unwrap();
    assert_eq!(text(&done.result), "slow report done", "{}", done.result);
    assert!(
        done.result.get("structuredContent").is_none(),
        "{}",
        done.result
    );
    assert_eq!(runs(&h, "slow"), 1);
    // Waiting again gives the stored result again.
    let stored = c
        .call_tool("tasklift_wait", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(text(&stored.result), "slow report done");
    h.stop().await;
}

#[tokio::test]
async fn tasklift_cancel_stops_the_job_and_wait_says_so() {
    let gate = Arc::new(Notify::new());
    let h = Harness::start(slow_server(Some(gate.clone())), handles).await;
    let c = h.plain_client();
    let id = followed(
        &c.call_tool("slow", json!({"seconds": 0}))
            .await
            .unwrap()
            .result,
    );
    let stop = c
        .call_tool("tasklift_cancel", json!({"taskId": id}))
        .await
        .unwrap();
    assert_eq!(stop.result["isError"], false, "{}", stop.result);
    let after = c
        .call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 10}))
        .await
        .unwrap();
    assert_eq!(after.result["isError"], true, "{}", after.result);
    assert!(
        text(&after.result).contains("cancelled"),
        "{}",
        after.result
    );
    h.stop().await;
}

#[tokio::test]
async fn a_failed_job_is_a_tool_error_naming_the_failure() {
    let h = Harness::start(slow_server(None), handles).await;
    let c = h.plain_client();
    let id = followed(
        &c.call_tool("broken", json!({"seconds": 1}))
            .await
            .unwrap()
            .result,
    );
    let r = c
        .call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 20}))
        .await
        .unwrap();
    assert_eq!(r.result["isError"], true, "{}", r.result);
    assert!(text(&r.result).contains("quota exhausted"), "{}", r.result);
    h.stop().await;
}

#[tokio::test]
async fn a_declaring_client_still_gets_real_task_handles() {
    let h = Harness::start(slow_server(None), |c| {
        handles(c);
        detach(c);
    })
    .await;
    let a = h
        .client()
        .call_tool("slow", json!({"seconds": 2}))
        .await
        .unwrap();
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    h.stop().await;
}

/// `c` sends `tools/call` with `params` and gives up after `after` (its connection
/// closes) while the call still runs.
async fn leave(c: &tasklift::cli::client::Client, params: Value, after: Duration) {
    let r = tokio::time::timeout(after, c.request("tools/call", params)).await;
    assert!(r.is_err(), "the call should still run: {r:?}");
}

/// The params of a `slow` call with these arguments.
fn slow_call(args: Value) -> Value {
    json!({"name": "slow", "arguments": args})
}

/// Alice's plain client gives up on `slow` after `after`.
async fn give_up(h: &Harness, args: Value, after: Duration) {
    leave(&plain_as(h, "alice"), slow_call(args), after).await;
}

#[tokio::test]
async fn detach_keeps_a_left_call_running_and_the_identical_retry_gets_its_result() {
    let h = Harness::start(slow_server(None), |c| {
        detach(c);
        bearer(c);
    })
    .await;
    let args = json!({"seconds": 3, "label": "payroll"});
    give_up(&h, args.clone(), Duration::from_millis(1200)).await;
    let alice = plain_as(&h, "alice");
    let retry = alice.call_tool("slow", args.clone()).await.unwrap();
    assert_eq!(text(&retry.result), "slow payroll done", "{}", retry.result);
    assert_eq!(runs(&h, "slow"), 1, "the retry joined the running call");
    // Once done, the same call again is answered from the stored result.
    let stored = alice.call_tool("slow", args.clone()).await.unwrap();
    assert_eq!(text(&stored.result), "slow payroll done");
    assert_eq!(runs(&h, "slow"), 1);
    // Another caller's identical call is its own: it runs.
    let bob = plain_as(&h, "bob").call_tool("slow", args).await.unwrap();
    assert_eq!(text(&bob.result), "slow payroll done");
    assert_eq!(runs(&h, "slow"), 2, "never another caller's result");
    // Other arguments are another call.
    let other = alice
        .call_tool("slow", json!({"seconds": 0, "label": "other"}))
        .await
        .unwrap();
    assert_eq!(text(&other.result), "slow other done");
    assert_eq!(runs(&h, "slow"), 3);
    let metrics = reqwest_metrics(&h).await;
    assert!(
        metrics.contains("tasklift_replays_total{outcome=\"joined\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tasklift_replays_total{outcome=\"stored\"} 1"),
        "{metrics}"
    );
    h.stop().await;
}

#[tokio::test]
async fn without_detach_the_left_call_is_cancelled_and_the_retry_runs_again() {
    let h = Harness::start(slow_server(None), bearer).await;
    let args = json!({"seconds": 2, "label": "payroll"});
    give_up(&h, args.clone(), Duration::from_millis(1000)).await;
    let retry = plain_as(&h, "alice").call_tool("slow", args).await.unwrap();
    assert_eq!(text(&retry.result), "slow payroll done");
    assert_eq!(runs(&h, "slow"), 2);
    h.stop().await;
}

#[tokio::test]
async fn an_idempotency_key_names_the_call_instead_of_its_arguments() {
    let h = Harness::start(slow_server(None), detach).await;
    let c = h.plain_client();
    let keyed = |label: &str| {
        json!({"name": "slow", "arguments": {"seconds": 2, "label": label},
               "_meta": {"tasklift/idempotencyKey": "order-42"}})
    };
    leave(&c, keyed("first"), Duration::from_millis(1000)).await;
    let retry = c.request("tools/call", keyed("second")).await.unwrap();
    assert_eq!(text(&retry.result), "slow first done", "{}", retry.result);
    assert_eq!(runs(&h, "slow"), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_failed_call_is_not_replayed() {
    let h = Harness::start(slow_server(None), |c| {
        detach(c);
        bearer(c);
    })
    .await;
    let c = plain_as(&h, "alice");
    let a = c.call_tool("broken", json!({"seconds": 1})).await;
    assert!(
        a.is_err() || a.as_ref().unwrap().result.get("error").is_some(),
        "{a:?}"
    );
    let _ = c.call_tool("broken", json!({"seconds": 1})).await;
    assert_eq!(runs(&h, "broken"), 2, "a failure is not kept as the answer");
    h.stop().await;
}

#[tokio::test]
async fn with_tool_handles_and_detach_a_retry_gets_the_same_handle() {
    let h = Harness::start(slow_server(None), |c| {
        handles(c);
        detach(c);
        bearer(c);
    })
    .await;
    let c = plain_as(&h, "alice");
    let args = json!({"seconds": 3, "label": "x"});
    let first = followed(&c.call_tool("slow", args.clone()).await.unwrap().result);
    let second = followed(&c.call_tool("slow", args).await.unwrap().result);
    assert_eq!(first, second);
    assert_eq!(runs(&h, "slow"), 1);
    h.stop().await;
}

async fn reqwest_metrics(h: &Harness) -> String {
    let r = crate::support::wire::raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body
}

#[tokio::test]
async fn without_authentication_replays_by_arguments_stay_within_a_session() {
    // Every caller is the same principal without authentication: two clients'
    // identical calls are two calls, so neither is handed the other's result.
    let h = Harness::start(slow_server(None), detach).await;
    let args = json!({"seconds": 2, "label": "mine"});
    let c = h.plain_client();
    leave(&c, slow_call(args.clone()), Duration::from_millis(1000)).await;
    let other = h.plain_client().call_tool("slow", args).await.unwrap();
    assert_eq!(text(&other.result), "slow mine done");
    assert_eq!(runs(&h, "slow"), 2);
    h.stop().await;
}

#[tokio::test]
async fn without_anything_to_match_a_retry_a_detach_call_is_cancelled_not_detached() {
    // auth none, a 2026-07-28 client (no session) and no idempotency key: a retry
    // could never be matched to this call, so detaching it would only make the
    // retry run the job a second time. It is cancelled as with "cancel".
    let h = Harness::start(slow_server(None), detach).await;
    let lone = slow_call(json!({"seconds": 3, "label": "lone"}));
    leave(&h.plain_client(), lone, Duration::from_millis(1000)).await;
    let cancelled = || !h.received("notifications/cancelled").is_empty();
    for _ in 0..100 {
        if cancelled() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cancelled(), "the left call was cancelled upstream");
    let metrics = reqwest_metrics(&h).await;
    assert!(
        metrics.contains("tasklift_detached_calls_total 0"),
        "{metrics}"
    );
    // With an idempotency key the same call is detached and its retry joins it.
    let keyed = json!({"name": "slow", "arguments": {"seconds": 2, "label": "keyed"},
        "_meta": {"tasklift/idempotencyKey": "k-1"}});
    leave(
        &h.plain_client(),
        keyed.clone(),
        Duration::from_millis(1000),
    )
    .await;
    let retry = h
        .plain_client()
        .request("tools/call", keyed)
        .await
        .unwrap()
        .result;
    assert_eq!(text(&retry), "slow keyed done", "{retry}");
    assert_eq!(runs(&h, "slow"), 2, "one run each: the keyed retry joined");
    h.stop().await;
}

#[tokio::test]
async fn a_wait_its_client_gave_up_on_makes_that_clients_later_waits_shorter() {
    // Threshold 3 s: a new client's wait lasts 3 s. This one gives up after 1 s
    // (its tool timeout, say); from then on its waits end before that.
    let h = Harness::start(slow_server(None), |c| {
        handles(c);
        c.tasks.threshold = "3s".into();
    })
    .await;
    let c = h.plain_client();
    let first = c
        .call_tool("slow", json!({"seconds": 30, "label": "long"}))
        .await
        .unwrap()
        .result;
    let id = followed(&first);
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        c.call_tool("tasklift_wait", json!({"taskId": id})),
    )
    .await;
    assert!(gave_up.is_err(), "the first wait lasts the threshold");
    // tasklift notices the hang-up a moment later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let again = c
        .call_tool("tasklift_wait", json!({"taskId": id}))
        .await
        .unwrap()
        .result;
    let took = started.elapsed();
    assert_eq!(again["structuredContent"]["status"], "working", "{again}");
    // 0.75 of the 1 s it gave up after; the bound is far from the 3 s threshold.
    assert!(
        took < Duration::from_millis(2000),
        "the wait ended before this client gives up: {took:?}"
    );
    c.call_tool("tasklift_cancel", json!({"taskId": id}))
        .await
        .unwrap();
    h.stop().await;
}

/// The demo tools (HTTP or stdio) with tool-level handles, and `confirm_delete`
/// a task at once, so its question comes after the handle.
async fn asking(stdio: bool) -> Harness {
    crate::support::input::demo(stdio, |c| {
        handles(c);
        c.upstreams[0]
            .tools
            .insert("confirm_delete".into(), rule("always"));
    })
    .await
}

async fn legacy_session_is_asked_its_own_elicitation_through_tasklift_wait(stdio: bool) {
    use crate::support::wire::LegacyClient;
    let h = asking(stdio).await;
    let (c, _) = LegacyClient::start(&h.url, "2025-06-18", json!({"elicitation": {}})).await;
    let list = c.request(1, "tools/list", json!({})).await.response();
    let listed: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(listed.contains(&"tasklift_wait"), "{list}");
    let first = c
        .request(
            2,
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}}),
        )
        .await
        .response();
    let id = followed(&first["result"]);
    let mut s = c
        .open(
            3,
            "tools/call",
            json!({"name": "tasklift_wait", "arguments": {"taskId": id, "waitSeconds": 20}}),
        )
        .await;
    let ask = s
        .message_where("the task's question", |m| {
            m["method"] == "elicitation/create"
        })
        .await;
    assert_eq!(ask["params"]["message"], "Delete a.txt?", "{ask}");
    let yes = json!({"action": "accept", "content": {"confirm": true}});
    assert_eq!(c.respond(&ask["id"], yes).await.status, 202);
    let done = s.finish_guarded("the job's result").await;
    let last = done.sse_messages().pop().unwrap();
    assert_eq!(last["id"], 3, "{last}");
    assert_eq!(text(&last["result"]), "Deleted a.txt.", "{last}");
    h.stop().await;
}

#[tokio::test]
async fn http_legacy_session_is_asked_its_own_elicitation_through_tasklift_wait() {
    legacy_session_is_asked_its_own_elicitation_through_tasklift_wait(false).await
}

#[tokio::test]
async fn stdio_legacy_session_is_asked_its_own_elicitation_through_tasklift_wait() {
    legacy_session_is_asked_its_own_elicitation_through_tasklift_wait(true).await
}

#[tokio::test]
async fn a_modern_client_gets_the_tasks_question_as_input_required_from_tasklift_wait() {
    let h = asking(false).await;
    let mut c = h.plain_client();
    c.capabilities.insert("elicitation".into(), json!({}));
    let id = followed(
        &c.call_tool("confirm_delete", json!({"filename": "b.txt"}))
            .await
            .unwrap()
            .result,
    );
    let asked = c
        .call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 20}))
        .await
        .unwrap()
        .result;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let (key, q) = asked["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(q["params"]["message"], "Delete b.txt?", "{asked}");
    let retry = json!({"name": "tasklift_wait", "arguments": {"taskId": id, "waitSeconds": 20},
        "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}},
        "requestState": asked["requestState"]});
    let done = c.request("tools/call", retry).await.unwrap().result;
    assert_eq!(text(&done), "Deleted b.txt.", "{done}");
    // Without elicitation declared, the model is told what the job waits for.
    let plain = h.plain_client();
    let id = followed(
        &plain
            .call_tool("confirm_delete", json!({"filename": "c.txt"}))
            .await
            .unwrap()
            .result,
    );
    let t = plain
        .call_tool("tasklift_wait", json!({"taskId": id, "waitSeconds": 1}))
        .await
        .unwrap()
        .result;
    assert_ne!(t["resultType"], "input_required", "{t}");
    h.stop().await;
}

#[tokio::test]
async fn stdio_upstream_detach_and_tool_handles() {
    let h = crate::support::input::demo(true, |c| {
        handles(c);
        detach(c);
        bearer(c);
    })
    .await;
    let c = plain_as(&h, "alice");
    let args = json!({"seconds": 3, "label": "stdio"});
    let id = followed(
        &c.call_tool("slow_compute", args.clone())
            .await
            .unwrap()
            .result,
    );
    assert_eq!(
        followed(&c.call_tool("slow_compute", args).await.unwrap().result),
        id,
        "replayed"
    );
    let done = wait_result(&c, &id).await;
    assert_eq!(text(&done), "computed stdio in 3 s", "{done}");
    let log = std::fs::read_to_string(h.dir.path().join("fixture.log")).unwrap();
    let runs = log.lines().filter(|l| *l == "call slow_compute").count();
    assert_eq!(runs, 1, "{log}");
    h.stop().await;
}

#[tokio::test]
async fn on_postgres_a_retry_on_another_replica_joins_the_detached_call() {
    let Some(db) = crate::support::pg::Db::create().await else {
        return;
    };
    let up = slow_server(None)
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let start = |dir: &std::path::Path| {
        let mut c = config(&up.url(), dir);
        c.store.url = db.url.clone();
        c.tasks.threshold = "300ms".into();
        detach(&mut c);
        handles(&mut c);
        bearer(&mut c);
        c
    };
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = tasklift::app::start(start(d1.path()).validate().unwrap())
        .await
        .unwrap();
    let b = tasklift::app::start(start(d2.path()).validate().unwrap())
        .await
        .unwrap();
    let client = |addr: std::net::SocketAddr| {
        let mut c = tasklift::cli::client::Client::new(&format!("http://{addr}/mcp")).unwrap();
        c.tasks = false;
        c.headers.push((
            "authorization".parse().unwrap(),
            http::HeaderValue::from_static("Bearer alice"),
        ));
        c
    };
    let args = json!({"seconds": 2, "label": "shared"});
    let id = followed(
        &client(a.addr)
            .call_tool("slow", args.clone())
            .await
            .unwrap()
            .result,
    );
    // The identical call on the other replica is the same job.
    let again = client(b.addr).call_tool("slow", args).await.unwrap().result;
    assert_eq!(followed(&again), id);
    let done = wait_result(&client(b.addr), &id).await;
    assert_eq!(text(&done), "slow shared done", "{done}");
    let calls = up
        .stats()
        .bodies
        .lock()
        .unwrap()
        .iter()
        .filter(|b| b["params"]["name"] == "slow")
        .count();
    assert_eq!(calls, 1);
    a.shutdown().await;
    b.shutdown().await;
    up.stop().await;
}

#[tokio::test]
async fn after_the_replay_window_the_identical_call_runs_again() {
    let h = Harness::start(slow_server(None), |c| {
        detach(c);
        bearer(c);
        c.upstreams[0].replay_window = "500ms".into();
    })
    .await;
    let alice = plain_as(&h, "alice");
    let args = json!({"seconds": 1, "label": "window"});
    assert_eq!(
        text(&alice.call_tool("slow", args.clone()).await.unwrap().result),
        "slow window done"
    );
    // The call took a second, past its 500 ms window: the next one runs.
    assert_eq!(
        text(&alice.call_tool("slow", args).await.unwrap().result),
        "slow window done"
    );
    assert_eq!(runs(&h, "slow"), 2);
    h.stop().await;
}

#[test]
fn unknown_modes_are_refused_naming_the_key() {
    for (set, key) in [
        (
            (|c: &mut RawConfig| c.upstreams[0].non_task_clients = "handles".into())
                as fn(&mut RawConfig),
            "non_task_clients",
        ),
        (
            |c: &mut RawConfig| c.upstreams[0].on_disconnect = "keep".into(),
            "on_disconnect",
        ),
        (
            |c: &mut RawConfig| c.upstreams[0].replay_window = "soon".into(),
            "replay_window",
        ),
        (
            |c: &mut RawConfig| c.tasks.max_wait = "0s".into(),
            "max_wait",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config("http://127.0.0.1:9/mcp", dir.path());
        set(&mut c);
        let e = c.validate().expect_err(key).to_string();
        assert!(e.contains(key), "{e}");
    }
}
