//! A PostgreSQL store that runs out of space (`53100 disk_full`), on a real
//! server: the test database lives in a tablespace on a small tmpfs the test
//! mounts (root, as in CI), and is filled to the last byte. Then:
//! - stored tasks stay readable;
//! - a task running when the database filled keeps its outcome and records it
//!   once space is freed (nothing is lost, nothing is left `working`);
//! - new calls run synchronously, a tool that runs only as a task is refused
//!   before anything runs upstream, `/readyz` says `degraded`, `/metrics` says low;
//! - once space is freed tasklift finds out by itself and calls become tasks again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::Client;
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;
use tokio_postgres::NoTls;

use crate::support::harness::{eventually, raw};
use crate::support::proc::Proc;

const ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Text of `n` pseudo-random hex digits: PostgreSQL's compression cannot shrink it
/// much, so storing it needs about `n` bytes.
fn noise(n: usize, seed: u64) -> String {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from_digit((x % 16) as u32, 16).unwrap()
        })
        .collect()
}

/// A database in a tablespace on a fresh `size` tmpfs (its copy of template1 takes
/// about 8 MiB of it); dropped (and unmounted) at
/// the end.
struct SmallDb {
    name: String,
    dir: std::path::PathBuf,
    url: String,
}

impl SmallDb {
    async fn create(size: &str) -> Result<Self, String> {
        let (admin, conn) = tokio_postgres::connect(ADMIN, NoTls)
            .await
            .map_err(|e| format!("no PostgreSQL at {ADMIN}: {e}"))?;
        tokio::spawn(conn);
        let name = format!("tasklift_space_{}", uuid::Uuid::new_v4().simple());
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let sh = |cmd: &str| {
            let out = std::process::Command::new("sh").args(["-c", cmd]).output();
            match out {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(format!("{cmd}: {}", String::from_utf8_lossy(&o.stderr))),
                Err(e) => Err(format!("{cmd}: {e}")),
            }
        };
        let d = dir.display();
        sh(&format!("mount -t tmpfs -o size={size} tmpfs {d}"))?;
        sh(&format!("chown postgres:postgres {d} && chmod 700 {d}"))?;
        // Two statements: neither may run inside a transaction block.
        let mut made = admin
            .batch_execute(&format!("CREATE TABLESPACE {name} LOCATION '{d}'"))
            .await;
        if made.is_ok() {
            made = admin
                .batch_execute(&format!("CREATE DATABASE {name} TABLESPACE {name}"))
                .await;
        }
        let made = made.map_err(|e| match e.as_db_error() {
            Some(d) => d.message().to_string(),
            None => e.to_string(),
        });
        let db = Self {
            url: format!("postgres://postgres@127.0.0.1:5432/{name}"),
            name,
            dir,
        };
        made.map_err(|e| {
            format!("cannot make a tablespace on a tmpfs (is PostgreSQL local?): {e}")
        })?;
        Ok(db)
    }

    async fn client(&self) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(&self.url, NoTls).await.unwrap();
        tokio::spawn(conn);
        c
    }

    /// Fill the database until PostgreSQL answers `53100 disk_full`.
    async fn fill(&self, c: &tokio_postgres::Client) {
        c.batch_execute("CREATE TABLE IF NOT EXISTS filler (b bytea)")
            .await
            .unwrap();
        for chunk in [8192, 512, 16] {
            loop {
                let r = c
                    .execute(
                        "INSERT INTO filler SELECT decode(string_agg(md5(random()::text || g::text), ''), 'hex') \
                         FROM generate_series(1, $1) g",
                        &[&chunk],
                    )
                    .await;
                match r {
                    Ok(_) => continue,
                    Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL) => {
                        break
                    }
                    Err(e) => panic!("filling the database: {e}"),
                }
            }
        }
    }
}

impl Drop for SmallDb {
    fn drop(&mut self) {
        let name = &self.name;
        crate::support::pg::run_at_drop(
            ADMIN,
            &[
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                &format!("DROP TABLESPACE IF EXISTS {name}"),
            ],
        );
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The task id of an answer that is a handle, if it is one.
fn handle(a: &tasklift::cli::client::Answer) -> Option<String> {
    (a.result["resultType"] == "task").then(|| a.result["taskId"].as_str().unwrap().to_string())
}

fn stat(up: &FixtureServer) -> usize {
    up.stats().calls.load(Ordering::Relaxed)
}

async fn readyz(p: &Proc) -> Value {
    let base = p.url.trim_end_matches("/mcp");
    let r = raw("GET", &format!("{base}/readyz"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// The fixture (a slow `echo`, a task-only tool, and a gated `report` answering
/// `report_bytes` of noise) and one tasklift on `store` (`[store]` lines).
async fn tasklift_on(
    store: &str,
    report_bytes: usize,
) -> (Arc<Notify>, FixtureServer, tempfile::TempDir, Proc) {
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(Tool::new("echo").sleep(Duration::from_millis(400)))
        .tool(Tool::new("only_task"))
        .tool(
            Tool::new("report")
                .gate(gate.clone())
                .reply(move |_| noise(report_bytes, 7)),
        )
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tasklift.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
[store]
{store}
[tasks]
threshold = "100ms"
poll_interval = "50ms"
[[upstreams]]
url = "{up}"
[upstreams.tools.only_task]
mode = "required"
"#,
            up = up.url()
        ),
    )
    .unwrap();
    let p = Proc::start(&["serve", "-c", cfg.to_str().unwrap()], "on PostgreSQL").await;
    (gate, up, dir, p)
}

/// The task once terminal; tasklift's log in the failure message otherwise.
async fn terminal_or_logs(c: &Client, id: &str, p: &Proc) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let t = c.get_task(id).await;
        if let Ok(t) = &t {
            if matches!(
                t["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return t.clone();
            }
        }
        if tokio::time::Instant::now() > deadline {
            let logs = p.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "task {id} not terminal: {t:?}; tasklift's last lines:\n{}",
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A synchronous `echo`, and a task-only tool refused before anything runs
/// upstream with an error containing `why`.
async fn runs_without_tasks(c: &Client, up: &FixtureServer, why: &str) {
    let sync = c.call_tool("echo", json!({})).await.unwrap();
    assert!(handle(&sync).is_none(), "no handle in the low mode");
    assert_eq!(
        sync.result["content"][0]["text"], "echo done",
        "{:?}",
        sync.result
    );
    let before = stat(up);
    let refused = c
        .call_tool("only_task", json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains(why), "{refused}");
    assert_eq!(stat(up), before, "nothing ran upstream");
}

#[tokio::test]
async fn a_full_database_keeps_what_it_holds_and_tasks_come_back_when_space_does() {
    let db = match SmallDb::create("24m").await {
        Ok(db) => db,
        Err(why) if std::env::var_os("CI").is_some() => panic!("{why}"),
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let (gate, up, _dir, p) = tasklift_on(&format!("url = \"{}\"", db.url), 600_000).await;
    let c = Client::new(&p.url).unwrap();

    // Before: a finished task, and one still running.
    let done = c.call_tool("echo", json!({})).await.unwrap();
    let done_id = handle(&done).expect("a task");
    let done_result = terminal_or_logs(&c, &done_id, &p).await;
    assert_eq!(done_result["status"], "completed", "{done_result}");
    let running = c.call_tool("report", json!({})).await.unwrap();
    let running_id = handle(&running).expect("a task");

    let filler = db.client().await;
    db.fill(&filler).await;

    // The running task ends while the database is full: its outcome waits.
    gate.notify_one();
    eventually("the report tool answered", Duration::from_secs(20), || {
        up.stats().running.load(Ordering::Relaxed) == 0
    })
    .await;
    eventually(
        "tasklift notices the full database",
        Duration::from_secs(20),
        || p.logs().contains("the task store is out of space"),
    )
    .await;
    let r = readyz(&p).await;
    assert_eq!(r["status"], "degraded", "{r}");
    assert!(r["degraded"].as_str().unwrap().contains("53100"), "{r}");
    let metrics = raw("GET", &p.url.replace("/mcp", "/metrics"), &[], "").await;
    assert!(
        metrics.body.contains("tasklift_store_low_space 1"),
        "{}",
        metrics.body
    );

    // Stored tasks stay readable; the running one is not failed for lack of space.
    let t = c.get_task(&done_id).await.unwrap();
    assert_eq!(t["status"], "completed", "{t}");
    let t = c.get_task(&running_id).await.unwrap();
    assert_eq!(t["status"], "working", "{t}");
    // New calls: synchronous; a task-only tool is refused before it runs.
    runs_without_tasks(&c, &up, "out of space").await;

    eventually(
        "the outcome waits for space",
        Duration::from_secs(20),
        || p.logs().contains("keeping it and retrying"),
    )
    .await;
    // Space comes back: the waiting outcome is recorded whole, tasks resume.
    filler.batch_execute("DROP TABLE filler").await.unwrap();
    let t = terminal_or_logs(&c, &running_id, &p).await;
    assert_eq!(t["status"], "completed", "{t}");
    let text = t["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        text,
        noise(600_000, 7),
        "the outcome kept while the database was full"
    );
    let back = async {
        loop {
            if readyz(&p).await["status"] == "ready" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), back)
        .await
        .expect("/readyz says ready again");
    let again = c.call_tool("echo", json!({})).await.unwrap();
    assert!(handle(&again).is_some(), "calls become tasks again");
    drop(p);
    up.stop().await;
}

/// A TCP forwarder to PostgreSQL that the test can cut: every connection through
/// it is dropped and new ones are refused until it is restored.
struct Cable {
    addr: std::net::SocketAddr,
    up: Arc<std::sync::atomic::AtomicBool>,
    cut: Arc<Notify>,
}

impl Cable {
    async fn to(target: &'static str) -> Self {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let cut = Arc::new(Notify::new());
        let (up2, cut2) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut a, _)) = l.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused at once
                }
                let cut = cut2.clone();
                tokio::spawn(async move {
                    let Ok(mut b) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
                        _ = cut.notified() => {}
                    }
                });
            }
        });
        Self { addr, up, cut }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.notify_waiters();
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_lost_database_connection_loses_no_outcome() {
    let required = std::env::var_os("TASKLIFT_TEST_POSTGRES").is_some();
    let made = async {
        let (c, conn) = tokio_postgres::connect(ADMIN, NoTls).await?;
        tokio::spawn(conn);
        let name = format!("tasklift_cable_{}", uuid::Uuid::new_v4().simple());
        c.batch_execute(&format!("CREATE DATABASE {name}")).await?;
        Ok::<_, tokio_postgres::Error>((c, name))
    };
    let (_admin, name) = match made.await {
        Ok(x) => x,
        Err(e) if required => {
            panic!("TASKLIFT_TEST_POSTGRES is set but PostgreSQL is not usable: {e}")
        }
        Err(e) => return eprintln!("skipped: no PostgreSQL at {ADMIN}: {e}"),
    };
    // Dropped however the test ends.
    struct DropDb(String);
    impl Drop for DropDb {
        fn drop(&mut self) {
            let st = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0);
            crate::support::pg::run_at_drop(ADMIN, &[&st]);
        }
    }
    let _db = DropDb(name.clone());
    let cable = Cable::to("127.0.0.1:5432").await;
    let store = format!(
        "url = \"postgres://postgres@{}/{name}?connect_timeout=1\"\nlease = \"30s\"",
        cable.addr
    );
    let (gate, up, _dir, p) = tasklift_on(&store, 50_000).await;
    let c = Client::new(&p.url).unwrap();
    let running = c.call_tool("report", json!({})).await.unwrap();
    let running_id = handle(&running).expect("a task");

    cable.cut();
    gate.notify_one();
    eventually(
        "the outcome waits for the database",
        Duration::from_secs(30),
        || p.logs().contains("keeping it and retrying"),
    )
    .await;
    // Meanwhile: reads fail clearly, new calls run synchronously, task-only tools
    // are refused before they run, and /readyz says not ready.
    let e = c.get_task(&running_id).await.unwrap_err().to_string();
    assert!(e.contains("unavailable") || e.contains("connection"), "{e}");
    runs_without_tasks(&c, &up, "cannot be reached").await;
    let base = p.url.trim_end_matches("/mcp");
    let r = raw("GET", &format!("{base}/readyz"), &[], "").await;
    assert_eq!(r.status, 503, "{}", r.body);

    // The database is back: the outcome is recorded whole, and tasks resume.
    cable.restore();
    let t = terminal_or_logs(&c, &running_id, &p).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(
        t["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default(),
        noise(50_000, 7)
    );
    let back = async {
        loop {
            let a = c.call_tool("echo", json!({})).await;
            if a.as_ref().is_ok_and(|a| handle(a).is_some()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), back)
        .await
        .expect("calls become tasks again");
    drop(p);
    up.stop().await;
}
