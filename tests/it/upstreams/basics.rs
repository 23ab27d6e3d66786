//! Upstreams of both eras: the legacy handshake tasklift runs on the caller's
//! behalf, modern pass-through, discovery, headers, TLS, and what happens
//! when the upstream is gone or hands out task handles of its own.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::ClientError;
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;
use crate::support::mock::{
    discover_result, sse_event, tls_front, MockReply, MockUpstream, StreamTx,
};
use crate::support::relay::Relay;

fn fixture() -> FixtureServer {
    FixtureServer::new().tool(Tool::new("echo"))
}

fn rpc_err(
    r: Result<tasklift::cli::client::Answer, ClientError>,
) -> tasklift_protocol::jsonrpc::RpcError {
    match r {
        Err(ClientError::Rpc(e)) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn legacy_upstream_is_initialized_by_tasklift_and_results_are_completed() {
    let h = Harness::start(fixture(), |c| {
        c.upstreams[0].list_ttl_ms = 60_000;
        c.upstreams[0].list_cache_scope = "public".into();
    })
    .await;
    let c = h.client();
    let a = c.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "complete");
    assert_eq!(a.result["content"][0]["text"], "echo done");
    let init = h.received("initialize");
    assert_eq!(init.len(), 1);
    assert_eq!(init[0]["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(h.received("notifications/initialized").len(), 1);
    // The per-request protocol fields live in the session for a legacy server.
    let sent = &h.received("tools/call")[0]["params"];
    assert!(sent["_meta"]
        .get("io.modelcontextprotocol/protocolVersion")
        .is_none());
    // List results get what 2026-07-28 requires, as configured.
    let list = c.request("tools/list", json!({})).await.unwrap().result;
    assert_eq!(list["tools"][0]["name"], "echo");
    assert_eq!(list["resultType"], "complete");
    assert_eq!(list["ttlMs"], 60_000);
    assert_eq!(list["cacheScope"], "public");
    h.stop().await;
}

#[tokio::test]
async fn modern_upstream_gets_each_request_with_its_meta_and_mirrored_headers() {
    let h = Harness::start(fixture().modern(), |_| {}).await;
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let c = h.client_with(true, &[("traceparent", trace), ("mcp-param-region", "eu")]);
    for _ in 0..3 {
        let a = c.call_tool("echo", json!({})).await.unwrap();
        assert_eq!(a.result["content"][0]["text"], "echo done");
    }
    c.request("tools/list", json!({})).await.unwrap();
    assert!(
        h.received("initialize").is_empty(),
        "no handshake for a modern server"
    );
    assert_eq!(h.received("server/discover").len(), 1, "era probed once");
    let call = &h.received("tools/call")[0];
    let meta = &call["params"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert!(
        meta["io.modelcontextprotocol/clientCapabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_some()
    );
    let stats = h.upstream.stats();
    let headers = stats.headers.lock().unwrap().clone();
    let call_h = headers
        .iter()
        .find(|h| h.get("mcp-method").map(String::as_str) == Some("tools/call"))
        .expect("a tools/call POST");
    assert_eq!(call_h["mcp-name"], "echo");
    assert_eq!(call_h["mcp-protocol-version"], "2026-07-28");
    // Custom parameter headers travel on as they are; the trace goes on with
    // tasklift as a hop (same trace id, tasklift's own parent id).
    assert_eq!(call_h["mcp-param-region"], "eu");
    assert!(
        call_h["traceparent"].starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
        "{call_h:?}"
    );
    assert_ne!(call_h["traceparent"], trace);
    h.stop().await;
}

#[tokio::test]
async fn legacy_era_is_detected_once_and_the_session_reused() {
    let h = Harness::start(fixture(), |_| {}).await;
    let c = h.client();
    for _ in 0..3 {
        c.call_tool("echo", json!({})).await.unwrap();
    }
    c.request("tools/list", json!({})).await.unwrap();
    c.request("server/discover", json!({})).await.unwrap();
    assert_eq!(h.received("server/discover").len(), 1);
    assert_eq!(h.upstream.stats().initializes.load(Ordering::Relaxed), 1);
    h.stop().await;
}

#[tokio::test]
async fn static_headers_and_forwarded_authorization_reach_the_upstream() {
    for forward in [true, false] {
        let h = Harness::start(fixture(), |c| {
            c.upstreams[0].forward_authorization = forward;
            c.upstreams[0]
                .headers
                .insert("x-api-key".into(), "static-secret".into());
        })
        .await;
        let c = h.client_with(true, &[("authorization", "Bearer caller-token")]);
        c.call_tool("echo", json!({})).await.unwrap();
        let stats = h.upstream.stats();
        let headers = stats.headers.lock().unwrap().clone();
        assert!(headers.len() >= 3, "probe, initialize, initialized, call");
        for hd in &headers {
            assert_eq!(hd["x-api-key"], "static-secret");
        }
        let call = headers
            .last()
            .expect("the tools/call POST comes last")
            .clone();
        if forward {
            assert_eq!(call["authorization"], "Bearer caller-token");
        } else {
            assert!(
                headers.iter().all(|h| !h.contains_key("authorization")),
                "{headers:?}"
            );
        }
        drop(headers);
        h.stop().await;
    }
}

#[tokio::test]
async fn discover_on_a_legacy_upstream_comes_from_initialize_plus_the_extension() {
    let h = Harness::start(fixture(), |_| {}).await;
    let d = h
        .client()
        .request("server/discover", json!({}))
        .await
        .unwrap()
        .result;
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
    assert!(d["ttlMs"].is_u64() && d["cacheScope"].is_string(), "{d}");
    assert!(d["capabilities"]["tools"].is_object(), "{d}");
    assert!(d["capabilities"]["extensions"]
        .get("io.modelcontextprotocol/tasks")
        .is_some());
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "tasklift-fixture"
    );
    assert!(d["instructions"].as_str().unwrap().contains("slow"));
    h.stop().await;
}

#[tokio::test]
async fn discover_on_a_modern_upstream_keeps_its_answer_and_adds_the_extension() {
    let h = Harness::start(fixture().modern(), |_| {}).await;
    let d = h
        .client()
        .request("server/discover", json!({}))
        .await
        .unwrap()
        .result;
    assert_eq!(d["cacheScope"], "public", "the upstream's own value: {d}");
    assert!(d["capabilities"]["tools"].is_object());
    assert!(d["capabilities"]["extensions"]
        .get("io.modelcontextprotocol/tasks")
        .is_some());
    h.stop().await;
}

#[tokio::test]
async fn unknown_fields_and_meta_keys_pass_through_unchanged() {
    for modern in [false, true] {
        let up = if modern {
            fixture().modern()
        } else {
            fixture()
        };
        let h = Harness::start(up, |_| {}).await;
        let params = json!({
            "name": "echo",
            "arguments": {"nested": {"list": [1, 2.5, null], "s": "ü"}},
            "x-routing": {"shard": 3},
            "_meta": {"com.example/trace": "t-1", "progressToken": "mine"},
        });
        let r = post(&h.url, 1, "tools/call", params.clone(), true).await;
        assert_eq!(r.response()["result"]["content"][0]["text"], "echo done");
        let r = post(&h.url, 2, "tools/list", json!({"x-extra": [true]}), true).await;
        assert!(r.response().get("result").is_some(), "{r:?}");
        let got = &h.received("tools/call")[0]["params"];
        assert_eq!(got["arguments"], params["arguments"]);
        assert_eq!(got["x-routing"], params["x-routing"]);
        assert_eq!(got["_meta"]["com.example/trace"], "t-1");
        assert_eq!(got["_meta"]["progressToken"], "mine");
        assert_eq!(
            h.received("tools/list")[0]["params"]["x-extra"],
            json!([true])
        );
        h.stop().await;
    }
}

#[tokio::test]
async fn a_dead_upstream_gives_a_clear_error_naming_it() {
    for http2 in [false, true] {
        dead_upstream(http2).await;
    }
}

async fn dead_upstream(http2: bool) {
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &closed_port_url(), dir, |c| {
        c.upstreams[0].name = "backend".into();
        c.upstreams[0].http2 = http2;
    })
    .await;
    let c = h.client();
    for (method, params) in [
        ("tools/call", json!({"name": "echo"})),
        ("tools/list", json!({})),
    ] {
        let r = tokio::time::timeout(Duration::from_secs(20), c.request(method, params))
            .await
            .expect("an answer, not a hang");
        let e = rpc_err(r);
        assert_eq!(e.code, -32010, "http2 {http2}: {e:?}");
        assert!(
            e.message.contains("upstream backend") && e.message.contains("unreachable"),
            "http2 {http2}: {}",
            e.message
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn upstream_task_handles_and_their_tasks_calls_pass_through_untouched() {
    let handle = json!({
        "resultType": "task", "taskId": "upstream-task-1", "status": "working",
        "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
        "ttlMs": 1234, "pollIntervalMs": 777, "x-vendor": {"queue": "gpu"},
    });
    let detailed = json!({
        "resultType": "complete", "taskId": "upstream-task-1", "status": "completed",
        "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:05Z",
        "ttlMs": 1234, "pollIntervalMs": 777,
        "result": {"content": [{"type": "text", "text": "from upstream"}]},
        "x-vendor": {"cost": 5},
    });
    let (h1, d1) = (handle.clone(), detailed.clone());
    let mock = MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "server/discover" => MockReply::Result(discover_result(
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
        )),
        "tools/call" => MockReply::Result(h1.clone()),
        "tasks/get" => MockReply::Result(d1.clone()),
        "tasks/cancel" => MockReply::Result(json!({"resultType": "complete"})),
        other => MockReply::Error(404, -32601, format!("Method not found: {other}")),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |_| {}).await;
    let c = h.client();
    let a = c.call_tool("gpu_job", json!({})).await.unwrap();
    assert_eq!(a.result, handle);
    assert_eq!(c.get_task("upstream-task-1").await.unwrap(), detailed);
    assert_eq!(
        c.cancel_task("upstream-task-1").await.unwrap(),
        json!({"resultType": "complete"})
    );
    let gets = mock.received("tasks/get");
    assert_eq!(gets.len(), 1);
    assert_eq!(gets[0]["params"]["taskId"], "upstream-task-1");
    assert_eq!(mock.received("tasks/cancel").len(), 1);
    assert_eq!(stored_tasks(&h).await, 0, "tasklift keeps no record of it");
    h.stop().await;
}

#[tokio::test]
async fn an_https_upstream_is_trusted_through_ca_file() {
    let up = fixture()
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let backend = up.url().trim_start_matches("http://").replace("/mcp", "");
    let (url, pem) = tls_front(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let cadir = tempfile::tempdir().unwrap();
    let ca = cadir.path().join("ca.pem");
    std::fs::write(&ca, pem).unwrap();
    // Without the CA the certificate is refused, and the error says so.
    let h = Harness::front(
        FixtureServer::new(),
        &url,
        tempfile::tempdir().unwrap(),
        |_| {},
    )
    .await;
    let e = rpc_err(h.client().call_tool("echo", json!({})).await);
    assert!(e.message.contains("unreachable"), "{}", e.message);
    assert!(
        e.message.to_lowercase().contains("certificate"),
        "{}",
        e.message
    );
    h.stop().await;
    let ca_file = ca.display().to_string();
    let stats = up.stats();
    let h = Harness::front(FixtureServer::new(), &url, dir, |c| {
        c.upstreams[0].ca_file = ca_file.clone()
    })
    .await;
    let a = h.client().call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "echo done");
    assert_eq!(stats.calls.load(Ordering::Relaxed), 1);
    h.stop().await;
    // The same over HTTP/2 (ALPN h2 offered; the front passes the bytes on).
    let h = Harness::front(
        FixtureServer::new(),
        &url,
        tempfile::tempdir().unwrap(),
        |c| {
            c.upstreams[0].ca_file = ca_file;
            c.upstreams[0].http2 = true;
        },
    )
    .await;
    let a = h.client().call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "echo done");
    assert_eq!(stats.calls.load(Ordering::Relaxed), 2);
    assert!(
        stats.http2_requests.load(Ordering::Relaxed) >= 1,
        "it went over HTTP/2"
    );
    h.stop().await;
}

/// An https upstream whose TLS handshake never gets an answer (a port that
/// accepts and stays silent): each connection attempt, TLS included, ends at
/// `connect_timeout`. Over HTTP/1.1 each call has an attempt of its own; over
/// HTTP/2 calls that waited on an attempt get its error at once, not after
/// trying again one after another. So eight calls are all answered in about one
/// timeout, over both.
#[tokio::test]
async fn a_silent_tls_upstream_fails_its_calls_within_the_connect_timeout() {
    for http2 in [false, true] {
        silent_tls_upstream(http2).await;
    }
}

async fn silent_tls_upstream(http2: bool) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let h = Harness::front(
        FixtureServer::new(),
        &url,
        tempfile::tempdir().unwrap(),
        |c| {
            c.upstreams[0].http2 = http2;
            c.upstreams[0].era = "modern".into();
            c.upstreams[0].connect_timeout = "1s".into();
            c.server.workers = 1;
        },
    )
    .await;
    let started = tokio::time::Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        // Without the tasks extension: the caller waits for the error itself.
        let c = h.plain_client();
        calls.spawn(async move { rpc_err(c.call_tool("echo", json!({})).await) });
    }
    while let Some(e) = calls.join_next().await {
        let e = e.unwrap();
        let said = format!("http2 {http2}: {}", e.message);
        assert!(e.message.contains("unreachable"), "{said}");
        assert!(e.message.contains("no connection within"), "{said}");
    }
    // One after another they would take eight timeouts.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "http2 {http2}: {:?} for eight calls with a 1 s connect timeout",
        started.elapsed()
    );
    h.stop().await;
}

#[tokio::test]
async fn an_auth_failure_while_probing_does_not_settle_the_era() {
    // A modern upstream that wants a bearer token; tasklift forwards the caller's.
    let mock = MockUpstream::start_with_headers(|h, m| {
        if h.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer good") {
            return MockReply::Status(401);
        }
        match m["method"].as_str().unwrap_or("") {
            "server/discover" => MockReply::Result(discover_result(json!({}))),
            "tools/call" => MockReply::Result(json!({"content": [{"type": "text", "text": "ok"}]})),
            other => MockReply::Error(404, -32601, format!("Method not found: {other}")),
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |c| {
        c.upstreams[0].forward_authorization = true
    })
    .await;
    // The first caller has no valid token: the upstream answers 401.
    let e = rpc_err(h.client().call_tool("echo", json!({})).await);
    assert!(e.message.contains("401"), "{}", e.message);
    // A caller with a valid token then gets through: the 401 did not make
    // tasklift take the modern upstream for a legacy one.
    let good = h.client_with(true, &[("authorization", "Bearer good")]);
    let a = good.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "ok");
    assert!(mock.received("initialize").is_empty());
    h.stop().await;
}

/// `http2 = true`: tasklift speaks HTTP/2 (h2c, prior knowledge) to the upstream,
/// and concurrent calls, fast ones and ones that become tasks, share one
/// connection per front-door worker instead of holding one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_upstream_carries_concurrent_calls_on_a_connection_per_worker() {
    let up = FixtureServer::new().modern().tool(Tool::new("echo")).tool(
        Tool::new("slow")
            .sleep(Duration::from_millis(500))
            .reply(|a| format!("slow {}", a["n"])),
    );
    let stats = up.stats();
    let h = Harness::start(up, |c| {
        c.server.workers = 2;
        c.upstreams[0].http2 = true;
    })
    .await;
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..30 {
        let c = h.client();
        calls.spawn(async move {
            let a = c.call_tool("echo", json!({})).await.unwrap();
            assert_eq!(a.result["content"][0]["text"], "echo done");
            let a = c.call_tool("slow", json!({"n": n})).await.unwrap();
            assert_eq!(a.result["resultType"], "task", "{}", a.result);
            let id = a.result["taskId"].as_str().unwrap().to_string();
            let t = wait_terminal(&c, &id, Duration::from_secs(20)).await;
            assert_eq!(
                t["result"]["content"][0]["text"],
                format!("slow {n}"),
                "{t}"
            );
        });
    }
    while let Some(r) = calls.join_next().await {
        r.unwrap();
    }
    assert!(
        stats.http2_requests.load(Ordering::Relaxed) >= 60,
        "every call went over HTTP/2"
    );
    let conns = stats.connections.load(Ordering::Relaxed);
    assert!(
        (1..=2).contains(&conns),
        "30 concurrent slow calls over {conns} connections, not one per worker"
    );
    h.stop().await;
}

/// An HTTP/2 upstream connection that breaks is not reused: the task running on
/// it fails saying the connection broke (it does not hang), and the next call
/// opens a new connection and gets its answer.
#[tokio::test]
async fn a_broken_http2_connection_fails_its_calls_and_the_next_call_reconnects() {
    let up = FixtureServer::new()
        .modern()
        .tool(Tool::new("echo"))
        .tool(Tool::new("slow").sleep(Duration::from_secs(30)))
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let cut = Relay::start(&up.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &cut.url, dir, |c| {
        c.server.workers = 1;
        c.upstreams[0].http2 = true;
    })
    .await;
    let c = h.client();
    let a = c.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "echo done");
    let a = c.call_tool("slow", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    let id = a.result["taskId"].as_str().unwrap().to_string();
    assert_eq!(cut.accepted(), 1, "one connection so far");

    cut.cut();
    let t = wait_terminal(&c, &id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "failed", "{t}");
    let said = t.to_string();
    assert!(said.contains("connection") || said.contains("broke"), "{t}");

    let a = c.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "echo done");
    assert_eq!(cut.accepted(), 2, "a new connection");
    h.stop().await;
}

/// An SSE answer whose stream goes on after the call's response (its last
/// chunk comes later, or never): the caller has its answer at once, the
/// connection goes back to the pool once the stream ends, and a stream that
/// never ends is closed within seconds, not held. Dropped unread, the stream
/// closed its connection, and every call opened a new one.
#[tokio::test]
async fn an_sse_answer_that_ends_after_its_response_keeps_its_connection() {
    let streams: Arc<Mutex<Vec<StreamTx>>> = Arc::default();
    let s2 = streams.clone();
    let mock = MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "server/discover" => MockReply::Result(discover_result(json!({}))),
        _ => {
            let answer = json!({"jsonrpc": "2.0", "id": m["id"], "result": {
                "resultType": "complete",
                "content": [{"type": "text", "text": m["params"]["name"]}]}});
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tx.try_send(Ok(sse_event(&answer))).unwrap();
            s2.lock().unwrap().push(tx);
            MockReply::Stream(rx)
        }
    })
    .await;
    let relay = Relay::start(&mock.url).await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &relay.url, dir, |c| {
        c.server.workers = 1;
    })
    .await;
    let c = h.client();
    for round in 0..3 {
        let a = c.call_tool("first", json!({})).await.unwrap();
        assert_eq!(a.result["content"][0]["text"], "first", "{}", a.result);
        // The stream is still open: the answer did not wait for its end.
        let tx = streams.lock().unwrap().pop().expect("the call's stream");
        drop(tx); // now it ends
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(relay.accepted(), 1, "round {round}: one connection for all");
    }

    // A stream that never ends is let go, not held.
    let a = c.call_tool("endless", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "endless", "{}", a.result);
    let tx = streams.lock().unwrap().pop().expect("the call's stream");
    let closed = async {
        // Comments keep coming until a write finds the connection closed.
        while tx.send(Ok(": ping\n\n".into())).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .expect("the endless stream's connection is closed");
    let a = c.call_tool("after", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "after", "{}", a.result);
    assert_eq!(relay.accepted(), 2, "a new connection after the closed one");
    h.stop().await;
}

/// A 2025-era upstream over HTTP/2: its sessions, their GET streams and the
/// DELETE at the end all ride the shared connection.
#[tokio::test]
async fn a_legacy_upstream_works_over_http2() {
    let up = fixture().tool(Tool::new("slow").sleep(Duration::from_millis(600)));
    let stats = up.stats();
    let h = Harness::start(up, |c| c.upstreams[0].http2 = true).await;
    let c = h.client();
    let a = c.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(a.result["content"][0]["text"], "echo done");
    let a = c.call_tool("slow", json!({})).await.unwrap();
    let id = a.result["taskId"].as_str().unwrap().to_string();
    let t = wait_terminal(&c, &id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(h.received("initialize").len(), 1);
    assert!(stats.http2_requests.load(Ordering::Relaxed) >= 3);
    h.stop().await;
}
