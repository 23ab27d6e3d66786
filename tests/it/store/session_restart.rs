//! Legacy client sessions outlive the tasklift process that opened them: after a
//! restart (clean or `kill -9`) the same `Mcp-Session-Id` keeps working for the
//! caller that opened it, tasklift opens a new upstream session behind it, a call
//! that was in flight ends with a JSON-RPC error when the client resumes its
//! stream, and sessions still expire and stay deleted.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::input::result;
use crate::support::proc::Proc;

const V25: &str = "2025-11-25";
const V06: &str = "2025-06-18";

fn upstream() -> (Arc<Notify>, FixtureServer) {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(Tool::new("echo"))
        .tool(Tool::new("job").gate(gate.clone()));
    (gate, up)
}

fn n(a: &std::sync::atomic::AtomicUsize) -> usize {
    a.load(Ordering::Relaxed)
}

async fn echo_ok(c: &LegacyClient, id: u64) {
    let r = c.request(id, "tools/call", json!({"name": "echo"})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(result(&r)["content"][0]["text"], "echo done", "{r:?}");
}

fn assert_no_session(r: &Raw, what: &str) {
    assert_eq!(r.status, 404, "{what}: {r:?}");
    assert_eq!(r.json()["error"]["code"], -32001, "{what}: {r:?}");
}

#[tokio::test]
async fn a_session_keeps_working_after_a_restart_for_its_own_caller_only() {
    let (_gate, up) = upstream();
    let mut h = Harness::start(up, |c| c.auth.mode = "bearer".into()).await;
    let alice = [("authorization", "Bearer alice-token")];
    for version in [V25, V06] {
        let caps = json!({"elicitation": {}, "roots": {"listChanged": true}});
        let (c, _) = LegacyClient::start_with(&h.url, version, caps, &alice).await;
        echo_ok(&c, 2).await;
        let r = c
            .request(3, "logging/setLevel", json!({"level": "warning"}))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        let inits = n(&h.upstream.stats().initializes);

        h.restart().await;
        let mut c = c.clone();
        c.url = h.url.clone();
        echo_ok(&c, 4).await;
        let stats = h.upstream.stats();
        assert_eq!(
            n(&stats.initializes),
            inits + 1,
            "tasklift opened a new upstream session behind the restored one"
        );
        // What the client declared at initialize reached the new upstream session.
        let init = h.received("initialize").last().cloned().unwrap();
        assert_eq!(init["params"]["clientInfo"]["name"], "legacy-test-client");
        assert_eq!(init["params"]["capabilities"]["elicitation"], json!({}));
        // Another caller cannot use it, before or after it is restored here.
        let bob = c.with_extra(&[("authorization", "Bearer bob-token")]);
        assert_no_session(&bob.request(5, "ping", json!({})).await, "bob's POST");
        echo_ok(&c, 6).await;
    }
    h.stop().await;
}

#[tokio::test]
async fn another_caller_cannot_claim_a_stored_session_first() {
    let (_gate, up) = upstream();
    let mut h = Harness::start(up, |c| c.auth.mode = "bearer".into()).await;
    let alice = [("authorization", "Bearer alice-token")];
    let (c, _) = LegacyClient::start_with(&h.url, V25, json!({}), &alice).await;
    h.restart().await;
    let mut c = c.clone();
    c.url = h.url.clone();
    // Bob is the first to name the session after the restart.
    let bob = c.with_extra(&[("authorization", "Bearer bob-token")]);
    assert_no_session(&bob.request(2, "ping", json!({})).await, "bob's POST");
    let g = bob.get(None).await.finish_guarded("bob's GET").await;
    assert_no_session(&g, "bob's GET");
    assert_no_session(&bob.delete().await, "bob's DELETE");
    echo_ok(&c, 3).await;
    h.stop().await;
}

#[tokio::test]
async fn a_call_in_flight_at_a_restart_ends_with_an_error_when_its_stream_is_resumed() {
    let (gate, up) = upstream();
    let mut h = Harness::start(up, |c| c.server.shutdown_grace = "200ms".into()).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let mut s = c.open(7, "tools/call", json!({"name": "job"})).await;
    let seen = s
        .events_until("the priming event", |e| e.id.is_some())
        .await;
    let last = seen[0].id.clone().unwrap();
    drop(s);
    h.restart().await;
    gate.notify_waiters();
    let mut c = c.clone();
    c.url = h.url.clone();
    let resumed = c
        .get(Some(&last))
        .await
        .finish_guarded("the resumed stream")
        .await;
    let msgs = resumed.sse_messages();
    assert_eq!(msgs.len(), 1, "{resumed:?}");
    assert_eq!(msgs[0]["id"], 7, "{msgs:?}");
    assert_eq!(msgs[0]["error"]["code"], -32603, "{msgs:?}");
    let why = msgs[0]["error"]["message"].as_str().unwrap();
    assert!(why.contains("restarted"), "{why}");
    // The session itself goes on.
    echo_ok(&c, 8).await;
    h.stop().await;
}

#[tokio::test]
async fn a_deleted_session_stays_deleted_and_an_expired_one_is_not_restored() {
    let (_gate, up) = upstream();
    let mut h = Harness::start(up, |c| c.legacy.session_idle = "2s".into()).await;
    let (gone, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    assert_eq!(gone.delete().await.status, 200);
    let (idle, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    echo_ok(&idle, 2).await;
    h.restart().await;
    let mut gone = gone.clone();
    gone.url = h.url.clone();
    assert_no_session(&gone.request(3, "ping", json!({})).await, "deleted");
    // Idle past `legacy.session_idle` across the restart.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut idle = idle.clone();
    idle.url = h.url.clone();
    assert_no_session(&idle.request(4, "ping", json!({})).await, "expired");
    h.stop().await;
}

#[tokio::test]
async fn a_session_survives_kill_9() {
    let (_gate, up) = upstream();
    let up = up.start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "serve",
        "--upstream",
        &up.url(),
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ];
    let mut p = Proc::start(&args, "first").await;
    let (c, _) = LegacyClient::start(&p.url, V06, json!({})).await;
    echo_ok(&c, 2).await;
    p.kill9();
    let p = Proc::start(&args, "after kill -9").await;
    let mut c = c.clone();
    c.url = p.url.clone();
    echo_ok(&c, 3).await;
    let listed = c.request(4, "tools/list", json!({})).await;
    let tools: Vec<Value> = result(&listed)["tools"].as_array().cloned().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "job"), "{listed:?}");
    assert!(p.logs().contains("restored from the store"), "{}", p.logs());
    drop(p);
    up.stop().await;
}

/// A free port on 127.0.0.1, so that tasklift restarts on the address the
/// client knows.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The TypeScript SDK v1 client through a restart: the call in flight ends with
/// tasklift's error once the SDK resumes its stream (it used to wait for its own
/// timeout), and the next call works in the same session (it used to fail with
/// "Session not found").
#[tokio::test]
async fn the_typescript_sdk_v1_client_keeps_its_session_across_a_restart() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let Some(dir) = crate::support::node::peers_or_skip() else {
        return;
    };
    let (gate, up) = upstream();
    let port = free_port();
    let mut h = Harness::start(up, |c| {
        c.server.listen = format!("127.0.0.1:{port}");
        c.server.shutdown_grace = "200ms".into();
    })
    .await;
    let mut child = tokio::process::Command::new(crate::support::node::node())
        .args(["ts-v1-restart.mjs", &h.url])
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = String::new();
    let mut outcomes = std::collections::HashMap::new();
    let mut next = async || {
        let l = guarded("a line from ts-v1-restart.mjs", lines.next_line()).await;
        let l = l.unwrap().unwrap_or_default();
        out.push_str(&l);
        out.push('\n');
        if let Some((name, v)) = l.strip_prefix("outcome ").and_then(|r| r.split_once(' ')) {
            outcomes.insert(name.to_string(), serde_json::from_str::<Value>(v).unwrap());
        }
        (l, out.clone(), outcomes.clone())
    };
    loop {
        let (l, all, _) = next().await;
        assert!(!l.is_empty(), "the script ended early:\n{all}");
        if l.starts_with("in flight ") {
            break;
        }
    }
    eventually("the job runs upstream", Duration::from_secs(10), || {
        n(&h.upstream.stats().running) == 1
    })
    .await;
    h.restart().await;
    gate.notify_waiters();
    let outcomes = loop {
        let (l, all, outcomes) = next().await;
        assert!(!l.is_empty(), "the script ended without finishing:\n{all}");
        if l == "ts-v1-restart: done" {
            break outcomes;
        }
    };
    let text = |o: &Value| o["result"]["content"][0]["text"].clone();
    assert_eq!(text(&outcomes["before"]), "echo done", "{outcomes:?}");
    let inflight = &outcomes["inflight"];
    assert_eq!(inflight["code"], -32603, "{inflight}");
    let why = inflight["error"].as_str().unwrap();
    assert!(why.contains("restarted"), "{why}");
    assert_eq!(text(&outcomes["after"]), "echo done", "{outcomes:?}");
    let s = &outcomes["session"];
    assert_eq!(s["before"], s["after"], "the same Mcp-Session-Id");
    h.stop().await;
}
