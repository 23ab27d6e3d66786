//! The `requestState` tasklift hands out for a parked legacy call is attacker-controlled
//! input: tampered, foreign, replayed, misdirected or expired state is rejected with
//! -32602, and the parked call is not disturbed by a rejected attempt.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::config::ToolPolicy;
use tasklift::reply::Reply;
use tasklift::store::{SledStore, TaskStore};
use tasklift::tasks::{Engine, EngineSettings};
use tasklift::upstream::{
    CallContext, CallEvent, Canceller, Era, ServerRequest, Upstream, UpstreamCall, UpstreamFuture,
};
use tasklift_fixture::FixtureServer;
use tasklift_protocol::jsonrpc::{Outcome, Request};
use tokio::sync::mpsc;

use crate::support::harness::*;
use crate::support::input::*;

/// Yes to the one request of an `InputRequiredResult`.
fn yes_to(r: &Value) -> Value {
    let reqs = r["inputRequests"].as_object().unwrap();
    let key = reqs.keys().next().unwrap().clone();
    json!({key: {"action": "accept", "content": {"confirm": true}}})
}

fn assert_rejected(r: &Raw, why: &str) {
    let e = r.error();
    assert_eq!(e["code"], -32602, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("requestState"), "{msg}");
    assert!(msg.contains(why), "expected {why:?} in {msg:?}");
}

/// The demo tools (confirm_delete and multi_input ask before a 10 s threshold), and
/// a caller of confirm_delete.
async fn start(bearer: bool) -> (Harness, Caller) {
    let h = Harness::start(FixtureServer::demo(), |c| {
        if bearer {
            c.auth.mode = "bearer".into();
        }
        with_tool("confirm_delete", threshold("10s"))(c);
        with_tool("multi_input", threshold("10s"))(c);
    })
    .await;
    let c = Caller::new(&h, "confirm_delete", json!({"filename": "a.txt"}));
    (h, c)
}

/// The retry that works.
async fn assert_resumes(c: &Caller, id: u64, r: &Value) {
    let ok = result(&c.retry(id, yes_to(r), &r["requestState"]).await);
    assert_eq!(ok["content"][0]["text"], "Deleted a.txt.", "{ok}");
}

#[tokio::test]
async fn tampered_state_is_rejected_and_the_call_stays_parked() {
    let (h, c) = start(false).await;
    let r = result(&c.call(1).await);
    let state = r["requestState"].as_str().unwrap();
    let mut bytes = state.as_bytes().to_vec();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = json!(String::from_utf8(bytes).unwrap());
    assert_rejected(&c.retry(2, yes_to(&r), &tampered).await, "");
    assert!(
        answers_upstream_got(&h).is_empty(),
        "nothing answered upstream"
    );
    assert_resumes(&c, 3, &r).await;
    h.stop().await;
}

#[tokio::test]
async fn state_presented_by_another_principal_is_rejected() {
    let (h, c) = start(true).await;
    let (alice, bob) = (c.clone().token("alice-token"), c.token("bob-token"));
    let r = result(&alice.call(1).await);
    let stolen = bob.retry(2, yes_to(&r), &r["requestState"]).await;
    assert_rejected(&stolen, "another caller");
    assert_resumes(&alice, 3, &r).await;
    h.stop().await;
}

#[tokio::test]
async fn state_is_single_use() {
    let (h, c) = start(false).await;
    let r = result(&c.call(1).await);
    assert_resumes(&c, 2, &r).await;
    let again = c.retry(3, yes_to(&r), &r["requestState"]).await;
    assert_rejected(&again, "no longer waiting");
    let calls = h.received("tools/call").len();
    assert_eq!(calls, 1, "the replay started nothing upstream");
    h.stop().await;
}

#[tokio::test]
async fn state_presented_for_another_tool_is_rejected() {
    let (h, c) = start(false).await;
    let r = result(&c.call(1).await);
    let other = c.clone().tool("multi_input", json!({}));
    let misdirected = other.retry(2, yes_to(&r), &r["requestState"]).await;
    assert_rejected(&misdirected, "another request");
    assert_eq!(h.received("tools/call").len(), 1, "multi_input not called");
    assert_resumes(&c, 3, &r).await;
    h.stop().await;
}

/// An in-memory legacy upstream whose tool asks one question and waits forever.
struct Asking {
    answers: Arc<Mutex<Vec<Outcome>>>,
    cancelled: Arc<AtomicUsize>,
}

impl Upstream for Asking {
    fn name(&self) -> &str {
        "asking"
    }
    fn era<'a>(&'a self, _: &'a CallContext) -> UpstreamFuture<'a, Era> {
        Box::pin(async { Ok(Era::Legacy) })
    }
    fn call<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, UpstreamCall> {
        let (answers, cancelled) = (self.answers.clone(), self.cancelled.clone());
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(4);
            let responder: Box<dyn FnOnce(Outcome) + Send> =
                Box::new(move |o| answers.lock().unwrap().push(o));
            let req = ServerRequest::new(
                "elicitation/create".into(),
                json!({"message": "ok?"}),
                responder,
            );
            let task = tokio::spawn(async move {
                let _ = tx.send(CallEvent::Input(req)).await;
                std::future::pending::<()>().await
            });
            let on_cancel: Box<dyn FnOnce() + Send> = Box::new(move || {
                cancelled.fetch_add(1, Ordering::Relaxed);
            });
            Ok(UpstreamCall {
                events: rx.into(),
                canceller: Canceller::new(task.abort_handle(), Some(on_cancel)),
            })
        })
    }
    fn notify<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn discover<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, Outcome> {
        Box::pin(async { Ok(Ok(json!({}))) })
    }
    fn close_idle<'a>(
        &'a self,
        _: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
}

/// The engine's answer as the front door renders it (for a request without an id).
fn rendered(a: tasklift::tasks::Answer) -> Reply {
    tasklift::front::render::reply(a, None)
}

fn json_reply(a: tasklift::tasks::Answer) -> Value {
    match rendered(a) {
        Reply::Json(v) => v,
        other => panic!("expected a JSON reply, got {other:?}"),
    }
}

/// PARK_TTL (src/tasks/sync.rs) is 10 minutes: checked under paused time.
#[tokio::test(start_paused = true)]
async fn a_parked_call_nobody_resumes_expires_after_ten_minutes() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TaskStore> = Arc::new(SledStore::open(dir.path(), 64 * 1024).unwrap());
    let engine = Engine::new(
        store,
        EngineSettings::new(
            Duration::from_secs(60),
            Duration::from_secs(15),
            tasklift::front::errors::written,
        ),
    );
    let answers: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let cancelled = Arc::new(AtomicUsize::new(0));
    let up: Arc<dyn Upstream> = Arc::new(Asking {
        answers: answers.clone(),
        cancelled: cancelled.clone(),
    });
    let policy = ToolPolicy::auto(
        Duration::from_secs(3600),
        Duration::from_secs(7200),
        Duration::from_secs(1),
    );
    let req = |id: u64, state: Option<&Value>| {
        let mut p = json!({"name": "t", "_meta": {"io.modelcontextprotocol/clientCapabilities": caps(true, &["elicitation"])}});
        if let Some(s) = state {
            p["requestState"] = s.clone();
            p["inputResponses"] = json!({"input-1": {"action": "accept"}});
        }
        Request::from_value(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": p}),
        )
        .unwrap()
    };
    let ctx = CallContext {
        principal: "p".into(),
        ..Default::default()
    };
    let r = json_reply(
        engine
            .call_tool(up.clone(), &policy, req(1, None).into(), ctx.clone())
            .await,
    );
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let state = r["result"]["requestState"].clone();

    tokio::time::sleep(Duration::from_secs(599)).await;
    assert!(answers.lock().unwrap().is_empty(), "still parked at 9:59");
    assert_eq!(cancelled.load(Ordering::Relaxed), 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = answers.lock().unwrap().clone();
    assert_eq!(
        got.len(),
        1,
        "the upstream's request was answered when the park expired"
    );
    assert!(got[0].is_err(), "with an error: {got:?}");
    assert_eq!(
        cancelled.load(Ordering::Relaxed),
        1,
        "and the upstream call cancelled"
    );

    let late = json_reply(
        engine
            .call_tool(up, &policy, req(2, Some(&state)).into(), ctx)
            .await,
    );
    assert_eq!(late["error"]["code"], -32602, "{late}");
    let msg = late["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("requestState") && msg.contains("expired"),
        "{msg}"
    );
}
