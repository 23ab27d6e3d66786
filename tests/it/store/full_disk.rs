//! A full disk under the embedded store (issue 29), on a tmpfs of its own (these
//! tests need root to mount one, as `low_space` does): an outcome that does not
//! fit is kept and lands once space returns, never failed for lack of space; no
//! handle is given once the disk is below the watermark, however fast it filled;
//! the store takes writes again in the running process after sled itself met the
//! error; and a volume smaller than the watermark starts, full or not.

use std::time::Duration;

use serde_json::json;
use tasklift::store::{SledStore, TaskRecord, TaskStore};
use tasklift_fixture::{FixtureServer, Tool};

use crate::support::harness::*;
use crate::support::space::{fill, slow_becomes_a_task, wait_ready_status, Mounted};

/// `slow` answers after 800 ms; `report` after `seconds` with a 600 KB text that
/// starts with `report N`: three of them are more than the 1 MiB reserve.
fn upstream() -> FixtureServer {
    FixtureServer::new()
        .tool(Tool::new("slow").sleep(Duration::from_millis(800)))
        .tool(
            Tool::new("report")
                .sleep_arg("seconds", 3.0)
                .reply(|a| format!("report {} ", a["n"]))
                .pad_to(600 * 1024),
        )
}

macro_rules! tmpfs_or_skip {
    ($size:expr) => {
        match Mounted::tmpfs($size) {
            Some(fs) => fs,
            None => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI runs as root and must mount a tmpfs"
                );
                eprintln!("skipped: this process cannot mount a tmpfs (it needs root)");
                return;
            }
        }
    };
}

fn reserve_written(dir: &std::path::Path) -> bool {
    std::fs::metadata(dir.join(tasklift::store::space::RESERVE_FILE))
        .is_ok_and(|m| m.len() == tasklift::store::space::RESERVE_BYTES)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_that_meet_a_full_disk_are_kept_and_land_once_space_returns() {
    let fs = tmpfs_or_skip!("24m");
    let dir = tempfile::tempdir_in(&fs.0).unwrap();
    let data = dir.path().to_path_buf();
    let h = Harness::start_in(upstream(), dir, |c| c.store.min_free_bytes = 6 << 20).await;
    eventually("the reserve is written", Duration::from_secs(10), || {
        reserve_written(&data)
    })
    .await;
    let c = h.client();
    let mut ids = Vec::new();
    for n in 0..3 {
        let a = c
            .call_tool("report", json!({"n": n, "seconds": 2}))
            .await
            .unwrap();
        assert_eq!(a.result["resultType"], "task", "{}", a.result);
        ids.push(a.result["taskId"].as_str().unwrap().to_string());
    }
    // The disk fills to the last byte at once, as a neighbour's core dump does.
    let ballast = fill(&fs.0, 0);
    // No new handle: the call runs synchronously (measured at the threshold,
    // not only by the once-a-second watch).
    assert!(!slow_becomes_a_task(&h).await, "a handle on a full disk");
    // The reports end upstream while the disk is full: none is failed for it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in &ids {
        let t = c.get_task(id).await.expect("a task stays readable");
        assert_ne!(t["status"], "failed", "failed for lack of space: {t}");
    }
    let r = wait_ready_status(&h, "degraded").await;
    assert_eq!(r["disk"]["low"], true, "{r}");

    // Space comes back: every outcome lands whole, and calls become tasks again,
    // without a restart.
    std::fs::remove_file(&ballast).unwrap();
    for (n, id) in ids.iter().enumerate() {
        let t = wait_terminal(&c, id, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "completed", "{t}");
        let text = t["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.starts_with(&format!("report {n} ")),
            "{}",
            &text[..40.min(text.len())]
        );
        assert!(
            text.len() >= 600 * 1024,
            "the whole outcome: {} bytes",
            text.len()
        );
    }
    wait_ready_status(&h, "ready").await;
    assert!(
        slow_becomes_a_task(&h).await,
        "tasks again once space is back"
    );
    eventually(
        "the reserve is written again",
        Duration::from_secs(10),
        || reserve_written(&data),
    )
    .await;
}

fn running(i: usize) -> TaskRecord {
    TaskRecord::new(tasklift::store::NewTask {
        id: format!("task-{i}"),
        owner: "o".into(),
        upstream: "u".into(),
        tool: "t".into(),
        created_at_ms: 1,
        ttl_ms: 3_600_000,
        poll_interval_ms: 100,
    })
}

fn completed(i: usize, bytes: usize) -> TaskRecord {
    let mut rec = running(i);
    rec.updated_at_ms = 2;
    rec.settle(tasklift::store::Settle::Completed(
        json!({"n": i, "pad": "x".repeat(bytes)}),
    ))
    .unwrap();
    rec
}

/// sled keeps its first write error for good, and reads through it fail for
/// pages it had not written: once it has met the full disk, the store opens it
/// again at once (with the reserve), so every acknowledged task reads on while
/// the disk stays full; a running task's change that does not fit is shown and
/// written once there is room; a final state that did not fit never shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_reads_on_and_takes_writes_again_after_sled_met_a_full_disk() {
    let fs = tmpfs_or_skip!("8m");
    let space = tasklift::store::space::DiskSpace::new(&fs.0, 1 << 20);
    // A small page cache: sled writes pages out and reads them back, as a large
    // store does with the default cache.
    let s = SledStore::open_with_cache(&fs.0, 64 * 1024, 256 * 1024)
        .unwrap()
        .watched(space.clone());
    assert!(reserve_written(&fs.0));
    // 3,000 running tasks, then each completed with a 3 KB outcome (kept in
    // sled itself, not in a result file) until the disk refuses a completion.
    let n = 3000;
    for i in 0..n {
        s.create(&running(i)).await.expect("room for the tasks");
    }
    let mut done = Vec::new();
    let mut refused = None;
    for i in 0..n {
        match s.put(&completed(i, 3000)).await {
            Ok(()) => done.push(i),
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (last, e) = refused.expect("the disk fills");
    assert!(
        matches!(e, tasklift::store::StoreError::Full(_)),
        "a full disk is 'full', to be retried: {e}"
    );
    assert!(space.store_refused(), "the refusal is noted (no new tasks)");
    // While the disk stays full: every completed task reads, outcome and all;
    // the others are running. The completion that was refused may have reached
    // the disk all the same (sled reports the error of a later write): it shows
    // working, or completed with its outcome, and once completed, stays so.
    let mut last_completed = false;
    for round in 0..2 {
        for i in 0..n {
            let r = s.get(&format!("task-{i}")).await;
            let r = r.unwrap_or_else(|e| panic!("round {round}: task-{i} unreadable: {e}"));
            let r = r.unwrap_or_else(|| panic!("round {round}: task-{i} lost"));
            let completed = match &r.outcome {
                Some(tasklift::store::TaskOutcome::Result(v)) => {
                    assert_eq!(v["n"], i);
                    true
                }
                None => false,
                other => panic!("task-{i}: {other:?}"),
            };
            match i.cmp(&last) {
                std::cmp::Ordering::Less => assert!(completed, "task-{i}: {:?}", r.status()),
                std::cmp::Ordering::Equal => {
                    assert!(
                        completed || !last_completed,
                        "round {round}: task-{i} (refused) was shown completed, then working"
                    );
                    last_completed = completed;
                }
                std::cmp::Ordering::Greater => assert_eq!(
                    r.status(),
                    tasklift::store::TaskStatus::Working,
                    "task-{i} (the refused completion was task-{last})"
                ),
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A running task's change that does not fit is accepted and shown.
    let mut asking = running(last + 1);
    asking.updated_at_ms = 3;
    asking.status_message = Some("asked while the disk was full".into());
    s.put(&asking).await.expect("kept in memory");
    let shown = s.get(&asking.id).await.unwrap().unwrap();
    assert_eq!(shown.status_message, asking.status_message);
    let listed = s.list("o", "u", 0).await.unwrap();
    assert_eq!(listed.len(), n);
    let in_list = listed.iter().find(|r| r.id == asking.id).unwrap();
    assert_eq!(in_list.status_message, asking.status_message);
    // Space comes back: the volume grows, and the store takes writes again.
    assert!(std::process::Command::new("mount")
        .args(["-o", "remount,size=32m"])
        .arg(&fs.0)
        .status()
        .unwrap()
        .success());
    space.measure().unwrap();
    s.recover().await.expect("the store takes writes again");
    space.writes_again();
    s.put(&completed(last, 3000))
        .await
        .expect("the kept outcome lands once there is room");
    // What was held was written: it is on disk when the store is opened anew.
    drop(s);
    let s = eventually_ok("the store opens again", || {
        SledStore::open(&fs.0, 64 * 1024)
    })
    .await;
    let r = s.get(&asking.id).await.unwrap().unwrap();
    assert_eq!(r.status_message, asking.status_message);
    for i in 0..=last {
        let r = s.get(&format!("task-{i}")).await.unwrap();
        assert!(r.is_some_and(|r| r.outcome.is_some()), "task-{i} lost");
    }
}

/// Retry `open` for a few seconds: sled's background thread lets go of the
/// directory's lock a moment after its last handle.
async fn eventually_ok<T, E: std::fmt::Display>(what: &str, open: impl Fn() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match open() {
            Ok(t) => return t,
            Err(e) if std::time::Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A volume smaller than `store.min_free_bytes` starts (with a warning) and keeps
/// its reserve, so that full to the last byte it still opens its store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_smaller_than_the_watermark_starts_full_or_not() {
    let fs = tmpfs_or_skip!("3m");
    let dir = tempfile::tempdir_in(&fs.0).unwrap();
    let data = dir.path().to_path_buf();
    // The default watermark (64 MiB) is larger than the whole volume.
    let mut h = Harness::start_in(upstream(), dir, |_| {}).await;
    assert!(reserve_written(&data), "the reserve is written at start");
    let r = wait_ready_status(&h, "degraded").await;
    assert_eq!(r["disk"]["low"], true, "{r}");
    h.proxy.take().unwrap().shutdown().await;
    let _ballast = fill(&fs.0, 0);
    h.restart().await;
    let r = wait_ready_status(&h, "degraded").await;
    assert_eq!(r["disk"]["low"], true, "{r}");
    let a = h
        .client()
        .call_tool("slow", json!({}))
        .await
        .expect("calls run");
    assert!(a.result["content"].is_array(), "{}", a.result);
}
