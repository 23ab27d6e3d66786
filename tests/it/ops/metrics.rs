//! `/metrics` and `/readyz` as an operator reads them: the numbers move as tasks are
//! created, finish and expire, and readiness follows an upstream that dies and
//! comes back.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::wire::raw;

/// One sample's value from a Prometheus text page (`name{labels}` exactly as written).
fn sample(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{page}"))
        .trim()
        .parse()
        .unwrap()
}

async fn scrape(h: &Harness) -> String {
    let r = raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    r.body
}

#[tokio::test]
async fn metrics_follow_tasks_from_creation_to_expiry() {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(Tool::new("job").gate(gate.clone()))
        .tool(
            Tool::new("broken")
                .sleep(Duration::from_millis(600))
                .rpc_error(-32603, "it broke"),
        )
        .tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let h = Harness::start(up, |c| {
        c.tasks.ttl = "8s".into();
        c.tasks.sweep_interval = "100ms".into();
        c.tasks.expired_grace = "100ms".into();
    })
    .await;
    let up = "{upstream=\"default\"}";
    let page = scrape(&h).await;
    assert_eq!(sample(&page, "tasklift_tasks_created_total"), 0.0);
    assert_eq!(
        sample(&page, &format!("tasklift_upstream_calls_in_flight{up}")),
        0.0
    );

    let c = h.client();
    let job = c.call_tool("job", json!({})).await.unwrap().result;
    assert_eq!(job["resultType"], "task", "{job}");
    let page = scrape(&h).await;
    assert_eq!(sample(&page, "tasklift_tasks_created_total"), 1.0);
    assert_eq!(sample(&page, "tasklift_tasks{status=\"working\"}"), 1.0);
    assert_eq!(
        sample(&page, &format!("tasklift_upstream_calls_in_flight{up}")),
        1.0
    );
    assert_eq!(
        sample(
            &page,
            "tasklift_requests_total{method=\"tools/call\",outcome=\"task\"}"
        ),
        1.0
    );

    gate.notify_one();
    let id = job["taskId"].as_str().unwrap();
    wait_terminal(&c, id, Duration::from_secs(10)).await;
    let forever = c.call_tool("forever", json!({})).await.unwrap().result;
    let forever = forever["taskId"].as_str().unwrap().to_string();
    c.cancel_task(&forever).await.unwrap();
    wait_terminal(&c, &forever, Duration::from_secs(10)).await;
    let broken = c.call_tool("broken", json!({})).await.unwrap().result;
    wait_terminal(
        &c,
        broken["taskId"].as_str().unwrap(),
        Duration::from_secs(10),
    )
    .await;

    let page = scrape(&h).await;
    assert_eq!(sample(&page, "tasklift_tasks_created_total"), 3.0);
    for (status, n) in [("completed", 1.0), ("cancelled", 1.0), ("failed", 1.0)] {
        let finished = format!("tasklift_tasks_finished_total{{status=\"{status}\"}}");
        assert_eq!(sample(&page, &finished), n, "{status}");
        assert_eq!(
            sample(&page, &format!("tasklift_tasks{{status=\"{status}\"}}")),
            n
        );
    }
    assert_eq!(sample(&page, "tasklift_tasks{status=\"working\"}"), 0.0);
    assert_eq!(
        sample(&page, &format!("tasklift_upstream_calls_in_flight{up}")),
        0.0
    );
    let calls = format!("tasklift_upstream_call_duration_seconds_count{up}");
    assert!(sample(&page, &calls) >= 3.0, "{page}");
    assert!(sample(&page, "tasklift_store_disk_bytes") > 0.0);

    // A malformed request is counted as rejected.
    let bad = crate::support::wire::Post::new(&h.url, 5, "tools/list", json!({}), false)
        .header("mcp-method", "prompts/list")
        .send()
        .await;
    assert_eq!(bad.status, 400);
    let page = scrape(&h).await;
    let rejected = "tasklift_requests_total{method=\"tools/list\",outcome=\"rejected\"}";
    assert_eq!(sample(&page, rejected), 1.0);

    // The three tasks expire (TTL 8 s) and the sweeper deletes them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let page = scrape(&h).await;
        if sample(&page, "tasklift_tasks_expired_total") == 3.0 {
            for status in ["completed", "cancelled", "failed"] {
                let now = format!("tasklift_tasks{{status=\"{status}\"}}");
                assert_eq!(sample(&page, &now), 0.0, "{page}");
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never expired:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    h.stop().await;
}

#[tokio::test]
async fn metrics_can_be_turned_off_on_the_main_listener() {
    let h = Harness::start(FixtureServer::new(), |c| c.server.metrics = false).await;
    let r = raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "").await;
    assert_eq!(r.status, 404, "{r:?}");
    h.stop().await;
}

#[tokio::test]
async fn readiness_follows_an_upstream_that_dies_and_comes_back() {
    let first = FixtureServer::new()
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = first.url();
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &url, dir, |_| {}).await;
    let readyz = h.url.replace("/mcp", "/readyz");
    let r = raw("GET", &readyz, &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");

    first.stop().await;
    let r = raw("GET", &readyz, &[], "").await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.body.contains("unreachable"), "{}", r.body);
    let page = scrape(&h).await;
    assert_eq!(
        sample(&page, "tasklift_upstream_ready{upstream=\"default\"}"),
        0.0
    );

    let again = FixtureServer::new().start(addr).await.unwrap();
    let r = raw("GET", &readyz, &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    let page = scrape(&h).await;
    assert_eq!(
        sample(&page, "tasklift_upstream_ready{upstream=\"default\"}"),
        1.0
    );
    again.stop().await;
    h.stop().await;
}

/// A client's W3C trace context crosses tasklift: the upstream sees the same trace id,
/// with tasklift's own parent id, in its `_meta` and in the HTTP headers.
#[tokio::test]
async fn a_trace_id_sent_by_the_client_reaches_the_upstream() {
    let h = Harness::start(FixtureServer::new().tool(Tool::new("echo")), |_| {}).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let sent = format!("00-{trace}-00f067aa0ba902b7-01");
    let c = h.client_with(true, &[("traceparent", &sent), ("tracestate", "acme=7")]);
    c.call_tool("echo", json!({})).await.unwrap();
    let body = h
        .received("tools/call")
        .pop()
        .expect("the call went upstream");
    let meta = &body["params"]["_meta"];
    let seen = meta["traceparent"].as_str().expect("traceparent in _meta");
    assert!(seen.starts_with(&format!("00-{trace}-")), "{seen}");
    assert_ne!(seen, sent, "tasklift adds its own hop");
    assert_eq!(meta["tracestate"], "acme=7");
    let stats = h.upstream.stats();
    let with_trace = stats
        .headers
        .lock()
        .unwrap()
        .iter()
        .find(|h| h.get("traceparent").is_some())
        .cloned()
        .expect("a request with a traceparent header");
    assert_eq!(with_trace["traceparent"], seen, "the header says the same");
    assert_eq!(with_trace["tracestate"], "acme=7");
    // From `_meta` alone (e.g. a stdio-era client library) works the same.
    let c = h.client();
    c.request(
        "tools/call",
        json!({"name": "echo", "arguments": {}, "_meta": {"traceparent": sent}}),
    )
    .await
    .unwrap();
    let body = h.received("tools/call").pop().unwrap();
    let seen = body["params"]["_meta"]["traceparent"].as_str().unwrap();
    assert!(seen.starts_with(&format!("00-{trace}-")), "{seen}");
    h.stop().await;
}

/// Every metric deploy/grafana/tasklift.json queries is one `/metrics` renders
/// (a histogram by its `_bucket`, `_sum` and `_count` series), and every family
/// `/metrics` renders has a panel, so the dashboard follows the metrics.
#[tokio::test]
async fn the_grafana_dashboard_queries_what_metrics_renders() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/tasklift.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .expect("the dashboard is JSON");
    fn exprs<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(e) = m.get("expr").and_then(|e| e.as_str()) {
                    out.push(e);
                }
                m.values().for_each(|v| exprs(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
            _ => {}
        }
    }
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    assert!(queries.len() > 10, "{} queries", queries.len());
    let mut used = std::collections::BTreeSet::new();
    for q in &queries {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut rest = *q;
        while let Some(i) = rest.find("tasklift_") {
            let before = rest[..i].chars().next_back();
            let name: String = rest[i..].chars().take_while(|c| ident(*c)).collect();
            if !before.is_some_and(|c| ident(c) || c == '$') {
                used.insert(name.clone());
            }
            rest = &rest[i + name.len()..];
        }
    }

    let h = Harness::start(FixtureServer::new().tool(Tool::new("fast")), |_| {}).await;
    h.client().call_tool("fast", json!({})).await.unwrap();
    let page = scrape(&h).await;
    let mut rendered = std::collections::BTreeSet::new();
    let mut families = Vec::new();
    for line in page.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').unwrap();
            let series: &[&str] = if kind == "histogram" {
                &["_bucket", "_sum", "_count"]
            } else {
                &[""]
            };
            let names: Vec<String> = series.iter().map(|s| format!("{name}{s}")).collect();
            rendered.extend(names.iter().cloned());
            families.push((name.to_string(), names));
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap();
            rendered.insert(name.to_string());
        }
    }
    let unknown: Vec<_> = used.difference(&rendered).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics /metrics does not render: {unknown:?}\n{page}"
    );
    let unshown: Vec<_> = families
        .iter()
        .filter(|(_, names)| !names.iter().any(|n| used.contains(n)))
        .map(|(f, _)| f)
        .collect();
    assert!(
        unshown.is_empty(),
        "metrics without a panel in the dashboard: {unshown:?}"
    );
    h.stop().await;
}
