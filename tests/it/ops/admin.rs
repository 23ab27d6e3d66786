//! The admin listener: `/metrics`, `/healthz`, `/readyz` and the status page on an
//! address of their own, off by default, and the page as a real browser (headless
//! Chromium) shows it, with what clients and upstreams wrote escaped.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tasklift::store::{NewTask, Settle, SledStore, TaskRecord, TaskStore};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;
use crate::support::wire::raw;

const EVIL: &str = "<script>alert(1)</script>";

fn admin_on(c: &mut tasklift::config::RawConfig) {
    c.admin.listen = "127.0.0.1:0".into();
}

fn admin_url(h: &Harness, path: &str) -> String {
    let p = h.proxy.as_ref().expect("running");
    let addr = p.admin_addr.expect("the admin listener is on");
    format!("http://{addr}{path}")
}

#[tokio::test]
async fn admin_listener_serves_metrics_health_and_the_page_apart_from_the_front_door() {
    // Metrics off on the front door: the admin listener serves them anyway.
    let h = Harness::start(FixtureServer::new(), |c| {
        admin_on(c);
        c.server.metrics = false;
    })
    .await;
    let admin = h.proxy.as_ref().unwrap().admin_addr.unwrap();
    assert_ne!(admin, h.proxy.as_ref().unwrap().addr);

    let m = raw("GET", &admin_url(&h, "/metrics"), &[], "").await;
    assert_eq!(m.status, 200, "{m:?}");
    assert!(m.content_type().starts_with("text/plain; version=0.0.4"));
    assert!(
        m.body.contains("tasklift_tasks_created_total 0"),
        "{}",
        m.body
    );
    assert!(
        m.body
            .contains("tasklift_upstream_ready{upstream=\"default\"} 1"),
        "{}",
        m.body
    );

    let r = raw("GET", &admin_url(&h, "/healthz"), &[], "").await;
    assert_eq!((r.status, r.json()["status"].clone()), (200, json!("ok")));
    let r = raw("GET", &admin_url(&h, "/readyz"), &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["status"], "ready");

    let page = raw("GET", &admin_url(&h, "/"), &[], "").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.content_type(), "text/html; charset=utf-8");
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(page.body.contains("<title>tasklift status</title>"));
    assert!(page.body.contains(env!("CARGO_PKG_VERSION")));
    assert!(page.body.contains("<td class=\"name\">default</td>"));

    let r = raw("GET", &admin_url(&h, "/nothing-here"), &[], "").await;
    assert_eq!(r.status, 404, "{r:?}");
    for method in ["POST", "PUT", "DELETE"] {
        let r = raw(method, &admin_url(&h, "/"), &[], "").await;
        assert_eq!(r.status, 405, "{method}: {r:?}");
        assert_eq!(r.headers["allow"], "GET");
    }

    // The front door has no status page (and, here, no metrics).
    let front = h.url.replace("/mcp", "/");
    let r = raw("GET", &front, &[], "").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(!r.body.contains("<html"), "{}", r.body);
    let r = raw("GET", &h.url.replace("/mcp", "/metrics"), &[], "").await;
    assert_eq!(r.status, 404, "{r:?}");
    h.stop().await;
}

#[tokio::test]
async fn admin_listener_is_off_by_default_and_the_flag_turns_it_on() {
    let h = Harness::start(FixtureServer::new(), |_| {}).await;
    assert_eq!(h.proxy.as_ref().unwrap().admin_addr, None);
    h.stop().await;

    let mut raw_cfg = config("http://127.0.0.1:9/mcp", std::path::Path::new("/tmp"));
    let flags = tasklift::cli::Overrides {
        admin_listen: Some("127.0.0.1:9090".into()),
        ..Default::default()
    };
    flags.apply(&mut raw_cfg).unwrap();
    let cfg = raw_cfg.validate().unwrap();
    assert_eq!(cfg.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
    let flags = tasklift::cli::Overrides {
        admin_listen: Some("not-an-address".into()),
        ..Default::default()
    };
    flags.apply(&mut raw_cfg).unwrap();
    let e = raw_cfg.validate().unwrap_err().to_string();
    assert!(e.contains("admin.listen"), "{e}");
}

/// A headless Chromium on this machine, if any.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The DOM Chromium builds from `url` (after parsing, any scripts, and the CSS),
/// serialized: what a person would see, as markup.
fn browser_dom(chromium: &std::path::Path, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", url])
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(err.reopen().unwrap())
        .spawn()
        .expect("chromium runs");
    // A cold start on a busy two-core machine can take a while.
    let limit = Duration::from_secs(120);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium still running after {limit:?}; stderr: {}",
                std::fs::read_to_string(err.path()).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = std::fs::read_to_string(out.path()).unwrap();
    assert!(
        status.success() && dom.contains("</html>"),
        "chromium failed ({status}): {dom}\nstderr: {}",
        std::fs::read_to_string(err.path()).unwrap_or_default()
    );
    dom
}

/// The table row (`<tr …>…</tr>`) holding `needle`.
fn row<'a>(dom: &'a str, needle: &str) -> &'a str {
    let at = dom
        .find(needle)
        .unwrap_or_else(|| panic!("no {needle:?} in\n{dom}"));
    let start = dom[..at].rfind("<tr").expect("in a row");
    let end = at + dom[at..].find("</tr>").expect("row ends");
    &dom[start..end]
}

#[tokio::test]
async fn status_page_in_a_headless_browser() {
    let Some(chromium) = chromium() else {
        let msg = "chromium is not installed (apt-get install chromium): the status page was not checked in a browser";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return;
    };
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(Tool::new("slow_report").gate(gate.clone()))
        .tool(Tool::new(EVIL).gate(gate.clone()));
    // A finished task whose status message came from a hostile upstream, three
    // minutes old, with an owner the page must not show: in the store the proxy
    // starts on, as a previous run left it.
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path(), 64 * 1024).unwrap();
        let now = tasklift::tasks::Clock::new().now_ms();
        let mut rec = TaskRecord::new(NewTask {
            id: "f00dcafe-0000-4000-8000-000000000001".into(),
            owner: "bearer:owner-hash-never-shown".into(),
            upstream: "default".into(),
            tool: "export_all".into(),
            created_at_ms: now - 185_000,
            ttl_ms: 3_600_000,
            poll_interval_ms: 1_000,
        });
        rec.settle(Settle::Failed {
            message: String::new(),
            error: serde_json::Value::Null,
        })
        .unwrap();
        rec.status_message = Some(format!("{EVIL} {}", "x".repeat(100)));
        rec.updated_at_ms = now - 180_000;
        rec.expires_at_ms = now + 3_400_000;
        rec.outcome = None;
        store.create(&rec).await.unwrap();
        store.flush().await.unwrap();
    }
    let h = Harness::start_in(up, dir, |c| {
        admin_on(c);
        c.upstreams[0].era = "legacy".into();
    })
    .await;
    let c = h.client();
    let task = c.call_tool("slow_report", json!({})).await.unwrap().result;
    assert_eq!(task["resultType"], "task", "{task}");
    let id = task["taskId"].as_str().unwrap().to_string();
    let evil = c.call_tool(EVIL, json!({})).await.unwrap().result;
    assert_eq!(evil["resultType"], "task", "{evil}");

    let url = admin_url(&h, "/");
    let dom = tokio::task::spawn_blocking(move || browser_dom(&chromium, &url))
        .await
        .unwrap();

    // The page itself.
    assert!(dom.contains("<title>tasklift status</title>"), "{dom}");
    assert!(dom.contains(env!("CARGO_PKG_VERSION")), "{dom}");
    // The upstream: its name, path, era, transport and readiness.
    let up = row(&dom, "<td class=\"name\">default</td>");
    assert!(up.contains("<td>/mcp</td>"), "{up}");
    assert!(up.contains("<td>legacy</td>"), "{up}");
    assert!(up.contains(&h.upstream.url()), "{up}");
    assert!(up.contains("<td class=\"ok\">ready</td>"), "{up}");
    assert!(
        up.contains("<td class=\"num\">2</td>"),
        "two calls in flight: {up}"
    );
    // Counts by status.
    assert!(dom.contains("id=\"count-working\">2<"), "{dom}");
    assert!(dom.contains("id=\"count-failed\">1<"), "{dom}");
    assert!(dom.contains("id=\"count-completed\">0<"), "{dom}");
    assert!(dom.contains("id=\"count-total\">3<"), "{dom}");
    // The test's task: truncated id, tool, status.
    let short = format!("{}…", &id[..8]);
    let mine = row(&dom, &short);
    assert!(
        mine.contains("<td class=\"tool\">slow_report</td>"),
        "{mine}"
    );
    assert!(mine.contains(">working</td>"), "{mine}");
    assert!(!dom.contains(&id), "the whole id is shown: {dom}");
    // The hostile tool name and status message are text, not markup.
    let escaped = "&lt;script&gt;alert(1)&lt;/script&gt;";
    let tool = row(&dom, &format!("<td class=\"tool\">{escaped}</td>"));
    assert!(tool.contains(">working</td>"), "{tool}");
    let old = row(&dom, "f00dcafe…");
    assert!(
        old.contains(&format!("<td class=\"message\">{escaped} xx")),
        "{old}"
    );
    assert!(old.contains(">3m</td>"), "{old}");
    assert!(old.contains("x…</td>"), "the message is cut: {old}");
    assert!(
        !dom.contains("<script"),
        "a script element made it in: {dom}"
    );
    assert!(!dom.contains("owner-hash"), "an owner is shown: {dom}");

    gate.notify_waiters();
    h.stop().await;
}

/// DNS rebinding: a page answered under any host name could be read by a web page
/// whose DNS points that name at 127.0.0.1. Only IPs, localhost and listed hosts.
#[tokio::test]
async fn the_admin_listener_refuses_other_host_names_and_origins() {
    let h = Harness::start(FixtureServer::new(), |c| {
        admin_on(c);
        c.admin.allowed_hosts = vec!["status.internal".into()];
    })
    .await;
    let url = admin_url(&h, "/");
    for (host, status) in [
        ("attacker.example:9090", 403),
        ("127.0.0.1:9090", 200),
        ("localhost", 200),
        ("[::1]:9090", 200),
        ("status.internal:9090", 200),
    ] {
        let r = raw("GET", &url, &[("host", host)], "").await;
        assert_eq!(r.status, status, "Host {host}: {r:?}");
    }
    let r = raw("GET", &url, &[("origin", "https://attacker.example")], "").await;
    assert_eq!(r.status, 403, "{r:?}");
    h.stop().await;
}
