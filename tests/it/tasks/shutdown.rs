//! Shutdown: calls and tasks get a grace period, then are cancelled upstream; tasks
//! that did not finish are `failed` saying the proxy shut down (not left `working`).

use std::time::Duration;

use serde_json::json;
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;

#[tokio::test]
async fn a_task_outliving_the_grace_is_cancelled_upstream_and_failed() {
    let up = FixtureServer::new()
        .tool(Tool::new("forever").sleep(Duration::from_secs(3600)))
        .tool(Tool::new("short").sleep(Duration::from_millis(700)));
    let stats = up.stats();
    let mut h = Harness::start(up, |c| c.server.shutdown_grace = "1500ms".into()).await;
    let c = h.client();
    let forever = c.call_tool("forever", json!({})).await.unwrap().result;
    let forever = forever["taskId"].as_str().unwrap().to_string();
    let short = c.call_tool("short", json!({})).await.unwrap().result;
    let short = short["taskId"].as_str().unwrap().to_string();
    assert_eq!(stats.running.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Shut down and start again on the same store.
    h.restart().await;
    upstream_call_cancelled(&stats).await;
    let c = h.client();
    let t = c.get_task(&short).await.unwrap();
    assert_eq!(t["status"], "completed", "finished within the grace: {t}");
    let t = c.get_task(&forever).await.unwrap();
    assert_eq!(t["status"], "failed", "{t}");
    let msg = t["error"]["message"].as_str().unwrap();
    assert!(msg.contains("shut down"), "not mistaken for a crash: {msg}");
    h.stop().await;
}

#[tokio::test]
async fn a_call_in_progress_finishes_within_the_grace() {
    let up = FixtureServer::new().tool(Tool::new("slow").sleep(Duration::from_millis(800)));
    let h = Harness::start(up, |c| c.server.shutdown_grace = "5s".into()).await;
    let c = h.plain_client();
    let call = tokio::spawn(async move { c.call_tool("slow", json!({})).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stats = h.upstream.stats();
    assert_eq!(stats.running.load(std::sync::atomic::Ordering::SeqCst), 1);
    h.stop().await;
    let a = call.await.unwrap().expect("the call got its answer");
    assert_eq!(a.result["content"][0]["text"], "slow done", "{}", a.result);
    assert_eq!(stats.cancelled.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_call_outliving_the_grace_is_cancelled_upstream() {
    let up = FixtureServer::new().tool(Tool::new("slow").sleep(Duration::from_secs(60)));
    let stats = up.stats();
    let h = Harness::start(up, |c| c.server.shutdown_grace = "500ms".into()).await;
    let c = h.plain_client();
    let call = tokio::spawn(async move { c.call_tool("slow", json!({})).await });
    eventually("the call runs upstream", Duration::from_secs(10), || {
        stats.running.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let proxy = h.proxy.as_ref().unwrap().addr;
    let stopped = tokio::time::timeout(Duration::from_secs(20), h.stop()).await;
    assert!(stopped.is_ok(), "shutdown took more than the grace by far");
    assert!(call.await.unwrap().is_err(), "the call was cut at {proxy}");
    upstream_call_cancelled(&stats).await;
}
