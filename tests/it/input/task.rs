//! A legacy upstream (HTTP or stdio) asks for input after the task handle was
//! returned: the task goes `input_required`, `tasks/get` shows the requests under
//! keys unique for its life, `tasks/update` answers the upstream, and a request
//! nobody answers ends with the task's TTL.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::config::RawToolRule;
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::input::*;

fn asks(n: usize) -> impl Fn(&Value) -> bool {
    move |t| {
        t["status"] == "input_required"
            && t["inputRequests"].as_object().is_some_and(|r| r.len() == n)
    }
}

async fn confirm_delete_as_a_task(stdio: bool) {
    let h = demo(stdio, with_tool("confirm_delete", rule("always"))).await;
    let c = h.client();
    let id = task_of(&h, "confirm_delete", json!({"filename": "a.txt"})).await;
    let t = wait_for(&c, &id, "input_required", asks(1)).await;
    let key = key_for(&t["inputRequests"], "Delete a.txt?");
    assert_eq!(
        t["inputRequests"][&key]["method"], "elicitation/create",
        "{t}"
    );
    assert_eq!(
        t["inputRequests"][&key]["params"]["requestedSchema"]["required"],
        json!(["confirm"])
    );
    let again = c.get_task(&id).await.unwrap();
    assert_eq!(
        again["inputRequests"], t["inputRequests"],
        "the same request under the same key"
    );

    update(
        &c,
        &id,
        json!({key.clone(): {"action": "accept", "content": {"confirm": true}}}),
    )
    .await;
    let done = wait_terminal(&c, &id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Deleted a.txt.");
    assert!(done.get("inputRequests").is_none(), "{done}");
    // Answering a settled task is acknowledged and changes nothing.
    update(&c, &id, json!({key: {"action": "decline"}})).await;
    assert_eq!(c.get_task(&id).await.unwrap()["result"], done["result"]);
    h.stop().await;
}

#[tokio::test]
async fn http_task_goes_input_required_and_tasks_update_completes_it() {
    confirm_delete_as_a_task(false).await
}

#[tokio::test]
async fn stdio_task_goes_input_required_and_tasks_update_completes_it() {
    confirm_delete_as_a_task(true).await
}

async fn partial_answers(stdio: bool) {
    let h = demo(stdio, with_tool("multi_input", rule("always"))).await;
    let c = h.client();
    let id = task_of(&h, "multi_input", json!({})).await;
    let first = wait_for(&c, &id, "both requests", asks(2)).await;
    let reqs = &first["inputRequests"];
    let (name, proceed) = (key_for(reqs, "name"), key_for(reqs, "Proceed"));
    let ann = json!({"action": "accept", "content": {"name": "Ann"}});
    update(
        &c,
        &id,
        json!({name.clone(): ann, "never-issued": {"action": "accept"}}),
    )
    .await;
    let t = wait_for(&c, &id, "one request left", asks(1)).await;
    assert_eq!(t["inputRequests"][&proceed], reqs[&proceed], "{t}");
    // Answering the answered key again, or an unknown one, is ignored.
    update(
        &c,
        &id,
        json!({name: {"action": "accept", "content": {"name": "Bob"}}, "x": {}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = c.get_task(&id).await.unwrap();
    assert!(
        asks(1)(&t) && t["inputRequests"].get(&proceed).is_some(),
        "unchanged: {t}"
    );

    update(
        &c,
        &id,
        json!({proceed: {"action": "accept", "content": {"confirm": true}}}),
    )
    .await;
    let done = wait_terminal(&c, &id, Duration::from_secs(15)).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "name \"Ann\", confirm true",
        "{done}"
    );
    h.stop().await;
}

#[tokio::test]
async fn http_partial_answers_leave_the_rest_outstanding() {
    partial_answers(false).await
}

#[tokio::test]
async fn stdio_partial_answers_leave_the_rest_outstanding() {
    partial_answers(true).await
}

#[tokio::test]
async fn the_task_is_working_again_once_answered() {
    let gate = Arc::new(Notify::new());
    let tool = Tool::new("approve").gate(gate.clone()).ask(
        |_| {
            vec![(
                "elicitation/create".into(),
                json!({"message": "Approve?", "requestedSchema": {"type": "object"}}),
            )]
        },
        |_, a| {
            Ok(format!(
                "approval: {}",
                a[0].as_ref().map_err(Clone::clone)?["action"]
            ))
        },
    );
    let h = Harness::start(
        FixtureServer::new().tool(tool),
        with_tool("approve", rule("always")),
    )
    .await;
    let c = h.client();
    let id = task_of(&h, "approve", json!({})).await;
    let t = wait_for(&c, &id, "input_required", asks(1)).await;
    let key = key_for(&t["inputRequests"], "Approve?");
    update(&c, &id, json!({key: {"action": "accept", "content": {}}})).await;
    let t = wait_for(&c, &id, "working", |t| t["status"] == "working").await;
    assert!(t.get("inputRequests").is_none(), "{t}");
    gate.notify_one();
    let done = wait_terminal(&c, &id, Duration::from_secs(15)).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "approval: \"accept\"",
        "{done}"
    );
    h.stop().await;
}

async fn unanswered_until_the_ttl(stdio: bool) {
    let h = demo(stdio, |c| {
        c.tasks.sweep_interval = "100ms".into();
        let r = RawToolRule {
            ttl: Some("1s".into()),
            ..rule("always")
        };
        c.upstreams[0].tools.insert("confirm_delete".into(), r);
    })
    .await;
    let c = h.client();
    let id = task_of(&h, "confirm_delete", json!({"filename": "a.txt"})).await;
    wait_for(&c, &id, "input_required", asks(1)).await;
    let done = wait_terminal(&c, &id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(
        done["error"]["message"].as_str().unwrap().contains("TTL"),
        "{done}"
    );
    assert!(done.get("inputRequests").is_none(), "{done}");
    if stdio {
        let log = h.dir.path().join("fixture.log");
        eventually(
            "the child is told the call was cancelled",
            Duration::from_secs(10),
            || {
                std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .contains("cancelled")
            },
        )
        .await;
    } else {
        let stats = h.upstream.stats();
        eventually("the upstream call ends", Duration::from_secs(10), || {
            stats.cancelled.load(Ordering::Relaxed) >= 1
                && stats.running.load(Ordering::Relaxed) == 0
        })
        .await;
        eventually(
            "the upstream's request is answered",
            Duration::from_secs(10),
            || {
                answers_upstream_got(&h)
                    .iter()
                    .any(|a| a.get("error").is_some())
            },
        )
        .await;
    }
    h.stop().await;
}

#[tokio::test]
async fn http_request_nobody_answers_ends_with_the_task_ttl() {
    unanswered_until_the_ttl(false).await
}

#[tokio::test]
async fn stdio_request_nobody_answers_ends_with_the_task_ttl() {
    unanswered_until_the_ttl(true).await
}
