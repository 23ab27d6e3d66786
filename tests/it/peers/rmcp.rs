//! A real peer: the `rmcp` SDK as a task-aware 2026-07-28 client against tasklift.
//!
//! rmcp connects with `server/discover` and stamps the tasks extension into each
//! request's `_meta`. Every scenario runs in front of a legacy and a modern fixture.
//! rmcp is lenient about wire details: exact shapes are checked by the raw-HTTP tests.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    ClientCapabilities, ClientConfig, ClientRequest, GetTaskParams, GetTaskResult, Implementation,
    JsonObject, ProtocolVersion, RequestMetaObject, ServerResult, TaskPayload, TaskStatus,
    TASKS_EXTENSION_ID,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, Peer};
use serde_json::json;
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;

type RmcpClient = RunningService<RoleClient, ClientConfig>;

/// Runs each scenario against a legacy and a modern fixture upstream.
macro_rules! both_eras {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn legacy() {
                super::$name(false).await
            }
            #[tokio::test]
            async fn modern() {
                super::$name(true).await
            }
        }
    )*};
}

both_eras!(
    discover_advertises_tasks,
    fast_call_completes_inline,
    slow_call_becomes_a_task_with_the_upstream_result,
    cancel_settles_and_cancels_upstream,
    tool_error_completes_and_rpc_error_fails,
    without_tasks_capability_a_slow_call_stays_synchronous,
);

fn era(up: FixtureServer, modern: bool) -> FixtureServer {
    if modern {
        up.modern()
    } else {
        up
    }
}

/// rmcp with the 2026-07-28 lifecycle (`server/discover`), declaring the tasks extension.
async fn connect(h: &Harness) -> RmcpClient {
    let mut caps = ClientCapabilities::default();
    caps.extensions = Some([(TASKS_EXTENSION_ID.to_string(), JsonObject::new())].into());
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

fn args(v: serde_json::Value) -> JsonObject {
    v.as_object().expect("object").clone()
}

/// Call a tool that must become a task; its id.
async fn start_task(c: &RmcpClient, tool: &str) -> String {
    match c
        .call_tool_once(CallToolRequestParams::new(tool.to_string()))
        .await
        .expect("tools/call")
    {
        CallToolResponse::Task(t) => {
            assert_eq!(t.task.status, TaskStatus::Working);
            t.task.task_id
        }
        other => panic!("expected a task for {tool}, got {other:?}"),
    }
}

/// Poll `tasks/get` (honouring `pollIntervalMs`) until the task is terminal.
async fn settle(peer: &Peer<RoleClient>, id: &str) -> GetTaskResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = peer
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if got.task.task.status.is_terminal() {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} stuck: {got:?}"
        );
        let poll = got.task.task.poll_interval_ms.unwrap_or(50);
        tokio::time::sleep(Duration::from_millis(poll)).await;
    }
}

fn completed(got: GetTaskResult) -> CallToolResult {
    match got.task.payload {
        TaskPayload::Completed { result } => {
            serde_json::from_value(result.into()).expect("a CallToolResult")
        }
        other => panic!("expected completed, got {other:?}"),
    }
}

fn text(r: &CallToolResult) -> &str {
    &r.content[0].as_text().expect("text content").text
}

async fn discover_advertises_tasks(modern: bool) {
    let h = Harness::start(era(FixtureServer::demo(), modern), |_| {}).await;
    let c = connect(&h).await;
    let info = c.peer_info().expect("discover result");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    let ext = info.capabilities.extensions.as_ref().expect("extensions");
    assert!(ext.contains_key(TASKS_EXTENSION_ID), "{ext:?}");
    assert!(info.capabilities.tools.is_some(), "upstream caps kept");
    // A relayed list result parses too (legacy upstreams get ttlMs/cacheScope added).
    let tools = c.list_tools(None).await.expect("tools/list");
    assert!(tools.tools.iter().any(|t| t.name == "slow_compute"));
    c.cancel().await.unwrap();
    h.stop().await;
}

async fn fast_call_completes_inline(modern: bool) {
    // A generous threshold: "fast" must not depend on how busy the machine is.
    let up = era(FixtureServer::demo(), modern);
    let h = Harness::start(up, |raw| raw.tasks.threshold = "1m".into()).await;
    let c = connect(&h).await;
    let params = CallToolRequestParams::new("greet").with_arguments(args(json!({"name": "rmcp"})));
    match c.call_tool_once(params).await.expect("tools/call") {
        CallToolResponse::Complete(r) => {
            assert_eq!(text(&r), "Hello, rmcp!");
            assert_ne!(r.is_error, Some(true));
        }
        other => panic!("expected a complete result, got {other:?}"),
    }
    let engine = &h.proxy.as_ref().unwrap().engine;
    assert_eq!(engine.health().await.unwrap().tasks, 0, "nothing stored");
    c.cancel().await.unwrap();
    h.stop().await;
}

async fn slow_call_becomes_a_task_with_the_upstream_result(modern: bool) {
    let gate = Arc::new(Notify::new());
    let tool = Tool::new("report")
        .gate(gate.clone())
        .reply(|a| format!("report for {}", a["who"].as_str().unwrap_or("?")));
    let h = Harness::start(era(FixtureServer::new().tool(tool), modern), |_| {}).await;
    let c = connect(&h).await;
    let params = CallToolRequestParams::new("report").with_arguments(args(json!({"who": "rmcp"})));
    let CallToolResponse::Task(t) = c.call_tool_once(params).await.expect("tools/call") else {
        panic!("expected a task");
    };
    assert_eq!(t.task.status, TaskStatus::Working);
    assert!(t.task.ttl_ms.is_some() && t.task.poll_interval_ms.is_some());
    let id = t.task.task_id;
    let got = c.get_task(GetTaskParams::new(id.clone())).await.unwrap();
    assert!(matches!(got.task.payload, TaskPayload::Working), "{got:?}");
    gate.notify_one();
    let got = settle(c.peer(), &id).await;
    let r = completed(got);
    let content = serde_json::to_value(&r.content).unwrap();
    assert_eq!(
        content,
        json!([{"type": "text", "text": "report for rmcp"}])
    );
    assert_ne!(r.is_error, Some(true));
    c.cancel().await.unwrap();
    h.stop().await;
}

async fn cancel_settles_and_cancels_upstream(modern: bool) {
    let gate = Arc::new(Notify::new()); // never released
    let up = era(FixtureServer::new(), modern).tool(Tool::new("held").gate(gate));
    let stats = up.stats();
    let h = Harness::start(up, |_| {}).await;
    let c = connect(&h).await;
    let id = start_task(&c, "held").await;
    eventually(
        "the upstream call is running",
        Duration::from_secs(5),
        || stats.running.load(Ordering::Relaxed) == 1,
    )
    .await;
    c.cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("tasks/cancel acked");
    let got = settle(c.peer(), &id).await;
    assert_eq!(got.task.task.status, TaskStatus::Cancelled);
    assert!(matches!(got.task.payload, TaskPayload::Cancelled));
    upstream_call_cancelled(&stats).await;
    // Cancelling a terminal task is acknowledged too, and it stays cancelled.
    c.cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    let got = c.get_task(GetTaskParams::new(id)).await.unwrap();
    assert_eq!(got.task.task.status, TaskStatus::Cancelled);
    c.cancel().await.unwrap();
    h.stop().await;
}

async fn tool_error_completes_and_rpc_error_fails(modern: bool) {
    let gate = Arc::new(Notify::new());
    let up = era(FixtureServer::new(), modern)
        .tool(
            Tool::new("quota")
                .gate(gate.clone())
                .tool_error()
                .reply(|_| "disk quota exceeded".into()),
        )
        .tool(
            Tool::new("crash")
                .gate(gate.clone())
                .rpc_error(-32603, "crash always fails"),
        );
    let h = Harness::start(up, |_| {}).await;
    let c = connect(&h).await;

    let id = start_task(&c, "quota").await;
    gate.notify_one();
    let got = settle(c.peer(), &id).await;
    assert_eq!(got.task.task.status, TaskStatus::Completed);
    let r = completed(got);
    assert_eq!(r.is_error, Some(true));
    assert_eq!(text(&r), "disk quota exceeded");

    let id = start_task(&c, "crash").await;
    gate.notify_one();
    let got = settle(c.peer(), &id).await;
    assert_eq!(got.task.task.status, TaskStatus::Failed);
    let TaskPayload::Failed { error } = got.task.payload else {
        panic!("expected failed, got {got:?}");
    };
    assert_eq!(error["code"], -32603, "{error:?}");
    assert_eq!(error["message"], "crash always fails", "{error:?}");
    c.cancel().await.unwrap();
    h.stop().await;
}

async fn without_tasks_capability_a_slow_call_stays_synchronous(modern: bool) {
    let gate = Arc::new(Notify::new());
    let up = era(FixtureServer::new(), modern).tool(Tool::new("slow").gate(gate.clone()));
    let stats = up.stats();
    // "always": the threshold is zero, so only the missing capability keeps it synchronous;
    // short keep-alives make rmcp read SSE comments while it waits.
    let h = Harness::start(up, |raw| {
        raw.server.keepalive_interval = "20ms".into();
        raw.upstreams[0].tools.insert("slow".into(), rule("always"));
    })
    .await;
    let c = connect(&h).await;
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(ClientCapabilities::default()); // overrides the stamped caps
    let call =
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("slow")));
    let handle = c
        .send_request_with_option(call, PeerRequestOptions::default().with_meta(meta))
        .await
        .expect("tools/call sent");
    eventually(
        "the upstream call is running",
        Duration::from_secs(5),
        || stats.running.load(Ordering::Relaxed) == 1,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await; // a few keep-alives
    gate.notify_one();
    match handle.await_response().await.expect("a synchronous answer") {
        ServerResult::CallToolResult(r) => assert_eq!(text(&r), "slow done"),
        other => panic!("expected a plain CallToolResult, got {other:?}"),
    }
    let engine = &h.proxy.as_ref().unwrap().engine;
    assert_eq!(
        engine.health().await.unwrap().tasks,
        0,
        "never a task handle"
    );
    c.cancel().await.unwrap();
    h.stop().await;
}
