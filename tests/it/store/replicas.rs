//! Several tasklift replicas sharing one PostgreSQL store, as real processes in
//! front of one upstream, with requests spread round-robin:
//! - a task created on one replica is polled, answered and cancelled on others;
//! - a replica killed with `kill -9` has its tasks failed by the others once its
//!   lease lapses, saying the replica was lost and the outcome is unknown;
//! - a replica paused past its lease cannot overwrite the failure when it resumes;
//! - expired tasks are deleted from the database;
//! - principals hash alike on every replica (the key lives in the database).
//!
//! They need a PostgreSQL server: `TASKLIFT_TEST_POSTGRES` (a URL, or `1` for
//! `postgres://postgres@127.0.0.1:5432/postgres`) makes them required, as in CI;
//! without it they run when that default server answers and skip, saying so, when
//! it does not. Each test works in a database of its own, dropped at the end.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tasklift::cli::client::Client;
use tasklift::store::{NewTask, PgStore, Settle, StoreError, TaskRecord, TaskStatus, TaskStore};
use tasklift_fixture::FixtureServer;

use crate::support::harness::wait_terminal;
use crate::support::pg::Db;
use crate::support::proc::Proc;

const LOST: &str = "the tasklift replica running this task was lost";

/// Start the demo upstream.
async fn upstream() -> FixtureServer {
    FixtureServer::demo()
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A fresh database, the demo upstream, and `n` replicas with a lease of `lease`
/// (the directory holds their configuration); `None` when PostgreSQL is skipped.
async fn cluster(
    n: usize,
    lease: &str,
) -> Option<(Db, FixtureServer, tempfile::TempDir, Vec<Proc>)> {
    let db = Db::create().await?;
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(n, &db, &up.url(), lease, dir.path()).await;
    Some((db, up, dir, rs))
}

/// `n` replicas on `db` in front of `upstream`, with a lease of `lease`.
async fn replicas(
    n: usize,
    db: &Db,
    upstream: &str,
    lease: &str,
    dir: &std::path::Path,
) -> Vec<Proc> {
    let cfg = dir.join("tasklift.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
[store]
url = "{url}"
lease = "{lease}"
pool_size = 4
[tasks]
threshold = "100ms"
poll_interval = "50ms"
sweep_interval = "200ms"
ttl = "1h"
[auth]
mode = "bearer"
[[upstreams]]
url = "{upstream}"
[upstreams.tools.confirm_delete]
mode = "always"
"#,
            url = db.url
        ),
    )
    .unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let when = format!("as replica {i}");
        out.push(Proc::start(&["serve", "-c", cfg.to_str().unwrap()], &when).await);
    }
    out
}

fn client(p: &Proc, token: &str) -> Client {
    let mut c = Client::new(&p.url).unwrap();
    c.capabilities.insert("elicitation".into(), json!({}));
    c.headers.push((
        http::header::AUTHORIZATION,
        http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    ));
    c
}

/// Call `tool` and return the task id (the call must become a task).
async fn task(c: &Client, tool: &str, args: Value) -> String {
    let r = c.call_tool(tool, args).await.expect("tools/call").result;
    assert_eq!(r["resultType"], "task", "{r}");
    r["taskId"].as_str().unwrap().to_string()
}

async fn wait_status(c: &Client, id: &str, status: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let t = c.get_task(id).await.expect("tasks/get");
        if t["status"] == status {
            return t;
        }
        assert!(Instant::now() < deadline, "task {id} never {status}: {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn tasks_are_served_answered_and_cancelled_by_any_replica() {
    let Some((_db, up, _dir, rs)) = cluster(3, "3s").await else {
        return;
    };
    let on = |i: usize| client(&rs[i % rs.len()], "alice-token");

    // Round-robin: each task is created on one replica and followed on the next two.
    let mut ids = Vec::new();
    for i in 0..9 {
        let label = format!("job{i}");
        let id = task(
            &on(i),
            "slow_compute",
            json!({"seconds": 0.4, "label": label}),
        )
        .await;
        let seen = on(i + 1)
            .get_task(&id)
            .await
            .expect("another replica finds it");
        assert_eq!(seen["taskId"], id.as_str());
        ids.push((i, id, label));
    }
    for (i, id, label) in &ids {
        let done = wait_terminal(&on(i + 2), id, Duration::from_secs(20)).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(
            done["result"]["content"][0]["text"],
            format!("computed {label} in 0.4 s")
        );
    }

    // Input: asked on the replica running the call, answered on another, seen on a third.
    let id = task(&on(0), "confirm_delete", json!({"filename": "a.txt"})).await;
    let t = wait_status(&on(1), &id, "input_required", Duration::from_secs(15)).await;
    let key = t["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let ack = on(1)
        .update_task(
            &id,
            json!({key.clone(): {"action": "accept", "content": {"confirm": true}}}),
        )
        .await
        .unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    // The ack waits for the running replica's write: a poll right after it no
    // longer shows the answered question.
    let t = on(1).get_task(&id).await.unwrap();
    assert!(
        t["status"] != "input_required" && t["inputRequests"].get(&key).is_none(),
        "answered on this replica, shown by it at once: {t}"
    );
    let done = wait_terminal(&on(2), &id, Duration::from_secs(15)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Deleted a.txt.");

    // Cancel on another replica: the task is cancelled at once, the call stops upstream.
    let stats = up.stats();
    let before = stats.cancelled.load(std::sync::atomic::Ordering::SeqCst);
    let id = task(&on(0), "slow_compute", json!({"seconds": 60})).await;
    let ack = on(2).cancel_task(&id).await.unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    let t = on(1).get_task(&id).await.unwrap();
    assert_eq!(t["status"], "cancelled", "{t}");
    crate::support::harness::eventually(
        "the upstream call is cancelled",
        Duration::from_secs(10),
        || stats.cancelled.load(std::sync::atomic::Ordering::SeqCst) > before,
    )
    .await;
    // The owner does not overwrite it when its call ends.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(on(0).get_task(&id).await.unwrap()["status"], "cancelled");

    // Another caller sees none of it, on any replica.
    for r in &rs {
        let e = client(r, "mallory-token").get_task(&id).await;
        assert!(e.is_err(), "another principal must not see the task: {e:?}");
    }
}

#[tokio::test]
async fn a_killed_replicas_tasks_are_failed_by_the_others_within_the_lease() {
    let Some((_db, _up, _dir, mut rs)) = cluster(3, "2s").await else {
        return;
    };
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            task(
                &client(&rs[0], "t"),
                "slow_compute",
                json!({"seconds": 120}),
            )
            .await,
        );
    }
    // A task on a surviving replica keeps running.
    let kept = task(&client(&rs[1], "t"), "slow_compute", json!({"seconds": 3})).await;
    let killed_at = Instant::now();
    rs[0].kill9();
    let c = client(&rs[2], "t");
    for id in &ids {
        let t = wait_terminal(&c, id, Duration::from_secs(20)).await;
        assert_eq!(t["status"], "failed", "{t}");
        let msg = t["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(LOST), "{t}");
        assert!(msg.contains("outcome is unknown"), "{t}");
    }
    let took = killed_at.elapsed();
    eprintln!("tasks of the killed replica failed {took:?} after the kill (lease 2 s)");
    let t = wait_terminal(&c, &kept, Duration::from_secs(20)).await;
    assert_eq!(
        t["status"], "completed",
        "a live replica's task is untouched: {t}"
    );
}

#[tokio::test]
async fn a_paused_replica_cannot_overwrite_what_the_others_decided() {
    let Some((_db, _up, _dir, rs)) = cluster(2, "1s").await else {
        return;
    };
    let id = task(&client(&rs[0], "t"), "slow_compute", json!({"seconds": 2})).await;
    rs[0].signal(nix::sys::signal::Signal::SIGSTOP);
    let c = client(&rs[1], "t");
    let t = wait_terminal(&c, &id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "failed", "{t}");
    // The upstream call finishes meanwhile; the paused replica wakes and tries to
    // record the result: refused, the failure stands.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    rs[0].signal(nix::sys::signal::Signal::SIGCONT);
    crate::support::harness::eventually(
        "the resumed replica notices",
        Duration::from_secs(10),
        || rs[0].logs().contains("settled by another replica"),
    )
    .await;
    let after = c.get_task(&id).await.unwrap();
    assert_eq!(after["status"], "failed", "{after}");
    assert_eq!(after["error"], t["error"]);
    let again = client(&rs[0], "t").get_task(&id).await.unwrap();
    assert_eq!(again["status"], "failed", "{again}");
}

#[tokio::test]
async fn expired_tasks_are_deleted_from_the_database() {
    let Some((db, _up, _dir, rs)) = cluster(2, "3s").await else {
        return;
    };
    let c = client(&rs[0], "t");
    let id = task(&c, "slow_compute", json!({"seconds": 0.2})).await;
    wait_terminal(&c, &id, Duration::from_secs(10)).await;
    let pg = db.client().await;
    let n: i64 = pg
        .query_one("SELECT count(*) FROM tasklift_tasks WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    pg.execute(
        "UPDATE tasklift_tasks SET expires_at_ms = 0 WHERE id = $1",
        &[&id],
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = pg
            .query_one("SELECT count(*) FROM tasklift_tasks WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        if n == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the expired task was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = client(&rs[1], "t").get_task(&id).await;
    assert!(gone.is_err(), "{gone:?}");
}

fn record(id: &str) -> TaskRecord {
    {
        let mut rec = TaskRecord::new(NewTask {
            id: id.into(),
            owner: "o".into(),
            upstream: "u".into(),
            tool: "t".into(),
            created_at_ms: 1,
            ttl_ms: 60_000,
            poll_interval_ms: 100,
        });
        rec.expires_at_ms = u64::MAX / 4;
        rec
    }
}

#[tokio::test]
async fn writes_are_compare_and_set_on_status_and_epoch() {
    let Some(db) = Db::create().await else { return };
    let a = PgStore::connect(&db.url, 2, Duration::from_secs(30), None)
        .await
        .unwrap();
    let b = PgStore::connect(&db.url, 2, Duration::from_secs(30), None)
        .await
        .unwrap();
    // Migrations are idempotent: a third start finds nothing to do.
    PgStore::connect(&db.url, 2, Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(a.hash_key().await.unwrap(), b.hash_key().await.unwrap());

    let mut rec = record("task-1");
    a.create(&rec).await.unwrap();
    rec.status_message = Some("halfway".into());
    a.put(&rec).await.unwrap();
    assert_eq!(
        b.get("task-1")
            .await
            .unwrap()
            .unwrap()
            .status_message
            .as_deref(),
        Some("halfway")
    );

    // B cancels it (a tasks/cancel that landed there); A's late progress is refused.
    let mut cancel = b.get("task-1").await.unwrap().unwrap();
    cancel.settle(Settle::Cancelled(String::new())).unwrap();
    b.put(&cancel).await.unwrap();
    rec.status_message = Some("late".into());
    assert!(matches!(
        a.put(&rec).await,
        Err(StoreError::Conflict { .. })
    ));
    let mut done = rec.clone();
    done.settle(Settle::Completed(serde_json::Value::Null))
        .unwrap();
    assert!(matches!(
        a.put(&done).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        a.get("task-1").await.unwrap().unwrap().status(),
        TaskStatus::Cancelled
    );
    // A finished task never changes again, whoever writes.
    assert!(matches!(
        b.put(&done).await,
        Err(StoreError::Conflict { .. })
    ));

    // Answers left by B reach A, once, in order.
    a.create(&record("task-2")).await.unwrap();
    let one = json!({"k1": 1}).as_object().unwrap().clone();
    let two = json!({"k2": 2}).as_object().unwrap().clone();
    b.send_answers("task-2", &one).await.unwrap();
    b.send_answers("task-2", &two).await.unwrap();
    let got = a.take_answers(&["task-2".into()]).await.unwrap();
    assert_eq!(got, vec![("task-2".into(), one), ("task-2".into(), two)]);
    assert!(a.take_answers(&["task-2".into()]).await.unwrap().is_empty());
}

/// Found by `tasklift-bench crash --restart-postgres`: tasks that ended while the
/// database restarted stayed `working` for good, because their replica went on
/// renewing the lease of every unfinished row naming it, including the rows whose
/// end it had failed to write and no longer ran.
#[tokio::test]
async fn a_task_whose_end_could_not_be_written_lapses_instead_of_staying_working() {
    let Some(db) = Db::create().await else { return };
    let lease = Duration::from_secs(1);
    let a = PgStore::connect(&db.url, 2, lease, None).await.unwrap();
    let b = PgStore::connect(&db.url, 2, lease, None).await.unwrap();
    let rec = record("unwritten");
    a.create(&rec).await.unwrap();
    a.create(&record("running")).await.unwrap();
    // The database refuses this task's end with a plain error (not out of space
    // or out of reach, which the driver retries).
    let pg = db.client().await;
    pg.batch_execute(
        "ALTER TABLE tasklift_tasks ADD CONSTRAINT refuse_end
         CHECK (id <> 'unwritten' OR status IN ('working', 'input_required'))",
    )
    .await
    .unwrap();
    let mut done = rec.clone();
    done.settle(Settle::Completed(json!({"content": []})))
        .unwrap();
    // Refused, and given up.
    assert!(a.put(&done).await.is_err(), "the end is refused");
    pg.batch_execute("ALTER TABLE tasklift_tasks DROP CONSTRAINT refuse_end")
        .await
        .unwrap();
    // A renews its leases past the lease: only the task it still runs is held.
    let until = Instant::now() + lease + Duration::from_millis(500);
    while Instant::now() < until {
        assert!(a.renew_leases().await.unwrap().is_empty());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(a.renew_leases().await.unwrap().is_empty());
    let lost = json!({"code": -32603, "message": "lost"});
    let reaped = b.reap_lost(0, &lost, 10).await.unwrap();
    assert_eq!(reaped, vec!["unwritten".to_string()]);
    let t = b.get("unwritten").await.unwrap().unwrap();
    assert_eq!(t.status(), TaskStatus::Failed);
    let t = b.get("running").await.unwrap().unwrap();
    assert_eq!(
        t.status(),
        TaskStatus::Working,
        "a task A runs keeps its lease"
    );
}

/// The end of a task, refused while the database restarts, is written once it is
/// back (within twice the lease), rather than lost.
#[tokio::test]
async fn per_connection_state_on_another_replica_fails_clearly_and_retryably() {
    let Some((_db, _up, _dir, rs)) = cluster(2, "3s").await else {
        return;
    };

    // MRTR: the parked call lives on the replica that parked it.
    let (a, b) = (client(&rs[0], "t"), client(&rs[1], "t"));
    let asked = a.call_tool("multi_input", json!({})).await.unwrap().result;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let state = asked["requestState"].clone();
    let mut answers = serde_json::Map::new();
    for (k, r) in asked["inputRequests"].as_object().unwrap() {
        let content = if r["params"]["message"] == "Your name?" {
            json!({"name": "Ann"})
        } else {
            json!({"confirm": true})
        };
        answers.insert(k.clone(), json!({"action": "accept", "content": content}));
    }
    let retry = json!({"name": "multi_input", "arguments": {}, "requestState": state, "inputResponses": answers});
    let e = b
        .request("tools/call", retry.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("waits on another tasklift replica"), "{e}");
    assert!(e.contains("call the tool again"), "{e}");
    let done = a.request("tools/call", retry).await.unwrap().result;
    assert_eq!(
        done["isError"],
        json!(null),
        "the replica that parked it resumes it: {done}"
    );

    // Legacy sessions are kept in the store: any replica serves them.
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let h = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("authorization", "Bearer t"),
    ];
    let r = crate::support::harness::raw("POST", &rs[0].url, &h, init).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_string();
    let mut hs = h.to_vec();
    hs.push(("mcp-session-id", &sid));
    hs.push(("mcp-protocol-version", "2025-11-25"));
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let elsewhere = crate::support::harness::raw("POST", &rs[1].url, &hs, list).await;
    assert_eq!(elsewhere.status, 200, "{}", elsewhere.body);
    let home = crate::support::harness::raw("POST", &rs[0].url, &hs, list).await;
    assert_eq!(home.status, 200, "{}", home.body);
}

#[tokio::test]
async fn postgres_over_tls_is_verified() {
    // Debian's PostgreSQL serves TLS with its snakeoil certificate, issued to
    // "localhost"; without it there is nothing to check.
    let snakeoil = std::path::Path::new("/etc/ssl/certs/ssl-cert-snakeoil.pem");
    let Some(db) = Db::create().await else { return };
    let pg = db.client().await;
    let ssl: String = pg.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    if ssl != "on" || !snakeoil.exists() {
        eprintln!("SKIPPED: this PostgreSQL does not serve TLS with Debian's snakeoil certificate");
        return;
    }
    let lease = Duration::from_secs(30);
    // The certificate is checked: it names localhost, not 127.0.0.1.
    let by_ip = format!("{}?sslmode=require", db.url);
    let e = PgStore::connect(&by_ip, 2, lease, Some(snakeoil))
        .await
        .err()
        .expect("a certificate for another name is refused");
    assert!(e.to_string().contains("invalid peer certificate"), "{e}");
    let url = by_ip.replace("127.0.0.1", "localhost");
    let store = PgStore::connect(&url, 2, lease, Some(snakeoil))
        .await
        .unwrap();
    let row = pg
        .query_one(
            "SELECT bool_and(s.ssl), count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.application_name = $1",
            &[&format!("tasklift {}", store.replica())],
        )
        .await
        .unwrap();
    let (all_tls, n): (Option<bool>, i64) = (row.get(0), row.get(1));
    assert!(n >= 1, "the store's connections are visible");
    assert_eq!(
        all_tls,
        Some(true),
        "every connection of the store uses TLS"
    );
}

#[tokio::test]
async fn a_blocked_tasks_result_on_another_replica_wakes_when_the_task_ends() {
    let Some((_db, _up, _dir, rs)) = cluster(2, "3s").await else {
        return;
    };
    // A 2025-11-25 client's task runs on one replica; its blocking tasks/result
    // waits on the other, woken by the notification the owner's write sends.
    let auth = [("authorization", "Bearer t")];
    let (a, _) =
        crate::support::wire::LegacyClient::start_with(&rs[0].url, "2025-11-25", json!({}), &auth)
            .await;
    let (b, _) =
        crate::support::wire::LegacyClient::start_with(&rs[1].url, "2025-11-25", json!({}), &auth)
            .await;
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "x"}, "task": {"ttl": 60000}});
    let created = crate::support::input::result(&a.request(1, "tools/call", call).await);
    let id = created["task"]["taskId"].clone();
    assert!(id.is_string(), "a CreateTaskResult: {created}");
    let waited = tokio::time::timeout(
        Duration::from_secs(15),
        b.request(2, "tasks/result", json!({"taskId": id})),
    )
    .await
    .expect("tasks/result on the other replica returns once the task ends");
    let res = crate::support::input::result(&waited);
    assert_eq!(res["content"][0]["text"], "computed x in 1 s", "{res}");
}

#[tokio::test]
async fn a_legacy_session_opened_on_one_replica_is_served_by_the_others() {
    let Some((_db, up, dir, mut rs)) = cluster(3, "2s").await else {
        return;
    };
    use crate::support::harness::LegacyClient;
    let alice = [("authorization", "Bearer alice-token")];
    let (c, _) = LegacyClient::start_with(&rs[0].url, "2025-06-18", json!({}), &alice).await;
    let greet = |c: &LegacyClient, id: u64| {
        let c = c.clone();
        async move {
            let r = c
                .request(
                    id,
                    "tools/call",
                    json!({"name": "greet", "arguments": {"name": "Ann"}}),
                )
                .await;
            assert_eq!(r.status, 200, "{r:?}");
            let text = crate::support::input::result(&r)["content"][0]["text"].clone();
            assert!(text.as_str().is_some_and(|t| t.contains("Ann")), "{r:?}");
        }
    };
    greet(&c, 2).await;
    let mut on1 = c.clone();
    on1.url = rs[1].url.clone();
    greet(&on1, 3).await;
    // Another caller gets nothing on any replica.
    let bob = on1.with_extra(&[("authorization", "Bearer bob-token")]);
    let r = bob.request(4, "ping", json!({})).await;
    assert_eq!(r.status, 404, "{r:?}");
    // The replica that opened it dies; the session lives on.
    rs[0].kill9();
    let mut on2 = c.clone();
    on2.url = rs[2].url.clone();
    greet(&on2, 5).await;
    // Deleted through one replica, it ends on the others, and a new replica
    // does not bring it back.
    assert_eq!(on2.delete().await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = on1.request(6, "ping", json!({})).await;
        if r.status == 404 {
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
        assert!(
            Instant::now() < deadline,
            "replica 1 still serves a deleted session"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let fresh = Proc::start(
        &[
            "serve",
            "-c",
            dir.path().join("tasklift.toml").to_str().unwrap(),
        ],
        "a new replica",
    )
    .await;
    let mut gone = c.clone();
    gone.url = fresh.url.clone();
    let r = gone.request(7, "ping", json!({})).await;
    assert_eq!(r.status, 404, "a deleted session is not restored: {r:?}");
    drop(up);
}
