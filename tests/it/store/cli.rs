//! `tasklift store` (the binary): stats, list, show and purge on a data directory a
//! real tasklift filled in front of the demo fixture, and the refusals: a directory
//! in use by a running tasklift (exit 3), a missing or empty one (exit 2).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::Client;
use tasklift::config::RawUpstream;
use tasklift::store::{
    NewTask, SledStore, StoreError, TaskOutcome, TaskRecord, TaskStatus, TaskStore,
};
use tasklift_fixture::FixtureServer;

use crate::support::cli::{run, text};
use crate::support::harness::*;

/// An argument only the upstream ever sees; its result echoes it.
const SECRET: &str = "label-only-the-upstream-sees";
/// What the input request of the `input_required` record asks.
const ASKED: &str = "Delete secret-plans.txt?";
/// The result of the expired record.
const OLD_RESULT: &str = "an old result nobody fetched";

/// `tasklift store <args> --data-dir <dir>`, off the test's runtime (the proxy may be
/// running on it).
async fn store(dir: &Path, args: &[&str]) -> Output {
    let mut all: Vec<String> = vec!["store".into()];
    all.extend(args.iter().map(|s| s.to_string()));
    all.extend(["--data-dir".into(), dir.display().to_string()]);
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        run(&refs, Duration::from_secs(60))
    })
    .await
    .unwrap()
}

/// Like `store`, expecting exit 0; the parsed stdout.
async fn store_json(dir: &Path, args: &[&str]) -> Value {
    let out = store(dir, args).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The ids of a `list --json` answer.
fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

fn result_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("results"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

fn result_file(dir: &Path, id: &str) -> PathBuf {
    dir.join("results").join(format!("{id}.json"))
}

/// A data directory tasklift filled, then stopped.
struct Filled {
    _parent: tempfile::TempDir,
    dir: PathBuf,
    /// Completed on the default upstream (slow_compute twice, failing_job).
    completed: Vec<String>,
    /// Completed on the upstream named "other".
    other: String,
    failed: String,
    cancelled: String,
    /// Written directly: left `working` by a "crashed" proxy.
    working: String,
    /// Written directly: `input_required`, past its expiry.
    input: String,
    /// Written directly: completed three days ago, past its expiry.
    expired: String,
}

async fn task_of(c: &Client, tool: &str, args: Value) -> String {
    let a = c.call_tool(tool, args).await.unwrap();
    assert_eq!(a.result["resultType"], "task", "{}", a.result);
    a.result["taskId"].as_str().unwrap().to_string()
}

fn record(id: &str, status: TaskStatus, created_ago_ms: u64, expires_in_ms: i64) -> TaskRecord {
    let now = tasklift::tasks::Clock::new().now_ms();
    let created = now - created_ago_ms;
    let expires = now.checked_add_signed(expires_in_ms).unwrap();
    // Written straight into the store, in whatever status the test needs.
    TaskRecord::new(NewTask {
        id: id.into(),
        owner: format!("bearer:{}", "5e".repeat(32)),
        upstream: "default".into(),
        tool: "slow_compute".into(),
        created_at_ms: created,
        ttl_ms: expires - created,
        poll_interval_ms: 1000,
    })
    .restored(status)
}

/// Open the store a stopped in-process proxy used: its last references may outlive
/// `shutdown` by a moment.
async fn open_after_stop(dir: &Path) -> SledStore {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match SledStore::open(dir, 0) {
            Ok(s) => return s,
            Err(StoreError::InUse { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("store opens: {e}"),
        }
    }
}

async fn filled() -> Filled {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let d = dir.clone();
    let h = Harness::start(FixtureServer::demo(), move |c| {
        c.store.data_dir = d.display().to_string();
        // Every outcome in a result file, so purge has files to remove.
        c.store.large_result_bytes = 0;
        let url = c.upstreams[0].url.clone();
        c.upstreams.push(RawUpstream {
            name: "other".into(),
            path: "/other".into(),
            url,
            ..RawUpstream::default()
        });
        for u in &mut c.upstreams {
            for tool in ["slow_compute", "failing_job", "protocol_error_job"] {
                u.tools.insert(tool.into(), rule("always"));
            }
        }
    })
    .await;
    let c = h.client();
    let other = Client::new(&h.url.replace("/mcp", "/other")).unwrap();
    let quick = json!({"seconds": 0.2, "label": SECRET});
    let mut completed = vec![
        task_of(&c, "slow_compute", quick.clone()).await,
        task_of(&c, "slow_compute", quick.clone()).await,
        task_of(&c, "failing_job", json!({})).await,
    ];
    let failed = task_of(&c, "protocol_error_job", json!({})).await;
    let cancelled = task_of(&c, "slow_compute", json!({"seconds": 3600})).await;
    c.cancel_task(&cancelled).await.unwrap();
    let other_id = task_of(&other, "slow_compute", quick).await;
    for id in completed.iter().chain([&failed, &cancelled]) {
        wait_terminal(&c, id, Duration::from_secs(20)).await;
    }
    assert_eq!(
        wait_terminal(&other, &other_id, Duration::from_secs(20)).await["status"],
        "completed"
    );
    assert_eq!(
        wait_terminal(&c, &completed[0], Duration::from_secs(1)).await["result"]["content"][0]
            ["text"],
        format!("computed {SECRET} in 0.2 s")
    );
    h.stop().await;

    // What a proxy that crashed, or was stopped long ago, leaves behind.
    let store = open_after_stop(&dir).await;
    let working = uuid::Uuid::new_v4().to_string();
    let mut rec = record(&working, TaskStatus::Working, 60_000, 3_600_000);
    rec.status_message = Some("2/5 – halfway".into());
    store.create(&rec).await.unwrap();
    let input = uuid::Uuid::new_v4().to_string();
    let mut rec = record(&input, TaskStatus::InputRequired, 120_000, -1_000);
    rec.tool = "confirm_delete".into();
    rec.input_requests.insert(
        "ask-1".into(),
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": ASKED}}),
    );
    store.create(&rec).await.unwrap();
    let expired = uuid::Uuid::new_v4().to_string();
    let mut rec = record(&expired, TaskStatus::Completed, 3 * 86_400_000, -3_600_000);
    rec.outcome = Some(TaskOutcome::Result(
        json!({"content": [{"type": "text", "text": OLD_RESULT}]}),
    ));
    store.create(&rec).await.unwrap();
    store.flush().await.unwrap();
    drop(store);
    completed.push(expired.clone());
    Filled {
        _parent: parent,
        dir,
        completed,
        other: other_id,
        failed,
        cancelled,
        working,
        input,
        expired,
    }
}

#[tokio::test]
async fn store_cli_reads_and_purges_a_stopped_proxys_store() {
    let f = filled().await;
    let dir = f.dir.as_path();
    let files = result_files(dir);
    // Completed (4 + other) and failed tasks keep their outcome in a file.
    assert_eq!(files.len(), 6, "{files:?}");

    // stats
    let s = store_json(dir, &["stats", "--json"]).await;
    assert_eq!(s["tasks"], 9, "{s}");
    assert_eq!(
        s["by_status"],
        json!({"working": 1, "input_required": 1, "completed": 5, "failed": 1, "cancelled": 1}),
        "{s}"
    );
    assert_eq!(s["expired_not_swept"], 2, "{s}");
    assert_eq!(s["result_files"], 6, "{s}");
    let disk = &s["disk_bytes"];
    let files_bytes: u64 = files.iter().map(|p| p.metadata().unwrap().len()).sum();
    assert_eq!(disk["result_files"], files_bytes, "{s}");
    assert!(disk["database"].as_u64().unwrap() > 0, "{s}");
    assert!(
        disk["total"].as_u64().unwrap() >= files_bytes + disk["database"].as_u64().unwrap(),
        "{s}"
    );
    let out = store(dir, &["stats"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let human = text(&out.stdout);
    for (key, n) in [
        ("tasks", "9"),
        ("completed", "5"),
        ("failed", "1"),
        ("cancelled", "1"),
        ("working", "1"),
        ("input_required", "1"),
    ] {
        assert!(
            human.lines().any(|l| l.split_whitespace().eq([key, n])),
            "{key} {n}:\n{human}"
        );
    }
    assert!(human.contains("expired, not yet swept  2"), "{human}");
    assert!(human.contains("result files"), "{human}");

    // list: newest first, filters, never arguments, results or input requests
    let all = store_json(dir, &["list", "--json"]).await;
    let listed = ids(&all);
    assert_eq!(listed.len(), 9);
    let created: Vec<u64> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["created_at_ms"].as_u64().unwrap())
        .collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "{created:?}");
    assert_eq!(listed.last(), Some(&f.expired), "the oldest comes last");
    assert_eq!(s["oldest_created_at_ms"], created[8]);
    assert_eq!(s["newest_created_at_ms"], created[0]);
    for t in all.as_array().unwrap() {
        assert!(
            t.get("outcome").is_none() && t.get("input_requests").is_none(),
            "{t}"
        );
    }
    let input = all
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == f.input.as_str())
        .unwrap();
    assert_eq!(input["pending_inputs"], 1, "{input}");
    assert_eq!(input["expired"], true, "{input}");
    assert_eq!(input["owner"], "bearer:5e5e5e5e", "hashes are cut: {input}");
    let completed = ids(&store_json(dir, &["list", "--json", "--status", "completed"]).await);
    let mut want = f.completed.clone();
    want.push(f.other.clone());
    want.sort();
    let mut got = completed.clone();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(
        ids(&store_json(dir, &["list", "--json", "--status", "input_required"]).await),
        [f.input.as_str()]
    );
    assert_eq!(
        ids(&store_json(dir, &["list", "--json", "--upstream", "other"]).await),
        [f.other.as_str()]
    );
    assert_eq!(
        ids(&store_json(dir, &["list", "--json", "--limit", "2"]).await),
        listed[..2]
    );
    let out = store(dir, &["list"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("ID "), "{table}");
    for id in &listed {
        assert!(table.contains(id.as_str()), "{id} missing:\n{table}");
    }
    assert!(table.contains("2/5 – halfway"), "{table}");
    let out = store(dir, &["list", "--limit", "3", "--status", "completed"]).await;
    let short = text(&out.stdout);
    assert_eq!(short.lines().count(), 1 + 3 + 1, "{short}");
    assert!(short.contains("(3 of 5 shown"), "{short}");
    for out in [all.to_string(), table, short] {
        for secret in [SECRET, "computed", "disk quota", ASKED, OLD_RESULT] {
            assert!(!out.contains(secret), "{secret} listed:\n{out}");
        }
    }

    // show: the whole record, outcome included
    let t = store_json(dir, &["show", &f.completed[0]]).await;
    assert_eq!(t["status"], "completed");
    assert_eq!(
        t["outcome"]["result"]["content"][0]["text"],
        format!("computed {SECRET} in 0.2 s"),
        "{t}"
    );
    let t = store_json(dir, &["show", &f.failed]).await;
    assert_eq!(t["status"], "failed");
    assert_eq!(t["outcome"]["error"]["code"], -32603, "{t}");
    let t = store_json(dir, &["show", &f.input]).await;
    assert_eq!(t["input_requests"]["ask-1"]["params"]["message"], ASKED);
    let out = store(dir, &["show", "no-such-task"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no task no-such-task"));

    // purge --dry-run deletes nothing
    for sel in [
        &["--status", "completed"][..],
        &["--expired"],
        &["--older-than", "0s"],
    ] {
        let mut args = vec!["purge", "--dry-run"];
        args.extend(sel);
        let out = store(dir, &args).await;
        let stdout = text(&out.stdout);
        assert!(stdout.contains("would delete"), "{stdout}");
        assert!(stdout.contains("nothing was deleted"), "{stdout}");
    }
    let out = store(dir, &["purge", "--dry-run", "--older-than", "2d"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("would delete {}", f.expired)),
        "{stdout}"
    );
    assert!(
        stdout.contains("would delete 1 task and 1 result file"),
        "{stdout}"
    );
    assert_eq!(store_json(dir, &["stats", "--json"]).await["tasks"], 9);
    assert_eq!(result_files(dir), files);

    // purge --expired: the sweeper's work, except the unfinished task
    let out = store(dir, &["purge", "--expired"]).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "kept one: {stdout}{stderr}");
    assert!(
        stdout.contains("deleted 1 task and 1 result file"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("kept {} (input_required)", f.input)),
        "{stderr}"
    );
    assert!(stderr.contains("--force"), "{stderr}");
    assert!(!result_file(dir, &f.expired).exists());
    assert_eq!(
        store(dir, &["show", &f.expired]).await.status.code(),
        Some(1)
    );

    // purge --status completed: exactly those, and their result files
    let out = store(dir, &["purge", "--status", "completed"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("deleted 4 tasks and 4 result files"),
        "{}",
        text(&out.stdout)
    );
    let s = store_json(dir, &["stats", "--json"]).await;
    assert_eq!(
        s["by_status"],
        json!({"working": 1, "input_required": 1, "completed": 0, "failed": 1, "cancelled": 1}),
        "{s}"
    );
    assert_eq!(result_files(dir), [result_file(dir, &f.failed)]);
    let left = ids(&store_json(dir, &["list", "--json"]).await);
    for id in [&f.failed, &f.cancelled, &f.working, &f.input] {
        assert!(left.contains(id), "{id} deleted");
    }

    // Unfinished tasks go only with --force.
    let out = store(dir, &["purge", "--id", &f.working]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("deleted 0 tasks"));
    assert!(text(&out.stderr).contains(&format!("kept {} (working)", f.working)));
    let out = store(dir, &["purge", "--older-than", "0s"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("deleted 2 tasks and 1 result file"));
    assert_eq!(
        ids(&store_json(dir, &["list", "--json"]).await).len(),
        2,
        "only the unfinished ones are left"
    );
    let out = store(
        dir,
        &[
            "purge",
            "--id",
            &f.working,
            "--id",
            "no-such-task",
            "--force",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "an unknown id is reported");
    assert!(text(&out.stdout).contains("deleted 1 task"));
    assert!(text(&out.stderr).contains("no task no-such-task"));
    assert_eq!(
        ids(&store_json(dir, &["list", "--json"]).await),
        [f.input.as_str()]
    );

    // Usage errors: no selector; --status of an unfinished state.
    for args in [&["purge"][..], &["purge", "--status", "working"]] {
        let out = store(dir, args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    assert_eq!(store_json(dir, &["stats", "--json"]).await["tasks"], 1);
}

#[tokio::test]
async fn store_cli_takes_the_data_dir_from_a_config_file_and_data_dir_wins() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    // A store with one record.
    {
        let store = SledStore::open(&dir, 1024).unwrap();
        let id = uuid::Uuid::new_v4().to_string();
        store
            .create(&record(&id, TaskStatus::Cancelled, 1000, 60_000))
            .await
            .unwrap();
        store.flush().await.unwrap();
    }
    let write = |name: &str, data_dir: &Path| {
        let p = parent.path().join(name);
        let body = format!(
            "[store]\ndata_dir = {:?}\n\n[[upstreams]]\nurl = \"http://127.0.0.1:9/mcp\"\n",
            data_dir.display().to_string()
        );
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let good = write("good.toml", &dir);
    let wrong = write("wrong.toml", &parent.path().join("elsewhere"));
    let stats = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&refs, Duration::from_secs(60))
        })
    };
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let out = stats(args(&["store", "stats", "--json", "--config", &good]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["tasks"], 1);
    let out = stats(args(&["store", "stats", "--config", &wrong]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!parent.path().join("elsewhere").exists());
    let out = stats(args(&[
        "store",
        "stats",
        "--json",
        "--config",
        &wrong,
        "--data-dir",
        dir.to_str().unwrap(),
    ]))
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bad = parent.path().join("bad.toml");
    std::fs::write(&bad, "[store]\ndata_directory = \"x\"\n").unwrap();
    let out = stats(args(&["store", "stats", "--config", bad.to_str().unwrap()]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("data_directory"));
}

#[tokio::test]
async fn store_cli_refuses_a_store_in_use_and_never_creates_one() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let d = dir.clone();
    let h = Harness::start(FixtureServer::demo(), move |c| {
        c.store.data_dir = d.display().to_string();
    })
    .await;
    // sled's lock is a flock on db/db: a process of its own (the CLI) is refused.
    for args in [
        &["stats"][..],
        &["list"],
        &["show", "x"],
        &["purge", "--expired", "--force"],
    ] {
        let out = store(&dir, args).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "the data directory {} is in use by a running tasklift",
                dir.display()
            )) && stderr.contains("stop it first"),
            "{stderr}"
        );
        if cfg!(target_os = "linux") && Path::new("/proc/locks").exists() {
            let pid = format!("(pid {})", std::process::id());
            assert!(stderr.contains(&pid), "the holder is named: {stderr}");
        }
        assert!(out.stdout.is_empty());
    }
    h.stop().await;
    // Once stopped, the store opens (the in-process proxy lets go a moment later).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = store(&dir, &["stats", "--json"]).await;
        if out.status.code() == Some(0) {
            let s: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(s["tasks"], 0);
            break;
        }
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        assert!(tokio::time::Instant::now() < deadline, "still in use");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A missing directory is not created; an empty or foreign one is not a store.
    let missing = parent.path().join("missing");
    let out = store(&missing, &["stats"]).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("there is no data directory {}", missing.display())),
        "{stderr}"
    );
    assert!(!missing.exists(), "created {}", missing.display());
    let empty = parent.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = store(&empty, &["purge", "--expired"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is empty"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "left empty");
    std::fs::write(empty.join("notes.txt"), "hello").unwrap();
    let out = store(&empty, &["list"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("holds no tasklift task store"),
        "{}",
        text(&out.stderr)
    );
    assert!(!empty.join("db").exists() && !empty.join("results").exists());
}
