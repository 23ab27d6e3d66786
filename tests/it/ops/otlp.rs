//! OpenTelemetry traces as an operator's collector receives them. The receiver
//! (tests/peers/python/otlp_receiver.py) decodes tasklift's OTLP/HTTP exports with
//! the OpenTelemetry project's own protobuf classes; upstream, the MCP Python SDK
//! (mcp==2.3, with the OpenTelemetry SDK switched on: traced_v2_server.py) exports
//! its spans to the same receiver, so a test sees one trace from the client through
//! tasklift into the server.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::io::AsyncBufReadExt;

use crate::support::harness::*;
use crate::support::python::{python, Mode, PyServer};

/// The client's trace: its trace id and the span tasklift's is a child of.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent(flags: &str) -> String {
    format!("00-{TRACE}-{CLIENT_SPAN}-{flags}")
}

/// The OTLP receiver, killed when dropped; every span it decoded, as JSON.
struct Receiver {
    _child: tokio::process::Child,
    lines: Arc<Mutex<Vec<Value>>>,
    /// Its traces URL.
    url: String,
}

impl Receiver {
    async fn start(args: &[&str]) -> Option<Self> {
        let python = python("otlp")?;
        let mut child = tokio::process::Command::new(python)
            .arg(crate::support::python::peers_dir().join("otlp_receiver.py"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the OTLP receiver starts");
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = guarded("the receiver's port", out.next_line())
            .await
            .unwrap()
            .expect("the receiver prints its port");
        let port = first.strip_prefix("LISTENING ").expect("LISTENING <port>");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            while let Ok(Some(l)) = out.next_line().await {
                let v: Value = serde_json::from_str(&l).expect("the receiver prints JSON");
                sink.lock().unwrap().push(v);
            }
        });
        Some(Self {
            _child: child,
            lines,
            url: format!("http://127.0.0.1:{port}/v1/traces"),
        })
    }

    /// The spans decoded so far (the test fails on anything that did not decode).
    fn spans(&self) -> Vec<Value> {
        let all = self.lines.lock().unwrap().clone();
        for l in &all {
            assert!(
                l.get("error").is_none(),
                "the receiver could not read an export: {l}"
            );
        }
        all.into_iter()
            .filter(|l| l.get("spanId").is_some())
            .collect()
    }

    /// The first span matching `pred`, waited for.
    async fn span(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            if let Some(s) = self.spans().into_iter().find(|s| pred(s)) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no span {what} among {:#?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many exports were refused (`--fail-first`).
    fn refused(&self) -> usize {
        let all = self.lines.lock().unwrap();
        all.iter().filter(|l| l.get("refused").is_some()).count()
    }
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn named(service: &'static str, name: &'static str) -> impl Fn(&Value) -> bool {
    move |s| s["service"] == service && s["name"] == name
}

/// Span kinds and status codes as OTLP numbers them.
const INTERNAL: u64 = 1;
const SERVER: u64 = 2;
const STATUS_ERROR: u64 = 2;

/// A real SDK server behind tasklift: the client's trace continues through
/// tasklift's request span into the Python SDK's own span, the call that became a
/// task has a task span under the request, polls land in the same trace, and a
/// request without a trace starts one the upstream joins.
#[tokio::test]
async fn a_trace_runs_from_the_client_through_tasklift_into_the_python_sdk() {
    let Some(recv) = Receiver::start(&[]).await else {
        return;
    };
    let Some(py) = python("otlp") else { return };
    let server = PyServer::start_with_env(
        &py,
        "traced_v2_server.py",
        Mode::Http,
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &recv.url)],
    )
    .await;
    let url = recv.url.clone();
    let h = Harness::front(
        FixtureServer::new(),
        &server.url,
        tempfile::tempdir().unwrap(),
        |c| c.telemetry.otlp_endpoint = url,
    )
    .await;
    let tp = traceparent("01");
    let c = h.client_with(true, &[("traceparent", &tp), ("tracestate", "acme=7")]);
    let handle = c.call_tool("slow", json!({"seconds": 1})).await.unwrap();
    assert_eq!(handle.result["resultType"], "task", "{:?}", handle.result);
    let id = handle.result["taskId"].as_str().unwrap().to_string();
    let done = wait_terminal(&c, &id, GUARD).await;
    assert_eq!(done["status"], "completed", "{done}");

    let call = recv
        .span(
            "tasklift's tools/call slow",
            named("tasklift", "tools/call slow"),
        )
        .await;
    assert_eq!(call["traceId"], TRACE, "the client's trace: {call}");
    assert_eq!(
        call["parentSpanId"], CLIENT_SPAN,
        "a child of the client's span: {call}"
    );
    assert_eq!(call["kind"], SERVER);
    assert_eq!(call["traceState"], "acme=7");
    let flags = call["flags"].as_u64().unwrap();
    assert_eq!(
        flags & 0x301,
        0x301,
        "sampled, with a remote parent: {flags:#x}"
    );
    assert_eq!(attr(&call, "mcp.method.name"), "tools/call");
    assert_eq!(attr(&call, "gen_ai.tool.name"), "slow");
    assert_eq!(attr(&call, "tasklift.task.id"), id.as_str());
    assert_eq!(attr(&call, "tasklift.outcome"), "task");
    assert_eq!(attr(&call, "tasklift.upstream"), "default");
    assert_eq!(attr(&call, "http.response.status_code"), 200);
    assert_eq!(call["resource"]["service.version"], tasklift::VERSION);
    let call_id = call["spanId"].as_str().unwrap().to_string();

    let task = recv.span("task slow", named("tasklift", "task slow")).await;
    assert_eq!(task["traceId"], TRACE);
    assert_eq!(
        task["parentSpanId"],
        call_id.as_str(),
        "the task is the call's child: {task}"
    );
    assert_eq!(task["kind"], INTERNAL);
    assert_eq!(attr(&task, "tasklift.task.id"), id.as_str());
    assert_eq!(attr(&task, "tasklift.task.status"), "completed");
    assert_eq!(attr(&task, "tasklift.handle"), "task");
    assert!(
        task["start"].as_u64() >= call["start"].as_u64(),
        "{task} {call}"
    );
    assert!(task["end"].as_u64() >= task["start"].as_u64());
    assert_ne!(task["status"]["code"], STATUS_ERROR);

    // The upstream continued tasklift's hop: its span's parent is tasklift's span.
    let upstream = recv
        .span("the Python SDK's span under tasklift's", |s| {
            s["service"] == "py-v2-peer" && s["parentSpanId"] == call_id.as_str()
        })
        .await;
    assert_eq!(upstream["traceId"], TRACE, "{upstream}");

    // The polls are requests of their own in the client's trace, naming the task.
    let poll = recv.span("tasks/get", named("tasklift", "tasks/get")).await;
    assert_eq!(poll["traceId"], TRACE);
    assert_eq!(poll["parentSpanId"], CLIENT_SPAN);
    assert_eq!(attr(&poll, "tasklift.task.id"), id.as_str());

    // No traceparent: tasklift starts a trace, and the upstream's span joins it.
    let plain = h.client();
    plain
        .call_tool("echo", json!({"text": "hi"}))
        .await
        .unwrap();
    let root = recv
        .span("tools/call echo", named("tasklift", "tools/call echo"))
        .await;
    assert_eq!(root["parentSpanId"], "", "a trace's root: {root}");
    assert_ne!(root["traceId"], TRACE);
    let root_id = root["spanId"].as_str().unwrap().to_string();
    let joined = recv
        .span("the SDK's span in tasklift's new trace", |s| {
            s["service"] == "py-v2-peer" && s["parentSpanId"] == root_id.as_str()
        })
        .await;
    assert_eq!(joined["traceId"], root["traceId"]);

    // Errors mark the span: a tool error, and a JSON-RPC error with its message.
    let _ = plain.call_tool("fail", json!({})).await;
    let failed = recv
        .span("tools/call fail", named("tasklift", "tools/call fail"))
        .await;
    assert_eq!(failed["status"]["code"], STATUS_ERROR, "{failed}");
    assert_eq!(attr(&failed, "error.type"), "tool_error");
    let _ = plain.call_tool("reject", json!({})).await;
    let rejected = recv
        .span("tools/call reject", named("tasklift", "tools/call reject"))
        .await;
    assert_eq!(rejected["status"]["code"], STATUS_ERROR, "{rejected}");
    assert!(
        rejected["status"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid params, as asked"),
        "{rejected}"
    );
    h.stop().await;
}

/// A task that fails has its span marked with the reason, and a 2025-era
/// client's requests are traced with its session.
#[tokio::test]
async fn failed_tasks_and_legacy_sessions_are_traced() {
    let Some(recv) = Receiver::start(&[]).await else {
        return;
    };
    let url = recv.url.clone();
    let h = Harness::start(
        FixtureServer::new()
            .tool(
                Tool::new("doomed")
                    .sleep(Duration::from_millis(600))
                    .rpc_error(-32603, "the report generator crashed"),
            )
            .tool(Tool::new("echo")),
        |c| c.telemetry.otlp_endpoint = url,
    )
    .await;
    let tp = traceparent("01");
    let c = h.client_with(true, &[("traceparent", &tp)]);
    let handle = c.call_tool("doomed", json!({})).await.unwrap();
    let id = handle.result["taskId"]
        .as_str()
        .expect("a task")
        .to_string();
    let done = wait_terminal(&c, &id, GUARD).await;
    assert_eq!(done["status"], "failed", "{done}");
    let task = recv
        .span("task doomed", named("tasklift", "task doomed"))
        .await;
    assert_eq!(attr(&task, "tasklift.task.status"), "failed");
    assert_eq!(task["status"]["code"], STATUS_ERROR);
    assert!(
        task["status"]["message"]
            .as_str()
            .unwrap()
            .contains("the report generator crashed"),
        "{task}"
    );

    let (legacy, _) =
        LegacyClient::start_with(&h.url, "2025-06-18", json!({}), &[("traceparent", &tp)]).await;
    let r = legacy
        .request(2, "tools/call", json!({"name": "echo", "arguments": {}}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let span = recv
        .span("the legacy session's tools/call echo", |s| {
            s["name"] == "tools/call echo"
                && s["attributes"]["mcp.session.id"] == legacy.sid.as_str()
        })
        .await;
    assert_eq!(span["traceId"], TRACE);
    assert_eq!(span["parentSpanId"], CLIENT_SPAN);
    h.stop().await;
}

/// The caller's sampling decision stands (an unsampled trace is passed upstream
/// but not recorded), `sample_ratio = 0` records no new traces, configured headers
/// go with every export, and the spans of the last requests reach the collector
/// when tasklift stops.
#[tokio::test]
async fn sampling_headers_and_the_last_spans_at_shutdown() {
    let Some(recv) = Receiver::start(&["--header", "x-api-key"]).await else {
        return;
    };
    let url = recv.url.clone();
    let h = Harness::start(FixtureServer::new().tool(Tool::new("echo")), |c| {
        c.telemetry.otlp_endpoint = url;
        c.telemetry.sample_ratio = 0.0;
        c.telemetry.service_name = "gateway-eu".into();
        c.telemetry
            .otlp_headers
            .insert("x-api-key".into(), "k-123".into());
    })
    .await;
    let unsampled = traceparent("00");
    let c = h.client_with(true, &[("traceparent", &unsampled)]);
    c.call_tool("echo", json!({})).await.unwrap();
    let seen = h.received("tools/call").pop().unwrap()["params"]["_meta"]["traceparent"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        seen.starts_with(&format!("00-{TRACE}-")) && seen.ends_with("-00"),
        "{seen}"
    );
    // Not sampled by tasklift either (ratio 0), but a new trace is still passed on.
    h.client().call_tool("echo", json!({})).await.unwrap();
    let fresh = h.received("tools/call").pop().unwrap()["params"]["_meta"]["traceparent"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!fresh.contains(TRACE) && fresh.ends_with("-00"), "{fresh}");
    // A sampled caller's trace is recorded whatever the ratio: the last request,
    // sent just before the stop.
    let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let sampled = h.client_with(true, &[("traceparent", other)]);
    sampled.call_tool("echo", json!({})).await.unwrap();
    h.stop().await;
    let span = recv
        .span("the sampled call", |s| {
            s["traceId"] == "0af7651916cd43dd8448eb211c80319c"
        })
        .await;
    assert_eq!(span["service"], "gateway-eu");
    assert_eq!(span["headers"]["x-api-key"], "k-123");
    let spans = recv.spans();
    assert_eq!(spans.len(), 1, "only the sampled request: {spans:#?}");
}

/// A collector that refuses (503) gets the export again; one that is gone costs
/// no call anything, and the lost spans are counted in `/metrics`.
#[tokio::test]
async fn a_collector_that_refuses_or_is_gone_costs_no_call() {
    let Some(recv) = Receiver::start(&["--fail-first", "1"]).await else {
        return;
    };
    let url = recv.url.clone();
    let h = Harness::start(FixtureServer::new().tool(Tool::new("echo")), |c| {
        c.telemetry.otlp_endpoint = url;
    })
    .await;
    h.client().call_tool("echo", json!({})).await.unwrap();
    recv.span(
        "the call, exported again",
        named("tasklift", "tools/call echo"),
    )
    .await;
    assert_eq!(recv.refused(), 1);
    h.stop().await;

    let gone = closed_port_url().replace("/mcp", "/v1/traces");
    let h = Harness::start(FixtureServer::new().tool(Tool::new("echo")), |c| {
        c.telemetry.otlp_endpoint = gone;
    })
    .await;
    for _ in 0..3 {
        let r = h.client().call_tool("echo", json!({"n": 1})).await.unwrap();
        assert!(r.result.get("content").is_some(), "{:?}", r.result);
    }
    let metrics = h.url.replace("/mcp", "/metrics");
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let page = raw("GET", &metrics, &[], "").await.body;
        let failed = page
            .lines()
            .find_map(|l| l.strip_prefix("tasklift_trace_spans_total{outcome=\"failed\"} "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if failed >= 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no failed export counted:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.stop().await;
}
