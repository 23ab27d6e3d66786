//! The security suite, in one place for an auditor: a real tasklift in front of the
//! bundled fixture with `auth.mode = "bearer"` and two callers (alice, bob).
//!
//! 1. Another principal can neither use nor detect a task (`tasks/get`, `tasks/update`,
//!    `tasks/cancel`, `subscriptions/listen`); the task is unaffected.
//! 2. Task ids are unguessable UUID v4.
//! 3. Browser `Origin`s that are not loopback or configured get 403 (POST, legacy GET,
//!    admin listener).
//! 4. Oversized and malformed requests are refused and the proxy keeps serving.
//! 5. Another principal's legacy session id is an unknown session id.
//! 6. Secrets are not echoed (401 answers, `check-config`).
//!
//! Related, not repeated here: auth_ownership.rs (header and jwt modes, an upstream's
//! own task ids), tasks/listen.rs `another_principals_task_is_not_acknowledged_nor_pushed`
//! (nothing pushed on bob's stream later), ops/admin.rs
//! `the_admin_listener_refuses_other_host_names_and_origins` (DNS rebinding: Host),
//! door.rs (every -32020 header rule).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;

const ALICE: &str = "Bearer alice-token";
const BOB: &str = "Bearer bob-token";
const ALLOWED: &str = "https://app.example.com";
const EVIL: &str = "https://evil.example";
const V25: &str = "2025-11-25";

/// tasklift in bearer mode, with an allowed origin and the admin listener, in front of
/// a fixture with `echo` and a gated `job`.
async fn harness(tweak: impl FnOnce(&mut tasklift::config::RawConfig)) -> (Arc<Notify>, Harness) {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(Tool::new("echo"))
        .tool(Tool::new("job").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        c.auth.mode = "bearer".into();
        c.server.allowed_origins = vec![ALLOWED.into()];
        c.admin.listen = "127.0.0.1:0".into();
        tweak(c);
    })
    .await;
    (gate, h)
}

/// A modern request as `who` (an `Authorization` value).
fn req(h: &Harness, who: &str, method: &str, params: Value) -> Post {
    Post::new(&h.url, 1, method, params, true).header("authorization", who)
}

/// A `tools/call` of `echo` as `who`.
fn echo(h: &Harness, who: &str) -> Post {
    req(
        h,
        who,
        "tools/call",
        json!({"name": "echo", "arguments": {}}),
    )
}

async fn assert_echo_works(h: &Harness) {
    let r = echo(h, ALICE).send().await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.response()["result"]["content"][0]["text"], "echo done");
}

/// Start the gated `job` as `who`; its task id.
async fn create_task(h: &Harness, who: &str) -> String {
    let a = h
        .client_with(true, &[("authorization", who)])
        .call_tool("job", json!({}))
        .await
        .unwrap();
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    a.result["taskId"].as_str().unwrap().to_string()
}

/// The whole answer (status and body) to `method` on `task` as `who`.
async fn answer(h: &Harness, who: &str, method: &str, task: &str) -> (u16, String) {
    let params = match method {
        "tasks/update" => json!({"taskId": task, "inputResponses": {}}),
        _ => json!({"taskId": task}),
    };
    let r = req(h, who, method, params).send().await;
    (r.status, r.body)
}

/// The acknowledgement of a `subscriptions/listen` for `task` as `who`.
async fn listen_ack(h: &Harness, who: &str, task: &str) -> Value {
    let params = json!({"notifications": {"taskIds": [task]}});
    let mut s = req(h, who, "subscriptions/listen", params).open().await;
    assert_eq!(s.status, 200);
    s.message_where("the acknowledgement", |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
    })
    .await
}

fn admin_url(h: &Harness) -> String {
    let addr = h
        .proxy
        .as_ref()
        .unwrap()
        .admin_addr
        .expect("admin listener");
    format!("http://{addr}/")
}

// 1. Ownership ------------------------------------------------------------------

#[tokio::test]
async fn another_principal_cannot_use_or_detect_a_task() {
    let (gate, h) = harness(|_| {}).await;
    let id = create_task(&h, ALICE).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let foreign = answer(&h, BOB, method, &id).await;
        let missing = answer(&h, BOB, method, &unknown).await;
        assert_eq!(
            foreign, missing,
            "{method}: a foreign task must look unknown"
        );
        let e = serde_json::from_str::<Value>(&foreign.1).unwrap()["error"].clone();
        assert_eq!(e["code"], -32602, "{method}: {e}");
    }
    // The listen acknowledgement agrees to nothing, exactly as for an unknown id.
    assert_eq!(
        listen_ack(&h, BOB, &id).await,
        listen_ack(&h, BOB, &unknown).await
    );
    // Unaffected: still running upstream, not cancelled, and its owner sees it.
    let stats = h.upstream.stats();
    assert_eq!(stats.cancelled.load(Ordering::Relaxed), 0);
    assert_eq!(stats.running.load(Ordering::Relaxed), 1);
    let alice = h.client_with(true, &[("authorization", ALICE)]);
    assert_eq!(alice.get_task(&id).await.unwrap()["status"], "working");
    let ack = listen_ack(&h, ALICE, &id).await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    gate.notify_one();
    let t = wait_terminal(&alice, &id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    h.stop().await;
}

// 2. Task ids -------------------------------------------------------------------

#[tokio::test]
async fn task_ids_are_random_uuid_v4() {
    let (_gate, h) = harness(|c| {
        c.upstreams[0].tools.insert("echo".into(), rule("always"));
    })
    .await;
    let alice = h.client_with(true, &[("authorization", ALICE)]);
    let mut ids = Vec::new();
    for _ in 0..200 {
        let a = alice.call_tool("echo", json!({})).await.unwrap();
        ids.push(a.result["taskId"].as_str().expect("a task").to_string());
    }
    let mut prefixes = HashSet::new();
    for id in &ids {
        let u = uuid::Uuid::parse_str(id).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(u.hyphenated().to_string(), *id, "canonical form");
        assert_eq!(u.get_version_num(), 4, "{id}");
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122, "{id}");
        // Distinct, and no two share 48 bits of prefix (chance: ~1e-10).
        assert!(prefixes.insert(id[..12].to_string()), "shared prefix: {id}");
    }
    // Not ordered by creation (a counter or a timestamp would be).
    let mut sorted = ids.clone();
    sorted.sort();
    assert_ne!(sorted, ids, "ids increase with creation");
    h.stop().await;
}

// 3. Origins --------------------------------------------------------------------

#[tokio::test]
async fn a_foreign_browser_origin_gets_403_everywhere_and_a_configured_one_passes() {
    let (_gate, h) = harness(|_| {}).await;
    let (alice, _) =
        LegacyClient::start_with(&h.url, V25, json!({}), &[("authorization", ALICE)]).await;
    for (origin, status) in [
        (EVIL, 403),
        ("http://localhost.evil.example", 403),
        (ALLOWED, 200),
    ] {
        let r = echo(&h, ALICE).header("origin", origin).send().await;
        assert_eq!(r.status, status, "POST from {origin}: {r:?}");
        let with_origin = alice.with_extra(&[("authorization", ALICE), ("origin", origin)]);
        let g = with_origin.get(None).await;
        assert_eq!(g.status, status, "legacy GET from {origin}");
        drop(g);
        let r = raw("GET", &admin_url(&h), &[("origin", origin)], "").await;
        assert_eq!(r.status, status, "admin page from {origin}: {r:?}");
    }
    assert_eq!(
        h.received("tools/call").len(),
        1,
        "only the allowed call went upstream"
    );
    h.stop().await;
}

// 4. Oversized and malformed requests -------------------------------------------

#[tokio::test]
async fn oversized_and_malformed_requests_are_refused_and_the_proxy_keeps_serving() {
    let (_gate, h) = harness(|c| c.server.max_body_bytes = 2048).await;
    let big = echo(&h, ALICE)
        .edit(|b| b["params"]["arguments"]["blob"] = json!("x".repeat(64 * 1024)))
        .send()
        .await;
    assert_eq!(big.status, 413, "{big:?}");
    assert!(big.json()["error"]["code"].is_i64(), "{}", big.body);
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("authorization", ALICE),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
    ];
    let r = raw(
        "POST",
        &h.url,
        &headers,
        "{\"jsonrpc\": \"2.0\", \"id\": 1,",
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!(-32700)),
        "{r:?}"
    );
    let batch = json!([{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {}}]);
    let r = echo(&h, ALICE).edit(|b| *b = batch).send().await;
    assert_eq!(r.status, 400, "batch: {r:?}");
    assert!(r.json()["error"]["code"].is_i64(), "{}", r.body);
    for params in [json!([1, 2]), json!("x"), json!(7)] {
        let r = req(&h, ALICE, "tools/list", json!({}))
            .edit(|b| b["params"] = params.clone())
            .send()
            .await;
        assert_eq!(r.status, 400, "params {params}: {r:?}");
        assert!(r.json()["error"]["code"].is_i64(), "{}", r.body);
    }
    assert!(
        h.received("tools/call").is_empty(),
        "nothing refused went upstream"
    );
    assert_echo_works(&h).await;
    h.stop().await;
}

// 5. Legacy sessions ------------------------------------------------------------

#[tokio::test]
async fn another_principals_legacy_session_id_is_an_unknown_one() {
    let (_gate, h) = harness(|_| {}).await;
    let (alice, _) =
        LegacyClient::start_with(&h.url, V25, json!({}), &[("authorization", ALICE)]).await;
    let bob = alice.with_extra(&[("authorization", BOB)]);
    let nobody = bob.with_sid(&uuid::Uuid::new_v4().simple().to_string());
    for (who, c) in [("bob", &bob), ("unknown", &nobody)] {
        let post = c.request(2, "tools/list", json!({})).await;
        let get = c.get(None).await.finish_guarded("GET").await;
        let del = c.delete().await;
        for (what, r) in [("POST", &post), ("GET", &get), ("DELETE", &del)] {
            assert_eq!(r.status, 404, "{who} {what}: {r:?}");
            assert_eq!(r.json()["error"]["code"], -32001, "{who} {what}: {r:?}");
        }
    }
    // Byte for byte the same answers for bob's use of alice's id and a made-up id.
    let bodies = |c: &LegacyClient| {
        let c = c.clone();
        async move {
            let p = c.request(3, "tools/list", json!({})).await.body;
            let g = c.get(None).await.finish_guarded("GET").await.body;
            let d = c.delete().await.body;
            (p, g, d)
        }
    };
    assert_eq!(bodies(&bob).await, bodies(&nobody).await);
    // Alice's session is untouched.
    let r = alice
        .request(4, "tools/call", json!({"name": "echo"}))
        .await;
    assert_eq!(
        r.response()["result"]["content"][0]["text"],
        "echo done",
        "{r:?}"
    );
    assert_eq!(h.upstream.stats().deletes.load(Ordering::Relaxed), 0);
    h.stop().await;
}

// 6. Secrets --------------------------------------------------------------------

#[tokio::test]
async fn a_refused_credential_is_not_echoed() {
    let (_gate, h) = harness(|_| {}).await;
    let secret = "sekrit-4711";
    for auth in [
        format!("Token {secret}"),
        format!("Basic {secret}"),
        secret.to_string(),
    ] {
        let r = echo(&h, &auth).send().await;
        assert_eq!(r.status, 401, "{auth}: {r:?}");
        assert!(!r.body.contains(secret), "{auth} echoed: {}", r.body);
        let echoed = r
            .headers
            .values()
            .any(|v| v.as_bytes().windows(11).any(|w| w == secret.as_bytes()));
        assert!(!echoed, "{auth} echoed in a header: {r:?}");
    }
    h.stop().await;
    // jwt mode: a malformed token is refused without being repeated
    // (auth_ownership.rs `jwt_mode_keeps_tasks_across_token_refresh` covers expired
    // and wrong-audience tokens).
    let h = Harness::start(FixtureServer::new().tool(Tool::new("echo")), |c| {
        c.auth.mode = "jwt".into();
        c.auth.jwt.hs256_secret = "an-hs256-secret-of-enough-length-000".into();
    })
    .await;
    for token in [
        format!("eyJ{secret}.e30.x"),
        format!("{secret}.{secret}.{secret}"),
    ] {
        let r = echo(&h, &format!("Bearer {token}")).send().await;
        assert_eq!(r.status, 401, "{token}: {r:?}");
        assert!(!r.body.contains(secret), "{token} echoed: {}", r.body);
    }
    h.stop().await;
}

#[test]
fn check_config_redacts_configured_secrets() {
    use crate::support::cli::{run, text};
    let secrets = [
        "hash-key-s3cret",
        "hs256-s3cret-of-enough-length-0000",
        "header-s3cret",
        "env-s3cret",
        "url-s3cret",
        "tok-s3cret",
    ];
    let toml = format!(
        r#"
[auth]
mode = "jwt"
hash_key = "{}"
[auth.jwt]
hs256_secret = "{}"

[[upstreams]]
name = "web"
path = "/mcp"
url = "http://svc:{}@127.0.0.1:9000/mcp"
headers = {{ "X-Api-Key" = "{}" }}

[[upstreams]]
name = "tok"
path = "/tok"
url = "http://tok-s3cret@127.0.0.1:9001/mcp"

[[upstreams]]
name = "local"
path = "/local"
command = ["true"]
env = {{ "API_TOKEN" = "{}" }}
"#,
        secrets[0], secrets[1], secrets[4], secrets[2], secrets[3]
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(&file, toml).unwrap();
    let out = run(
        &["check-config", file.to_str().unwrap()],
        Duration::from_secs(30),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for s in secrets {
        assert!(
            !stdout.contains(s) && !stderr.contains(s),
            "{s} shown:\n{stdout}{stderr}"
        );
    }
    // What is redacted is still named.
    for name in [
        "X-Api-Key",
        "API_TOKEN",
        "hash_key",
        "hs256_secret",
        "<redacted>",
    ] {
        assert!(stdout.contains(name), "{name} missing:\n{stdout}");
    }
}
