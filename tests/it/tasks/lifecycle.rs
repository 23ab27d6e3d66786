//! How tasks end: completed (even with `isError`), failed (JSON-RPC error, broken
//! upstream, TTL, restart), cancelled by a disconnecting client; expiry; ids.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::ClientError;
use tasklift::store::{NewTask, SledStore, TaskRecord, TaskStore};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};

use crate::support::harness::*;
use crate::support::mock::{discover_result, sse_event, MockReply, MockUpstream, StreamTx};

/// Start a slow call that becomes a task; returns its id.
async fn task_of(h: &Harness, tool: &str) -> String {
    let a = h.client().call_tool(tool, json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    a.result["taskId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_tool_error_result_completes_the_task() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(
        Tool::new("lint")
            .gate(gate.clone())
            .tool_error()
            .reply(|_| "3 problems".into()),
    );
    let h = Harness::start(up, |_| {}).await;
    let id = task_of(&h, "lint").await;
    gate.notify_one();
    let t = wait_terminal(&h.client(), &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["isError"], true);
    assert_eq!(t["result"]["content"][0]["text"], "3 problems");
    assert!(t.get("error").is_none());
    h.stop().await;
}

#[tokio::test]
async fn a_json_rpc_error_fails_the_task_with_that_error() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(
        Tool::new("quota")
            .gate(gate.clone())
            .rpc_error(-32050, "quota exhausted"),
    );
    let h = Harness::start(up, |_| {}).await;
    let id = task_of(&h, "quota").await;
    gate.notify_one();
    let t = wait_terminal(&h.client(), &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "failed");
    assert_eq!(t["error"]["code"], -32050);
    assert_eq!(t["error"]["message"], "quota exhausted");
    assert!(t.get("result").is_none(), "{t}");
    h.stop().await;
}

#[tokio::test]
async fn an_upstream_that_breaks_mid_call_fails_the_task() {
    // tools/call answers with an SSE stream the test holds open, then breaks.
    let streams: Arc<Mutex<Vec<StreamTx>>> = Arc::default();
    let s2 = streams.clone();
    let mock = MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "server/discover" => MockReply::Result(discover_result(json!({}))),
        _ => {
            let (tx, rx) = mpsc::channel(4);
            s2.lock().unwrap().push(tx);
            MockReply::Stream(rx)
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |c| {
        c.upstreams[0].name = "flaky".into()
    })
    .await;
    for abrupt in [true, false] {
        let id = task_of(&h, "job").await;
        let tx = streams.lock().unwrap().pop().expect("the call's stream");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "working"}});
        tx.send(Ok(sse_event(&note))).await.unwrap();
        if abrupt {
            tx.send(Err(std::io::Error::other("crash"))).await.unwrap();
        }
        drop(tx); // otherwise: the stream just ends, without a response
        let t = wait_terminal(&h.client(), &id, Duration::from_secs(10)).await;
        assert_eq!(t["status"], "failed", "{t}");
        assert_eq!(t["error"]["code"], -32010);
        let msg = t["error"]["message"].as_str().unwrap();
        assert!(msg.contains("upstream flaky"), "{msg}");
        // A stream that broke says so, with its cause; one that just ended
        // without an answer says that.
        let says = match abrupt {
            true => "response stream broke before the answer",
            false => "closed the connection before answering",
        };
        assert!(msg.contains(says), "{msg}");
    }
    h.stop().await;
}

/// The raw bytes of a modern tools/call POST.
fn raw_call(tool: &str, tasks: bool) -> Vec<u8> {
    let mut params = json!({"name": tool, "arguments": {}});
    params["_meta"] = meta(tasks);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let body = body.to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: {tool}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_client_that_disconnects_before_any_answer_cancels_the_upstream_call() {
    for modern in [false, true] {
        let up = FixtureServer::new().tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
        let up = if modern { up.modern() } else { up };
        let stats = up.stats();
        let h = Harness::start(up, |c| c.tasks.threshold = "60s".into()).await;
        let addr = h.proxy.as_ref().unwrap().addr;
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(&raw_call("forever", true)).await.unwrap();
        eventually("the call runs upstream", Duration::from_secs(10), || {
            stats.running.load(Ordering::Relaxed) == 1
        })
        .await;
        drop(conn);
        upstream_call_cancelled(&stats).await;
        assert_eq!(
            stored_tasks(&h).await,
            0,
            "no task for a call nobody waits for"
        );
        h.stop().await;
    }
}

#[tokio::test]
async fn a_client_that_leaves_a_keepalive_stream_cancels_the_upstream_call() {
    let up = FixtureServer::new().tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let stats = up.stats();
    let h = Harness::start(up, |c| c.server.keepalive_interval = "100ms".into()).await;
    let mut s = Post::new(&h.url, 1, "tools/call", json!({"name": "forever"}), false)
        .open()
        .await;
    s.read_until("a keep-alive", |seen| seen.contains(':'))
        .await;
    assert_eq!(stats.running.load(Ordering::Relaxed), 1);
    drop(s);
    upstream_call_cancelled(&stats).await;
    h.stop().await;
}

#[tokio::test]
async fn a_task_running_past_its_ttl_is_cancelled_upstream_and_failed() {
    let up = FixtureServer::new().tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let stats = up.stats();
    let h = Harness::start(up, |c| {
        c.tasks.sweep_interval = "100ms".into();
        c.upstreams[0].tools.insert(
            "forever".into(),
            tasklift::config::RawToolRule {
                ttl: Some("1s".into()),
                ..rule("always")
            },
        );
    })
    .await;
    let id = task_of(&h, "forever").await;
    let t = wait_terminal(&h.client(), &id, Duration::from_secs(15)).await;
    assert_eq!(t["status"], "failed", "{t}");
    assert!(
        t["error"]["message"].as_str().unwrap().contains("TTL"),
        "{t}"
    );
    upstream_call_cancelled(&stats).await;
    h.stop().await;
}

#[tokio::test]
async fn a_finished_task_past_its_ttl_is_deleted() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("job").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        c.tasks.ttl = "1s".into();
        c.tasks.sweep_interval = "100ms".into();
    })
    .await;
    let c = h.client();
    let id = task_of(&h, "job").await;
    gate.notify_one();
    let t = wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "completed");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while stored_tasks(&h).await > 0 {
        assert!(tokio::time::Instant::now() < deadline, "never swept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match c.get_task(&id).await {
        Err(ClientError::Rpc(e)) => assert_eq!(e.code, -32602),
        other => panic!("an expired task is gone: {other:?}"),
    }
    h.stop().await;
}

#[tokio::test]
async fn tasks_left_working_by_a_previous_process_fail_on_start() {
    let dir = tempfile::tempdir().unwrap();
    let id = uuid::Uuid::new_v4().to_string();
    {
        let store = SledStore::open(dir.path(), 64 * 1024).unwrap();
        let now = tasklift::tasks::Clock::new().now_ms();
        let rec = {
            let mut rec = TaskRecord::new(NewTask {
                id: id.clone(),
                owner: "anonymous".into(),
                upstream: "default".into(),
                tool: "job".into(),
                created_at_ms: now,
                ttl_ms: 3_600_000,
                poll_interval_ms: 1000,
            });
            rec.status_message = Some("2/5 – halfway".into());
            rec.expires_at_ms = now + 3_600_000;
            rec
        };
        store.create(&rec).await.unwrap();
        store.flush().await.unwrap();
    }
    let h = Harness::start_in(FixtureServer::new(), dir, |_| {}).await;
    let t = h.client().get_task(&id).await.unwrap();
    assert_eq!(t["status"], "failed", "{t}");
    let msg = t["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("restarted") && msg.contains("unknown"),
        "{msg}"
    );
    h.stop().await;
}

#[tokio::test]
async fn finished_tasks_survive_a_restart() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("job").gate(gate.clone()));
    let mut h = Harness::start(up, |_| {}).await;
    let id = task_of(&h, "job").await;
    gate.notify_one();
    wait_terminal(&h.client(), &id, Duration::from_secs(10)).await;
    h.restart().await;
    let t = h.client().get_task(&id).await.unwrap();
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["content"][0]["text"], "job done");
    h.stop().await;
}

#[tokio::test]
async fn tasks_are_readable_at_once_and_have_distinct_uuid_ids() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("job").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        c.upstreams[0].tools.insert("job".into(), rule("always"));
    })
    .await;
    let c = h.client();
    let mut ids = std::collections::HashSet::new();
    for _ in 0..8 {
        let a = c.call_tool("job", json!({})).await.unwrap();
        let id = a.result["taskId"].as_str().unwrap().to_string();
        // The very next request finds it.
        let t = c.get_task(&id).await.unwrap();
        assert_eq!(t["taskId"], id.as_str());
        assert_eq!(t["status"], "working");
        let u = uuid::Uuid::parse_str(&id).expect("a UUID");
        assert_eq!(u.get_version_num(), 4, "random (122 bits): {id}");
        assert!(ids.insert(id));
    }
    h.stop().await;
}

#[tokio::test]
async fn cancelling_a_finished_task_is_acknowledged_and_changes_nothing() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("job").gate(gate.clone()));
    let h = Harness::start(up, |_| {}).await;
    let c = h.client();
    let id = task_of(&h, "job").await;
    gate.notify_one();
    wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(
        c.cancel_task(&id).await.unwrap(),
        json!({"resultType": "complete"})
    );
    let t = c.get_task(&id).await.unwrap();
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["content"][0]["text"], "job done");
    h.stop().await;
}

#[tokio::test]
async fn cancelling_a_task_on_a_modern_upstream_closes_its_stream() {
    let up = FixtureServer::new()
        .modern()
        .tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let stats = up.stats();
    let h = Harness::start(up, |_| {}).await;
    let c = h.client();
    let id = task_of(&h, "forever").await;
    c.cancel_task(&id).await.unwrap();
    assert_eq!(
        wait_terminal(&c, &id, Duration::from_secs(10)).await["status"],
        "cancelled"
    );
    eventually("the upstream call ends", Duration::from_secs(10), || {
        stats.cancelled.load(Ordering::Relaxed) == 1 && stats.running.load(Ordering::Relaxed) == 0
    })
    .await;
    assert!(
        h.received("notifications/cancelled").is_empty(),
        "closing the stream is the cancellation on modern HTTP"
    );
    h.stop().await;
}
