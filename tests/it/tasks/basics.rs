//! The core path: fast calls stay synchronous, slow calls become tasks that complete,
//! fail or are cancelled.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;

#[tokio::test]
async fn fast_call_is_answered_directly_and_nothing_is_stored() {
    let h = Harness::start(FixtureServer::new().tool(Tool::new("quick")), |_| {}).await;
    let a = h.client().call_tool("quick", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "complete");
    assert_eq!(a.result["content"][0]["text"], "quick done");
    let stats = h.proxy.as_ref().unwrap().engine.health().await.unwrap();
    assert_eq!(stats.tasks, 0, "a fast call must not create a task record");
    h.stop().await;
}

#[tokio::test]
async fn slow_call_becomes_a_task_that_completes() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(
        Tool::new("slow")
            .gate(gate.clone())
            .reply(|_| "the report".into()),
    );
    let h = Harness::start(up, |_| {}).await;
    let c = h.client();
    let a = c.call_tool("slow", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task");
    assert_eq!(a.result["status"], "working");
    let id = a.result["taskId"].as_str().unwrap().to_string();
    for k in ["createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"] {
        assert!(
            a.result.get(k).is_some(),
            "CreateTaskResult lacks {k}: {}",
            a.result
        );
    }
    let t = c.get_task(&id).await.unwrap();
    assert_eq!(t["status"], "working");
    assert_eq!(t["resultType"], "complete");
    gate.notify_one();
    let t = wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["content"][0]["text"], "the report");
    h.stop().await;
}

#[tokio::test]
async fn cancelling_a_task_cancels_the_upstream_call() {
    let up = FixtureServer::new().tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let stats = up.stats();
    let h = Harness::start(up, |_| {}).await;
    let c = h.client();
    let a = c.call_tool("forever", json!({})).await.unwrap();
    let id = a.result["taskId"].as_str().unwrap().to_string();
    let ack = c.cancel_task(&id).await.unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    let t = wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "cancelled");
    upstream_call_cancelled(&stats).await;
    // Cancelling a terminal task is acknowledged the same way.
    assert_eq!(
        c.cancel_task(&id).await.unwrap(),
        json!({"resultType": "complete"})
    );
    h.stop().await;
}

#[tokio::test]
async fn several_upstreams_each_at_its_own_path() {
    let second = FixtureServer::new()
        .modern()
        .tool(Tool::new("whoami").reply(|_| "second".into()))
        .tool(Tool::new("slow").sleep(Duration::from_secs(3600)))
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let first = FixtureServer::new().tool(Tool::new("whoami").reply(|_| "first".into()));
    let second_url = second.url();
    let h = Harness::start(first, move |raw| {
        raw.upstreams.push(tasklift::config::RawUpstream {
            name: "second".into(),
            path: "/second/mcp".into(),
            url: second_url,
            ..Default::default()
        });
    })
    .await;
    let a = h.client().call_tool("whoami", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "first");
    let other = tasklift::cli::client::Client::new(&h.url.replace("/mcp", "/second/mcp")).unwrap();
    let b = other.call_tool("whoami", json!({})).await.unwrap();
    assert_eq!(b.result["content"][0]["text"], "second");
    // A task belongs to the upstream it was created on: the other mount does not know it.
    let t = other.call_tool("slow", json!({})).await.unwrap();
    let id = t.result["taskId"].as_str().unwrap();
    assert_eq!(other.get_task(id).await.unwrap()["status"], "working");
    let err = h.client().get_task(id).await.unwrap_err().to_string();
    assert!(err.contains("-32602"), "{err}");
    other.cancel_task(id).await.unwrap();
    second.stop().await;
    h.stop().await;
}

#[tokio::test]
async fn a_burst_of_progress_ends_with_the_latest_message_visible() {
    // Progress every 40 ms, the last three after the 300 ms threshold and within one
    // write interval, then the tool waits: writes are spaced out, but the last message
    // must still reach tasks/get while the task is working.
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(
        Tool::new("bursty")
            .sleep(Duration::from_millis(400))
            .progress(10)
            .gate(gate.clone()),
    );
    let h = Harness::start(up, |_| {}).await;
    let c = h.client();
    let id = c.call_tool("bursty", json!({})).await.unwrap().result["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let t = c.get_task(&id).await.unwrap();
        assert_eq!(t["status"], "working");
        if t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("10/10"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "latest progress never shown: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gate.notify_one();
    assert_eq!(
        wait_terminal(&c, &id, Duration::from_secs(10)).await["status"],
        "completed"
    );
    h.stop().await;
}
