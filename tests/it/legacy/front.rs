//! Legacy (2025-era) clients on tasklift's own front door, beside modern ones: a
//! session per `initialize`, results shaped the legacy way, the upstream's requests
//! to the client relayed as real JSON-RPC requests on the POST's stream, progress
//! and logs, `notifications/cancelled`, and the session's stream on GET.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;
use crate::support::input::{answers_upstream_got, result};

const V25: &str = "2025-11-25";
const V06: &str = "2025-06-18";
const V03: &str = "2025-03-26";

/// The upstream's `mcp-protocol-version` on the POSTs carrying `method`.
fn upstream_versions(h: &Harness, method: &str) -> Vec<String> {
    let stats = h.upstream.stats();
    let headers = stats.headers.lock().unwrap();
    let bodies = stats.bodies.lock().unwrap();
    headers
        .iter()
        .zip(bodies.iter())
        .filter(|(_, b)| b["method"] == method)
        .filter_map(|(h, _)| h.get("mcp-protocol-version").cloned())
        .collect()
}

fn echo() -> FixtureServer {
    FixtureServer::new().tool(Tool::new("echo"))
}

#[tokio::test]
async fn initialize_opens_a_session_for_each_legacy_revision_beside_modern_clients() {
    let h = Harness::start(echo(), |_| {}).await;
    let mut sids = HashSet::new();
    let cases = [(V03, V03), (V06, V06), (V25, V25), ("2024-11-05", V25)];
    for (asked, agreed) in cases {
        let r = legacy_initialize(&h.url, asked, json!({"elicitation": {}}), &[]).await;
        assert_eq!(r.status, 200, "{asked}: {r:?}");
        let sid = r.headers["mcp-session-id"].to_str().unwrap().to_string();
        assert!(sid.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{sid}");
        assert!(sids.insert(sid), "a new session id each time");
        let m = r.json();
        assert_eq!(m["id"], 1);
        let res = &m["result"];
        assert_eq!(res["protocolVersion"], agreed, "{asked}: {res}");
        assert_eq!(res["serverInfo"]["name"], "tasklift-fixture", "{res}");
        assert_eq!(res["capabilities"]["tools"], json!({"listChanged": true}));
        assert!(res.get("resultType").is_none(), "{res}");
        let caps = &res["capabilities"];
        assert!(
            caps.get("extensions").is_none(),
            "no modern extensions: {caps}"
        );
        if agreed == V25 {
            let tasks = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
            assert_eq!(caps["tasks"], tasks, "{asked}");
        } else {
            assert!(caps.get("tasks").is_none(), "{asked}: {caps}");
        }
    }
    // Each client got an upstream session of its own, opened with its handshake.
    let inits = h.received("initialize");
    for v in [V03, V06, V25] {
        let mine = inits.iter().find(|i| i["params"]["protocolVersion"] == v);
        let mine = mine.unwrap_or_else(|| panic!("no upstream initialize for {v}: {inits:?}"));
        assert_eq!(mine["params"]["clientInfo"]["name"], "legacy-test-client");
        assert_eq!(mine["params"]["capabilities"], json!({"elicitation": {}}));
    }
    // A modern request without a session, on the same endpoint, meanwhile.
    let a = h.client().call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "complete", "{}", a.result);
    assert_eq!(a.result["content"][0]["text"], "echo done");
    h.stop().await;
}

#[tokio::test]
async fn with_legacy_disabled_initialize_is_refused_as_a_modern_request() {
    let h = Harness::start(echo(), |c| c.legacy.enabled = false).await;
    let r = legacy_initialize(&h.url, V25, json!({}), &[]).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.headers.get("mcp-session-id").is_none());
    h.stop().await;
}

#[tokio::test]
async fn tools_list_and_call_in_a_session_answer_the_legacy_way() {
    let greet =
        Tool::new("greet").reply(|a| format!("Hello, {}!", a["name"].as_str().unwrap_or("you")));
    let h = Harness::start(FixtureServer::new().tool(greet), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V06, json!({})).await;
    let pong = c.request(2, "ping", json!({})).await;
    assert_eq!(result(&pong), json!({}));
    let list = c.request(3, "tools/list", json!({})).await;
    assert_eq!(list.status, 200, "{list:?}");
    let res = result(&list);
    for k in ["resultType", "ttlMs", "cacheScope"] {
        assert!(res.get(k).is_none(), "no {k}: {res}");
    }
    assert_eq!(res["tools"].as_array().unwrap().len(), 1, "{res}");
    assert_eq!(res["tools"][0]["name"], "greet");
    assert!(
        res["tools"][0].get("execution").is_none(),
        "no tasks before 2025-11-25"
    );

    let call = c.request(
        4,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "Ann"}}),
    );
    let call = call.await;
    assert_eq!(call.response()["id"], 4);
    let res = result(&call);
    assert_eq!(
        res,
        json!({"content": [{"type": "text", "text": "Hello, Ann!"}]})
    );
    // The call went through the client's own upstream session, at its version.
    assert_eq!(upstream_versions(&h, "tools/call"), vec![V06.to_string()]);
    h.stop().await;
}

/// A legacy client answers `confirm_delete`'s elicitation on the call's own stream.
async fn elicitation_round_trip(version: &str, answer: Value, expected: &str) {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, version, json!({"elicitation": {}})).await;
    let args = json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}});
    let mut s = c.open(5, "tools/call", args).await;
    assert_eq!(s.status, 200);
    let is_ask = |m: &Value| m["method"] == "elicitation/create";
    let ask = s.message_where("the elicitation request", is_ask).await;
    assert!(!ask["id"].is_null(), "a request, with an id: {ask}");
    assert_eq!(ask["params"]["message"], "Delete a.txt?", "{ask}");
    let schema = &ask["params"]["requestedSchema"]["properties"]["confirm"];
    assert_eq!(schema, &json!({"type": "boolean"}), "{ask}");

    let ack = c.respond(&ask["id"], answer.clone()).await;
    assert_eq!(ack.status, 202, "{ack:?}");
    let done = s.finish_guarded("the call's result").await;
    let last = done.response();
    assert_eq!(last["id"], 5, "{last}");
    assert_eq!(last["result"]["content"][0]["text"], expected, "{last}");
    assert!(last["result"].get("resultType").is_none(), "{last}");

    // Event ids (process_stream_seq_request), unique, all of one stream and one
    // request; 2025-11-25 streams open with a priming event.
    let events = done.events();
    let ids: Vec<&str> = events.iter().filter_map(|e| e.id.as_deref()).collect();
    assert_eq!(ids.len(), events.len(), "every event has an id: {events:?}");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
    let mut streams = HashSet::new();
    for id in &ids {
        let parts: Vec<&str> = id.splitn(4, '_').collect();
        assert_eq!(parts.len(), 4, "{id}");
        assert!(
            parts[1].parse::<u64>().is_ok() && parts[2].parse::<u64>().is_ok(),
            "{id}"
        );
        streams.insert((parts[0], parts[1], parts[3]));
    }
    assert_eq!(streams.len(), 1, "{ids:?}");
    let priming = events[0].message().is_none();
    assert_eq!(priming, version == V25, "{version}: {events:?}");
    if priming {
        assert_eq!(events[0].retry, Some(1000), "the configured sse_retry");
    }
    // The answer reached the upstream as the response to its own request.
    let got = answers_upstream_got(&h);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["result"], answer);
    assert_eq!(h.received("tools/call").len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn an_elicitation_is_relayed_to_a_2025_11_25_client_and_its_answer_goes_upstream() {
    let yes = json!({"action": "accept", "content": {"confirm": true}});
    elicitation_round_trip(V25, yes, "Deleted a.txt.").await;
}

#[tokio::test]
async fn an_elicitation_is_relayed_to_a_2025_06_18_client_and_a_decline_goes_upstream() {
    elicitation_round_trip(V06, json!({"action": "decline"}), "Kept a.txt.").await;
}

#[tokio::test]
async fn a_modern_upstreams_input_required_becomes_real_requests_and_a_retry() {
    let quiz = FixtureServer::new()
        .modern()
        .tool(Tool::new("quiz").mrtr(2));
    let h = Harness::start(quiz, |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({"elicitation": {}})).await;
    let args = json!({"name": "quiz", "arguments": {"topic": "rust"}});
    let mut s = c.open(7, "tools/call", args).await;
    let answer = |a: &str| json!({"action": "accept", "content": {"answer": a}});
    for (k, a) in [(1, "A"), (2, "B")] {
        let q = format!("Question {k} of 2?");
        let ask = s
            .message_where(&q, |m| {
                m["method"] == "elicitation/create" && m["params"]["message"] == q
            })
            .await;
        assert_eq!(c.respond(&ask["id"], answer(a)).await.status, 202);
    }
    let done = s.finish_guarded("the quiz result").await;
    let msgs = done.sse_messages();
    let last = msgs.last().unwrap();
    assert_eq!(last["id"], 7);
    assert_eq!(
        last["result"]["content"][0]["text"],
        "quiz: 2 rounds, last answer B"
    );
    for m in &msgs {
        assert!(
            m.get("result")
                .is_none_or(|r| r.get("resultType").is_none()),
            "{m}"
        );
    }
    // tasklift retried the call with the answers and the server's requestState.
    let calls = h.received("tools/call");
    assert_eq!(calls.len(), 3, "{calls:?}");
    for (k, a) in [(1, "A"), (2, "B")] {
        let p = &calls[k]["params"];
        assert_eq!(
            p["inputResponses"],
            json!({format!("q{k}"): answer(a)}),
            "{p}"
        );
        assert_eq!(p["requestState"], format!("round-{k}"), "{p}");
        assert_eq!(p["arguments"], json!({"topic": "rust"}));
    }
    h.stop().await;
}

#[tokio::test]
async fn progress_is_relayed_with_the_clients_own_token() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V06, json!({})).await;
    let params = json!({"name": "generate_report", "arguments": {"pages": 1},
        "_meta": {"progressToken": "tok-7"}});
    let r = c.request(8, "tools/call", params).await;
    let msgs = r.sse_messages();
    let progress: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "{msgs:?}");
    let mut last = 0.0;
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "tok-7", "{p}");
        let n = p["params"]["progress"].as_f64().unwrap();
        assert!(n > last, "progress only grows: {msgs:?}");
        last = n;
    }
    let text = msgs.last().unwrap()["result"]["content"][0]["text"].clone();
    assert!(
        text.as_str().unwrap().starts_with("Monthly report"),
        "{msgs:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn log_messages_are_relayed_until_logging_set_level_filters_them() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let call = json!({"name": "test_logging_tool", "arguments": {}});
    let logs = |r: &Raw| -> Vec<Value> {
        let msgs = all_messages(r);
        let logs = msgs
            .iter()
            .filter(|m| m["method"] == "notifications/message");
        logs.map(|m| m["params"]["data"].clone()).collect()
    };
    let r = c.request(2, "tools/call", call.clone()).await;
    assert_eq!(
        logs(&r),
        vec![json!("starting the work"), json!("work done")]
    );
    assert_eq!(result(&r)["content"][0]["text"], "logged");

    let set = c
        .request(3, "logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(result(&set), json!({}), "{set:?}");
    let r = c.request(4, "tools/call", call).await;
    assert!(logs(&r).is_empty(), "info is below warning: {r:?}");
    assert_eq!(result(&r)["content"][0]["text"], "logged");
    h.stop().await;
}

#[tokio::test]
async fn notifications_cancelled_stops_the_call_upstream() {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let job = Tool::new("job").gate(gate.clone());
    let h = Harness::start(FixtureServer::new().tool(job), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let c2 = c.clone();
    let call =
        tokio::spawn(async move { c2.request(9, "tools/call", json!({"name": "job"})).await });
    let stats = h.upstream.stats();
    let running = || stats.running.load(Ordering::Relaxed) == 1;
    eventually("the call runs upstream", Duration::from_secs(10), running).await;

    let why = json!({"requestId": 9, "reason": "the user changed their mind"});
    let ack = c.notify("notifications/cancelled", why).await;
    assert_eq!(ack.status, 202, "{ack:?}");
    upstream_call_cancelled(&stats).await;
    let upstream_id = h.received("tools/call")[0]["id"].clone();
    let told = || !h.received("notifications/cancelled").is_empty();
    eventually(
        "notifications/cancelled upstream",
        Duration::from_secs(10),
        told,
    )
    .await;
    let sent = h.received("notifications/cancelled");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["params"]["requestId"], upstream_id);
    let r = guarded("the cancelled call's answer", call).await.unwrap();
    for m in all_messages(&r) {
        assert!(
            m.get("result").is_none(),
            "no result for a cancelled call: {m}"
        );
    }
    gate.notify_one();
    h.stop().await;
}

#[tokio::test]
async fn the_get_stream_carries_the_upstreams_list_changes() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let mut g = c.get(None).await;
    assert_eq!(g.status, 200);
    assert!(g.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    // tasklift opens the upstream's GET stream in the background: announce until
    // one arrives.
    let mut seen = None;
    for i in 0..50 {
        let r = c.request(
            10 + i,
            "tools/call",
            json!({"name": "test_trigger_tool_change"}),
        );
        assert_eq!(
            result(&r.await)["content"][0]["text"],
            "tool list change announced"
        );
        let wait = g.message_where("a list change", |m| {
            m["method"] == "notifications/tools/list_changed"
        });
        if let Ok(m) = tokio::time::timeout(Duration::from_millis(500), wait).await {
            seen = Some(m);
            break;
        }
    }
    let n = seen.expect("a tools/list_changed on the GET stream");
    assert!(n.get("id").is_none(), "a notification: {n}");
    h.stop().await;
}

#[tokio::test]
async fn a_method_the_upstream_lacks_is_an_error_not_a_lost_session() {
    let h = Harness::start(echo(), |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let r = c.request(2, "prompts/list", json!({})).await;
    // HTTP 404 in a session means "initialize again" to a legacy client.
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.response()["error"]["code"], -32601, "{r:?}");
    let r = c.request(3, "tools/call", json!({"name": "echo"})).await;
    assert_eq!(result(&r)["content"][0]["text"], "echo done");
    h.stop().await;
}
