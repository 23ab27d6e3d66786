//! Who shares a stdio child (`scope`, issue 28 point 4) and roots told truthfully
//! (point 3), against the registry's servers that keep state or use roots:
//! `server-sequential-thinking` (a thought history in memory), `server-memory` (a
//! knowledge graph in the file `MEMORY_FILE_PATH` names) and `server-filesystem`
//! (which narrows its allowed directories to the client's roots), installed by
//! scripts/install-registry-servers; the stdio fixture for the cap and idle reaping.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::config::RawConfig;

use crate::support::harness::*;
use crate::support::input::{caps, result, Caller};
use crate::support::python::{peers_dir, python};
use crate::support::registry::registry_server;
use crate::support::stdio::{StdioHarness, LIMIT, NAME};
use crate::support::wire::LegacyClient;

/// tasklift with bearer auth in front of `command`, with `scope`.
async fn behind(
    command: Vec<String>,
    scope: &str,
    tweak: impl FnOnce(&mut RawConfig),
) -> StdioHarness {
    let scope = scope.to_string();
    StdioHarness::start_command(
        move |_| command,
        move |c| {
            c.auth.mode = "bearer".into();
            c.upstreams[0].scope = scope;
            tweak(c);
        },
    )
    .await
}

/// A 2026-07-28 caller of `tool` as principal `token`, declaring no input capability.
fn caller(h: &StdioHarness, token: &str, tool: &str, args: Value) -> Caller {
    Caller::new_at(&h.url, tool, args)
        .caps(caps(false, &[]))
        .token(token)
}

/// One thought, as the first of a sequence: the server's answer.
async fn think(h: &StdioHarness, token: &str, id: u64) -> Value {
    let args = json!({"thought": "a first thought", "thoughtNumber": 1, "totalThoughts": 3,
        "nextThoughtNeeded": true});
    let r = caller(h, token, "sequentialthinking", args).call(id).await;
    let text = result(&r)["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thought_history_is_each_principals_own_with_scope_principal() {
    let h = behind(registry_server("sequential-thinking"), "principal", |_| {}).await;
    assert_eq!(think(&h, "alice", 1).await["thoughtHistoryLength"], 1);
    assert_eq!(
        think(&h, "bob", 2).await["thoughtHistoryLength"],
        1,
        "bob's child is not alice's"
    );
    assert_eq!(
        think(&h, "alice", 3).await["thoughtHistoryLength"],
        2,
        "alice's child keeps her history"
    );
    h.stop().await;
    // Shared (the default), as the issue found it: one history for everyone.
    let h = behind(registry_server("sequential-thinking"), "shared", |_| {}).await;
    assert_eq!(think(&h, "alice", 1).await["thoughtHistoryLength"], 1);
    assert_eq!(think(&h, "bob", 2).await["thoughtHistoryLength"], 2);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_principal_has_a_knowledge_graph_of_its_own_in_a_file_of_its_own() {
    let graphs = tempfile::tempdir().unwrap();
    let file = graphs
        .path()
        .join("memory-{scope}.jsonl")
        .display()
        .to_string();
    let h = behind(registry_server("memory"), "principal", |c| {
        c.upstreams[0].env.insert("MEMORY_FILE_PATH".into(), file);
    })
    .await;
    let entity = json!({"entities": [{"name": "Ada", "entityType": "person",
        "observations": ["alice's secret"]}]});
    result(&caller(&h, "alice", "create_entities", entity).call(1).await);
    let graph = |token: &'static str, id| {
        let c = caller(&h, token, "read_graph", json!({}));
        async move { result(&c.call(id).await).to_string() }
    };
    let alice = graph("alice", 2).await;
    assert!(alice.contains("alice's secret"), "{alice}");
    let bob = graph("bob", 3).await;
    assert!(
        !bob.contains("Ada"),
        "bob must not see alice's graph: {bob}"
    );
    let mut files: Vec<String> = std::fs::read_dir(graphs.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 1, "only alice wrote a graph: {files:?}");
    assert!(
        files[0].starts_with("memory-") && !files[0].contains("{scope}"),
        "{files:?}"
    );
    let written = std::fs::read_to_string(graphs.path().join(&files[0])).unwrap();
    assert!(written.contains("alice's secret"), "{written}");
    h.stop().await;
}

/// Two 2025-11-25 sessions of one principal: their own children with `session`,
/// one child with `principal`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_session_gives_each_legacy_session_its_own_child() {
    for (scope, second) in [("session", 1), ("principal", 2)] {
        let h = behind(registry_server("sequential-thinking"), scope, |_| {}).await;
        let auth = [("authorization", "Bearer carol")];
        let mut lengths = Vec::new();
        for id in 1..=2 {
            let (s, _) = LegacyClient::start_with(&h.url, "2025-11-25", json!({}), &auth).await;
            let args = json!({"thought": "t", "thoughtNumber": 1, "totalThoughts": 2,
                "nextThoughtNeeded": true});
            let r = s
                .request(
                    id,
                    "tools/call",
                    json!({"name": "sequentialthinking", "arguments": args}),
                )
                .await
                .response();
            let text = r["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{r}"));
            lengths.push(v["thoughtHistoryLength"].clone());
        }
        assert_eq!(lengths, vec![json!(1), json!(second)], "scope = {scope}");
        h.stop().await;
    }
}

/// Past `max_scopes` a new caller is refused while every child has a call in
/// flight, gets the place of a caller gone idle, and an idle caller's child is
/// stopped after `scope_idle`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_scopes_refuses_a_new_caller_while_all_are_busy_and_idle_children_stop() {
    let h = StdioHarness::start(&[], |c| {
        c.auth.mode = "bearer".into();
        c.tasks.threshold = "30s".into();
        c.upstreams[0].scope = "principal".into();
        c.upstreams[0].max_scopes = 1;
        c.upstreams[0].scope_idle = "1s".into();
    })
    .await;
    let slow = caller(
        &h,
        "alice",
        "slow_compute",
        json!({"seconds": 2, "label": "a"}),
    );
    let running = tokio::spawn(async move { slow.call(1).await });
    h.wait_log("alice's call reaches her child", |l| {
        l.iter().any(|l| l == "call slow_compute")
    })
    .await;
    let refused = caller(&h, "bob", "echo", json!({"message": "hi"}))
        .call(2)
        .await;
    let err = refused.response()["error"].clone();
    assert_eq!(err["code"], -32010, "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains(NAME) && msg.contains("max_scopes"), "{msg}");
    // Alice's call is unharmed.
    let done = tokio::time::timeout(LIMIT, running).await.unwrap().unwrap();
    result(&done);
    // Now alice's child is idle: bob takes its place.
    let r = caller(&h, "bob", "echo", json!({"message": "hi"}))
        .call(3)
        .await;
    assert_eq!(result(&r)["content"][0]["text"], "Echo: hi");
    assert_eq!(
        h.pids().len(),
        2,
        "bob got a child of his own: {:?}",
        h.log_lines()
    );
    let bobs = *h.pids().last().unwrap();
    // And after scope_idle without a call, bob's child stops.
    eventually("bob's idle child stops", LIMIT, || !alive(bobs)).await;
    h.stop().await;
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

// ---------------------------------------------------------------------------
// Roots
// ---------------------------------------------------------------------------

/// The roots client's answer (tests/peers/python/roots_client.py, mcp 1.30).
async fn roots_client(args: &[String]) -> Value {
    let python = python("mcp130").expect("mcp 1.30 installed");
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(python)
            .arg(peers_dir().join("roots_client.py"))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("roots_client.py finishes")
    .expect("roots_client.py runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "roots_client.py failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("no JSON line: {stdout}"))
}

/// Two directories the server is started with, and the one the client offers as
/// its root.
fn dirs() -> (tempfile::TempDir, String, String) {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("offered"), d.path().join("other"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let canon = |p: &Path| p.canonicalize().unwrap().display().to_string();
    (d, canon(&a), canon(&b))
}

/// A client that offers roots sees through tasklift the allowed directories it
/// sees directly: narrowed to its roots, once the server has asked for them (it
/// asks at start, and applies the answer in the background, directly as through
/// tasklift). With a child of its own (`session`) the question reaches the client
/// on its first call; a shared child is never told of any one caller's roots, so
/// it keeps its command-line directories and asks nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_offering_roots_sees_the_same_allowed_directories_as_directly() {
    let (_d, offered, other) = dirs();
    let mut server = registry_server("filesystem");
    server.extend([offered.clone(), other.clone()]);
    let root = vec!["--root".to_string(), offered.clone()];
    let direct =
        roots_client(&[root.clone(), vec!["--stdio".into()], server.clone()].concat()).await;
    let only = format!("Allowed directories:\n{offered}");
    assert_eq!(direct["settled"], only.as_str(), "directly: {direct}");

    let h = StdioHarness::start_command(
        {
            let server = server.clone();
            move |_| server
        },
        |c| c.upstreams[0].scope = "session".into(),
    )
    .await;
    let through = roots_client(&[root.clone(), vec!["--url".into(), h.url.clone()]].concat()).await;
    assert_eq!(
        through["settled"], direct["settled"],
        "through tasklift: {through}"
    );
    assert_eq!(through["asked"], 1, "{through}");
    h.stop().await;

    let h = StdioHarness::start_command(move |_| server, |_| {}).await;
    let shared = tokio::time::timeout(
        Duration::from_secs(10),
        roots_client(&[root, vec!["--url".into(), h.url.clone()]].concat()),
    )
    .await;
    // The client waits for a roots question that never comes: a shared child
    // keeps its command-line directories.
    assert!(
        shared.is_err(),
        "a shared child asked for roots: {shared:?}"
    );
    let r = Caller::new_at(&h.url, "list_allowed_directories", json!({}))
        .caps(caps(false, &["roots"]))
        .call(1)
        .await;
    let text = result(&r)["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains(&offered) && text.contains(&other), "{text}");
    h.stop().await;
}

/// A 2026-07-28 client with a child of its own: the child's `roots/list` comes
/// to it as an input request of its first call (MRTR), and the server narrows
/// its directories to the roots it answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_clients_roots_reach_its_own_child_through_its_first_call() {
    let (_d, offered, other) = dirs();
    let mut server = registry_server("filesystem");
    server.extend([offered.clone(), other]);
    let h = StdioHarness::start_command(
        move |_| server,
        |c| {
            c.upstreams[0].scope = "principal".into();
        },
    )
    .await;
    let c =
        Caller::new_at(&h.url, "list_allowed_directories", json!({})).caps(caps(false, &["roots"]));
    let first = result(&c.call(1).await);
    assert_eq!(first["resultType"], "input_required", "{first}");
    let reqs = &first["inputRequests"];
    let (key, asked) = reqs.as_object().unwrap().iter().next().unwrap();
    assert_eq!(asked["method"], "roots/list", "{reqs}");
    let answer = json!({ key.clone(): {"roots": [{"uri": format!("file://{offered}")}]} });
    let done = result(&c.retry(2, answer, &first["requestState"]).await);
    assert_eq!(done["resultType"], "complete", "{done}");
    // The server applies the roots in the background (as it does directly): the
    // calls after it see its directories narrowed to them, and are not asked again.
    let only = format!("Allowed directories:\n{offered}");
    let mut id = 3;
    loop {
        let r = result(&c.call(id).await);
        assert_eq!(r["resultType"], "complete", "asked again: {r}");
        if r["content"][0]["text"] == only.as_str() {
            break;
        }
        assert!(id < 50, "the roots were never applied: {r}");
        id += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.stop().await;
}
