//! Principals and ownership: a task is visible only to whoever created it, and a
//! foreign task is indistinguishable from an unknown one. Also the extension gate
//! on `tasks/*` and `tasks/update`'s acknowledgement.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::{Client, ClientError};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;

fn gated() -> (Arc<Notify>, FixtureServer) {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new().tool(Tool::new("job").gate(gate.clone()));
    (gate, up)
}

async fn create(c: &Client) -> String {
    let a = c.call_tool("job", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    a.result["taskId"].as_str().unwrap().to_string()
}

/// The whole error of a `tasks/*` call (code, message, data), to compare.
async fn task_error(c: &Client, method: &str, params: Value) -> Value {
    match c.request(method, params).await {
        Err(ClientError::Rpc(e)) => e.to_value(),
        other => panic!("{method}: expected an error, got {other:?}"),
    }
}

/// Another principal gets exactly the unknown-id error for every tasks/* method,
/// and the owner's task is untouched.
async fn assert_foreign(owner: &Client, other: &Client, id: &str) {
    let unknown = uuid::Uuid::new_v4().to_string();
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let foreign = task_error(other, method, json!({"taskId": id})).await;
        let missing = task_error(other, method, json!({"taskId": unknown})).await;
        assert_eq!(foreign["code"], -32602, "{method}: {foreign}");
        assert_eq!(
            foreign, missing,
            "{method}: a foreign task must look unknown"
        );
    }
    let t = owner.get_task(id).await.unwrap();
    assert_eq!(
        t["status"], "working",
        "the other caller's cancel did nothing: {t}"
    );
}

#[tokio::test]
async fn bearer_mode_keeps_tasks_private_to_their_token() {
    let (gate, up) = gated();
    let h = Harness::start(up, |c| c.auth.mode = "bearer".into()).await;
    let alice = h.client_with(true, &[("authorization", "Bearer alice-token")]);
    let bob = h.client_with(true, &[("authorization", "Bearer bob-token")]);
    let id = create(&alice).await;
    assert_foreign(&alice, &bob, &id).await;
    // The same token on a new connection is the same owner.
    let alice2 = h.client_with(true, &[("authorization", "Bearer alice-token")]);
    assert_eq!(
        alice2.cancel_task(&id).await.unwrap(),
        json!({"resultType": "complete"})
    );
    let t = wait_terminal(&alice, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "cancelled");
    gate.notify_one();
    h.stop().await;
}

#[tokio::test]
async fn bearer_mode_answers_401_without_a_token() {
    let (_gate, up) = gated();
    let h = Harness::start(up, |c| c.auth.mode = "bearer".into()).await;
    for auth in [None, Some("Basic dXNlcjpwdw=="), Some("Bearer ")] {
        let mut p = Post::new(&h.url, 3, "tools/call", json!({"name": "job"}), true);
        if let Some(a) = auth {
            p = p.header("authorization", a);
        }
        let r = p.send().await;
        assert_eq!(r.status, 401, "{auth:?}: {r:?}");
        assert_eq!(r.headers["www-authenticate"], "Bearer");
        assert!(r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer"));
    }
    assert_eq!(stored_tasks(&h).await, 0);
    h.stop().await;
}

#[tokio::test]
async fn header_mode_uses_the_trusted_header() {
    let (gate, up) = gated();
    let h = Harness::start(up, |c| c.auth.mode = "header:X-Forwarded-User".into()).await;
    let ann = h.client_with(true, &[("x-forwarded-user", "ann@example.com")]);
    let ben = h.client_with(true, &[("x-forwarded-user", "ben@example.com")]);
    let id = create(&ann).await;
    assert_foreign(&ann, &ben, &id).await;
    // Without the header: 401, naming the header the proxy in front must set.
    let r = Post::new(&h.url, 1, "tasks/get", json!({"taskId": id}), true)
        .send()
        .await;
    assert_eq!(r.status, 401);
    assert!(r.body.contains("x-forwarded-user"), "{}", r.body);
    gate.notify_one();
    h.stop().await;
}

#[tokio::test]
async fn none_mode_makes_the_task_id_the_secret() {
    let (gate, up) = gated();
    let h = Harness::start(up, |c| c.auth.mode = "none".into()).await;
    let a = h.client_with(true, &[("authorization", "Bearer one")]);
    let b = h.client_with(true, &[("authorization", "Bearer two")]);
    let id = create(&a).await;
    assert_eq!(b.get_task(&id).await.unwrap()["status"], "working");
    assert_eq!(
        h.client().get_task(&id).await.unwrap()["taskId"],
        id.as_str()
    );
    gate.notify_one();
    let t = wait_terminal(&b, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "completed");
    h.stop().await;
}

#[tokio::test]
async fn tasks_methods_require_the_extension_even_for_unknown_ids() {
    let (gate, up) = gated();
    let h = Harness::start(up, |_| {}).await;
    let id = create(&h.client()).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        for task in [&id, &unknown] {
            let r = post(&h.url, 2, method, json!({"taskId": task}), false).await;
            assert_eq!(r.status, 400, "{method}: {r:?}");
            let e = r.error();
            assert_eq!(e["code"], -32021, "{method}: {e}");
            assert!(e["data"]["requiredCapabilities"]["extensions"]
                .get("io.modelcontextprotocol/tasks")
                .is_some());
        }
    }
    let t = h.client().get_task(&id).await.unwrap();
    assert_eq!(t["status"], "working", "the refused cancel did nothing");
    gate.notify_one();
    h.stop().await;
}

#[tokio::test]
async fn tasks_update_acks_and_ignores_keys_that_are_not_outstanding() {
    let (gate, up) = gated();
    let h = Harness::start(up, |_| {}).await;
    let c = h.client();
    let id = create(&c).await;
    let ack = c
        .request(
            "tasks/update",
            json!({
                "taskId": id,
                "inputResponses": {"no-such-key": {"action": "accept", "content": {}}},
                "x-unknown": 1,
            }),
        )
        .await
        .unwrap()
        .result;
    assert_eq!(ack, json!({"resultType": "complete"}));
    let t = c.get_task(&id).await.unwrap();
    assert_eq!(t["status"], "working");
    assert!(t.get("inputRequests").is_none(), "{t}");
    gate.notify_one();
    let t = wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["content"][0]["text"], "job done");
    h.stop().await;
}

#[tokio::test]
async fn an_upstreams_own_task_is_reachable_only_by_its_caller() {
    use crate::support::mock::{discover_result, MockReply, MockUpstream};
    let handle = json!({
        "resultType": "task", "taskId": "up-7", "status": "working",
        "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 60000,
    });
    let h1 = handle.clone();
    let mock = MockUpstream::start(move |m| match m["method"].as_str().unwrap_or("") {
        "server/discover" => MockReply::Result(discover_result(json!({}))),
        "tools/call" => MockReply::Result(h1.clone()),
        "tasks/get" => MockReply::Result(json!({"resultType": "complete", "taskId": "up-7", "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 60000})),
        other => MockReply::Error(404, -32601, format!("Method not found: {other}")),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &mock.url, dir, |raw| {
        raw.auth.mode = "bearer".into()
    })
    .await;
    let alice = h.client_with(true, &[("authorization", "Bearer alice-token")]);
    let bob = h.client_with(true, &[("authorization", "Bearer bob-token")]);
    assert_eq!(
        alice.call_tool("job", json!({})).await.unwrap().result,
        handle
    );
    assert_eq!(alice.get_task("up-7").await.unwrap()["status"], "working");
    let err = bob.get_task("up-7").await.unwrap_err().to_string();
    assert!(
        err.contains("-32602"),
        "another caller must not reach the upstream's task: {err}"
    );
    assert_eq!(
        mock.received("tasks/get").len(),
        1,
        "bob's request never reached the upstream"
    );
    h.stop().await;
}

/// An RS256 access token from the test issuer, signed with the `rsa-1` test key.
fn jwt(sub: &str, aud: &str, exp_in: i64, iat_shift: i64) -> String {
    use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jwt");
    let pem = std::fs::read(format!("{dir}/rsa-private.pem")).unwrap();
    let now = jsonwebtoken::get_current_timestamp() as i64;
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa-1".into());
    let claims = json!({
        "iss": "https://idp.example", "sub": sub, "aud": aud,
        "iat": now + iat_shift, "exp": now + exp_in,
    });
    encode(&header, &claims, &EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap()
}

#[tokio::test]
async fn jwt_mode_keeps_tasks_across_token_refresh() {
    let (gate, up) = gated();
    let h = Harness::start(up, |c| {
        c.auth.mode = "jwt".into();
        c.auth.jwt.jwks_file =
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jwt/jwks.json").into();
        c.auth.jwt.audience = "tasklift".into();
        c.auth.jwt.issuers = vec!["https://idp.example".into()];
    })
    .await;
    let bearer = |t: String| format!("Bearer {t}");
    let first = bearer(jwt("alice", "tasklift", 300, 0));
    let alice = h.client_with(true, &[("authorization", &first)]);
    let id = create(&alice).await;
    // A refreshed token (same iss and sub, new iat and exp) still owns the task.
    let refreshed = bearer(jwt("alice", "tasklift", 3600, 5));
    assert_ne!(first, refreshed);
    let alice2 = h.client_with(true, &[("authorization", &refreshed)]);
    let t = alice2.get_task(&id).await.unwrap();
    assert_eq!(t["status"], "working", "{t}");
    // Another subject of the same issuer does not see it.
    let bob_token = bearer(jwt("bob", "tasklift", 300, 0));
    let bob = h.client_with(true, &[("authorization", &bob_token)]);
    assert_foreign(&alice2, &bob, &id).await;
    // Expired, or meant for another audience: 401 naming what failed.
    for (token, what) in [
        (jwt("alice", "tasklift", -3600, -7200), "expired"),
        (jwt("alice", "another-api", 300, 0), "audience"),
    ] {
        let r = Post::new(&h.url, 1, "tasks/get", json!({"taskId": id}), true)
            .header("authorization", &bearer(token.clone()))
            .send()
            .await;
        assert_eq!(r.status, 401, "{what}: {r:?}");
        assert!(r.body.contains(what), "{what}: {}", r.body);
        assert!(!r.body.contains(&token), "the token is echoed: {}", r.body);
    }
    assert_eq!(
        alice2.cancel_task(&id).await.unwrap(),
        json!({"resultType": "complete"})
    );
    gate.notify_one();
    h.stop().await;
}
