//! Events as a receiver gets them: one per status a task reaches (completed,
//! failed, cancelled, input_required), each verified by the `standardwebhooks`
//! library; a refused event sent again under the same `webhook-id`; and a
//! receiver that never answers slowing no call, no task and no other destination.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use super::receiver::{webhook_to, Receiver};
use crate::support::harness::*;
use crate::support::input::*;

/// Tools that end each way, all run as tasks at once.
fn upstream(gate: Arc<Notify>) -> FixtureServer {
    FixtureServer::new()
        .tool(Tool::new("report").sleep(Duration::from_millis(300)))
        .tool(Tool::new("broken").rpc_error(-32000, "the printer is on fire"))
        .tool(Tool::new("long").sleep(Duration::from_secs(60)))
        .tool(Tool::new("approve").gate(gate).ask(
            |_| {
                vec![(
                    "elicitation/create".into(),
                    json!({"message": "Approve?", "requestedSchema": {"type": "object"}}),
                )]
            },
            |_, _| Ok("approved".into()),
        ))
}

fn always(c: &mut tasklift::config::RawConfig) {
    for t in ["report", "broken", "long", "approve"] {
        c.upstreams[0].tools.insert(t.into(), rule("always"));
    }
}

/// Wait until the receiver holds a request about `task` matching `cond`.
async fn received(r: &Receiver, task: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = r.about(task).into_iter().find(|v| cond(v)) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} for {task}; received: {:?}",
            r.requests()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn of_type(t: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["payload"]["type"] == t
}

#[tokio::test]
async fn each_event_type_reaches_the_receiver_signed() {
    let Some(r) = Receiver::start(&[]).await else {
        return;
    };
    let gate = Arc::new(Notify::new());
    let h = Harness::start(upstream(gate.clone()), |c| {
        always(c);
        // The asking task is still waiting at the end: stop without waiting for it.
        c.server.shutdown_grace = "200ms".into();
        webhook_to(&r.url, |w| w.include_result = true)(c);
    })
    .await;
    let c = h.client();
    let done = task_of(&h, "report", json!({})).await;
    let failed = task_of(&h, "broken", json!({})).await;
    let long = task_of(&h, "long", json!({})).await;
    let asking = task_of(&h, "approve", json!({})).await;
    c.cancel_task(&long).await.expect("tasks/cancel");

    let v = received(&r, &done, "task.completed", of_type("task.completed")).await;
    assert_eq!(v["verified"], true, "{v}");
    assert_eq!(v["contentType"], "application/json");
    let data = &v["payload"]["data"];
    assert_eq!(data["status"], "completed", "{v}");
    assert_eq!(
        (data["tool"].as_str(), data["upstream"].as_str()),
        (Some("report"), Some("default"))
    );
    assert!(data["result"]["content"].is_array(), "include_result: {v}");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"), "{v}");
    for key in ["createdAt", "lastUpdatedAt"] {
        assert!(
            data[key].as_str().is_some_and(|t| t.ends_with('Z')),
            "{key}: {v}"
        );
    }
    assert!(v["payload"]["timestamp"].as_str().is_some(), "{v}");

    let v = received(&r, &failed, "task.failed", of_type("task.failed")).await;
    assert_eq!(v["verified"], true, "{v}");
    assert!(
        v["payload"]["data"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains("on fire"),
        "{v}"
    );

    let v = received(&r, &long, "task.cancelled", of_type("task.cancelled")).await;
    assert_eq!(
        (
            v["verified"].as_bool(),
            v["payload"]["data"]["status"].as_str()
        ),
        (Some(true), Some("cancelled")),
        "{v}"
    );

    let v = received(
        &r,
        &asking,
        "task.input_required",
        of_type("task.input_required"),
    )
    .await;
    assert_eq!(v["verified"], true, "{v}");
    let keys = v["payload"]["data"]["inputRequests"]
        .as_array()
        .expect("keys")
        .clone();
    let t = c.get_task(&asking).await.unwrap();
    let mut want: Vec<&String> = t["inputRequests"].as_object().unwrap().keys().collect();
    want.sort();
    assert_eq!(
        json!(want),
        json!(keys),
        "the keys only, as tasks/get has them: {v}"
    );
    assert!(v["payload"]["data"]["inputRequests"][0].is_string());

    // Each event once: every one was taken at its first attempt.
    for id in [&done, &failed, &long, &asking] {
        assert_eq!(r.about(id).len(), 1, "{:?}", r.about(id));
    }
    gate.notify_one();
    h.stop().await;
}

#[tokio::test]
async fn a_refused_event_is_sent_again_under_the_same_webhook_id() {
    let Some(r) = Receiver::start(&["--refuse-first", "2"]).await else {
        return;
    };
    let h = Harness::start(upstream(Arc::new(Notify::new())), |c| {
        always(c);
        webhook_to(&r.url, |w| w.events = vec!["task.completed".into()])(c);
    })
    .await;
    let id = task_of(&h, "report", json!({})).await;
    received(&r, &id, "the accepted attempt", |v| v["status"] == 204).await;
    let attempts = r.about(&id);
    let statuses: Vec<&Value> = attempts.iter().map(|v| &v["status"]).collect();
    assert_eq!(
        statuses,
        [&json!(503), &json!(503), &json!(204)],
        "{attempts:?}"
    );
    assert!(
        attempts.iter().all(|v| v["id"] == attempts[0]["id"]),
        "one webhook-id: {attempts:?}"
    );
    assert!(
        attempts.iter().all(|v| v["verified"] == true),
        "{attempts:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_receiver_that_never_answers_slows_no_call_task_or_other_destination() {
    let (Some(hung), Some(ok)) = (
        Receiver::start(&["--hang"]).await,
        Receiver::start(&[]).await,
    ) else {
        return;
    };
    let h = Harness::start(
        upstream(Arc::new(Notify::new())).tool(Tool::new("quick")),
        |c| {
            always(c);
            webhook_to(&hung.url, |w| {
                w.name = "hung".into();
                w.timeout = "60s".into();
                w.concurrency = 2;
            })(c);
            webhook_to(&ok.url, |w| w.name = "ok".into())(c);
        },
    )
    .await;
    let c = h.client();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(task_of(&h, "report", json!({})).await);
    }
    eventually(
        "the hung receiver holds requests",
        Duration::from_secs(10),
        || hung.requests().len() >= 2,
    )
    .await;
    // Calls keep being answered, and tasks keep ending, while it holds them.
    for i in 0..20 {
        let a = guarded("a synchronous call", c.call_tool("quick", json!({"i": i}))).await;
        assert!(a.expect("tools/call").result["content"].is_array());
    }
    for id in &ids {
        let t = wait_terminal(&c, id, Duration::from_secs(10)).await;
        assert_eq!(t["status"], "completed", "{t}");
        // The other destination gets every event meanwhile.
        received(&ok, id, "task.completed", of_type("task.completed")).await;
    }
    h.stop().await;
}

/// Given up at `max_age` after its last attempt, with one log line, by a real
/// tasklift process (its log is read).
#[tokio::test]
async fn an_event_nobody_takes_is_given_up_at_max_age_with_one_log_line() {
    use crate::support::proc::Proc;
    let upstream = FixtureServer::new()
        .tool(Tool::new("report").sleep(Duration::from_millis(100)))
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .expect("fixture starts");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tasklift.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = \"{data}\"\n\
             [[upstreams]]\nurl = \"{up}\"\n[upstreams.tools.report]\nmode = \"always\"\n\
             [[webhooks]]\nname = \"nobody\"\nurl = \"{hook}\"\nsecret = \"{secret}\"\nmax_age = \"3s\"\n",
            data = dir.path().join("data").display(),
            up = upstream.url(),
            hook = closed_port_url(),
            secret = super::receiver::SECRET,
        ),
    )
    .unwrap();
    let p = Proc::start(
        &["serve", "--config", cfg.to_str().unwrap()],
        "with a webhook",
    )
    .await;
    let c = tasklift::cli::client::Client::new(&p.url).unwrap();
    let r = c
        .call_tool("report", json!({}))
        .await
        .expect("tools/call")
        .result;
    let id = r["taskId"].as_str().expect("a task").to_string();
    let given_up = |logs: &str| {
        logs.lines()
            .filter(|l| l.contains("webhook event given up") && l.contains(&id))
            .count()
    };
    eventually("the event is given up", Duration::from_secs(20), || {
        given_up(&p.logs()) > 0
    })
    .await;
    // Its attempts were retried until then, and it is not tried again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let logs = p.logs();
    assert_eq!(given_up(&logs), 1, "{logs}");
    let line = logs
        .lines()
        .find(|l| l.contains("webhook event given up"))
        .unwrap();
    let v: Value = serde_json::from_str(line).unwrap();
    assert!(v["fields"]["attempts"].as_u64().unwrap() >= 2, "{line}");
    assert_eq!(v["fields"]["destination"], "nobody", "{line}");
}
