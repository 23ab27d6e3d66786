//! A dual-era upstream behind tasklift: `v2_server.py` (mcp==2.3 MCPServer) serves
//! 2026-07-28 clients and, after `initialize`, 2025-11-25 ones, and tells each era
//! something different (issue 28, point 5). tasklift speaks 2025 to it for a 2025
//! session, on an upstream session of the client's own. Each test asks the server
//! directly and through tasklift, and compares:
//!
//! - a 2025 session gets what the server gives a 2025 client: its `initialize`
//!   capabilities (no `listChanged`, no `subscribe`, where its `server/discover`
//!   says both), its refusal of `resources/subscribe` and `logging/setLevel`, its
//!   errors (not always those of a 2026 client) in-band, with 200;
//! - a 2026 client gets the HTTP status the server answers its errors with (400
//!   for `-32602`, 404 for `-32601`).
//!
//! And, with scripted upstreams: the status of a legacy upstream's error reaches a
//! 2025 session (but never a 404, which would end it), and a 2026-07-28-only
//! upstream is asked the legacy `initialize` once, then described from
//! `server/discover` as before.

use serde_json::{json, Value};
use tasklift_fixture::FixtureServer;

use crate::support::harness::*;
use crate::support::mock::{MockReply, MockUpstream};
use crate::support::python::{python, Mode, PyServer};

const V25: &str = "2025-11-25";

/// The mcp 2.3 server over HTTP and tasklift in front of it; `None` when the peer
/// is not installed.
async fn dual_era() -> Option<(PyServer, Harness)> {
    let python = python("mcp23")?;
    let server = PyServer::start(&python, "v2_server.py", Mode::Http).await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &server.url, dir, |_| {}).await;
    Some((server, h))
}

/// The capabilities without what tasklift adds for a 2025-11-25 client (its own
/// 2025-11-25 tasks).
fn without_tasks(caps: &Value) -> Value {
    let mut c = caps.clone();
    c.as_object_mut().unwrap().remove("tasks");
    c
}

#[tokio::test]
async fn a_2025_session_is_told_what_the_server_tells_a_2025_client() {
    let Some((server, h)) = dual_era().await else {
        return;
    };
    let (_, direct) = LegacyClient::start(&server.url, V25, json!({})).await;
    let (_, through) = LegacyClient::start(&h.url, V25, json!({})).await;
    // What the issue saw: the server tells a 2025 client false for both.
    assert_eq!(
        direct["capabilities"]["resources"]["subscribe"], false,
        "{direct}"
    );
    assert_eq!(
        direct["capabilities"]["tools"]["listChanged"], false,
        "{direct}"
    );
    assert_eq!(
        without_tasks(&through["capabilities"]),
        direct["capabilities"],
        "through tasklift: {through}"
    );
    assert_eq!(through["serverInfo"], direct["serverInfo"], "{through}");
    assert_eq!(through["protocolVersion"], V25);
    // A 2026 client is still told what the server tells 2026 clients.
    let d = post(&h.url, 2, "server/discover", json!({}), false).await;
    let caps = &d.json()["result"]["capabilities"];
    assert_eq!(caps["resources"]["subscribe"], true, "{caps}");
    assert_eq!(caps["tools"]["listChanged"], true, "{caps}");
    stop(server, h).await;
}

#[tokio::test]
async fn methods_the_server_lacks_for_2025_clients_get_its_refusal() {
    let Some((server, h)) = dual_era().await else {
        return;
    };
    let (direct, _) = LegacyClient::start(&server.url, V25, json!({})).await;
    let (through, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    for (id, method, params) in [
        (2, "resources/subscribe", json!({"uri": "file:///x"})),
        (3, "resources/unsubscribe", json!({"uri": "file:///x"})),
        (4, "logging/setLevel", json!({"level": "warning"})),
    ] {
        let d = direct.request(id, method, params.clone()).await;
        let t = through.request(id, method, params).await;
        assert_eq!(d.error()["code"], -32601, "{method} directly: {d:?}");
        assert_eq!(t.error(), d.error(), "{method} through tasklift: {t:?}");
        assert_eq!(t.status, d.status, "{method}: {t:?}");
        assert_eq!(t.status, 200, "{method}: {t:?}");
    }
    stop(server, h).await;
}

#[tokio::test]
async fn the_servers_error_status_reaches_each_era_as_the_server_gives_it() {
    let Some((server, h)) = dual_era().await else {
        return;
    };
    // (method, params, the error code, the status the server answers a 2026 client)
    let cases = [
        (
            "tools/call",
            json!({"name": "reject", "arguments": {}}),
            -32602,
            400,
        ),
        (
            "tools/call",
            json!({"name": "reject", "arguments": {"seconds": 0.2}}),
            -32602,
            400,
        ),
        (
            "resources/read",
            json!({"uri": "file:///nowhere"}),
            -32602,
            400,
        ),
        ("prompts/get", json!({"name": "nowhere"}), -32603, 200),
        ("nowhere/method", json!({}), -32601, 404),
    ];
    // 2026-07-28: the server's own status (400 for -32602), not tasklift's 200.
    for (i, (method, params, code, status)) in cases.iter().enumerate() {
        let id = 10 + i as u64;
        let d = post(&server.url, id, method, params.clone(), false).await;
        let t = post(&h.url, id, method, params.clone(), false).await;
        assert_eq!(d.json()["error"]["code"], *code, "{method} directly: {d:?}");
        assert_eq!(d.status, *status, "{method} directly: {d:?}");
        assert_eq!(t.json()["error"], d.json()["error"], "{method}: {t:?}");
        assert_eq!(t.status, d.status, "{method} {params}: {t:?}");
    }
    // 2025-11-25: the server answers a 2025 client's errors in-band, with 200, and
    // not always with the same error (an unknown prompt is code 0 there).
    let (direct, _) = LegacyClient::start(&server.url, V25, json!({})).await;
    let (through, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    for (i, (method, params, _, _)) in cases.iter().enumerate() {
        let id = 20 + i as u64;
        let d = direct.request(id, method, params.clone()).await;
        let t = through.request(id, method, params.clone()).await;
        assert_eq!(t.error(), d.error(), "{method} {params}: {t:?}");
        assert_eq!(t.status, d.status, "{method} {params}: {t:?}");
        assert_eq!(t.status, 200, "{method} {params}: {t:?}");
        if *method == "prompts/get" {
            assert_eq!(t.error()["code"], 0, "{t:?}");
        }
    }
    stop(server, h).await;
}

async fn stop(server: PyServer, h: Harness) {
    h.stop().await;
    drop(server);
}

/// A 2025-11-25 server (sessions) whose `tools/call` fails with `status` and a
/// JSON-RPC error.
async fn legacy_refusing(status: u16) -> MockUpstream {
    MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "server/discover" => {
            MockReply::Error(400, -32600, "Bad Request: No valid session ID".into())
        }
        "initialize" => MockReply::WithHeaders(
            vec![("mcp-session-id".into(), "up-1".into())],
            Box::new(MockReply::Result(json!({"protocolVersion": V25,
                "capabilities": {"tools": {}}, "serverInfo": {"name": "old", "version": "1"}}))),
        ),
        "tools/call" => MockReply::Error(status, -32602, "bad arguments".into()),
        _ => MockReply::Result(json!({})),
    })
    .await
}

#[tokio::test]
async fn a_legacy_upstreams_error_status_reaches_a_2025_session_but_never_a_404() {
    for (status, seen) in [(400, 400), (422, 422), (500, 500), (404, 200)] {
        let mock = legacy_refusing(status).await;
        let dir = tempfile::tempdir().unwrap();
        let h = Harness::front(FixtureServer::new(), &mock.url, dir, |_| {}).await;
        let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
        let r = c
            .request(2, "tools/call", json!({"name": "any", "arguments": {}}))
            .await;
        // 404 would tell the client its session on tasklift is gone.
        assert_eq!(r.status, seen, "{status}: {r:?}");
        assert_eq!(r.error()["code"], -32602, "{status}: {r:?}");
        assert_eq!(r.error()["message"], "bad arguments", "{status}: {r:?}");
        // A 2026 client in front of the same server gets the status as well.
        let m = post(&h.url, 3, "tools/call", json!({"name": "any"}), false).await;
        assert_eq!(m.json()["error"]["code"], -32602, "{status}: {m:?}");
        assert_eq!(m.status, status, "{status}: {m:?}");
        h.stop().await;
    }
}

#[tokio::test]
async fn a_modern_only_upstream_is_asked_the_legacy_initialize_once() {
    let h = Harness::start(FixtureServer::new().modern(), |_| {}).await;
    for _ in 0..3 {
        let (c, init) = LegacyClient::start(&h.url, V25, json!({})).await;
        // As before: its server/discover capabilities and serverInfo.
        assert_eq!(without_tasks(&init["capabilities"]), json!({"tools": {}}));
        assert_eq!(init["serverInfo"]["version"], "1", "{init}");
        assert_eq!(
            c.request(2, "ping", json!({})).await.response()["result"],
            json!({})
        );
    }
    assert_eq!(h.received("initialize").len(), 1);
    h.stop().await;
}
