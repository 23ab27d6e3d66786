//! `subscriptions/listen` with `notifications.taskIds`: an acknowledgement naming the
//! caller's own tasks, then `notifications/tasks` with the full task on every change,
//! read from the SSE stream as it arrives.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tasklift_protocol::sse::SseParser;
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::input::*;

const SUB: &str = "io.modelcontextprotocol/subscriptionId";

/// Open a listen stream (request id `id`) for these task ids.
async fn listen(url: &str, id: u64, ids: &[&str], auth: Option<&str>) -> Streaming {
    let mut p = Post::new(
        url,
        id,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": ids}}),
        true,
    );
    if let Some(token) = auth {
        p = p.header("authorization", &format!("Bearer {token}"));
    }
    let s = p.open().await;
    assert_eq!(s.status, 200);
    let ct = s
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    s
}

/// The complete messages read so far.
fn messages(seen: &str) -> Vec<Value> {
    SseParser::default()
        .feed(seen.as_bytes())
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("bad event ({e}): {d}")))
        .collect()
}

/// Read until the `n`th message (0-based) has arrived; return it.
async fn nth(s: &mut Streaming, n: usize) -> Value {
    let what = format!("message {n}");
    let read = s.read_until(&what, |seen| messages(seen).len() > n);
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("in time");
    messages(&s.seen).swap_remove(n)
}

/// Read until a task notification with this status arrives after message `from`;
/// its index and the notification.
async fn status_after(s: &mut Streaming, from: usize, status: &str) -> (usize, Value) {
    let find = |seen: &str| {
        messages(seen)
            .into_iter()
            .enumerate()
            .skip(from)
            .find(|(_, m)| m["params"]["status"] == status)
    };
    let read = s.read_until(status, |seen| find(seen).is_some());
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("in time");
    find(&s.seen).unwrap()
}

fn assert_task_notification(m: &Value, id: &str, sub: u64) {
    assert_eq!(m["method"], "notifications/tasks", "{m}");
    assert_eq!(m["params"]["taskId"], id, "{m}");
    assert_eq!(m["params"]["_meta"][SUB], sub, "{m}");
    assert!(
        m["params"].get("resultType").is_none(),
        "a Task, not a result: {m}"
    );
}

/// The notification's task equals what `tasks/get` returns (minus resultType and _meta).
fn same_as_get(m: &Value, got: &Value) {
    let (mut a, mut b) = (m["params"].clone(), got.clone());
    a.as_object_mut().unwrap().remove("_meta");
    b.as_object_mut().unwrap().remove("resultType");
    assert_eq!(a, b);
}

#[tokio::test]
async fn listen_acknowledges_own_tasks_and_pushes_every_change() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("job").gate(gate.clone()));
    let h = Harness::start(up, |c| c.server.keepalive_interval = "50ms".into()).await;
    let c = h.client();
    let a = c.call_tool("job", json!({})).await.unwrap();
    let id = a.result["taskId"].as_str().expect("a task").to_string();
    let unknown = uuid::Uuid::new_v4().to_string();
    let mut s = listen(&h.url, 42, &[&id, &unknown], None).await;

    let ack = nth(&mut s, 0).await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUB], 42, "{ack}");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "only the caller's own task"
    );
    let first = nth(&mut s, 1).await;
    assert_task_notification(&first, &id, 42);
    assert_eq!(first["params"]["status"], "working");
    same_as_get(&first, &c.get_task(&id).await.unwrap());
    let read = s.read_until("a keep-alive", |seen| {
        seen.lines().any(|l| l.starts_with(':'))
    });
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("keep-alives");

    gate.notify_one();
    let (_, done) = status_after(&mut s, 2, "completed").await;
    assert_task_notification(&done, &id, 42);
    assert_eq!(
        done["params"]["result"]["content"][0]["text"], "job done",
        "{done}"
    );
    same_as_get(&done, &c.get_task(&id).await.unwrap());
    for m in messages(&s.seen).iter().skip(1) {
        assert_task_notification(m, &id, 42);
    }
    drop(s);
    h.stop().await;
}

#[tokio::test]
async fn input_required_and_back_are_pushed_with_the_requests() {
    let h = Harness::start(FixtureServer::demo(), |c| {
        c.upstreams[0]
            .tools
            .insert("confirm_delete".into(), rule("always"));
    })
    .await;
    let c = h.client();
    let id = task_of(&h, "confirm_delete", json!({"filename": "a.txt"})).await;
    wait_for(&c, &id, "input_required", |t| {
        t["status"] == "input_required"
    })
    .await;
    let mut s = listen(&h.url, 7, &[&id], None).await;
    let (i, asking) = status_after(&mut s, 1, "input_required").await;
    assert_task_notification(&asking, &id, 7);
    let key = key_for(&asking["params"]["inputRequests"], "Delete a.txt?");
    assert_eq!(
        asking["params"]["inputRequests"][&key]["method"],
        "elicitation/create"
    );

    update(
        &c,
        &id,
        json!({key: {"action": "accept", "content": {"confirm": true}}}),
    )
    .await;
    let (j, working) = status_after(&mut s, i + 1, "working").await;
    assert!(
        working["params"].get("inputRequests").is_none(),
        "{working}"
    );
    let (_, done) = status_after(&mut s, j + 1, "completed").await;
    assert_eq!(
        done["params"]["result"]["content"][0]["text"], "Deleted a.txt.",
        "{done}"
    );
    drop(s);
    h.stop().await;
}

#[tokio::test]
async fn another_principals_task_is_not_acknowledged_nor_pushed() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("job").gate(gate.clone()));
    let h = Harness::start(up, |c| c.auth.mode = "bearer".into()).await;
    let alice = h.client_with(true, &[("authorization", "Bearer alice-token")]);
    let a = alice.call_tool("job", json!({})).await.unwrap();
    let id = a.result["taskId"].as_str().expect("a task").to_string();
    let mut bob = listen(&h.url, 1, &[&id], Some("bob-token")).await;
    let ack = nth(&mut bob, 0).await;
    let agreed = ack["params"]["notifications"].get("taskIds");
    assert!(
        agreed.is_none_or(|ids| ids == &json!([])),
        "nothing agreed: {ack}"
    );
    let mut own = listen(&h.url, 2, &[&id], Some("alice-token")).await;
    assert_eq!(
        nth(&mut own, 0).await["params"]["notifications"]["taskIds"],
        json!([id])
    );

    gate.notify_one();
    status_after(&mut own, 1, "completed").await;
    // Whatever bob's stream would carry has been sent by now.
    let _ = tokio::time::timeout(
        Duration::from_millis(300),
        bob.read_until("nothing", |_| false),
    )
    .await;
    assert_eq!(
        messages(&bob.seen).len(),
        1,
        "only the acknowledgement: {}",
        bob.seen
    );
    drop((bob, own));
    h.stop().await;
}

#[tokio::test]
async fn task_notifications_need_the_tasks_extension() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let params = json!({"notifications": {"taskIds": [uuid::Uuid::new_v4().to_string()]}});
    let r = post(&h.url, 5, "subscriptions/listen", params, false).await;
    let e = r.error();
    assert_eq!(e["code"], -32021, "{e}");
    assert_eq!(
        e["data"]["requiredCapabilities"],
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
    h.stop().await;
}
