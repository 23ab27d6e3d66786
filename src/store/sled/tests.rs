//! The embedded store's own tests (its group commit's are in `commit.rs`).

use super::*;
use crate::store::{ReplayStore, TaskStore};

fn finished(i: usize) -> TaskRecord {
    let mut rec = TaskRecord::new(crate::store::NewTask {
        id: format!("task-{i}"),
        owner: "o".into(),
        upstream: "u".into(),
        tool: "t".into(),
        created_at_ms: 1,
        ttl_ms: 60_000,
        poll_interval_ms: 100,
    });
    rec.settle(crate::store::Settle::Completed(serde_json::json!({"n": i})))
        .unwrap();
    rec.updated_at_ms = 2;
    rec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_finished_records_than_the_cache_holds_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
    let n = SETTLED_MAX + 64;
    for i in 0..n {
        s.put(&finished(i)).await.unwrap();
    }
    assert!(
        s.inner().unwrap().settled.len() <= SETTLED_MAX,
        "the cache is bounded"
    );
    // Reads of every record, cached or not, in two passes (the first refills
    // the cache past its bound, evicting as it goes).
    for _ in 0..2 {
        for i in 0..n {
            let got = s.get(&format!("task-{i}")).await.unwrap().unwrap();
            assert_eq!(got, finished(i));
        }
    }
    s.delete("task-0").await.unwrap();
    assert_eq!(s.get("task-0").await.unwrap(), None, "deleted means gone");
}
fn working(i: usize) -> TaskRecord {
    TaskRecord::new(crate::store::NewTask {
        id: format!("task-{i}"),
        owner: "o".into(),
        upstream: "u".into(),
        tool: "t".into(),
        created_at_ms: 1,
        ttl_ms: 60_000,
        poll_interval_ms: 100,
    })
}

/// Concurrent creates on real sled all land and are found, with no more
/// flushes than writers. How many they share depends on the machine's
/// scheduling (2-3 of 64 here, 45 once on a loaded CI machine), so sharing
/// itself is shown step by step by `a_writer_during_a_flush_waits_for_the_next_one`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
    let n = 64;
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let writers: Vec<_> = (0..n)
        .map(|i| {
            let (s, start) = (s.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                s.create(&working(i)).await
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    for i in 0..n {
        let got = s.get(&format!("task-{i}")).await.unwrap();
        assert_eq!(got, Some(working(i)));
    }
    let flushes = s.inner().unwrap().commit.flushes_started();
    assert!(
        flushes > 0 && flushes <= n as u64,
        "{flushes} flushes for {n} creates"
    );
}

#[tokio::test]
async fn a_replay_key_is_recalled_until_its_window_closes() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
    let replays = s.replays().expect("sled keeps replays");
    let flushes = s.inner().unwrap().commit.flushes_started();
    replays.remember_call("k1", "task-1", 1_000).await.unwrap();
    assert_eq!(
        s.inner().unwrap().commit.flushes_started(),
        flushes + 1,
        "remembering a call flushes"
    );
    assert_eq!(
        replays.recall_call("k1", 999).await.unwrap().as_deref(),
        Some("task-1")
    );
    assert_eq!(replays.recall_call("k1", 1_000).await.unwrap(), None);
    assert_eq!(replays.recall_call("k1", 5_000).await.unwrap(), None);
    assert_eq!(replays.recall_call("unknown", 0).await.unwrap(), None);
}

#[tokio::test]
async fn remembering_a_replay_key_again_replaces_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
    s.remember_call("k", "task-1", 1_000).await.unwrap();
    s.remember_call("k", "task-2", 2_000).await.unwrap();
    assert_eq!(
        s.recall_call("k", 1_500).await.unwrap().as_deref(),
        Some("task-2")
    );
    // A shorter window replaces a longer one too: the latest call decides.
    s.remember_call("k", "task-3", 500).await.unwrap();
    assert_eq!(s.recall_call("k", 600).await.unwrap(), None);
}

#[tokio::test]
async fn purging_replays_removes_only_closed_windows() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
    s.remember_call("a", "task-a", 100).await.unwrap();
    s.remember_call("b", "task-b", 200).await.unwrap();
    s.remember_call("c", "task-c", 300).await.unwrap();
    // An entry that cannot be read goes as well.
    s.inner()
        .unwrap()
        .replays
        .insert("bad", &[1u8, 2][..])
        .unwrap();
    assert!(matches!(
        s.recall_call("bad", 0).await,
        Err(StoreError::Corrupt { .. })
    ));
    assert_eq!(
        s.purge_calls(200).await.unwrap(),
        3,
        "a, b (at 200) and bad"
    );
    assert_eq!(s.recall_call("a", 0).await.unwrap(), None);
    assert_eq!(s.recall_call("b", 0).await.unwrap(), None);
    assert_eq!(
        s.recall_call("c", 250).await.unwrap().as_deref(),
        Some("task-c")
    );
    assert_eq!(s.purge_calls(200).await.unwrap(), 0);
    assert_eq!(s.inner().unwrap().replays.len(), 1);
}

#[tokio::test]
async fn a_replay_key_survives_reopening_and_task_deletion() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
        s.create(&working(1)).await.unwrap();
        s.remember_call("k", "task-1", 10_000).await.unwrap();
        // Deleting the task leaves the entry: whoever recalls it checks the task.
        s.delete("task-1").await.unwrap();
    }
    let s = reopened(dir.path()).await;
    assert_eq!(s.get("task-1").await.unwrap(), None);
    assert_eq!(
        s.recall_call("k", 5_000).await.unwrap().as_deref(),
        Some("task-1")
    );
}

#[tokio::test]
async fn sequential_creates_flush_each() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024).unwrap();
    for i in 0..10 {
        s.create(&working(i)).await.unwrap();
        assert_eq!(s.inner().unwrap().commit.flushes_started(), i as u64 + 1);
    }
    s.flush().await.unwrap();
    assert_eq!(
        s.inner().unwrap().commit.flushes_started(),
        11,
        "flush() flushes too"
    );
}

/// The store opened again on `dir`: sled's background thread lets go of the
/// directory's lock a moment after its last handle, later on a busy machine.
async fn reopened(dir: &std::path::Path) -> SledStore {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match SledStore::open(dir, 64 * 1024) {
            Err(StoreError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            other => return other.unwrap(),
        }
    }
}

/// An outbox for one destination (max_pending 2) of the tasks of upstream `u`.
fn outbox() -> Arc<crate::store::Outbox> {
    let text = "[[upstreams]]\nname = \"u\"\nurl = \"http://127.0.0.1:9/mcp\"\n[[webhooks]]\nname = \"d\"\nurl = \"http://127.0.0.1:1/h\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nmax_pending = 2\n";
    let cfg = crate::config::RawConfig::from_toml(text)
        .unwrap()
        .validate()
        .unwrap();
    Arc::new(crate::store::Outbox::new(cfg.webhooks))
}

#[tokio::test]
async fn a_status_change_leaves_its_event_in_the_outbox_until_it_is_done() {
    use crate::store::OutboxStore;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024)
        .unwrap()
        .with_outbox(outbox())
        .unwrap();
    let mut rec = finished(0);
    rec.upstream = "u".into();
    let mut working = TaskRecord::new(crate::store::NewTask {
        id: rec.id.clone(),
        owner: "o".into(),
        upstream: "u".into(),
        tool: "t".into(),
        created_at_ms: 1,
        ttl_ms: 60_000,
        poll_interval_ms: 100,
    });
    s.create(&working).await.unwrap();
    assert!(
        s.pending(10).await.unwrap().is_empty(),
        "working is no event"
    );
    working
        .settle(crate::store::Settle::Completed(serde_json::json!({"n": 0})))
        .unwrap();
    s.put(&working).await.unwrap();
    let lease = Duration::from_secs(30);
    let due = s.due("d", u64::MAX / 2, lease, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].kind, "task.completed");
    assert!(
        s.due("d", u64::MAX / 2, lease, 10)
            .await
            .unwrap()
            .is_empty(),
        "leased"
    );
    // Tried and failed: due again only from its next attempt's time.
    let mut d = due[0].clone();
    d.attempts = 1;
    d.next_at_ms = d.occurred_at_ms + 60_000;
    s.retry(&d).await.unwrap();
    assert!(s
        .due("d", d.next_at_ms - 1, lease, 10)
        .await
        .unwrap()
        .is_empty());
    let again = s.due("d", d.next_at_ms, lease, 10).await.unwrap();
    assert_eq!(
        (again[0].id.as_str(), again[0].attempts),
        (d.id.as_str(), 1),
        "same id"
    );
    s.done(&again[0]).await.unwrap();
    assert!(s.pending(10).await.unwrap().is_empty());
    assert!(s.depth().await.unwrap().is_empty());
}

#[tokio::test]
async fn past_max_pending_new_events_are_dropped_and_counted() {
    use crate::store::OutboxStore;
    let dir = tempfile::tempdir().unwrap();
    let o = outbox();
    let s = SledStore::open(dir.path(), 64 * 1024)
        .unwrap()
        .with_outbox(o.clone())
        .unwrap();
    for i in 0..4 {
        let mut rec = finished(i);
        rec.upstream = "u".into();
        s.put(&rec).await.unwrap();
    }
    assert_eq!(s.pending(10).await.unwrap().len(), 2, "max_pending");
    assert_eq!(o.dropped(), vec![("d".to_string(), 2)]);
    assert_eq!(
        s.get("task-3").await.unwrap().unwrap().id,
        "task-3",
        "the task is kept"
    );
}

#[tokio::test]
async fn a_large_body_waits_in_a_file_of_its_own_which_goes_with_its_event() {
    use crate::store::OutboxStore;
    use std::time::Duration;
    let text = "[[upstreams]]\nname = \"u\"\nurl = \"http://127.0.0.1:9/mcp\"\n[[webhooks]]\nname = \"d\"\nurl = \"http://127.0.0.1:1/h\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\ninclude_result = true\n";
    let cfg = crate::config::RawConfig::from_toml(text)
        .unwrap()
        .validate()
        .unwrap();
    let o = Arc::new(crate::store::Outbox::new(cfg.webhooks));
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path(), 64 * 1024)
        .unwrap()
        .with_outbox(o.clone())
        .unwrap();
    let mut rec = finished(0);
    rec.upstream = "u".into();
    rec.outcome = Some(crate::store::TaskOutcome::Result(
        serde_json::json!({"text": "x".repeat(20_000)}),
    ));
    s.put(&rec).await.unwrap();
    let files = || {
        std::fs::read_dir(dir.path().join("outbox"))
            .unwrap()
            .count()
    };
    assert_eq!(files(), 1, "the body is in a file");
    let due = s
        .due("d", u64::MAX / 2, Duration::from_secs(30), 10)
        .await
        .unwrap();
    assert!(
        due[0].body.contains(&"x".repeat(20_000)),
        "and read back whole"
    );
    // A file no event names (a crash between the writes) goes at the next start.
    std::fs::write(dir.path().join("outbox/orphan.json"), "{}").unwrap();
    drop(s);
    let s = loop {
        match SledStore::open(dir.path(), 64 * 1024) {
            Ok(s) => break s.with_outbox(o.clone()).unwrap(),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert_eq!(files(), 1);
    let due = s
        .due("d", u64::MAX / 2, Duration::from_secs(30), 10)
        .await
        .unwrap();
    s.done(&due[0]).await.unwrap();
    assert_eq!(files(), 0, "the file goes with its event");
}
