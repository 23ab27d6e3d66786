//! A legacy upstream asks for input before a task handle exists: the caller gets an
//! MRTR `InputRequiredResult` with tasklift's sealed `requestState`, and its retry
//! answers the upstream and resumes the call (a result, another round, or a task).
//! Also which requests a caller may be shown (its declared capabilities).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::FixtureServer;
use tokio::sync::mpsc;

use crate::support::harness::*;
use crate::support::input::*;
use crate::support::mock::{sse_event, MockReply, MockUpstream, StreamTx};

async fn confirm_delete_before_the_handle(stdio: bool) {
    let h = demo(stdio, with_tool("confirm_delete", threshold("10s"))).await;
    let c = Caller::new(&h, "confirm_delete", json!({"filename": "a.txt"}));
    let r = result(&c.call(1).await);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let reqs = r["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(reqs.len(), 1, "{r}");
    let (key, req) = reqs.iter().next().unwrap();
    let expected = json!({"method": "elicitation/create", "params": {
        "mode": "form", "message": "Delete a.txt?",
        "requestedSchema": {"type": "object",
            "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
    }});
    assert_eq!(req, &expected, "the upstream's request, as it sent it");
    let state = &r["requestState"];
    assert!(state.as_str().is_some_and(|s| !s.is_empty()), "{r}");

    let yes = json!({"action": "accept", "content": {"confirm": true}});
    let done = result(&c.retry(2, json!({key: yes}), state).await);
    assert_eq!(done["resultType"], "complete", "{done}");
    let text = json!([{"type": "text", "text": "Deleted a.txt."}]);
    assert_eq!(done["content"], text);
    if !stdio {
        let calls = h.received("tools/call").len();
        assert_eq!(calls, 1, "the retry resumed the same upstream call");
        let got = answers_upstream_got(&h);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            got[0]["result"], yes,
            "answered upstream as a JSON-RPC response"
        );
    }
    assert_eq!(stored_tasks(&h).await, 0);
    h.stop().await;
}

#[tokio::test]
async fn http_upstream_asking_before_the_handle_gets_input_required_then_the_retry_resumes() {
    confirm_delete_before_the_handle(false).await
}

#[tokio::test]
async fn stdio_upstream_asking_before_the_handle_gets_input_required_then_the_retry_resumes() {
    confirm_delete_before_the_handle(true).await
}

#[tokio::test]
async fn several_requests_at_once_all_appear_and_a_partial_answer_asks_for_the_rest() {
    let h = demo(false, with_tool("multi_input", threshold("10s"))).await;
    let c = Caller::new(&h, "multi_input", json!({}));
    let r = result(&c.call(1).await);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let reqs = &r["inputRequests"];
    assert_eq!(reqs.as_object().unwrap().len(), 2, "both at once: {r}");
    let (name, proceed) = (key_for(reqs, "name"), key_for(reqs, "Proceed"));

    let ann = json!({name.clone(): {"action": "accept", "content": {"name": "Ann"}}});
    let again = result(&c.retry(2, ann, &r["requestState"]).await);
    assert_eq!(again["resultType"], "input_required", "{again}");
    let left = again["inputRequests"].as_object().unwrap();
    let keys: Vec<_> = left.keys().collect();
    assert_eq!(keys, vec![&proceed], "only the unanswered one: {again}");
    assert_eq!(left[&proceed], reqs[&proceed]);
    assert_ne!(again["requestState"], r["requestState"], "a new state");

    let yes = json!({proceed: {"action": "accept", "content": {"confirm": true}}});
    let done = result(&c.retry(3, yes, &again["requestState"]).await);
    let text = &done["content"][0]["text"];
    assert_eq!(text, "name \"Ann\", confirm true", "{done}");
    h.stop().await;
}

/// A scripted legacy upstream whose tool asks one question, then another once the
/// first is answered, then answers.
#[tokio::test]
async fn a_legacy_upstream_asking_twice_in_sequence_gives_two_rounds() {
    let stream: Arc<Mutex<Option<(StreamTx, Value)>>> = Arc::default();
    let s2 = stream.clone();
    let mock = MockUpstream::start(move |m| match m["method"].as_str() {
        Some("initialize") => MockReply::Result(json!({"protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "seq", "version": "1"}})),
        Some("tools/call") => {
            let (tx, rx) = mpsc::channel(8);
            *s2.lock().unwrap() = Some((tx, m["id"].clone()));
            MockReply::Stream(rx)
        }
        _ => MockReply::Result(json!({})),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |c| {
        c.upstreams[0].era = "legacy".into();
        with_tool("seq", threshold("10s"))(c);
    })
    .await;
    let c = Caller::new(&h, "seq", json!({}));
    let send = |msg: Value| {
        let tx = stream.lock().unwrap().as_ref().map(|(tx, _)| tx.clone());
        async move {
            tx.expect("the call's stream")
                .send(Ok(sse_event(&msg)))
                .await
        }
    };
    let ask = |id: &str, q: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create",
            "params": {"mode": "form", "message": q, "requestedSchema": {"type": "object"}}})
    };
    let answered = |id: &str| {
        let seen = mock.requests.lock().unwrap();
        let mut answers = seen.iter().map(|(_, b)| b);
        let a = answers.find(|b| b["id"] == id && b.get("method").is_none());
        a.map(|b| b["result"].clone())
    };
    let wait = Duration::from_secs(10);

    let first = tokio::spawn(c.post(1, json!({})).send());
    let started = || stream.lock().unwrap().is_some();
    eventually("the call reaches the upstream", wait, started).await;
    send(ask("e1", "First?")).await.unwrap();
    let r1 = result(&first.await.unwrap());
    let k1 = key_for(&r1["inputRequests"], "First?");

    let a1 = json!({"action": "accept", "content": {"n": 1}});
    let answers = json!({k1.clone(): a1});
    let second = tokio::spawn(c.retry_post(2, answers, &r1["requestState"]).send());
    eventually("answer 1 upstream", wait, || answered("e1").is_some()).await;
    assert_eq!(answered("e1").unwrap(), a1);
    send(ask("e2", "Second?")).await.unwrap();
    let r2 = result(&second.await.unwrap());
    assert_eq!(r2["resultType"], "input_required", "{r2}");
    let k2 = key_for(&r2["inputRequests"], "Second?");
    assert_ne!(k1, k2, "keys stay unique across rounds");

    let a2 = json!({"action": "decline"});
    let third = tokio::spawn(c.retry_post(3, json!({k2: a2}), &r2["requestState"]).send());
    eventually("answer 2 upstream", wait, || answered("e2").is_some()).await;
    assert_eq!(answered("e2").unwrap(), a2);
    let id = stream.lock().unwrap().as_ref().unwrap().1.clone();
    let text = json!({"content": [{"type": "text", "text": "two answers"}]});
    send(json!({"jsonrpc": "2.0", "id": id, "result": text}))
        .await
        .unwrap();
    let done = result(&third.await.unwrap());
    assert_eq!(done["content"][0]["text"], "two answers", "{done}");
    assert_eq!(mock.received("tools/call").len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_retry_that_outlives_the_threshold_becomes_a_task() {
    // test_tool_with_task asks, then works for 3 s: longer than the 1 s threshold.
    let h = demo(false, with_tool("test_tool_with_task", threshold("1s"))).await;
    let c = Caller::new(&h, "test_tool_with_task", json!({}));
    let r = result(&c.call(1).await);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let key = key_for(&r["inputRequests"], "name");
    let ann = json!({key: {"action": "accept", "content": {"name": "Ann"}}});
    let t = result(&c.retry(2, ann, &r["requestState"]).await);
    assert_eq!(t["resultType"], "task", "{t}");
    let id = t["taskId"].as_str().unwrap();
    let done = wait_terminal(&h.client(), id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Hello, Ann!");
    h.stop().await;
}

#[tokio::test]
async fn a_caller_that_cannot_elicit_is_never_asked_and_the_upstream_gets_32021() {
    let h = demo(false, with_tool("confirm_delete", threshold("10s"))).await;
    let c = Caller::new(&h, "confirm_delete", json!({"filename": "a"}));
    let c = c.caps(caps(true, &["sampling"])); // not elicitation
    let e = c.call(1).await.error();
    assert_eq!(e["code"], -32021, "confirm_delete passes the error on: {e}");
    let needed = &e["data"]["requiredCapabilities"];
    assert_eq!(needed, &json!({"elicitation": {}}));
    let got = answers_upstream_got(&h);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0]["error"]["code"], -32021,
        "the upstream is not left waiting"
    );
    h.stop().await;
}

#[tokio::test]
async fn sampling_is_asked_only_of_a_caller_that_declared_it() {
    let tool = "test_missing_capability";
    let h = demo(false, with_tool(tool, threshold("10s"))).await;
    let c = Caller::new(&h, tool, json!({}));
    let e = c.call(1).await.error();
    assert_eq!(e["code"], -32021, "{e}");
    let needed = &e["data"]["requiredCapabilities"];
    assert_eq!(needed, &json!({"sampling": {}}), "{e}");

    // Any modern caller can be asked, with or without the tasks extension.
    let c = c.caps(caps(false, &["sampling"]));
    let r = result(&c.call(2).await);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let reqs = r["inputRequests"].as_object().unwrap();
    assert_eq!(reqs.len(), 1);
    let (key, req) = reqs.iter().next().unwrap();
    assert_eq!(req["method"], "sampling/createMessage");
    assert_eq!(req["params"]["maxTokens"], 20);
    let hi = json!({"role": "assistant", "content": {"type": "text", "text": "hi"},
        "model": "m", "stopReason": "endTurn"});
    let done = result(&c.retry(3, json!({key: hi}), &r["requestState"]).await);
    assert_eq!(done["content"][0]["text"], "sampled: hi", "{done}");
    h.stop().await;
}
