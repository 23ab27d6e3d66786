//! Low disk space (`store.min_free_bytes`): below the watermark no new task is
//! created. A call that could become a task runs synchronously, a tool that runs
//! only as a task is refused before anything runs upstream, stored and running
//! tasks stay readable and finish, `/readyz`, `/metrics` and the status page say
//! so, and it ends by itself once space is freed.

use std::time::Duration;

use serde_json::json;
use tasklift::cli::client::ClientError;
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;
use crate::support::space::{fill, slow_becomes_a_task, wait_ready_status, Mounted};
use crate::support::wire::raw;

/// `slow` answers after 800 ms (past the harness's 300 ms threshold), `long`
/// after 3 s, `only_task` is set to run only as a task.
fn upstream() -> FixtureServer {
    FixtureServer::new()
        .tool(Tool::new("slow").sleep(Duration::from_millis(800)))
        .tool(Tool::new("long").sleep(Duration::from_secs(3)))
        .tool(Tool::new("only_task").sleep(Duration::from_millis(800)))
}

async fn metric(h: &Harness, series: &str) -> Option<String> {
    let page = raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "")
        .await
        .body;
    let prefix = format!("{series} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

#[tokio::test]
async fn below_the_watermark_calls_run_synchronously_and_task_only_tools_are_refused() {
    let h = Harness::start(upstream(), |c| {
        c.store.min_free_bytes = u64::MAX; // above any filesystem's free space
        c.admin.listen = "127.0.0.1:0".into();
        c.upstreams[0]
            .tools
            .insert("only_task".into(), rule("required"));
    })
    .await;
    assert!(
        !slow_becomes_a_task(&h).await,
        "no task while space is low: the call ran synchronously"
    );
    match h.client().call_tool("only_task", json!({})).await {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, -32003, "{e:?}");
            assert!(e.message.contains("store.min_free_bytes"), "{}", e.message);
            assert!(e.message.contains("retry"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        h.received("tools/call").len(),
        1,
        "the refused tool never ran upstream"
    );
    let r = wait_ready_status(&h, "degraded").await;
    assert_eq!(r["disk"]["low"], true, "{r}");
    assert!(r["disk"]["free_bytes"].as_u64().is_some(), "{r}");
    assert_eq!(
        metric(&h, "tasklift_store_low_space").await.as_deref(),
        Some("1")
    );
    assert_eq!(
        metric(&h, "tasklift_limit_hits_total{limit=\"min_free_bytes\"}")
            .await
            .as_deref(),
        Some("2")
    );
    let admin = h
        .proxy
        .as_ref()
        .unwrap()
        .admin_addr
        .expect("admin listener");
    let page = raw("GET", &format!("http://{admin}/"), &[], "").await.body;
    assert!(
        page.contains("id=\"low-space\"") && page.contains("store.min_free_bytes"),
        "the status page says it: {page}"
    );
}

#[tokio::test]
async fn with_room_to_spare_calls_become_tasks_and_readyz_says_ready() {
    let h = Harness::start(upstream(), |c| c.store.min_free_bytes = 1).await;
    assert!(slow_becomes_a_task(&h).await);
    let r = wait_ready_status(&h, "ready").await;
    assert_eq!(r["disk"]["low"], false, "{r}");
    assert_eq!(
        metric(&h, "tasklift_store_low_space").await.as_deref(),
        Some("0")
    );
}

#[tokio::test]
async fn a_filling_disk_stops_new_tasks_and_freeing_it_brings_them_back() {
    let Some(fs) = Mounted::tmpfs("24m") else {
        eprintln!("skipped: this process cannot mount a tmpfs (it needs root); the watermark's other tests still run");
        return;
    };
    let dir = tempfile::tempdir_in(&fs.0).unwrap();
    let h = Harness::start_in(upstream(), dir, |c| c.store.min_free_bytes = 6 << 20).await;
    wait_ready_status(&h, "ready").await;
    let c = h.client();
    // A task started while there is room; it finishes after the disk fills.
    let a = c.call_tool("long", json!({})).await.unwrap();
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    let id = a.result["taskId"].as_str().unwrap().to_string();

    let ballast = fill(&fs.0, 3 << 20);
    let r = wait_ready_status(&h, "degraded").await;
    assert!(r["disk"]["free_bytes"].as_u64().unwrap() < 6 << 20, "{r}");
    assert!(!slow_becomes_a_task(&h).await, "no new task on a full disk");
    // The running task goes on, stores its outcome in the reserve, and is read.
    let done = wait_terminal(&c, &id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let status = raw("GET", &h.url.replace("/mcp", "/readyz"), &[], "").await;
    assert_eq!(status.status, 200);

    std::fs::remove_file(&ballast).unwrap();
    let r = wait_ready_status(&h, "ready").await;
    assert_eq!(r["disk"]["low"], false, "{r}");
    assert!(
        slow_becomes_a_task(&h).await,
        "tasks again once space is back"
    );
}

#[tokio::test]
async fn tasklift_starts_on_a_full_disk_and_serves_what_it_stored() {
    let Some(fs) = Mounted::tmpfs("24m") else {
        eprintln!("skipped: this process cannot mount a tmpfs (it needs root)");
        return;
    };
    let dir = tempfile::tempdir_in(&fs.0).unwrap();
    let data = dir.path().to_path_buf();
    let mut h = Harness::start_in(upstream(), dir, |c| c.store.min_free_bytes = 6 << 20).await;
    let reserve = data.join(tasklift::store::space::RESERVE_FILE);
    crate::support::harness::eventually(
        "the space reserve is written",
        Duration::from_secs(10),
        || {
            std::fs::metadata(&reserve)
                .is_ok_and(|m| m.len() == tasklift::store::space::RESERVE_BYTES)
        },
    )
    .await;
    let c = h.client();
    let a = c.call_tool("slow", json!({})).await.unwrap();
    let id = a.result["taskId"].as_str().expect("a task").to_string();
    let done = wait_terminal(&c, &id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "completed", "{done}");

    // Stopped, the disk fills up to the last byte; tasklift starts anyway.
    h.proxy.take().unwrap().shutdown().await;
    let ballast = fill(&fs.0, 0);
    h.restart().await;
    assert!(
        !reserve.exists(),
        "the reserve was given back to open the store"
    );
    let r = wait_ready_status(&h, "degraded").await;
    assert_eq!(r["disk"]["low"], true, "{r}");
    let c = h.client();
    let t = c.get_task(&id).await.expect("a stored task is served");
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"], done["result"], "with its result");
    assert!(!slow_becomes_a_task(&h).await, "no new task on a full disk");

    // Space comes back: tasks again, and the reserve is kept again.
    std::fs::remove_file(&ballast).unwrap();
    wait_ready_status(&h, "ready").await;
    assert!(slow_becomes_a_task(&h).await);
    crate::support::harness::eventually(
        "the reserve is written again",
        Duration::from_secs(10),
        || reserve.exists(),
    )
    .await;
}
