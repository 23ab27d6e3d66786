//! The replay index (`ReplayStore`) of the PostgreSQL store, on a real server: a
//! retried call must find the task its first attempt became on whichever replica
//! it reaches, until the replay window closes. The sled store's are unit tests
//! (`store::sled_store::tests`).
//!
//! Like `replicas`, they need PostgreSQL: `TASKLIFT_TEST_POSTGRES` makes them
//! required; without it they skip, saying so, when the default server is absent.

use std::time::Duration;

use tasklift::store::{PgStore, ReplayStore, TaskStore};

use crate::support::pg::Db;

async fn store(db: &Db) -> PgStore {
    PgStore::connect(&db.url, 2, Duration::from_secs(30), None)
        .await
        .unwrap()
}

fn replays(s: &PgStore) -> &dyn ReplayStore {
    s.replays().expect("PostgreSQL keeps replays")
}

#[tokio::test]
async fn a_replay_key_is_recalled_until_its_window_closes_in_postgres() {
    let Some(db) = Db::create().await else { return };
    let s = store(&db).await;
    let r = replays(&s);
    r.remember_call("k1", "task-1", 1_000).await.unwrap();
    assert_eq!(
        r.recall_call("k1", 999).await.unwrap().as_deref(),
        Some("task-1")
    );
    assert_eq!(r.recall_call("k1", 1_000).await.unwrap(), None);
    assert_eq!(r.recall_call("k1", 5_000).await.unwrap(), None);
    assert_eq!(r.recall_call("unknown", 0).await.unwrap(), None);
    // Windows beyond i64 are clamped, not refused.
    r.remember_call("far", "task-far", u64::MAX).await.unwrap();
    assert_eq!(
        r.recall_call("far", u64::MAX / 4).await.unwrap().as_deref(),
        Some("task-far")
    );
}

#[tokio::test]
async fn remembering_a_replay_key_again_replaces_its_task_in_postgres() {
    let Some(db) = Db::create().await else { return };
    let s = store(&db).await;
    let r = replays(&s);
    r.remember_call("k", "task-1", 1_000).await.unwrap();
    r.remember_call("k", "task-2", 2_000).await.unwrap();
    assert_eq!(
        r.recall_call("k", 1_500).await.unwrap().as_deref(),
        Some("task-2")
    );
    // A shorter window replaces a longer one too: the latest call decides.
    r.remember_call("k", "task-3", 500).await.unwrap();
    assert_eq!(r.recall_call("k", 600).await.unwrap(), None);
    let rows: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM tasklift_replays", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "one row per key");
}

#[tokio::test]
async fn purging_replays_removes_only_closed_windows_in_postgres() {
    let Some(db) = Db::create().await else { return };
    let s = store(&db).await;
    let r = replays(&s);
    r.remember_call("a", "task-a", 100).await.unwrap();
    r.remember_call("b", "task-b", 200).await.unwrap();
    r.remember_call("c", "task-c", 300).await.unwrap();
    assert_eq!(r.purge_calls(200).await.unwrap(), 2, "a, and b at 200");
    assert_eq!(r.recall_call("a", 0).await.unwrap(), None);
    assert_eq!(r.recall_call("b", 0).await.unwrap(), None);
    assert_eq!(
        r.recall_call("c", 250).await.unwrap().as_deref(),
        Some("task-c")
    );
    assert_eq!(r.purge_calls(200).await.unwrap(), 0);
}

/// What one replica remembers, the others recall (and purge), and a replica
/// started afterwards too: the index lives in the database, not in a process.
#[tokio::test]
async fn replay_keys_are_shared_by_replicas() {
    let Some(db) = Db::create().await else { return };
    let a = store(&db).await;
    let b = store(&db).await;
    replays(&a)
        .remember_call("k", "task-1", 10_000)
        .await
        .unwrap();
    assert_eq!(
        replays(&b)
            .recall_call("k", 5_000)
            .await
            .unwrap()
            .as_deref(),
        Some("task-1")
    );
    // The call ran again on B (the first task failed): A sees the new task.
    replays(&b)
        .remember_call("k", "task-2", 20_000)
        .await
        .unwrap();
    assert_eq!(
        replays(&a)
            .recall_call("k", 5_000)
            .await
            .unwrap()
            .as_deref(),
        Some("task-2")
    );
    drop((a, b));
    let c = store(&db).await;
    assert_eq!(
        replays(&c)
            .recall_call("k", 15_000)
            .await
            .unwrap()
            .as_deref(),
        Some("task-2")
    );
    assert_eq!(replays(&c).purge_calls(20_000).await.unwrap(), 1);
    assert_eq!(replays(&c).recall_call("k", 0).await.unwrap(), None);
}
