//! What operators see of webhooks: `tasklift store outbox` lists the events a
//! stopped proxy still owes a receiver that was down, and the status page and
//! `/metrics` show each destination's backlog and the outcomes of its attempts.

use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};

use super::receiver::webhook_to;
use crate::support::cli::{run, text};
use crate::support::harness::*;
use crate::support::input::*;

#[tokio::test]
async fn store_outbox_lists_the_events_a_receiver_that_is_down_still_waits_for() {
    let upstream = FixtureServer::new().tool(Tool::new("report").sleep(Duration::from_millis(100)));
    let h = Harness::start(upstream, |c| {
        c.upstreams[0].tools.insert("report".into(), rule("always"));
        webhook_to(&closed_port_url(), |_| {})(c);
    })
    .await;
    let id = task_of(&h, "report", json!({})).await;
    wait_terminal(&h.client(), &id, Duration::from_secs(10)).await;
    // The first attempt finds nobody listening.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Harness {
        proxy,
        upstream,
        dir,
        ..
    } = h;
    proxy.unwrap().shutdown().await;
    upstream.stop().await;

    let data = dir.path().to_str().unwrap().to_string();
    let cmd = move |json: bool| {
        let data = data.clone();
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["store", "outbox", "--data-dir", &data];
            if json {
                args.push("--json");
            }
            run(&args, Duration::from_secs(30))
        })
    };
    // sled's flusher lets go of the directory a moment after the proxy stops.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = cmd(true).await.unwrap();
        if out.status.code() != Some(3) || tokio::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pending = v["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{v}");
    assert_eq!(
        (pending[0]["task_id"].as_str(), pending[0]["type"].as_str()),
        (Some(id.as_str()), Some("task.completed")),
        "{v}"
    );
    assert!(pending[0]["attempts"].as_u64().unwrap() >= 1, "{v}");
    assert!(pending[0].get("body").is_none(), "never the body: {v}");
    assert_eq!(v["destinations"][0]["pending"], 1, "{v}");
    let out = cmd(false).await.unwrap();
    let table = text(&out.stdout);
    assert!(table.contains("receiver: 1 waiting"), "{table}");
    assert!(
        table.contains(pending[0]["webhook_id"].as_str().unwrap()),
        "{table}"
    );
}

#[tokio::test]
async fn the_status_page_and_metrics_show_each_destinations_backlog_and_failed_attempts() {
    let upstream = FixtureServer::new().tool(Tool::new("report").sleep(Duration::from_millis(100)));
    let h = Harness::start(upstream, |c| {
        c.admin.listen = "127.0.0.1:0".into();
        c.upstreams[0].tools.insert("report".into(), rule("always"));
        webhook_to(&closed_port_url(), |w| w.name = "tickets".into())(c);
    })
    .await;
    let id = task_of(&h, "report", json!({})).await;
    wait_terminal(&h.client(), &id, Duration::from_secs(10)).await;
    let admin = h.proxy.as_ref().unwrap().admin_addr.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let page = loop {
        let page = raw("GET", &format!("http://{admin}/"), &[], "").await.body;
        // The first attempt found nobody listening: an error, and the event waits.
        if page.contains("id=\"webhook-pending-tickets\">1<")
            && page.contains("<td class=\"num\">1</td>")
        {
            break page;
        }
        assert!(tokio::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(page.contains("<h2>Webhooks</h2>"), "{page}");
    assert!(page.contains("http://127.0.0.1:"), "{page}");
    assert!(!page.contains("whsec_"), "never the secret: {page}");
    // The same figures in /metrics.
    let m = raw("GET", &format!("http://{admin}/metrics"), &[], "")
        .await
        .body;
    let value = |series: &str| -> u64 {
        let line = m
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("no {series}:\n{m}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(
        value("tasklift_webhook_deliveries_total{destination=\"tickets\",outcome=\"error\"}") >= 1
    );
    assert_eq!(
        value("tasklift_webhook_deliveries_total{destination=\"tickets\",outcome=\"delivered\"}"),
        0
    );
    assert_eq!(
        value("tasklift_webhook_outbox_events{destination=\"tickets\"}"),
        1
    );
    assert!(
        m.contains("tasklift_webhook_outbox_oldest_age_seconds{destination=\"tickets\"}"),
        "{m}"
    );
    h.stop().await;
}
