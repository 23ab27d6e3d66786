//! stdio upstreams (issue 3): tasklift in front of MCP servers run as child processes.
//! The child is the stdio fixture (`tasklift-fixture --stdio`), which appends
//! `start PID`, `call NAME` and `cancelled ID` lines to a log file the tests read.
//! Faults (crashes, cancellation, shutdown) are in `stdio::faults`, the real
//! server-everything peer in `peers::stdio`, the harness in `support::stdio`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::Client;

use crate::support::harness::*;
use crate::support::stdio::*;

/// Fast call, slow call as a task, progress in `statusMessage`, discover: one era.
async fn serves_the_child(flags: &[&str]) {
    let h = StdioHarness::start(flags, |_| {}).await;
    let c = h.client();
    let a = guard("greet", c.call_tool("greet", json!({"name": "stdio"})))
        .await
        .unwrap();
    assert_eq!(
        a.result["resultType"], "complete",
        "{flags:?}: {}",
        a.result
    );
    assert_eq!(text(&a.result), "Hello, stdio!");

    let a = c
        .call_tool("slow_compute", json!({"seconds": 2, "label": "sum"}))
        .await
        .unwrap();
    let id = task_id(&a.result);
    let t = wait_terminal(&c, &id, LIMIT).await;
    assert_eq!(t["status"], "completed", "{flags:?}: {t}");
    assert_eq!(text(&t["result"]), "computed sum in 2 s");

    let a = c
        .call_tool("generate_report", json!({"pages": 3}))
        .await
        .unwrap();
    let id = task_id(&a.result);
    let (t, seen) = follow(&c, &id).await;
    assert_eq!(t["status"], "completed", "{flags:?}: {t}");
    assert!(
        text(&t["result"]).starts_with("Monthly report: 3 pages"),
        "{t}"
    );
    assert!(
        seen.iter()
            .any(|m| m.contains("/5 – step ") && m.ends_with(" of 5 done")),
        "{flags:?}: no progress in statusMessage; saw {seen:?}"
    );

    // server/discover is answered from what the child said at its handshake.
    let d = c.request("server/discover", json!({})).await.unwrap();
    assert!(
        d.result.to_string().contains("tasklift-fixture-stdio"),
        "{flags:?}: {}",
        d.result
    );
    assert_eq!(h.pids().len(), 1, "one child, never restarted");
    h.stop().await;
}

#[tokio::test]
async fn a_legacy_child_is_served_with_tasks() {
    // Legacy: tasklift's server/discover probe is refused, so it falls back to
    // initialize + notifications/initialized; calls working shows the handshake did.
    serves_the_child(&[]).await;
}

#[tokio::test]
async fn a_modern_child_is_served_with_tasks() {
    serves_the_child(&["--modern"]).await;
}

#[tokio::test]
async fn colliding_client_ids_are_multiplexed_over_one_child() {
    // Every Client numbers its requests from 1, so the ids collide across clients;
    // tasklift must still hand each answer to its own caller. The threshold is high
    // so every answer comes back on the call itself.
    let h = StdioHarness::start(&[], |raw| raw.tasks.threshold = "60s".into()).await;
    let clients: Vec<Arc<Client>> = (0..4).map(|_| Arc::new(h.plain_client())).collect();
    let mut calls = tokio::task::JoinSet::new();
    for (i, c) in clients.iter().enumerate() {
        for j in 0..6 {
            let c = c.clone();
            calls.spawn(async move {
                let msg = format!("client {i} call {j}");
                // Some calls stay in flight a while, so answers come back out of order.
                let a = if j % 2 == 0 {
                    c.call_tool("echo", json!({"message": msg})).await
                } else {
                    let secs = 0.1 * (4 - i) as f64;
                    c.call_tool("slow_compute", json!({"seconds": secs, "label": msg}))
                        .await
                };
                (i, j, msg, a.expect("call answered"))
            });
        }
    }
    let answers = guard("24 concurrent calls", calls.join_all()).await;
    assert_eq!(answers.len(), 24);
    for (i, j, msg, a) in answers {
        let want = if j % 2 == 0 {
            format!("Echo: {msg}")
        } else {
            format!("computed {msg} in {} s", 0.1 * (4 - i) as f64)
        };
        assert_eq!(text(&a.result), want, "client {i} call {j}: {}", a.result);
    }
    assert_eq!(h.pids().len(), 1, "all calls went over one child");
    h.stop().await;
}

#[tokio::test]
async fn garbage_on_the_childs_stdout_is_skipped() {
    // The fixture prints a non-JSON line at start and before every tool answer.
    let h = StdioHarness::start(&["--garbage"], |_| {}).await;
    let c = h.client();
    for _ in 0..3 {
        let a = guard(
            "echo",
            c.call_tool("echo", json!({"message": "still here"})),
        )
        .await
        .unwrap();
        assert_eq!(text(&a.result), "Echo: still here");
    }
    let a = c
        .call_tool("slow_compute", json!({"seconds": 1, "label": "noisy"}))
        .await
        .unwrap();
    let t = wait_terminal(&c, &task_id(&a.result), LIMIT).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(text(&t["result"]), "computed noisy in 1 s");
    assert_eq!(h.pids().len(), 1, "garbage must not cost a restart");
    h.stop().await;
}

/// Start a call that keeps a `--serial` child busy for an hour, as a task.
async fn occupy(h: &StdioHarness, c: &Client) -> String {
    let a = c
        .call_tool("slow_compute", json!({"seconds": 3600, "label": "hog"}))
        .await
        .unwrap();
    let id = task_id(&a.result);
    h.wait_log("the child received the hog", |l| {
        l.iter().any(|x| x == "call slow_compute")
    })
    .await;
    id
}

#[tokio::test]
async fn a_serial_child_runs_one_call_at_a_time() {
    // The control for the pool test below: with one `--serial` child busy, a fast
    // call waits behind the busy one and so becomes a task.
    let h = StdioHarness::start(&["--serial"], |_| {}).await;
    let c = h.client();
    let hog = occupy(&h, &c).await;
    let a = c.call_tool("greet", json!({})).await.unwrap();
    let greet = task_id(&a.result);
    assert_eq!(c.get_task(&greet).await.unwrap()["status"], "working");
    c.cancel_task(&hog).await.unwrap();
    c.cancel_task(&greet).await.unwrap();
    h.stop().await;
}

#[tokio::test]
async fn a_pool_of_serial_children_runs_calls_in_parallel() {
    let h = StdioHarness::start(&["--serial"], |raw| raw.upstreams[0].processes = 2).await;
    let c = h.client();
    h.wait_log("two children started", |l| {
        l.iter().filter(|x| x.starts_with("start ")).count() == 2
    })
    .await;
    let pids = h.pids();
    assert_ne!(pids[0], pids[1], "two processes");
    let hog = occupy(&h, &c).await;
    // While one child is busy for an hour, a fast call is answered directly by the
    // other one. Until the second child has finished its handshake a call may still
    // land behind the hog (and become a task), so retry a few times; with a single
    // child (the control test above) no attempt could ever be answered.
    let mut answered = None;
    let mut stuck = Vec::new();
    for _ in 0..50 {
        let a = c.call_tool("greet", json!({"name": "pool"})).await.unwrap();
        if a.result["resultType"] == "complete" {
            answered = Some(a.result);
            break;
        }
        stuck.push(task_id(&a.result));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answered = answered.expect("no child was free to answer while the other was busy");
    assert_eq!(text(&answered), "Hello, pool!");
    assert_eq!(c.get_task(&hog).await.unwrap()["status"], "working");
    assert_eq!(h.pids().len(), 2, "no restarts");
    for id in stuck.iter().chain([&hog]) {
        c.cancel_task(id).await.unwrap();
    }
    h.stop().await;
}

/// A stdio child's log line carries no link to its call: tasklift relays it to the
/// caller in flight, but never while another caller also has a call in flight.
#[tokio::test]
async fn a_log_line_never_reaches_another_callers_stream() {
    let h = StdioHarness::start(&[], |c| c.auth.mode = "bearer".into()).await;
    let as_caller = |token: &str| {
        let mut c = h.plain_client();
        c.headers.push((
            "authorization".parse().unwrap(),
            http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        ));
        c
    };
    let logs_seen = |c: Client| async move {
        let mut seen = 0;
        let params = json!({"name": "test_tool_with_logging", "arguments": {},
                            "_meta": {"io.modelcontextprotocol/logLevel": "debug"}});
        c.request_streaming("tools/call", params, |n| {
            if n["method"] == "notifications/message" {
                seen += 1;
            }
        })
        .await
        .expect("the call answers");
        seen
    };
    // Bob alone: his tool's log lines reach him.
    assert_eq!(logs_seen(as_caller("bob")).await, 3);
    // With Alice's call in flight, nobody can tell whose lines they are: none relayed.
    let alice = as_caller("alice");
    let slow =
        tokio::spawn(async move { alice.call_tool("slow_compute", json!({"seconds": 2})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        logs_seen(as_caller("bob")).await,
        0,
        "Alice's call was in flight"
    );
    slow.await.unwrap().expect("Alice's call answers");
    h.stop().await;
}
