//! Limits: a result too large to store fails its task naming the limit; calls past
//! an upstream's concurrency queue, then get a clear error; a caller with too many
//! running tasks is refused before any work starts. Each is counted in /metrics.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::ClientError;
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::wire::raw;

async fn limit_hits(h: &Harness, limit: &str) -> String {
    let page = raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "")
        .await
        .body;
    let series = format!("tasklift_limit_hits_total{{limit=\"{limit}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&series).map(str::to_string))
        .unwrap_or_else(|| panic!("no {series} in\n{page}"))
}

fn rpc_error(r: Result<tasklift::cli::client::Answer, ClientError>) -> (i64, String) {
    match r {
        Err(ClientError::Rpc(e)) => (e.code, e.message),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_result_over_the_limit_fails_its_task() {
    let up = FixtureServer::new().tool(
        Tool::new("dump")
            .sleep(Duration::from_millis(500))
            .pad_to(50_000),
    );
    let h = Harness::start(up, |c| c.limits.max_result_bytes = 10_000).await;
    let c = h.client();
    let a = c.call_tool("dump", json!({})).await.unwrap().result;
    let id = a["taskId"].as_str().expect("a task").to_string();
    let t = wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "failed", "{t}");
    let msg = t["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("limits.max_result_bytes") && msg.contains("10000"),
        "{msg}"
    );
    assert_eq!(limit_hits(&h, "max_result_bytes").await, "1");
    h.stop().await;
}

#[tokio::test]
async fn calls_past_the_concurrency_limit_wait_then_get_a_clear_error() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("hold").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        c.limits.max_concurrent_calls = 1;
        c.limits.queue_timeout = "300ms".into();
    })
    .await;
    let first = {
        let c = h.plain_client();
        tokio::spawn(async move { c.call_tool("hold", json!({})).await })
    };
    let stats = h.upstream.stats();
    eventually("the first call runs", Duration::from_secs(10), || {
        stats.running.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let (code, msg) = rpc_error(h.plain_client().call_tool("hold", json!({})).await);
    assert_eq!(code, -32003, "{msg}");
    assert!(msg.contains("limits.max_concurrent_calls"), "{msg}");
    gate.notify_one();
    first.await.unwrap().expect("the first call finished");
    // A queued call gets its turn when the slot frees within the queue timeout.
    let waiting = {
        let c = h.plain_client();
        tokio::spawn(async move { c.call_tool("hold", json!({})).await })
    };
    let next = {
        let c = h.plain_client();
        tokio::spawn(async move { c.call_tool("hold", json!({})).await })
    };
    eventually("one call runs", Duration::from_secs(10), || {
        stats.running.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    gate.notify_one();
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.notify_one();
    let done = [waiting.await.unwrap(), next.await.unwrap()];
    assert!(done.iter().all(|d| d.is_ok()), "{done:?}");
    assert_eq!(limit_hits(&h, "max_concurrent_calls").await, "1");
    h.stop().await;
}

#[tokio::test]
async fn a_caller_with_too_many_running_tasks_is_refused_before_any_work() {
    let up = FixtureServer::new().tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let stats = up.stats();
    let h = Harness::start(up, |c| {
        c.limits.max_active_tasks_per_principal = 1;
        c.auth.mode = "bearer".into();
    })
    .await;
    let alice = h.client_with(true, &[("authorization", "Bearer alice")]);
    let t = alice.call_tool("forever", json!({})).await.unwrap().result;
    let id = t["taskId"].as_str().expect("a task").to_string();
    let calls = stats.calls.load(std::sync::atomic::Ordering::SeqCst);
    let (code, msg) = rpc_error(alice.call_tool("forever", json!({})).await);
    assert_eq!(code, -32003, "{msg}");
    assert!(
        msg.contains("limits.max_active_tasks_per_principal"),
        "{msg}"
    );
    assert_eq!(
        stats.calls.load(std::sync::atomic::Ordering::SeqCst),
        calls,
        "nothing went upstream"
    );
    // Another caller is not affected; once alice's task ends, she may start another.
    let bob = h.client_with(true, &[("authorization", "Bearer bob")]);
    assert_eq!(
        bob.call_tool("forever", json!({})).await.unwrap().result["resultType"],
        "task"
    );
    alice.cancel_task(&id).await.unwrap();
    wait_terminal(&alice, &id, Duration::from_secs(10)).await;
    let again = alice.call_tool("forever", json!({})).await.unwrap().result;
    assert_eq!(again["resultType"], "task", "{again}");
    assert_eq!(limit_hits(&h, "max_active_tasks_per_principal").await, "1");
    h.stop().await;
}

#[tokio::test]
async fn polling_faster_than_the_task_asks_is_refused_when_limited() {
    let up = FixtureServer::new().tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let h = Harness::start(up, |c| {
        c.limits.poll_rate_limit = true;
        c.tasks.poll_interval = "1s".into();
    })
    .await;
    let c = h.client();
    let t = c.call_tool("forever", json!({})).await.unwrap().result;
    let id = t["taskId"].as_str().expect("a task").to_string();
    c.get_task(&id).await.expect("a first poll");
    let (code, msg) = match c.get_task(&id).await {
        Err(ClientError::Rpc(e)) => (e.code, e.message),
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(code, -32003, "{msg}");
    assert!(
        msg.contains("pollIntervalMs") && msg.contains("1000"),
        "{msg}"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    c.get_task(&id)
        .await
        .expect("a poll at the pace the task asks");
    assert_eq!(limit_hits(&h, "poll_rate_limit").await, "1");
    h.stop().await;
}
