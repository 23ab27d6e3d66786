//! A modern upstream asks for input the 2026-07-28 way, with an `InputRequiredResult`
//! (the fixture's `Tool::mrtr`): relayed as-is before the handle, turned into
//! `input_required` rounds after it. And rmcp answering `input_required` through
//! `tasks/update`, in front of a legacy and a modern upstream.

use std::collections::BTreeSet;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig,
    ElicitationCapability, GetTaskParams, GetTaskResult, Implementation, InputResponses,
    JsonObject, ProtocolVersion, TaskPayload, TaskStatus, UpdateTaskParams, TASKS_EXTENSION_ID,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;
use crate::support::input::*;

/// A modern upstream whose `quiz` asks `rounds` questions, one per round.
fn quiz(rounds: u32) -> FixtureServer {
    FixtureServer::new()
        .modern()
        .tool(Tool::new("quiz").mrtr(rounds))
}

/// The upstream's request of round `k` of `n`.
fn question(k: u32, n: u32) -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form", "message": format!("Question {k} of {n}?"),
        "requestedSchema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    }})
}

fn answer(s: &str) -> Value {
    json!({"action": "accept", "content": {"answer": s}})
}

#[tokio::test]
async fn before_the_handle_the_upstream_result_is_relayed_and_the_retry_forwarded() {
    let h = Harness::start(quiz(2), with_tool("quiz", threshold("10s"))).await;
    let args = json!({"topic": "rust"});
    let c = Caller::new(&h, "quiz", args.clone());
    let r1 = result(&c.call(1).await);
    let expected = |k: u32| {
        let reqs = json!({format!("q{k}"): question(k, 2)});
        let state = format!("round-{k}");
        json!({"resultType": "input_required", "inputRequests": reqs, "requestState": state})
    };
    assert_eq!(r1, expected(1), "relayed as the upstream sent it");
    let a1 = json!({"q1": answer("A")});
    let r2 = result(&c.retry(2, a1.clone(), &r1["requestState"]).await);
    assert_eq!(r2, expected(2));
    let a2 = json!({"q2": answer("B")});
    let done = result(&c.retry(3, a2.clone(), &r2["requestState"]).await);
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(done["content"][0]["text"], "quiz: 2 rounds, last answer B");

    let calls = h.received("tools/call");
    assert_eq!(calls.len(), 3, "each retry is a new upstream call");
    for (p, (answers, state)) in calls[1..]
        .iter()
        .map(|c| &c["params"])
        .zip([(a1, "round-1"), (a2, "round-2")])
    {
        assert_eq!(p["inputResponses"], answers, "{p}");
        assert_eq!(p["requestState"], state, "{p}");
        assert_eq!(p["arguments"], args);
    }
    assert_eq!(stored_tasks(&h).await, 0);
    h.stop().await;
}

#[tokio::test]
async fn after_the_handle_each_round_is_answered_with_tasks_update() {
    let h = Harness::start(quiz(3), with_tool("quiz", rule("always"))).await;
    let c = h.client();
    let args = json!({"topic": "rust"});
    let id = task_of(&h, "quiz", args.clone()).await;
    let mut keys: Vec<String> = Vec::new();
    for (k, a) in [(1, "A"), (2, "B"), (3, "C")] {
        let msg = format!("Question {k} of 3?");
        let t = wait_for(&c, &id, &msg, |t| {
            t["status"] == "input_required"
                && t["inputRequests"]
                    .as_object()
                    .is_some_and(|r| r.values().any(|q| q["params"]["message"] == msg))
        })
        .await;
        let reqs = t["inputRequests"].as_object().unwrap();
        assert_eq!(reqs.len(), 1, "{t}");
        let (key, req) = reqs.iter().next().unwrap();
        assert_eq!(req, &question(k, 3), "the upstream's request");
        assert!(
            !keys.contains(key),
            "keys are unique for the task's life: {key} in {keys:?}"
        );
        if let Some(stale) = keys.last() {
            // The previous round's key is no longer outstanding: ignored.
            update(&c, &id, json!({stale.clone(): answer("stale")})).await;
        }
        keys.push(key.clone());
        update(&c, &id, json!({key.clone(): answer(a)})).await;
    }
    let done = wait_terminal(&c, &id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "quiz: 3 rounds, last answer C"
    );

    let calls = h.received("tools/call");
    assert_eq!(calls.len(), 4, "the first call and one retry per round");
    assert!(calls[0]["params"].get("requestState").is_none());
    for (k, a) in [(1, "A"), (2, "B"), (3, "C")] {
        let p = &calls[k]["params"];
        assert_eq!(p["name"], "quiz");
        assert_eq!(p["arguments"], args, "the original arguments");
        assert_eq!(
            p["inputResponses"],
            json!({format!("q{k}"): answer(a)}),
            "upstream keys: {p}"
        );
        assert_eq!(p["requestState"], format!("round-{k}"), "{p}");
    }
    h.stop().await;
}

type RmcpClient = RunningService<RoleClient, ClientConfig>;

/// rmcp with the 2026-07-28 lifecycle, declaring the tasks extension and elicitation.
async fn connect(h: &Harness) -> RmcpClient {
    let mut caps = ClientCapabilities::default();
    caps.extensions = Some([(TASKS_EXTENSION_ID.to_string(), JsonObject::new())].into());
    caps.elicitation = Some(ElicitationCapability::new());
    ClientConfig::new(caps, Implementation::new("tasklift-it-rmcp", "0"))
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(h.url.clone()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("rmcp connects to tasklift")
}

/// Poll with rmcp, answering each new input request with `reply(request)`, until terminal.
async fn drive(
    c: &RmcpClient,
    id: &str,
    reply: impl Fn(&Value) -> Value,
) -> (GetTaskResult, usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut answered = BTreeSet::new();
    loop {
        let got = c.get_task(GetTaskParams::new(id)).await.expect("tasks/get");
        if got.task.task.status.is_terminal() {
            return (got, answered.len());
        }
        if let TaskPayload::InputRequired { input_requests } = &got.task.payload {
            let fresh: InputResponses = input_requests
                .iter()
                .filter(|(k, _)| !answered.contains(*k))
                .map(|(k, r)| (k.clone(), reply(&serde_json::to_value(r).unwrap())))
                .collect();
            if !fresh.is_empty() {
                answered.extend(fresh.keys().cloned());
                c.update_task(UpdateTaskParams::new(id, fresh))
                    .await
                    .expect("tasks/update acked");
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} stuck: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(
            got.task.task.poll_interval_ms.unwrap_or(50),
        ))
        .await;
    }
}

#[tokio::test]
async fn rmcp_answers_input_required_through_tasks_update() {
    for modern in [false, true] {
        let (up, tool) = if modern {
            (quiz(2), "quiz")
        } else {
            (FixtureServer::demo(), "confirm_delete")
        };
        let h = Harness::start(up, |c| {
            c.upstreams[0].tools.insert(tool.into(), rule("always"));
        })
        .await;
        let c = connect(&h).await;
        let params = CallToolRequestParams::new(tool.to_string())
            .with_arguments(json!({"filename": "b.txt"}).as_object().unwrap().clone());
        let CallToolResponse::Task(t) = c.call_tool_once(params).await.expect("tools/call") else {
            panic!("expected a task for {tool}");
        };
        let (got, rounds) = drive(&c, &t.task.task_id, |r| {
            assert_eq!(r["method"], "elicitation/create", "{r}");
            if modern {
                answer("R")
            } else {
                json!({"action": "accept", "content": {"confirm": true}})
            }
        })
        .await;
        assert_eq!(got.task.task.status, TaskStatus::Completed, "{got:?}");
        let TaskPayload::Completed { result } = got.task.payload else {
            unreachable!()
        };
        let text = &result["content"][0]["text"];
        if modern {
            assert_eq!(rounds, 2);
            assert_eq!(text, "quiz: 2 rounds, last answer R");
        } else {
            assert_eq!(rounds, 1);
            assert_eq!(text, "Deleted b.txt.");
        }
        c.cancel().await.unwrap();
        h.stop().await;
    }
}
