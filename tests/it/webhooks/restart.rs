//! At least once through a crash: a task ends while its receiver is down, the
//! event's attempts fail, tasklift is killed with SIGKILL, the receiver comes
//! up, and the restarted tasklift delivers the event from its outbox.

use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::Client;
use tasklift_fixture::{FixtureServer, Tool};

use super::receiver::{Receiver, SECRET};
use crate::support::harness::*;
use crate::support::proc::Proc;

/// A port nothing listens on yet.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn an_event_not_yet_delivered_at_a_kill_9_is_delivered_after_the_restart() {
    if crate::support::python::python("webhooks").is_none() {
        return;
    }
    let upstream = FixtureServer::new()
        .tool(Tool::new("report").sleep(Duration::from_millis(200)))
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .expect("fixture starts");
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tasklift.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = \"{data}\"\n\
             [[upstreams]]\nurl = \"{up}\"\n[upstreams.tools.report]\nmode = \"always\"\n\
             [[webhooks]]\nname = \"receiver\"\nurl = \"http://127.0.0.1:{port}/hooks\"\nsecret = \"{SECRET}\"\n",
            data = dir.path().join("data").display(),
            up = upstream.url(),
        ),
    )
    .unwrap();
    let args = ["serve", "--config", cfg.to_str().unwrap()];
    let mut first = Proc::start(&args, "before the kill").await;
    let c = Client::new(&first.url).unwrap();
    let answer = c.call_tool("report", json!({})).await.expect("tools/call");
    assert_eq!(answer.result["resultType"], "task", "{:?}", answer.result);
    let id = answer.result["taskId"].as_str().unwrap().to_string();
    let t = wait_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "completed", "{t}");
    // Its first attempt finds nobody listening; the event waits in the outbox.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.kill9();

    let port = port.to_string();
    let r = Receiver::start(&["--port", &port]).await.expect("receiver");
    let _second = Proc::start(&args, "after the kill").await;
    eventually(
        "the event is delivered after the restart",
        Duration::from_secs(20),
        || r.about(&id).iter().any(|v| v["status"] == 204),
    )
    .await;
    let got = r.about(&id);
    assert_eq!(got.len(), 1, "delivered once: {got:?}");
    assert_eq!(got[0]["verified"], true, "{got:?}");
    assert_eq!(got[0]["payload"]["type"], "task.completed", "{got:?}");
}
