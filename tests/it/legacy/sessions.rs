//! The life of a legacy client's session on tasklift: streams that survive a
//! disconnect and resume with `Last-Event-ID`, DELETE, sessions that are not the
//! caller's, idle expiry, and the per-principal cap.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::input::result;

const V25: &str = "2025-11-25";

/// A fixture with `echo` and gated `job`s, one gate each.
fn gated(jobs: &[&str]) -> (Vec<Arc<Notify>>, FixtureServer) {
    let mut up = FixtureServer::new().tool(Tool::new("echo"));
    let mut gates = Vec::new();
    for name in jobs {
        let g = Arc::new(Notify::new());
        up = up.tool(Tool::new(name).gate(g.clone()));
        gates.push(g);
    }
    (gates, up)
}

/// The answer is tasklift's "no such session": HTTP 404 with JSON-RPC -32001.
fn assert_no_session(r: &Raw, what: &str) {
    assert_eq!(r.status, 404, "{what}: {r:?}");
    assert_eq!(r.json()["error"]["code"], -32001, "{what}: {r:?}");
}

async fn echo_ok(c: &LegacyClient, id: u64) {
    let r = c.request(id, "tools/call", json!({"name": "echo"})).await;
    assert_eq!(result(&r)["content"][0]["text"], "echo done", "{r:?}");
}

fn count(n: &std::sync::atomic::AtomicUsize) -> usize {
    n.load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_dropped_stream_keeps_the_call_running_and_resumes_with_last_event_id() {
    let gate = Arc::new(Notify::new());
    let job = Tool::new("job")
        .progress(1)
        .sleep(Duration::from_millis(50))
        .gate(gate.clone());
    let h = Harness::start(FixtureServer::new().tool(job), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let params = json!({"name": "job", "_meta": {"progressToken": "p1"}});
    let mut s = c.open(3, "tools/call", params).await;
    let is_progress = |e: &SseEvent| {
        e.message()
            .is_some_and(|m| m["method"] == "notifications/progress")
    };
    let seen = s.events_until("the first progress", is_progress).await;
    let priming = &seen[0];
    assert!(
        priming.message().is_none() && priming.retry.is_some(),
        "{seen:?}"
    );
    let progress_id = seen
        .iter()
        .find(|e| is_progress(e))
        .unwrap()
        .id
        .clone()
        .unwrap();
    drop(s); // the client goes away mid-call

    gate.notify_one();
    let stats = h.upstream.stats();
    let finished = || count(&stats.calls) == 1 && count(&stats.running) == 0;
    eventually("the upstream call ends", Duration::from_secs(10), finished).await;
    assert_eq!(
        count(&stats.cancelled),
        0,
        "a disconnect is not a cancellation"
    );

    // Resume after the progress: only what followed, ending with the result.
    let g = c.get(Some(&progress_id)).await;
    assert_eq!(g.status, 200);
    let rest = g.finish_guarded("the resumed stream").await;
    let msgs = rest.sse_messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0]["id"], 3, "{msgs:?}");
    assert_eq!(msgs[0]["result"]["content"][0]["text"], "job done");
    // Resuming from the priming event replays the progress too.
    let again = c.get(priming.id.as_deref()).await;
    let msgs = again
        .finish_guarded("the stream from its start")
        .await
        .sse_messages();
    let methods: Vec<&Value> = msgs.iter().map(|m| &m["method"]).collect();
    assert_eq!(
        methods,
        [&json!("notifications/progress"), &Value::Null],
        "{msgs:?}"
    );
    assert_eq!(msgs[0]["params"]["progressToken"], "p1");
    assert_eq!(h.received("tools/call").len(), 1, "not run twice");
    h.stop().await;
}

#[tokio::test]
async fn a_stream_dropped_before_the_upstream_says_anything_still_resumes() {
    let (gates, up) = gated(&["job"]);
    let h = Harness::start(up, |c| c.server.keepalive_interval = "10m".into()).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let c2 = c.clone();
    let opened = tokio::spawn(async move {
        let mut s = c2.open(4, "tools/call", json!({"name": "job"})).await;
        let seen = s
            .events_until("the priming event", |e| e.id.is_some())
            .await;
        seen[0].id.clone().unwrap()
    });
    let stats = h.upstream.stats();
    let running = || count(&stats.running) == 1;
    eventually("the call runs upstream", Duration::from_secs(10), running).await;
    let tick = tokio::time::timeout(Duration::from_secs(20), opened).await;
    let primed = tick.expect("a priming event while the upstream is still silent");
    let last = primed.unwrap(); // the stream is dropped with the task
    gates[0].notify_one();
    let finished = || count(&stats.running) == 0;
    eventually("the upstream call ends", Duration::from_secs(10), finished).await;
    assert_eq!(
        count(&stats.cancelled),
        0,
        "a disconnect is not a cancellation"
    );
    let rest = c
        .get(Some(&last))
        .await
        .finish_guarded("the resumed stream")
        .await;
    assert_eq!(rest.response()["result"]["content"][0]["text"], "job done");
    h.stop().await;
}

#[tokio::test]
async fn delete_ends_the_session_and_its_upstream_session() {
    let h = Harness::start(gated(&[]).1, |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    echo_ok(&c, 2).await;
    let ready = h.url.replace("/mcp", "/readyz");
    let sessions = || async { raw("GET", &ready, &[], "").await.json()["legacy_sessions"].clone() };
    assert_eq!(sessions().await, 1, "/readyz counts the open session");
    let d = c.delete().await;
    assert_eq!(d.status, 200, "{d:?}");
    assert_eq!(sessions().await, 0, "and forgets it at DELETE");
    let stats = h.upstream.stats();
    let deleted = || count(&stats.deletes) == 1;
    eventually(
        "the upstream session is deleted",
        Duration::from_secs(10),
        deleted,
    )
    .await;

    assert_no_session(
        &c.request(3, "tools/list", json!({})).await,
        "POST after DELETE",
    );
    assert_no_session(
        &c.notify("notifications/initialized", json!({})).await,
        "notification",
    );
    let g = c.get(None).await.finish_guarded("GET").await;
    assert_no_session(&g, "GET after DELETE");
    assert_no_session(&c.delete().await, "DELETE twice");
    let made_up = c.with_sid("0123456789abcdef0123456789abcdef");
    assert_no_session(&made_up.request(4, "ping", json!({})).await, "a made-up id");
    // A 404 tells the client to initialize again, which works.
    let (again, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    echo_ok(&again, 5).await;
    h.stop().await;
}

#[tokio::test]
async fn another_principals_session_id_is_unknown_to_it() {
    let h = Harness::start(gated(&[]).1, |c| c.auth.mode = "bearer".into()).await;
    let alice_auth = [("authorization", "Bearer alice-token")];
    let (alice, _) = LegacyClient::start_with(&h.url, V25, json!({}), &alice_auth).await;
    echo_ok(&alice, 2).await;
    let bob = alice.with_extra(&[("authorization", "Bearer bob-token")]);
    assert_no_session(&bob.request(3, "tools/list", json!({})).await, "bob's POST");
    let g = bob.get(None).await.finish_guarded("bob's GET").await;
    assert_no_session(&g, "bob's GET");
    assert_no_session(&bob.delete().await, "bob's DELETE");
    let nobody = alice.with_extra(&[]);
    assert_eq!(nobody.request(4, "ping", json!({})).await.status, 401);
    // Alice's session is untouched.
    echo_ok(&alice, 5).await;
    assert_eq!(count(&h.upstream.stats().deletes), 0);
    h.stop().await;
}

#[tokio::test]
async fn an_idle_session_expires_but_not_while_a_call_runs() {
    let (gates, up) = gated(&["job"]);
    let h = Harness::start(up, |c| c.legacy.session_idle = "2s".into()).await;
    let stats = h.upstream.stats();
    let (busy, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let b2 = busy.clone();
    let call =
        tokio::spawn(async move { b2.request(2, "tools/call", json!({"name": "job"})).await });
    let running = || count(&stats.running) == 1;
    eventually("the call runs upstream", Duration::from_secs(10), running).await;

    let (idle, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    echo_ok(&idle, 3).await;
    let one_deleted = || count(&stats.deletes) == 1;
    eventually(
        "the idle session closes",
        Duration::from_secs(15),
        one_deleted,
    )
    .await;
    assert_no_session(
        &idle.request(4, "ping", json!({})).await,
        "the idle session",
    );

    // The session with a call running is kept however long the call takes…
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count(&stats.deletes), 1, "the busy session was not closed");
    gates[0].notify_one();
    let r = guarded("the long call", call).await.unwrap();
    assert_eq!(result(&r)["content"][0]["text"], "job done");
    // …and its idle time starts when the call ends, not when it started.
    tokio::time::sleep(Duration::from_secs(1)).await;
    echo_ok(&busy, 5).await;
    assert_eq!(count(&stats.deletes), 1);
    h.stop().await;
}

#[tokio::test]
async fn the_session_cap_closes_the_least_recently_used_idle_session_or_answers_429() {
    let (gates, up) = gated(&["job1", "job2"]);
    let h = Harness::start(up, |c| c.legacy.max_sessions_per_principal = 2).await;
    let pause = || tokio::time::sleep(Duration::from_millis(30));
    let (a, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    pause().await;
    let (b, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    pause().await;
    echo_ok(&a, 2).await; // b is now the least recently used
    pause().await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    assert_no_session(
        &b.request(3, "ping", json!({})).await,
        "the evicted session",
    );
    let stats = h.upstream.stats();
    let deleted = || count(&stats.deletes) == 1;
    eventually(
        "the evicted upstream session is deleted",
        Duration::from_secs(10),
        deleted,
    )
    .await;
    echo_ok(&a, 4).await;
    echo_ok(&c, 5).await;

    // Both sessions busy: no room, and nothing is closed.
    let (a2, c2) = (a.clone(), c.clone());
    let ja =
        tokio::spawn(async move { a2.request(6, "tools/call", json!({"name": "job1"})).await });
    let jc =
        tokio::spawn(async move { c2.request(7, "tools/call", json!({"name": "job2"})).await });
    let running = || count(&stats.running) == 2;
    eventually("both calls run upstream", Duration::from_secs(10), running).await;
    let full = legacy_initialize(&h.url, V25, json!({}), &[]).await;
    assert_eq!(full.status, 429, "{full:?}");
    assert!(full.headers.get("mcp-session-id").is_none());
    let e = &full.json()["error"];
    assert!(e["message"].as_str().unwrap().contains("sessions"), "{e}");
    for g in &gates {
        g.notify_one();
    }
    for (j, text) in [(ja, "job1 done"), (jc, "job2 done")] {
        let r = guarded("a gated call", j).await.unwrap();
        assert_eq!(result(&r)["content"][0]["text"], text);
    }
    pause().await;
    let (d, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    echo_ok(&d, 8).await;
    h.stop().await;
}
