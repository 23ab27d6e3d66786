//! `subscriptions/listen` for the upstream's own change notifications: a legacy
//! server's GET stream and a modern server's own listen stream, relayed with the
//! caller's subscriptionId and only the types it asked for.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tasklift_fixture::FixtureServer;
use tasklift_protocol::sse::SseParser;

use crate::support::harness::*;
use crate::support::mock::{discover_result, sse_event, MockReply, MockUpstream, StreamTx};

const SUB: &str = "io.modelcontextprotocol/subscriptionId";

/// Read SSE messages from `s` until one satisfies `pred`; returns all read.
async fn read_messages(s: &mut Streaming, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    let mut fed = 0;
    loop {
        s.read_until("more events", |seen| seen.len() > fed).await;
        let new = s.seen[fed..].to_string();
        fed = s.seen.len();
        for ev in parser.feed(new.as_bytes()) {
            let v: Value = serde_json::from_str(&ev).unwrap();
            let done = pred(&v);
            out.push(v);
            if done {
                return out;
            }
        }
    }
}

fn method_is(m: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["method"] == m
}

#[tokio::test]
async fn a_legacy_servers_list_changes_reach_the_listen_stream() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let filter = json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}});
    let mut s = Post::new(&h.url, 41, "subscriptions/listen", filter, false)
        .open()
        .await;
    let ack = read_messages(
        &mut s,
        method_is("notifications/subscriptions/acknowledged"),
    )
    .await;
    let ack = ack.last().unwrap();
    assert_eq!(ack["params"]["_meta"][SUB], 41);
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "the fixture offers tool-list changes only"
    );
    let c = h.plain_client();
    c.call_tool("test_trigger_tool_change", json!({}))
        .await
        .unwrap();
    let got = read_messages(&mut s, method_is("notifications/tools/list_changed")).await;
    let n = got.last().unwrap();
    assert_eq!(n["params"]["_meta"][SUB], 41, "{n}");
    // At shutdown the stream ends gracefully, with the response to the listen request.
    let (_, end) = tokio::join!(h.stop(), read_messages(&mut s, |v| v["id"] == 41));
    let done = end.last().unwrap();
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["_meta"][SUB], 41);
}

#[tokio::test]
async fn a_modern_servers_listen_stream_is_relayed_and_filtered() {
    let feed: Arc<Mutex<Option<StreamTx>>> = Arc::default();
    let f2 = feed.clone();
    let mock = MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "server/discover" => MockReply::Result(discover_result(json!({"resources": {"subscribe": true}}))),
        "subscriptions/listen" => {
            let (tx, rx) = tokio::sync::mpsc::channel(8);
            let upstream_id = m["id"].clone();
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": {SUB: upstream_id}, "notifications": m["params"]["notifications"].clone()}});
            tx.try_send(Ok(sse_event(&ack))).unwrap();
            *f2.lock().unwrap() = Some(tx);
            MockReply::Stream(rx)
        }
        other => MockReply::Error(404, -32601, format!("Method not found: {other}")),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |_| {}).await;
    let filter = json!({"notifications": {"resourceSubscriptions": ["file:///a.txt"]}});
    let mut s = Post::new(&h.url, 7, "subscriptions/listen", filter, false)
        .open()
        .await;
    let ack = read_messages(
        &mut s,
        method_is("notifications/subscriptions/acknowledged"),
    )
    .await;
    assert_eq!(
        ack.last().unwrap()["params"]["notifications"],
        json!({"resourceSubscriptions": ["file:///a.txt"]})
    );
    let forwarded = mock.received("subscriptions/listen");
    assert_eq!(forwarded.len(), 1);
    assert_eq!(
        forwarded[0]["params"]["notifications"],
        json!({"resourceSubscriptions": ["file:///a.txt"]})
    );
    let tx = feed
        .lock()
        .unwrap()
        .clone()
        .expect("the upstream stream is open");
    for n in [
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"_meta": {SUB: 1}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": "file:///a.txt", "_meta": {SUB: 1}}}),
    ] {
        tx.send(Ok(sse_event(&n))).await.unwrap();
    }
    let got = read_messages(&mut s, method_is("notifications/resources/updated")).await;
    assert!(
        got.iter()
            .all(|m| m["method"] != "notifications/tools/list_changed"),
        "a type the caller did not ask for leaked: {got:?}"
    );
    let n = got.last().unwrap();
    assert_eq!(n["params"]["uri"], "file:///a.txt");
    assert_eq!(
        n["params"]["_meta"][SUB], 7,
        "the caller's subscription id, not the upstream's"
    );
    h.stop().await;
}
