//! stdio upstreams when things go wrong: a child that crashes mid-call or at start,
//! cancellation reaching the child, and children never outliving tasklift.

use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::support::harness::*;
use crate::support::stdio::*;

/// What the crash error must say: the upstream, the exit status, the last stderr line.
fn assert_names_the_crash(message: &str) {
    for want in [
        &format!("upstream {NAME}"),
        "exit status: 7",
        "fixture: crashing on purpose",
    ] {
        assert!(message.contains(want), "{want:?} missing from: {message}");
    }
}

#[tokio::test]
async fn a_crash_mid_call_fails_the_synchronous_call_and_the_child_restarts() {
    let h = StdioHarness::start(&[], |_| {}).await;
    let c = h.plain_client();
    let e = rpc_error(guard("crash", c.call_tool("crash", json!({"after": 0.5}))).await);
    assert_names_the_crash(&e.message);
    h.wait_log("a second child started", |l| {
        l.iter().filter(|x| x.starts_with("start ")).count() == 2
    })
    .await;
    let a = guard("echo", c.call_tool("echo", json!({"message": "back"})))
        .await
        .unwrap();
    assert_eq!(text(&a.result), "Echo: back");
    let pids = h.pids();
    assert_ne!(pids[0], pids[1], "a new process");
    h.stop().await;
}

#[tokio::test]
async fn a_crash_mid_task_fails_the_task_and_the_child_restarts() {
    let h = StdioHarness::start(&[], |_| {}).await;
    let c = h.client();
    let a = c.call_tool("crash", json!({"after": 2})).await.unwrap();
    let t = wait_terminal(&c, &task_id(&a.result), LIMIT).await;
    assert_eq!(t["status"], "failed", "{t}");
    assert_names_the_crash(t["error"]["message"].as_str().unwrap_or_default());
    let a = guard("echo", c.call_tool("echo", json!({"message": "back"})))
        .await
        .unwrap();
    assert_eq!(text(&a.result), "Echo: back");
    assert_eq!(h.pids().len(), 2, "restarted once");
    h.stop().await;
}

#[tokio::test]
async fn a_child_that_exits_at_start_is_reported_crash_looping() {
    let h = StdioHarness::start(&["--exit-at-start"], |_| {}).await;
    let c = h.plain_client();
    // A clear error, not a hang (the bound is a hang guard, not a performance claim).
    let e = tokio::time::timeout(Duration::from_secs(20), c.call_tool("greet", json!({})))
        .await
        .expect("a call to a crash-looping upstream must not hang");
    let e = rpc_error(e);
    for want in [
        &format!("upstream {NAME}"),
        "keeps crashing",
        "exit status: 3",
        "fixture: exiting at start as asked",
    ] {
        assert!(e.message.contains(want), "{want:?} missing from: {e}");
    }
    assert!(h.pids().len() >= 3, "restarted before giving up");
    let base = h.url.trim_end_matches("/mcp");
    let r = raw("GET", &format!("{base}/readyz"), &[], "").await;
    assert_eq!(r.status, 503, "{}", r.body);
    let why = r.json()["upstreams"][NAME]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("keeps crashing"), "{}", r.body);
    h.stop().await;
}

#[tokio::test]
async fn a_healthy_stdio_upstream_is_ready() {
    let h = StdioHarness::start(&[], |_| {}).await;
    let c = h.client();
    guard("greet", c.call_tool("greet", json!({})))
        .await
        .unwrap();
    let r = raw("GET", &h.url.replace("/mcp", "/readyz"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    h.stop().await;
}

/// The upstream id in a `cancelled ID` log line, once one appears.
async fn cancelled_id(h: &StdioHarness) -> u64 {
    h.wait_log("notifications/cancelled reached the child", |l| {
        l.iter().any(|x| x.starts_with("cancelled "))
    })
    .await;
    let lines = h.log_lines();
    let line = lines.iter().find(|x| x.starts_with("cancelled ")).unwrap();
    line["cancelled ".len()..]
        .parse()
        .unwrap_or_else(|_| panic!("not an upstream request id: {line}"))
}

#[tokio::test]
async fn cancelling_a_task_sends_notifications_cancelled_to_the_child() {
    let h = StdioHarness::start(&[], |_| {}).await;
    let c = h.client();
    let a = c
        .call_tool("slow_compute", json!({"seconds": 3600}))
        .await
        .unwrap();
    let id = task_id(&a.result);
    h.wait_log("the call reached the child", |l| {
        l.iter().any(|x| x == "call slow_compute")
    })
    .await;
    c.cancel_task(&id).await.unwrap();
    let t = wait_terminal(&c, &id, LIMIT).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    cancelled_id(&h).await;
    // The child is still in service.
    let a = guard("echo", c.call_tool("echo", json!({"message": "after"})))
        .await
        .unwrap();
    assert_eq!(text(&a.result), "Echo: after");
    assert_eq!(h.pids().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_synchronous_client_that_disconnects_cancels_the_call_in_the_child() {
    let h = StdioHarness::start(&[], |_| {}).await;
    let mut params = json!({"name": "slow_compute", "arguments": {"seconds": 3600}});
    params["_meta"] = meta(false);
    // A client id that tasklift's own upstream ids will not reach in this test.
    let body = json!({"jsonrpc": "2.0", "id": 777, "method": "tools/call", "params": params});
    let body = body.to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: slow_compute\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let addr = h.proxy.as_ref().unwrap().addr;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    h.wait_log("the call reached the child", |l| {
        l.iter().any(|x| x == "call slow_compute")
    })
    .await;
    drop(conn);
    let id = cancelled_id(&h).await;
    assert_ne!(
        id, 777,
        "the child must get its own request id, not the client's"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_child_that_ignores_cancellation_still_gets_its_task_cancelled() {
    let h = StdioHarness::start(&["--ignore-cancel"], |_| {}).await;
    let c = h.client();
    let a = c
        .call_tool("slow_compute", json!({"seconds": 3600}))
        .await
        .unwrap();
    let id = task_id(&a.result);
    h.wait_log("the call reached the child", |l| {
        l.iter().any(|x| x == "call slow_compute")
    })
    .await;
    c.cancel_task(&id).await.unwrap();
    let t = wait_terminal(&c, &id, LIMIT).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    cancelled_id(&h).await;
    // It stays cancelled although the child keeps working on the call.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.get_task(&id).await.unwrap()["status"], "cancelled");
    h.stop().await;
}

/// `Some(state letter)` if `/proc/PID` exists (`'Z'` for a zombie).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Whether `pid` still is a fixture child (not gone, not a zombie, not reused).
fn fixture_alive(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    matches!(proc_state(pid), Some(s) if s != 'Z')
        && String::from_utf8_lossy(&cmdline).contains("tasklift-fixture")
}

/// The PIDs of live (not zombie) processes in process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name: state, ppid, pgrp, ...
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        if f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

#[tokio::test]
async fn shutdown_leaves_no_child_processes_behind() {
    let h = StdioHarness::start(&[], |raw| raw.upstreams[0].processes = 2).await;
    let c = h.client();
    // One child has a call in flight at shutdown.
    let a = c
        .call_tool("slow_compute", json!({"seconds": 3600}))
        .await
        .unwrap();
    task_id(&a.result);
    h.wait_log("two children, one busy", |l| {
        l.iter().filter(|x| x.starts_with("start ")).count() == 2
            && l.iter().any(|x| x == "call slow_compute")
    })
    .await;
    let pids = h.pids();
    for &pid in &pids {
        assert!(fixture_alive(pid), "child {pid} should be running");
    }
    guard("shutdown", h.stop()).await;
    for pid in pids {
        // Reaped by tasklift: gone entirely, not even a zombie.
        let state = proc_state(pid);
        assert!(
            state.is_none() || !fixture_alive(pid) && state != Some('Z'),
            "child {pid} outlived tasklift (state {state:?})"
        );
        assert!(group_members(pid).is_empty(), "its process group lives on");
    }
}

/// A child that ignores both its stdin closing and SIGTERM: a shell (ignoring TERM)
/// runs the fixture, then sleeps. It logs `shell PID` (the child's PID).
fn stubborn(log: &std::path::Path) -> Vec<String> {
    let fixture = fixture_command(&[], log)
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let log = log.display();
    vec![
        "sh".into(),
        "-c".into(),
        format!("echo \"shell $$\" >> '{log}'; trap '' TERM; {fixture}; exec sleep 3600"),
    ]
}

fn shell_pid(h: &StdioHarness) -> u32 {
    let lines = h.log_lines();
    let line = lines.iter().find(|l| l.starts_with("shell ")).unwrap();
    line["shell ".len()..].parse().unwrap()
}

#[tokio::test]
async fn shutdown_kills_a_child_that_ignores_stdin_close_and_sigterm() {
    let h = StdioHarness::start_command(stubborn, |raw| {
        raw.upstreams[0].shutdown_grace = "200ms".into()
    })
    .await;
    let c = h.client();
    let a = guard("echo", c.call_tool("echo", json!({"message": "hi"})))
        .await
        .unwrap();
    assert_eq!(text(&a.result), "Echo: hi");
    let shell = shell_pid(&h);
    assert!(matches!(proc_state(shell), Some(s) if s != 'Z'));
    guard("shutdown", h.stop()).await;
    assert_eq!(
        proc_state(shell),
        None,
        "the stubborn child {shell} was not killed and reaped"
    );
    assert!(
        group_members(shell).is_empty(),
        "its process group lives on"
    );
}

#[tokio::test]
async fn children_die_with_a_killed_tasklift() {
    if std::process::Command::new("setpriv")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("skipped: setpriv (util-linux) is not installed, so no parent-death signal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fixture.log");
    let mut tasklift = std::process::Command::new(env!("CARGO_BIN_EXE_tasklift"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("store"))
        .arg("--")
        .args(stubborn(&log))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tasklift serve starts");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    eventually("the child started", LIMIT, || read().contains("start ")).await;
    let shell: u32 = read()
        .lines()
        .find_map(|l| l.strip_prefix("shell ")?.parse().ok())
        .unwrap();
    // SIGKILL: no chance to clean up; the parent-death signal must do it.
    tasklift.kill().unwrap();
    tasklift.wait().unwrap();
    // A zombie waits for init to reap it; it no longer runs.
    eventually("the child died with tasklift", LIMIT, || {
        matches!(proc_state(shell), None | Some('Z'))
    })
    .await;
}

/// SIGKILL the child with this pid (as an OOM killer or a `kill -9` does).
fn kill9(pid: u32) {
    use nix::sys::signal::{kill, Signal};
    kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL).expect("kill -9 the child");
}

/// How many children have started so far.
fn starts(l: &[String]) -> usize {
    l.iter().filter(|x| x.starts_with("start ")).count()
}

#[tokio::test]
async fn readiness_comes_back_once_the_child_after_a_crash_loop_serves() {
    let h = StdioHarness::start(&[], |_| {}).await;
    let c = h.plain_client();
    guard("echo", c.call_tool("echo", json!({"message": "up"})))
        .await
        .unwrap();
    let readyz = h.url.replace("/mcp", "/readyz");
    // Three quick crashes: as far as anyone can tell, a crash loop.
    for n in 1..=3 {
        kill9(*h.pids().last().expect("a child"));
        h.wait_log("the child restarted", |l| starts(l) > n).await;
    }
    let during = raw("GET", &readyz, &[], "").await;
    // The child started after them answers, and readiness says so within seconds
    // (the hang guard is generous; the settle time is 3 s).
    let a = guard("echo", c.call_tool("echo", json!({"message": "back"})))
        .await
        .unwrap();
    assert_eq!(text(&a.result), "Echo: back");
    let mut last = String::new();
    let mut ready = false;
    for _ in 0..100 {
        let r = raw("GET", &readyz, &[], "").await;
        if r.status == 200 {
            ready = true;
            break;
        }
        last = r.body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready,
        "/readyz still unready with a serving child (right after the crashes: {} {}): {last}",
        during.status, during.body
    );
    h.stop().await;
}

#[tokio::test]
async fn a_call_made_right_after_the_child_dies_is_answered_by_its_replacement() {
    let h = StdioHarness::start(&[], |_| {}).await;
    let c = h.plain_client();
    guard("echo", c.call_tool("echo", json!({"message": "up"})))
        .await
        .unwrap();
    // Each round kills the serving child and calls at once, before tasklift can
    // have seen the exit: the call never reached a live child, so it goes to the
    // next one rather than failing. (Two rounds: a third quick crash in a row
    // would be a crash loop, which refuses calls at once.)
    for round in 1..=2 {
        kill9(*h.pids().last().expect("a child"));
        let a = guard(
            "echo",
            c.call_tool("echo", json!({"message": round.to_string()})),
        )
        .await
        .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        assert_eq!(text(&a.result), format!("Echo: {round}"), "{}", a.result);
        h.wait_log("the child restarted", |l| starts(l) > round)
            .await;
    }
    h.stop().await;
}
