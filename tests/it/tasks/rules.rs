//! Per-tool rules (threshold, never, always, required, TTL, poll interval), the
//! synchronous path for clients without the extension (SSE keep-alives), and
//! progress: into `statusMessage` for tasks, relayed over SSE otherwise.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::ClientError;
use tasklift::config::{RawConfig, RawToolRule};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;

fn set_rules(c: &mut RawConfig, rules: &[(&str, RawToolRule)]) {
    let map: BTreeMap<String, RawToolRule> = rules
        .iter()
        .map(|(n, r)| (n.to_string(), r.clone()))
        .collect();
    c.upstreams[0].tools = map;
}

fn threshold(t: &str) -> RawToolRule {
    RawToolRule {
        threshold: Some(t.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn each_tool_has_its_own_threshold() {
    // Lower than the default: with a 60 s default, "eager" is a task at once.
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("eager").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        c.tasks.threshold = "60s".into();
        set_rules(c, &[("eager", threshold("0"))]);
    })
    .await;
    let a = tokio::time::timeout(
        Duration::from_secs(20),
        h.client().call_tool("eager", json!({})),
    )
    .await
    .expect("not held for the 60 s default")
    .unwrap();
    assert_eq!(a.result["resultType"], "task");
    gate.notify_one();
    h.stop().await;
    // Higher than the default: "patient" (1 s) stays synchronous, where the 100 ms
    // default would have made it a task.
    let up = FixtureServer::new()
        .tool(Tool::new("patient").sleep(Duration::from_secs(1)))
        .tool(Tool::new("other").sleep(Duration::from_secs(1)));
    let h = Harness::start(up, |c| {
        c.tasks.threshold = "100ms".into();
        set_rules(c, &[("patient", threshold("20s"))]);
    })
    .await;
    let c = h.client();
    let a = c.call_tool("patient", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "complete");
    assert_eq!(a.result["content"][0]["text"], "patient done");
    let a = c.call_tool("other", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task");
    h.stop().await;
}

#[tokio::test]
async fn never_mode_keeps_a_slow_call_synchronous_for_a_declaring_client() {
    let up = FixtureServer::new().tool(Tool::new("report").sleep(Duration::from_secs(1)));
    let h = Harness::start(up, |c| {
        c.tasks.threshold = "100ms".into();
        set_rules(c, &[("report", rule("never"))]);
    })
    .await;
    let a = h.client().call_tool("report", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "complete");
    assert_eq!(a.result["content"][0]["text"], "report done");
    assert_eq!(stored_tasks(&h).await, 0);
    h.stop().await;
}

#[tokio::test]
async fn always_mode_makes_a_task_at_once_for_declaring_clients_only() {
    let (g1, g2) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let up = FixtureServer::new()
        .tool(Tool::new("job").gate(g1.clone()))
        .tool(Tool::new("job2").gate(g2.clone()));
    let h = Harness::start(up, |c| {
        c.tasks.threshold = "60s".into();
        set_rules(c, &[("job", rule("always")), ("job2", rule("always"))]);
    })
    .await;
    let a = h.client().call_tool("job", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task");
    assert_eq!(a.result["status"], "working");
    // A client without the extension still gets the result itself.
    let plain = h.plain_client();
    let call = tokio::spawn(async move { plain.call_tool("job2", json!({})).await });
    let stats = h.upstream.stats();
    eventually("both calls run upstream", Duration::from_secs(10), || {
        stats.running.load(Ordering::Relaxed) == 2
    })
    .await;
    g2.notify_one();
    let a = call.await.unwrap().unwrap();
    assert_eq!(a.result["resultType"], "complete");
    assert_eq!(a.result["content"][0]["text"], "job2 done");
    g1.notify_one();
    h.stop().await;
}

#[tokio::test]
async fn required_mode_refuses_clients_without_the_extension() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("batch").gate(gate.clone()));
    let h = Harness::start(up, |c| set_rules(c, &[("batch", rule("required"))])).await;
    let r = post(&h.url, 5, "tools/call", json!({"name": "batch"}), false).await;
    assert_eq!(r.status, 400, "{r:?}");
    let e = r.error();
    assert_eq!(e["code"], -32021);
    assert!(
        e["data"]["requiredCapabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_some(),
        "{e}"
    );
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("io.modelcontextprotocol/tasks"));
    assert_eq!(h.upstream.stats().calls.load(Ordering::Relaxed), 0);
    let a = h.client().call_tool("batch", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task");
    gate.notify_one();
    h.stop().await;
}

#[tokio::test]
async fn ttl_and_poll_interval_follow_the_tool_rule() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(Tool::new("long").gate(gate.clone()))
        .tool(Tool::new("plain").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        let r = RawToolRule {
            ttl: Some("2h".into()),
            poll_interval: Some("250ms".into()),
            ..rule("always")
        };
        set_rules(c, &[("long", r)]);
    })
    .await;
    let c = h.client();
    let a = c.call_tool("long", json!({})).await.unwrap();
    assert_eq!(a.result["ttlMs"], 7_200_000);
    assert_eq!(a.result["pollIntervalMs"], 250);
    let t = c
        .get_task(a.result["taskId"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (t["ttlMs"].clone(), t["pollIntervalMs"].clone()),
        (json!(7_200_000), json!(250))
    );
    // Tools without a rule get the defaults (ttl 1h; poll 50ms in the harness).
    let a = c.call_tool("plain", json!({})).await.unwrap();
    assert_eq!(a.result["ttlMs"], 3_600_000);
    assert_eq!(a.result["pollIntervalMs"], 50);
    gate.notify_waiters();
    h.stop().await;
}

#[tokio::test]
async fn a_slow_call_without_the_extension_streams_keepalives_then_the_result() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("slow").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        c.tasks.threshold = "100ms".into();
        c.server.keepalive_interval = "100ms".into();
    })
    .await;
    let mut s = Post::new(&h.url, 9, "tools/call", json!({"name": "slow"}), false)
        .open()
        .await;
    assert_eq!(s.status, 200);
    assert!(s.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    s.read_until("three keep-alives", |seen| {
        seen.lines().filter(|l| l.starts_with(':')).count() >= 3
    })
    .await;
    gate.notify_one();
    let r = s.finish().await;
    let msgs = r.sse_messages();
    assert_eq!(msgs.len(), 1, "only the result: {msgs:?}");
    assert_eq!(msgs[0]["id"], 9);
    assert_eq!(msgs[0]["result"]["resultType"], "complete");
    assert_eq!(msgs[0]["result"]["content"][0]["text"], "slow done");
    assert!(
        !r.body.contains("taskId"),
        "never a task handle: {}",
        r.body
    );
    assert_eq!(stored_tasks(&h).await, 0);
    h.stop().await;
}

#[tokio::test]
async fn progress_during_a_task_becomes_its_status_message() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(
        Tool::new("index")
            .sleep(Duration::from_millis(500))
            .progress(5)
            .gate(gate.clone()),
    );
    let h = Harness::start(up, |_| {}).await;
    let c = h.client();
    let a = c.call_tool("index", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task");
    let id = a.result["taskId"].as_str().unwrap().to_string();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let t = c.get_task(&id).await.unwrap();
        assert_eq!(t["status"], "working", "the tool waits for the gate: {t}");
        if let Some(m) = t["statusMessage"].as_str() {
            if seen.last().map(String::as_str) != Some(m) {
                seen.push(m.to_string());
            }
            if m == "5/5 – step 5 of 5 done" {
                break;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "saw only {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for m in &seen {
        let n = m.split('/').next().unwrap();
        assert_eq!(*m, format!("{n}/5 – step {n} of 5 done"));
    }
    gate.notify_one();
    let t = wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "completed");
    h.stop().await;
}

#[tokio::test]
async fn progress_on_the_synchronous_path_is_relayed_before_the_result() {
    let up = FixtureServer::new().tool(
        Tool::new("steps")
            .sleep(Duration::from_millis(300))
            .progress(3),
    );
    let h = Harness::start(up, |c| c.tasks.threshold = "30s".into()).await;
    let params = json!({"name": "steps", "_meta": {"progressToken": "tok-1"}});
    let r = post(&h.url, 11, "tools/call", params, false).await;
    assert!(r.content_type().starts_with("text/event-stream"), "{r:?}");
    let msgs = r.sse_messages();
    assert_eq!(msgs.len(), 4, "{msgs:?}");
    for (i, n) in msgs[..3].iter().enumerate() {
        assert_eq!(n["method"], "notifications/progress");
        assert_eq!(n["params"]["progressToken"], "tok-1");
        assert_eq!(n["params"]["progress"], i + 1);
        assert_eq!(n["params"]["total"], 3);
    }
    assert_eq!(msgs[3]["id"], 11);
    assert_eq!(msgs[3]["result"]["content"][0]["text"], "steps done");
    // The bundled client sees the same through its API.
    let c = h.plain_client();
    let a = c
        .request(
            "tools/call",
            json!({"name": "steps", "_meta": {"progressToken": 42}}),
        )
        .await
        .unwrap();
    assert_eq!(a.notifications.len(), 3);
    assert_eq!(a.notifications[2]["params"]["progressToken"], 42);
    match c.call_tool("missing", json!({})).await {
        Err(ClientError::Rpc(e)) => assert_eq!(e.code, -32602),
        other => panic!("unknown tool: {other:?}"),
    }
    h.stop().await;
}

#[tokio::test]
async fn a_declaring_client_sees_progress_until_the_call_becomes_a_task() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(
        Tool::new("crawl")
            .sleep(Duration::from_millis(400))
            .progress(4)
            .gate(gate.clone()),
    );
    let h = Harness::start(up, |c| c.tasks.threshold = "250ms".into()).await;
    let params = json!({"name": "crawl", "_meta": {"progressToken": "p"}});
    let r = post(&h.url, 12, "tools/call", params, true).await;
    let msgs = r.sse_messages();
    let (last, notes) = msgs.split_last().expect("messages");
    assert!(!notes.is_empty(), "progress came first: {msgs:?}");
    assert!(notes
        .iter()
        .all(|n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == "p"));
    assert_eq!(last["id"], 12);
    assert_eq!(last["result"]["resultType"], "task");
    // Later progress under the client's token still reaches the task.
    let c = h.client();
    let id = last["result"]["taskId"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while c.get_task(id).await.unwrap()["statusMessage"] != "4/4 – step 4 of 4 done" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "progress did not reach the task"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gate.notify_one();
    assert_eq!(
        wait_terminal(&c, id, Duration::from_secs(10)).await["status"],
        "completed"
    );
    h.stop().await;
}
