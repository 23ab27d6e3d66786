//! Legacy sessions, which tasklift runs on its callers' behalf: negotiated with
//! any legacy revision, reopened when they expire, one per principal, closed with
//! DELETE when idle, and always used with the credentials of whoever opened them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;
use crate::support::mock::{MockReply, MockUpstream};

fn fixture() -> FixtureServer {
    FixtureServer::new().tool(Tool::new("echo"))
}

#[tokio::test]
async fn an_expired_legacy_session_is_reopened_transparently() {
    let h = Harness::start(fixture(), |_| {}).await;
    let c = h.client();
    c.call_tool("echo", json!({})).await.unwrap();
    h.upstream.expire_sessions();
    let a = c.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "echo done");
    assert_eq!(h.upstream.stats().initializes.load(Ordering::Relaxed), 2);
    h.stop().await;
}

#[tokio::test]
async fn legacy_sessions_are_never_shared_between_principals() {
    let h = Harness::start(fixture(), |c| c.auth.mode = "bearer".into()).await;
    let alice = h.client_with(true, &[("authorization", "Bearer alice")]);
    let bob = h.client_with(true, &[("authorization", "Bearer bob")]);
    alice.call_tool("echo", json!({})).await.unwrap();
    alice.call_tool("echo", json!({})).await.unwrap();
    let inits = || h.upstream.stats().initializes.load(Ordering::Relaxed);
    assert_eq!(inits(), 1, "the same token reuses its session");
    bob.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(inits(), 2, "another token gets its own session");
    let stats = h.upstream.stats();
    let sessions: std::collections::HashSet<String> = stats
        .headers
        .lock()
        .unwrap()
        .iter()
        .filter_map(|h| h.get("mcp-session-id").cloned())
        .collect();
    assert_eq!(sessions.len(), 2);
    h.stop().await;
}

#[tokio::test]
async fn a_burst_of_calls_opens_at_most_sessions_per_caller_and_closes_them_all() {
    // Each `tools/call` may ask its client for input, so each wants a session with
    // no other asker: twelve at once from one caller, before any session is open,
    // share three (the limit) rather than open twelve or wait for each other.
    let slow = FixtureServer::new().tool(Tool::new("slow").sleep(Duration::from_millis(150)));
    let h = Harness::start(slow, |c| {
        c.upstreams[0].sessions_per_caller = 3;
        c.upstreams[0].session_idle = "1s".into();
    })
    .await;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let c = h.plain_client();
        calls.spawn(async move { c.call_tool("slow", json!({})).await });
    }
    while let Some(a) = calls.join_next().await {
        assert_eq!(
            a.unwrap().unwrap().result["content"][0]["text"],
            "slow done"
        );
    }
    let stats = h.upstream.stats();
    assert_eq!(stats.initializes.load(Ordering::Relaxed), 3);
    eventually(
        "the main session and both extra ones are deleted once idle",
        Duration::from_secs(15),
        || stats.deletes.load(Ordering::Relaxed) == 3,
    )
    .await;
    h.stop().await;
}

#[tokio::test]
async fn idle_legacy_sessions_are_closed_with_delete() {
    let h = Harness::start(fixture(), |c| c.upstreams[0].session_idle = "1s".into()).await;
    let c = h.client();
    c.call_tool("echo", json!({})).await.unwrap();
    let stats = h.upstream.stats();
    eventually(
        "the idle session is deleted",
        Duration::from_secs(15),
        || stats.deletes.load(Ordering::Relaxed) == 1,
    )
    .await;
    // The next call opens a new session.
    c.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(stats.initializes.load(Ordering::Relaxed), 2);
    h.stop().await;
}

#[tokio::test]
async fn requests_tasklift_makes_on_a_session_carry_the_openers_credentials() {
    // forward_authorization: the upstream authenticates every request, including
    // the answers tasklift posts for the caller and the DELETE that closes the session.
    let h = Harness::start(FixtureServer::demo(), |c| {
        c.upstreams[0].forward_authorization = true;
        c.upstreams[0].session_idle = "1s".into();
        c.tasks.threshold = "10s".into();
    })
    .await;
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}});
    let call = |id: u64, extra: serde_json::Value| {
        let mut p = json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"},
                           "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        Post::new(&h.url, id, "tools/call", p, true).header("authorization", "Bearer tok")
    };
    let asked = call(1, json!({})).send().await.response()["result"].clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let key = asked["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let answer = json!({"action": "accept", "content": {"confirm": true}});
    let extra = json!({"inputResponses": {key: answer}, "requestState": asked["requestState"]});
    let done = call(2, extra).send().await.response()["result"].clone();
    assert_eq!(done["content"][0]["text"], "Deleted a.txt.", "{done}");
    let stats = h.upstream.stats();
    let posts = stats.headers.lock().unwrap().clone();
    assert!(
        posts.len() >= 4,
        "probe, initialize, initialized, call, answer"
    );
    for hd in &posts {
        assert_eq!(
            hd.get("authorization").map(String::as_str),
            Some("Bearer tok"),
            "{hd:?}"
        );
    }
    eventually(
        "the idle session is deleted",
        Duration::from_secs(15),
        || stats.deletes.load(Ordering::Relaxed) == 1,
    )
    .await;
    let deletes = stats.delete_headers.lock().unwrap().clone();
    assert_eq!(
        deletes[0].get("authorization").map(String::as_str),
        Some("Bearer tok")
    );
    h.stop().await;
}

/// A stateless legacy server (no session id) that negotiates `version`.
async fn legacy_mock(version: &'static str) -> MockUpstream {
    MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "initialize" => MockReply::Result(json!({"protocolVersion": version,
            "capabilities": {"tools": {}}, "serverInfo": {"name": "old", "version": "1"}})),
        "tools/call" => {
            MockReply::Result(json!({"content": [{"type": "text", "text": "old done"}]}))
        }
        _ => MockReply::Error(400, -32000, "Bad Request: initialize first".into()),
    })
    .await
}

#[tokio::test]
async fn older_legacy_revisions_are_spoken_as_negotiated() {
    for version in ["2025-06-18", "2025-03-26"] {
        let mock = legacy_mock(version).await;
        let dir = tempfile::tempdir().unwrap();
        let h = Harness::front(FixtureServer::new(), &mock.url, dir, |_| {}).await;
        let a = h.client().call_tool("old", json!({})).await.unwrap();
        assert_eq!(a.result["resultType"], "complete");
        assert_eq!(a.result["content"][0]["text"], "old done");
        let reqs = mock.requests.lock().unwrap().clone();
        let (headers, _) = reqs
            .iter()
            .find(|(_, b)| b["method"] == "tools/call")
            .expect("the call reached the server");
        assert_eq!(headers["mcp-protocol-version"], version);
        drop(reqs);
        h.stop().await;
    }
}

#[tokio::test]
async fn a_server_choosing_an_unknown_revision_gets_a_clear_error() {
    let mock = legacy_mock("2024-11-05").await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |_| {}).await;
    match h.client().call_tool("old", json!({})).await {
        Err(tasklift::cli::client::ClientError::Rpc(e)) => {
            assert!(e.message.contains("upstream default"), "{}", e.message);
            assert!(e.message.contains("2024-11-05"), "{}", e.message);
        }
        other => panic!("expected a handshake error, got {other:?}"),
    }
    assert!(mock.received("tools/call").is_empty());
    h.stop().await;
}
