//! Webhooks with three replicas sharing one PostgreSQL store: each event is
//! leased to one replica at a time, and when a replica is killed with SIGKILL
//! while it delivers, the others send what it held once its leases lapse, and
//! fail its running tasks with an event of their own. Every event arrives;
//! an event sent twice carries the same `webhook-id` both times.
//!
//! PostgreSQL as in `store/replicas.rs` (`TASKLIFT_TEST_POSTGRES`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::Client;
use tasklift_fixture::{FixtureServer, Tool};

use super::receiver::{Receiver, SECRET};
use crate::support::pg::Db;
use crate::support::proc::Proc;

async fn task(url: &str, tool: &str) -> String {
    let c = Client::new(url).unwrap();
    let r = c
        .call_tool(tool, json!({}))
        .await
        .expect("tools/call")
        .result;
    assert_eq!(r["resultType"], "task", "{r}");
    r["taskId"].as_str().unwrap().to_string()
}

/// Whether the receiver answered 2xx to an event of `kind` about `task`.
fn delivered(r: &Receiver, task: &str, kind: &str) -> bool {
    r.about(task)
        .iter()
        .any(|v| v["status"] == 204 && v["payload"]["type"] == kind && v["verified"] == true)
}

#[tokio::test]
async fn three_replicas_deliver_every_event_when_one_dies_mid_delivery() {
    let Some(db) = Db::create().await else {
        return;
    };
    let Some(r) = Receiver::start(&["--delay", "3"]).await else {
        return;
    };
    let up = FixtureServer::new()
        .tool(Tool::new("report").sleep(Duration::from_millis(100)))
        .tool(Tool::new("long").sleep(Duration::from_secs(120)))
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tasklift.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nurl = \"{db}\"\nlease = \"2s\"\npool_size = 4\n\
             [tasks]\nsweep_interval = \"200ms\"\n[[upstreams]]\nurl = \"{up}\"\n\
             [upstreams.tools.report]\nmode = \"always\"\n[upstreams.tools.long]\nmode = \"always\"\n\
             [[webhooks]]\nname = \"receiver\"\nurl = \"{hook}\"\nsecret = \"{SECRET}\"\ntimeout = \"5s\"\nconcurrency = 2\n",
            db = db.url,
            up = up.url(),
            hook = r.url,
        ),
    )
    .unwrap();
    let args = ["serve", "-c", cfg.to_str().unwrap()];
    // Replica 0 alone first: the events are its to deliver.
    let mut first = Proc::start(&args, "as replica 0").await;
    // A task running on replica 0 when it dies: failed by another replica.
    let lost = task(&first.url, "long").await;
    let mut done = Vec::new();
    for _ in 0..6 {
        done.push(task(&first.url, "report").await);
    }
    let pg = db.client().await;
    let leased = || async {
        let n: i64 = pg
            .query_one(
                "SELECT count(*) FROM tasklift_outbox WHERE leased_by IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while leased().await < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica 0 never took events"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Two more replicas, and replica 0 dies while its deliveries are in flight
    // (the receiver takes 3 s to answer each).
    let _others = [
        Proc::start(&args, "as replica 1").await,
        Proc::start(&args, "as replica 2").await,
    ];
    first.kill9();

    // Every event reaches the receiver, and the outbox empties: each was
    // acknowledged to a replica still alive.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let all = done.iter().all(|id| delivered(&r, id, "task.completed"))
            && delivered(&r, &lost, "task.failed");
        let waiting: i64 = pg
            .query_one("SELECT count(*) FROM tasklift_outbox", &[])
            .await
            .unwrap()
            .get(0);
        if all && waiting == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every event delivered ({waiting} waiting): {:?}",
            r.requests()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Sent more than once only under one webhook-id per event.
    let mut ids: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for v in r.requests() {
        assert_eq!(v["verified"], true, "{v}");
        let key = (
            v["payload"]["data"]["taskId"].as_str().unwrap().to_string(),
            v["payload"]["type"].as_str().unwrap().to_string(),
        );
        ids.entry(key)
            .or_default()
            .insert(v["id"].as_str().unwrap().to_string());
    }
    for (event, webhook_ids) in &ids {
        assert_eq!(
            webhook_ids.len(),
            1,
            "{event:?} under several ids: {webhook_ids:?}"
        );
    }
    // What replica 0 was sending when it died was sent again, by another.
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    for v in r.requests() {
        *sent
            .entry(v["id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert!(
        sent.values().any(|n| *n > 1),
        "an event in flight at the kill is sent again: {sent:?}"
    );
}
