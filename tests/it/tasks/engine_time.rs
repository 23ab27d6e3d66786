//! The task engine under paused tokio time, with an in-memory upstream: the
//! threshold race, keep-alives and TTL expiry, without waiting in real time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::config::ToolPolicy;
use tasklift::reply::{Reply, StreamItem};
use tasklift::store::{SledStore, StoreFuture, StoreStats, TaskRecord, TaskStore};
use tasklift::tasks::{into_detailed_task, Caller, Engine, EngineSettings};
use tasklift::upstream::{
    CallContext, CallEvent, Canceller, Era, ServerRequest, Upstream, UpstreamCall, UpstreamFuture,
};
use tasklift_protocol::jsonrpc::{Request, RpcError};
use tokio::sync::mpsc;

/// The `Upstream` methods these in-memory upstreams do nothing with.
macro_rules! idle_rest {
    () => {
        fn notify<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
        fn discover<'a>(
            &'a self,
            _: &'a Request,
            _: &'a CallContext,
        ) -> UpstreamFuture<'a, tasklift_protocol::jsonrpc::Outcome> {
            Box::pin(async { Ok(Ok(json!({}))) })
        }
        fn close_idle<'a>(
            &'a self,
            _: bool,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
            Box::pin(async {})
        }
    };
}

/// An upstream whose tool answers after a fixed (virtual) time.
struct Timed {
    delay: Duration,
    cancelled: Arc<AtomicUsize>,
}

impl Upstream for Timed {
    fn name(&self) -> &str {
        "timed"
    }
    fn era<'a>(&'a self, _: &'a CallContext) -> UpstreamFuture<'a, Era> {
        Box::pin(async { Ok(Era::Modern) })
    }
    fn call<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, UpstreamCall> {
        let delay = self.delay;
        let cancelled = self.cancelled.clone();
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(4);
            let task = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = tx
                    .send(CallEvent::Done(Ok(
                        json!({"content": [{"type": "text", "text": "done"}]}),
                    )))
                    .await;
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
    idle_rest!();
}

fn policy(threshold: u64, ttl: u64) -> ToolPolicy {
    ToolPolicy::auto(
        Duration::from_secs(threshold),
        Duration::from_secs(ttl),
        Duration::from_secs(1),
    )
}

fn call(tasks: bool) -> Request {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    Request::from_value(
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "t", "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}}}),
    )
    .unwrap()
}

/// `tasks/get` as the principal `p` on the upstream `timed`, in its wire shape.
async fn get(engine: &Engine, id: &str) -> Result<Value, RpcError> {
    let who = Caller {
        principal: "p",
        upstream: "timed",
    };
    engine
        .get(id, who)
        .await
        .map(into_detailed_task)
        .map_err(RpcError::from)
}

fn setup(
    delay_secs: u64,
) -> (
    Arc<Engine>,
    Arc<dyn Upstream>,
    Arc<AtomicUsize>,
    tempfile::TempDir,
) {
    setup_with(Duration::from_secs(delay_secs))
}

fn setup_with(
    delay: Duration,
) -> (
    Arc<Engine>,
    Arc<dyn Upstream>,
    Arc<AtomicUsize>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(Arc::new(SledStore::open(dir.path(), 64 * 1024).unwrap()));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let up: Arc<dyn Upstream> = Arc::new(Timed {
        delay,
        cancelled: cancelled.clone(),
    });
    (engine, up, cancelled, dir)
}

/// An engine on `store`: a default TTL of 60 s, keep-alives every 15 s.
fn engine_on(store: Arc<dyn TaskStore>) -> Arc<Engine> {
    Engine::new(
        store,
        EngineSettings::new(
            Duration::from_secs(60),
            Duration::from_secs(15),
            tasklift::front::errors::written,
        ),
    )
}

fn ctx() -> CallContext {
    CallContext {
        principal: "p".into(),
        ..Default::default()
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

#[tokio::test(start_paused = true)]
async fn upstream_first_is_a_plain_result_threshold_first_is_a_task() {
    let (engine, up, _, _dir) = setup(5);
    let r = json_reply(
        engine
            .call_tool(up.clone(), &policy(10, 60), call(true).into(), ctx())
            .await,
    );
    assert_eq!(
        r["result"]["content"][0]["text"], "done",
        "5 s call under a 10 s threshold: {r}"
    );
    let r = json_reply(
        engine
            .call_tool(up, &policy(2, 60), call(true).into(), ctx())
            .await,
    );
    assert_eq!(
        r["result"]["resultType"], "task",
        "5 s call over a 2 s threshold: {r}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_without_the_extension_gets_keepalives_then_the_result() {
    let (engine, up, _, _dir) = setup(40);
    let answer = engine
        .call_tool(up, &policy(2, 60), call(false).into(), ctx())
        .await;
    // Rendered as the front door does, for the call's id.
    let Reply::Stream(mut rx) = tasklift::front::render::reply(answer, Some(&json!(7))) else {
        panic!("expected a stream");
    };
    let mut keepalives = 0;
    let last = loop {
        match rx.recv().await.expect("stream ends with the result") {
            StreamItem::KeepAlive => keepalives += 1,
            StreamItem::Message(m) => break m,
            other => panic!("a modern caller's stream has no event ids: {other:?}"),
        }
    };
    assert_eq!(last["result"]["content"][0]["text"], "done");
    assert_eq!(last["id"], 7);
    assert!(
        keepalives >= 2,
        "a 40 s wait with 15 s keep-alives sends at least two: {keepalives}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_running_past_its_ttl_is_cancelled_upstream_and_failed() {
    let (engine, up, cancelled, _dir) = setup(3600);
    let r = json_reply(
        engine
            .call_tool(up, &policy(1, 10), call(true).into(), ctx())
            .await,
    );
    let id = r["result"]["taskId"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_secs(11)).await;
    engine.sweep().await.unwrap();
    // The owner settles the task asynchronously.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if engine.running_count() == 0 {
            break;
        }
    }
    let t = get(&engine, &id).await.unwrap();
    assert_eq!(t["status"], "failed", "{t}");
    assert!(
        t["error"]["message"].as_str().unwrap().contains("TTL"),
        "{t}"
    );
    assert_eq!(
        cancelled.load(Ordering::Relaxed),
        1,
        "the upstream call is cancelled"
    );
    // After the grace period the sweeper deletes it.
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(engine.sweep().await.unwrap(), 1);
    assert!(get(&engine, &id).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_finished_task_is_kept_for_its_ttl_then_deleted() {
    let (engine, up, _, _dir) = setup(3);
    let r = json_reply(
        engine
            .call_tool(up, &policy(1, 30), call(true).into(), ctx())
            .await,
    );
    let id = r["result"]["taskId"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(get(&engine, &id).await.unwrap()["status"], "completed");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(engine.sweep().await.unwrap(), 0, "still within its TTL");
    assert_eq!(get(&engine, &id).await.unwrap()["status"], "completed");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(engine.sweep().await.unwrap(), 1);
    let e = get(&engine, &id).await.unwrap_err();
    assert_eq!(e.code, -32602);
}

/// A task's record is written 10 ms ahead of its threshold, so the handle does
/// not wait on the store. A call that ends inside that window answers as usual,
/// and the record written for it is deleted: no task nobody holds is left.
#[tokio::test(start_paused = true)]
async fn a_call_ending_just_before_its_threshold_leaves_no_record() {
    let (engine, up, _, _dir) = setup_with(Duration::from_millis(1995));
    let r = json_reply(
        engine
            .call_tool(up.clone(), &policy(2, 60), call(true).into(), ctx())
            .await,
    );
    assert_eq!(r["result"]["content"][0]["text"], "done", "{r}");
    // The delete runs beside the answer, after the write it undoes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = engine.health().await.unwrap().tasks;
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} record(s) left by a call that never became a task"
        );
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(5));
    }
    // A call past its threshold still becomes a task, on the record written ahead.
    let r = json_reply(
        engine
            .call_tool(up, &policy(1, 60), call(true).into(), ctx())
            .await,
    );
    let id = r["result"]["taskId"].as_str().unwrap().to_string();
    let t = get(&engine, &id).await.unwrap();
    assert_eq!(t["status"], "working", "{t}");
    assert_eq!(engine.health().await.unwrap().tasks, 1);
}

/// A store whose writes take 50 ms (a slow disk, a distant database).
struct SlowPuts(SledStore);

impl TaskStore for SlowPuts {
    fn create<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()> {
        self.0.create(rec)
    }
    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        self.0.get(id)
    }
    fn put<'a>(&'a self, rec: &'a TaskRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.put(rec).await
        })
    }
    fn delete<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        self.0.delete(id)
    }
    fn expired(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, Vec<String>> {
        self.0.expired(now_ms, limit)
    }
    fn unfinished(&self) -> StoreFuture<'_, Vec<TaskRecord>> {
        self.0.unfinished()
    }
    fn list<'a>(
        &'a self,
        owner: &'a str,
        upstream: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Vec<TaskRecord>> {
        self.0.list(owner, upstream, now_ms)
    }
    fn all(&self) -> StoreFuture<'_, Vec<TaskRecord>> {
        self.0.all()
    }
    fn stats(&self) -> StoreFuture<'_, StoreStats> {
        self.0.stats()
    }
    fn flush(&self) -> StoreFuture<'_, ()> {
        self.0.flush()
    }
}

/// An upstream whose tool, after 2 s, asks the client two questions, keyed `a` and
/// `b`, and answers once both are answered.
struct Asking;

impl Upstream for Asking {
    fn name(&self) -> &str {
        "timed"
    }
    fn era<'a>(&'a self, _: &'a CallContext) -> UpstreamFuture<'a, Era> {
        Box::pin(async { Ok(Era::Legacy) })
    }
    fn call<'a>(&'a self, _: &'a Request, _: &'a CallContext) -> UpstreamFuture<'a, UpstreamCall> {
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(4);
            let task = tokio::spawn(async move {
                // Past the threshold: the questions go to the task.
                tokio::time::sleep(Duration::from_secs(2)).await;
                let mut answers = Vec::new();
                for key in ["a", "b"] {
                    let (answered, heard) = tokio::sync::oneshot::channel();
                    let ask = ServerRequest::new(
                        "elicitation/create".into(),
                        json!({"message": format!("question {key}"), "requestedSchema": {"type": "object"}}),
                        Box::new(move |o| {
                            let _ = answered.send(o);
                        }),
                    )
                    .keyed_by(&json!(key));
                    let _ = tx.send(CallEvent::Input(ask)).await;
                    answers.push(heard);
                }
                let mut got = Vec::new();
                for a in answers {
                    got.push(a.await.ok().and_then(|o| o.ok()).unwrap_or(Value::Null));
                }
                let text = format!("{got:?}");
                let _ = tx
                    .send(CallEvent::Done(Ok(
                        json!({"content": [{"type": "text", "text": text}]}),
                    )))
                    .await;
            });
            Ok(UpstreamCall {
                events: rx.into(),
                canceller: Canceller::new(task.abort_handle(), None),
            })
        })
    }
    idle_rest!();
}

/// `tasks/update` is acknowledged once the task's record shows the answers, so a
/// client's `tasks/get` right after the ack no longer lists the answered key, even
/// when the store takes a while to write.
#[tokio::test(start_paused = true)]
async fn a_tasks_get_right_after_a_partial_update_shows_only_the_unanswered_key() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(Arc::new(SlowPuts(
        SledStore::open(dir.path(), 64 * 1024).unwrap(),
    )));
    let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let req = Request::from_value(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "t", "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}}}))
    .unwrap();
    let r = json_reply(
        engine
            .call_tool(Arc::new(Asking), &policy(1, 60), req.into(), ctx())
            .await,
    );
    let id = r["result"]["taskId"].as_str().expect("a task").to_string();
    let mut t = get(&engine, &id).await.unwrap();
    for _ in 0..100 {
        if t["inputRequests"].as_object().is_some_and(|m| m.len() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        t = get(&engine, &id).await.unwrap();
    }
    assert_eq!(t["status"], "input_required", "{t}");
    assert_eq!(
        t["inputRequests"].as_object().map(|m| m.len()),
        Some(2),
        "{t}"
    );
    let who = Caller {
        principal: "p",
        upstream: "timed",
    };
    let answer = |v: &str| json!({"action": "accept", "content": {"v": v}});
    let one = json!({"a": answer("first")}).as_object().unwrap().clone();
    engine.update(&id, who, one).await.unwrap();
    let t = get(&engine, &id).await.unwrap();
    assert_eq!(t["status"], "input_required", "{t}");
    let keys: Vec<&String> = t["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["b"], "only the unanswered key is left: {t}");

    let two = json!({"b": answer("second")}).as_object().unwrap().clone();
    engine.update(&id, who, two).await.unwrap();
    let mut t = get(&engine, &id).await.unwrap();
    assert_ne!(t["status"], "input_required", "answered in full: {t}");
    assert!(t.get("inputRequests").is_none(), "{t}");
    for _ in 0..100 {
        if t["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        t = get(&engine, &id).await.unwrap();
    }
    let text = t["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("first") && text.contains("second"),
        "the upstream got both answers: {t}"
    );
}

/// `tasks/cancel` of a task running here is acknowledged once the task's record
/// shows it settled, so a `tasks/get` right after the ack says `cancelled` even
/// when the store takes a while to write. The extension allows the ack first, but
/// clients read the task at once (the TypeScript SDK's ext-tasks client does, and
/// failed on the `working` it was shown).
#[tokio::test(start_paused = true)]
async fn a_tasks_get_right_after_a_cancel_ack_says_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(Arc::new(SlowPuts(
        SledStore::open(dir.path(), 64 * 1024).unwrap(),
    )));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let up: Arc<dyn Upstream> = Arc::new(Timed {
        delay: Duration::from_secs(3600),
        cancelled: cancelled.clone(),
    });
    let r = json_reply(
        engine
            .call_tool(up, &policy(1, 600), call(true).into(), ctx())
            .await,
    );
    let id = r["result"]["taskId"].as_str().expect("a task").to_string();
    let who = Caller {
        principal: "p",
        upstream: "timed",
    };
    engine.cancel(&id, who).await.unwrap();
    let t = get(&engine, &id).await.unwrap();
    assert_eq!(t["status"], "cancelled", "read right after the ack: {t}");
    assert_eq!(cancelled.load(Ordering::Relaxed), 1, "stopped upstream");
}
