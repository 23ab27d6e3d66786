//! A real stdio peer: `@modelcontextprotocol/server-everything` (a legacy server,
//! installed by scripts/install-test-tools) run as a child behind tasklift.

use serde_json::json;

use crate::support::everything::{everything, everything_walkthrough};
use crate::support::stdio::*;

#[tokio::test]
async fn server_everything_over_stdio() {
    let Some((node, entry)) = everything() else {
        return;
    };
    let h = StdioHarness::start_command(
        |_| vec![node, entry.display().to_string(), "stdio".into()],
        |raw| raw.tasks.threshold = "500ms".into(),
    )
    .await;
    everything_walkthrough(&h.client(), &String::new).await;
    h.stop().await;
}

/// The pids of this test process's children whose environment holds `mark`.
fn children_marked(mark: &str) -> Vec<u32> {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": the ppid follows the closing parenthesis.
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1));
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            ppid == Some(me.as_str()) && env.split(|b| *b == 0).any(|kv| kv == mark.as_bytes())
        })
        .collect()
}

/// server-everything, SIGKILLed as an OOM killer would: a call made at once is
/// answered by the replacement, and after a crash loop /readyz is back as soon
/// as a restarted child serves (not for good unready, as a readiness probe
/// would then drop a working sidecar).
#[tokio::test]
async fn server_everything_killed_answers_the_next_call_and_readiness_recovers() {
    let Some((node, entry)) = everything() else {
        return;
    };
    let mark = format!("TASKLIFT_TEST_CHILD={}", std::process::id() ^ 0x5eed);
    let (k, v) = mark.split_once('=').unwrap();
    let h = StdioHarness::start_command(
        |_| vec![node, entry.display().to_string(), "stdio".into()],
        |raw| {
            raw.upstreams[0].env.insert(k.into(), v.into());
        },
    )
    .await;
    let c = h.plain_client();
    let echo = |m: &str| c.call_tool("echo", json!({"message": m}));
    assert_eq!(
        text(&guard("echo", echo("up")).await.unwrap().result),
        "Echo: up"
    );
    let kill = || {
        let pids = children_marked(&mark);
        assert_eq!(pids.len(), 1, "one server-everything child: {pids:?}");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pids[0] as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill -9");
        pids[0]
    };
    // A call right after the kill never reached a live child: the next answers it.
    let mut killed = kill();
    let a = guard("echo", echo("after")).await.unwrap();
    assert_eq!(text(&a.result), "Echo: after", "{}", a.result);
    // Two more quick kills: three in a row, a crash loop as far as anyone can tell.
    for _ in 0..2 {
        let mut pids = children_marked(&mark);
        for _ in 0..100 {
            if pids.len() == 1 && pids[0] != killed {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            pids = children_marked(&mark);
        }
        killed = kill();
    }
    // /readyz says so once tasklift has reaped the third, then recovers as soon as
    // the next child has served (3 s), not for good.
    let readyz = h.url.replace("/mcp", "/readyz");
    let status = || async { crate::support::wire::raw("GET", &readyz, &[], "").await };
    let mut seen = Vec::new();
    for _ in 0..150 {
        let r = status().await;
        let code = r.status;
        if seen.last() != Some(&code) {
            seen.push(code);
        }
        if seen.ends_with(&[503, 200]) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        seen.ends_with(&[503, 200]),
        "/readyz should show the crash loop, then recover: {seen:?}"
    );
    let a = guard("echo", echo("back")).await.unwrap();
    assert_eq!(text(&a.result), "Echo: back", "{}", a.result);
    h.stop().await;
}
