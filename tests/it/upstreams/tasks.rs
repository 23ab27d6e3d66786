//! Tools a legacy upstream runs only as its own 2025-11-25 task
//! (`execution.taskSupport: "required"`): tasklift calls them with `params.task`,
//! follows the upstream's task (`tasks/get`, a blocking `tasks/result`, the input
//! requests it sends there) and shows each era its own kind of task; `tools/list`
//! shows each era what tasklift will do with each tool. Against a scripted legacy
//! upstream, and against the real server-everything's `simulate-research-query`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tasklift::cli::client::Client;
use tasklift_fixture::FixtureServer;
use tokio::sync::mpsc;

use crate::support::everything::everything;
use crate::support::harness::*;
use crate::support::input::result;
use crate::support::mock::{sse_event, MockReply, MockUpstream, StreamTx};

const V25: &str = "2025-11-25";
const RELATED: &str = "io.modelcontextprotocol/related-task";
/// The upstream's own task id (tasklift never shows it to clients).
const UP_TASK: &str = "up-task-1";

/// A legacy (2025-11-25) upstream with task support, as the TypeScript SDK v1 serves
/// it: `research` runs only as a task, `lookup` never, `either` both ways, `plain`
/// declares nothing. The test plays the upstream's task: it sets what `tasks/get`
/// answers and writes the `tasks/result` streams.
struct TaskServer {
    mock: MockUpstream,
    /// The upstream's task as `tasks/get` answers it.
    task: Arc<Mutex<Value>>,
    /// Each `tasks/result` request as it arrives: its id and its SSE stream.
    results: tokio::sync::Mutex<mpsc::UnboundedReceiver<(Value, StreamTx)>>,
}

fn tool(name: &str, support: Option<&str>) -> Value {
    let mut t = json!({"name": name, "inputSchema": {"type": "object"}});
    if let Some(s) = support {
        t["execution"] = json!({"taskSupport": s});
    }
    t
}

impl TaskServer {
    async fn start() -> Self {
        let task = Arc::new(Mutex::new(json!({
            "taskId": UP_TASK, "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttl": 60000, "pollInterval": 50,
        })));
        let (results_tx, results) = mpsc::unbounded_channel();
        let t = task.clone();
        let mock = MockUpstream::start(move |m| {
            let method = m["method"].as_str().unwrap_or("");
            match method {
                "server/discover" => MockReply::Error(400, -32600, "Bad Request: No valid session ID".into()),
                "initialize" => MockReply::Result(json!({
                    "protocolVersion": V25,
                    "capabilities": {"tools": {}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}},
                    "serverInfo": {"name": "legacy-tasks", "version": "1"},
                })),
                "tools/list" => MockReply::Result(json!({"tools": [
                    tool("research", Some("required")),
                    tool("lookup", Some("forbidden")),
                    tool("either", Some("optional")),
                    tool("plain", None),
                ]})),
                "tools/call" => {
                    let name = m["params"]["name"].as_str().unwrap_or("");
                    match (name, m["params"].get("task")) {
                        ("research", Some(_)) => {
                            let mut task = t.lock().unwrap().clone();
                            task["ttl"] = m["params"]["task"]["ttl"].clone();
                            MockReply::Result(json!({ "task": task }))
                        }
                        // What the TypeScript SDK answers a plain call of a task-only tool.
                        ("research", None) => MockReply::Result(json!({
                            "content": [{"type": "text", "text": "Tool research requires task augmentation (taskSupport: 'required')"}],
                            "isError": true,
                        })),
                        (_, Some(_)) => MockReply::Error(200, -32601, "this tool does not run as a task".into()),
                        (n, None) => MockReply::Result(json!({"content": [{"type": "text", "text": format!("{n} done")}]})),
                    }
                }
                "tasks/get" if m["params"]["taskId"] == UP_TASK => {
                    MockReply::Result(t.lock().unwrap().clone())
                }
                "tasks/cancel" if m["params"]["taskId"] == UP_TASK => {
                    let mut task = t.lock().unwrap();
                    task["status"] = json!("cancelled");
                    MockReply::Result(task.clone())
                }
                "tasks/result" if m["params"]["taskId"] == UP_TASK => {
                    let (tx, rx) = mpsc::channel(8);
                    let _ = results_tx.send((m["id"].clone(), tx));
                    MockReply::Stream(rx)
                }
                m if m.starts_with("tasks/") => MockReply::Error(200, -32602, "Failed to retrieve task: Task not found".into()),
                // A client's answer to the upstream's request, or a notification.
                "" => MockReply::Status(202),
                _ => MockReply::Result(json!({})),
            }
        })
        .await;
        Self {
            mock,
            task,
            results: tokio::sync::Mutex::new(results),
        }
    }

    /// Change what `tasks/get` says.
    fn set(&self, status: &str, message: &str) {
        let mut t = self.task.lock().unwrap();
        t["status"] = json!(status);
        t["statusMessage"] = json!(message);
    }

    /// The next `tasks/result` request tasklift sends: its id and its stream.
    async fn next_result(&self) -> (Value, StreamTx) {
        guarded("tasklift asks for the upstream task's result", async {
            self.results
                .lock()
                .await
                .recv()
                .await
                .expect("mock running")
        })
        .await
    }

    /// Answer a `tasks/result` with the tool's result, as the SDK does.
    async fn complete(&self, (id, tx): (Value, StreamTx), text: &str) {
        self.set("completed", "done");
        let result = json!({
            "content": [{"type": "text", "text": text}],
            "_meta": {RELATED: {"taskId": UP_TASK}},
        });
        let msg = json!({"jsonrpc": "2.0", "id": id, "result": result});
        tx.send(Ok(sse_event(&msg))).await.unwrap();
    }

    /// Ask the client something on a `tasks/result` stream, as the SDK does for a
    /// request queued with `relatedTask`.
    async fn ask(&self, tx: &StreamTx, id: &str, message: &str) {
        self.set("input_required", "waiting for the user");
        let ask = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
            "message": message,
            "requestedSchema": {"type": "object", "properties": {"pick": {"type": "string"}}},
            "_meta": {RELATED: {"taskId": UP_TASK}},
        }});
        tx.send(Ok(sse_event(&ask))).await.unwrap();
    }

    /// The client's answers the upstream received to its request `id`.
    fn answers(&self, id: &str) -> Vec<Value> {
        self.mock
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .filter(|b| b.get("method").is_none() && b["id"] == id)
            .collect()
    }
}

/// tasklift in front of `up`; `tweak` adjusts the configuration.
async fn front(up: &TaskServer, tweak: impl FnOnce(&mut tasklift::config::RawConfig)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    Harness::front(FixtureServer::new(), &up.mock.url, dir, |c| {
        c.upstreams[0].era = "legacy".into();
        tweak(c);
    })
    .await
}

/// Poll `tasks/get` until `cond` holds for the task.
async fn task_until(c: &Client, id: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    guarded(what, async {
        loop {
            let t = c.get_task(id).await.expect("tasks/get");
            if cond(&t) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A modern client's call of `research`: a tasklift task (its id).
async fn research_task(c: &Client) -> String {
    let a = guarded(
        "tools/call",
        c.call_tool("research", json!({"topic": "rust"})),
    )
    .await
    .expect("tools/call");
    assert_eq!(
        a.result["resultType"], "task",
        "a tasklift task: {}",
        a.result
    );
    let id = a.result["taskId"].as_str().unwrap().to_string();
    assert_ne!(id, UP_TASK, "tasklift's own id, not the upstream's");
    id
}

#[tokio::test]
async fn a_modern_client_gets_a_task_that_completes_with_the_upstream_tasks_result() {
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    let c = h.client();
    // No tools/list first: tasklift learns on its own that the tool needs a task.
    up.set("working", "Gathering sources");
    let id = research_task(&c).await;
    let calls = up.mock.received("tools/call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0]["params"]["task"]["ttl"].is_u64(),
        "the upstream is asked for a task: {}",
        calls[0]
    );
    assert_eq!(calls[0]["params"]["arguments"], json!({"topic": "rust"}));
    // The upstream task's status message is the tasklift task's.
    let t = task_until(&c, &id, "the upstream's status message", |t| {
        t["statusMessage"] == "Gathering sources"
    })
    .await;
    assert_eq!(t["status"], "working", "{t}");

    let stream = up.next_result().await;
    up.complete(stream, "a report on rust").await;
    let t = wait_terminal(&c, &id, GUARD).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "a report on rust", "{t}");
    assert!(
        t["result"]
            .get("_meta")
            .is_none_or(|m| m.get(RELATED).is_none()),
        "the upstream's task id stays inside tasklift: {t}"
    );
    let asked = up.mock.received("tasks/result");
    assert_eq!(asked[0]["params"]["taskId"], UP_TASK, "{asked:?}");
    assert!(!up.mock.received("tasks/get").is_empty());
    assert!(up.mock.received("tasks/cancel").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_modern_client_without_the_extension_waits_for_the_upstream_tasks_result() {
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    let c = h.plain_client();
    let call = tokio::spawn(async move { c.call_tool("research", json!({"topic": "go"})).await });
    let stream = up.next_result().await;
    up.complete(stream, "a report on go").await;
    let a = guarded("the plain call", call)
        .await
        .unwrap()
        .expect("tools/call");
    assert_eq!(a.result["resultType"], "complete", "{}", a.result);
    assert_eq!(a.result["content"][0]["text"], "a report on go");
    assert!(a.result.get("isError").is_none(), "{}", a.result);
    h.stop().await;
}

#[tokio::test]
async fn cancelling_the_task_cancels_the_upstream_task() {
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    let c = h.client();
    let id = research_task(&c).await;
    let _stream = up.next_result().await;
    c.cancel_task(&id).await.expect("tasks/cancel");
    let t = wait_terminal(&c, &id, GUARD).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let mock = &up.mock;
    eventually("the upstream gets tasks/cancel", GUARD, || {
        !mock.received("tasks/cancel").is_empty()
    })
    .await;
    let cancels = mock.received("tasks/cancel");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["params"]["taskId"], UP_TASK);
    h.stop().await;
}

#[tokio::test]
async fn a_client_that_goes_away_before_any_answer_cancels_the_upstream_task() {
    use tokio::io::AsyncWriteExt;
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    // A plain modern call: it waits, and the connection is all that holds it.
    let mut params = json!({"name": "research", "arguments": {}});
    params["_meta"] = meta(false);
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: research\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let addr = h.proxy.as_ref().unwrap().addr;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(req.as_bytes()).await.unwrap();
    let _stream = up.next_result().await;
    drop(conn);
    let mock = &up.mock;
    eventually("the upstream gets tasks/cancel", GUARD, || {
        !mock.received("tasks/cancel").is_empty()
    })
    .await;
    assert_eq!(
        mock.received("tasks/cancel")[0]["params"]["taskId"],
        UP_TASK
    );
    assert_eq!(
        stored_tasks(&h).await,
        0,
        "no task for a call nobody waits for"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_broken_tasks_result_stream_is_asked_again() {
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    let c = h.client();
    let id = research_task(&c).await;
    let (_, first) = up.next_result().await;
    drop(first); // the upstream's stream ends without the result
    let again = up.next_result().await;
    up.complete(again, "a report after all").await;
    let t = wait_terminal(&c, &id, GUARD).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(
        t["result"]["content"][0]["text"], "a report after all",
        "{t}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_failed_upstream_task_fails_the_task_with_the_upstreams_error() {
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    let c = h.client();
    let id = research_task(&c).await;
    let (rid, tx) = up.next_result().await;
    up.set("failed", "the index is gone");
    let err = json!({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "the index is gone"}});
    tx.send(Ok(sse_event(&err))).await.unwrap();
    let t = wait_terminal(&c, &id, GUARD).await;
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(t["error"]["code"], -32603, "{t}");
    assert_eq!(t["error"]["message"], "the index is gone", "{t}");
    h.stop().await;
}

#[tokio::test]
async fn the_upstream_tasks_input_requests_reach_a_modern_client_and_its_answer_goes_back() {
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    let mut c = h.client();
    c.capabilities.insert("elicitation".into(), json!({}));
    let id = research_task(&c).await;
    let (rid, tx) = up.next_result().await;
    up.ask(&tx, "clarify", "Which rust?").await;
    let t = task_until(&c, &id, "the task asks", |t| {
        t["status"] == "input_required"
    })
    .await;
    let ask = &t["inputRequests"]["clarify"];
    assert_eq!(ask["method"], "elicitation/create", "{t}");
    assert_eq!(ask["params"]["message"], "Which rust?", "{t}");
    assert!(
        ask["params"]
            .get("_meta")
            .is_none_or(|m| m.get(RELATED).is_none()),
        "the upstream's task id stays inside tasklift: {t}"
    );
    let yes = json!({"action": "accept", "content": {"pick": "the language"}});
    c.update_task(&id, json!({"clarify": yes}))
        .await
        .expect("tasks/update");
    eventually("the upstream gets the answer", GUARD, || {
        !up.answers("clarify").is_empty()
    })
    .await;
    assert_eq!(up.answers("clarify")[0]["result"], yes);
    task_until(&c, &id, "working again", |t| t["status"] == "working").await;
    up.complete((rid, tx), "a report on the language").await;
    let t = wait_terminal(&c, &id, GUARD).await;
    assert_eq!(
        t["result"]["content"][0]["text"], "a report on the language",
        "{t}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_2025_11_25_client_gets_a_task_of_its_era_that_follows_the_upstream_task() {
    let up = TaskServer::start().await;
    let h = front(&up, |_| {}).await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({"elicitation": {}})).await;
    let params = json!({"name": "research", "arguments": {"topic": "zig"}, "task": {"ttl": 60000}});
    let created = result(&c.request(2, "tools/call", params).await);
    let task = &created["task"];
    let tid = task["taskId"]
        .as_str()
        .expect("a 2025-11-25 task")
        .to_string();
    assert_ne!(tid, UP_TASK);
    assert_eq!(task["ttl"], 60000, "{created}");
    let calls = up.mock.received("tools/call");
    assert_eq!(calls[0]["params"]["task"]["ttl"], 60000, "{calls:?}");

    // tasklift's tasks/result relays the upstream task's question, as its own task's.
    let mut s = c.open(3, "tasks/result", json!({"taskId": tid})).await;
    let (rid, tx) = up.next_result().await;
    up.ask(&tx, "clarify", "Which zig?").await;
    let ask = s
        .message_where("the upstream task's elicitation", |m| {
            m["method"] == "elicitation/create"
        })
        .await;
    assert_eq!(ask["params"]["message"], "Which zig?", "{ask}");
    assert_eq!(
        ask["params"]["_meta"][RELATED],
        json!({"taskId": tid}),
        "{ask}"
    );
    let yes = json!({"action": "accept", "content": {"pick": "the language"}});
    assert_eq!(c.respond(&ask["id"], yes.clone()).await.status, 202);
    eventually("the upstream gets the answer", GUARD, || {
        !up.answers("clarify").is_empty()
    })
    .await;
    assert_eq!(up.answers("clarify")[0]["result"], yes);
    up.complete((rid, tx), "a report on zig").await;
    let done = s.finish_guarded("the task's result").await.response();
    assert_eq!(
        done["result"]["content"][0]["text"], "a report on zig",
        "{done}"
    );
    assert_eq!(
        done["result"]["_meta"][RELATED],
        json!({"taskId": tid}),
        "{done}"
    );
    let got = result(&c.request(4, "tasks/get", json!({"taskId": tid})).await);
    assert_eq!(got["status"], "completed", "{got}");

    // The same tool called without params.task: tasklift follows the upstream's task
    // for the client, which simply waits (the tool is listed as optional for it).
    let call = {
        let c = c.clone();
        tokio::spawn(async move {
            c.request(
                5,
                "tools/call",
                json!({"name": "research", "arguments": {"topic": "c"}}),
            )
            .await
        })
    };
    let stream = up.next_result().await;
    up.complete(stream, "a report on c").await;
    let r = guarded("the plain call", call).await.unwrap();
    let plain = crate::support::wire::all_messages(&r)
        .into_iter()
        .find(|m| m["id"] == 5)
        .unwrap_or_else(|| panic!("no response: {r:?}"));
    assert_eq!(
        plain["result"]["content"][0]["text"], "a report on c",
        "{plain}"
    );
    assert!(plain["result"].get("isError").is_none(), "{plain}");
    assert!(
        plain["result"]
            .get("_meta")
            .is_none_or(|m| m.get(RELATED).is_none()),
        "{plain}"
    );
    h.stop().await;
}

/// Each tool's `execution.taskSupport` in a `tools/list` result (`null`: none).
fn task_support(list: &Value) -> Vec<(String, Value)> {
    list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tools/list result: {list}"))
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["execution"]["taskSupport"].clone(),
            )
        })
        .collect()
}

fn expect(pairs: &[(&str, Value)]) -> Vec<(String, Value)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect()
}

#[tokio::test]
async fn tools_list_shows_each_era_what_tasklift_does_with_each_tool() {
    let up = TaskServer::start().await;
    let h = front(&up, |c| {
        c.upstreams[0].tools.insert("plain".into(), rule("never"));
        c.upstreams[0]
            .tools
            .insert("either".into(), rule("required"));
    })
    .await;
    // 2026-07-28: the Tasks extension has no per-tool field; the 2025-era one, which
    // would say "forbidden" of tools tasklift turns into tasks, is gone.
    let modern = h
        .client()
        .request("tools/list", json!({}))
        .await
        .unwrap()
        .result;
    let none = Value::Null;
    assert_eq!(
        task_support(&modern),
        expect(&[
            ("research", none.clone()),
            ("lookup", none.clone()),
            ("either", none.clone()),
            ("plain", none.clone())
        ]),
        "{modern}"
    );
    assert!(
        modern["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("execution").is_none()),
        "{modern}"
    );
    // 2025-11-25: from tasklift's rules; the task-only tool is bridged, so optional.
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let legacy = result(&c.request(2, "tools/list", json!({})).await);
    assert_eq!(
        task_support(&legacy),
        expect(&[
            ("research", json!("optional")),
            ("lookup", json!("optional")),
            ("either", json!("required")),
            ("plain", json!("forbidden")),
        ]),
        "{legacy}"
    );
    // Before 2025-11-25 there are no tasks to ask for.
    let (old, _) = LegacyClient::start(&h.url, "2025-06-18", json!({})).await;
    let older = result(&old.request(2, "tools/list", json!({})).await);
    assert!(
        older["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("execution").is_none()),
        "{older}"
    );
    // And the task-only tool works when a 2025-06-18 client calls it plainly.
    let call = {
        let old = old.clone();
        tokio::spawn(async move {
            old.request(
                3,
                "tools/call",
                json!({"name": "research", "arguments": {}}),
            )
            .await
        })
    };
    let stream = up.next_result().await;
    up.complete(stream, "a report").await;
    let r = guarded("the plain call", call).await.unwrap();
    let msgs = crate::support::wire::all_messages(&r);
    let resp = msgs
        .iter()
        .find(|m| m["id"] == 3)
        .unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(resp["result"]["content"][0]["text"], "a report", "{resp}");
    h.stop().await;
}

/// Ask server-everything an ambiguous research query through tasklift: the task goes
/// `input_required` with the server's question, and the answer shapes the report.
async fn ambiguous_research(c: &Client) {
    use crate::support::stdio::{follow, guard, task_id, text};
    let a = guard(
        "simulate-research-query",
        c.call_tool(
            "simulate-research-query",
            json!({"topic": "python", "ambiguous": true}),
        ),
    )
    .await
    .expect("tools/call");
    let id = task_id(&a.result);
    let t = task_until(c, &id, "the server asks which python", |t| {
        matches!(
            t["status"].as_str(),
            Some("input_required" | "completed" | "failed" | "cancelled")
        )
    })
    .await;
    assert_eq!(t["status"], "input_required", "{t}");
    let reqs = t["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(reqs.len(), 1, "{t}");
    let (key, ask) = reqs.iter().next().unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{t}");
    assert!(
        ask["params"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("python"),
        "{t}"
    );
    let answer = json!({"action": "accept", "content": {"interpretation": "snake"}});
    c.update_task(&id, json!({ key: answer }))
        .await
        .expect("tasks/update");
    let (t, _) = follow(c, &id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        text(&t["result"]).contains("# Research Report: python (snake)"),
        "{t}"
    );
}

#[tokio::test]
async fn server_everythings_research_query_runs_as_a_tasklift_task() {
    use crate::support::stdio::{follow, guard, task_id, text, StdioHarness};
    let Some((node, entry)) = everything() else {
        return;
    };
    let h = StdioHarness::start_command(
        |_| vec![node, entry.display().to_string(), "stdio".into()],
        |raw| raw.tasks.threshold = "500ms".into(),
    )
    .await;
    let c = h.client();
    // Four stages of a second each, followed through the server's own task.
    let a = guard(
        "simulate-research-query",
        c.call_tool("simulate-research-query", json!({"topic": "tardigrades"})),
    )
    .await
    .expect("tools/call");
    let id = task_id(&a.result);
    let (t, seen) = follow(&c, &id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        text(&t["result"]).contains("# Research Report: tardigrades"),
        "{t}"
    );
    assert!(
        seen.iter().any(|m| m.ends_with("...")),
        "the server's stages never showed as statusMessage; saw {seen:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn server_everythings_research_query_asks_through_the_tasklift_task_over_stdio() {
    use crate::support::stdio::StdioHarness;
    let Some((node, entry)) = everything() else {
        return;
    };
    let h = StdioHarness::start_command(
        |_| vec![node, entry.display().to_string(), "stdio".into()],
        |raw| raw.tasks.threshold = "500ms".into(),
    )
    .await;
    let mut c = h.client();
    c.capabilities.insert("elicitation".into(), json!({}));
    ambiguous_research(&c).await;
    h.stop().await;
}

#[tokio::test]
async fn server_everythings_research_query_asks_through_the_tasklift_task_over_http() {
    let Some(server) = crate::support::everything::everything_http().await else {
        return;
    };
    let url = server.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &url, dir, |c| {
        c.tasks.threshold = "500ms".into();
    })
    .await;
    let mut c = h.client();
    c.capabilities.insert("elicitation".into(), json!({}));
    ambiguous_research(&c).await;
    h.stop().await;
}

#[tokio::test]
async fn two_research_queries_at_once_are_each_followed_in_their_own_upstream_session() {
    // A legacy HTTP upstream keeps each task in the session that created it: every
    // tasks/* request for it must go to that session, also when tasklift opened
    // another session for the caller's second call (sessions_per_caller).
    use crate::support::stdio::{follow, guard, task_id, text};
    let Some(server) = crate::support::everything::everything_http().await else {
        return;
    };
    let url = server.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::front(FixtureServer::new(), &url, dir, |c| {
        c.tasks.threshold = "500ms".into();
    })
    .await;
    let c = h.client();
    let call = |topic: &'static str| {
        guard(
            "simulate-research-query",
            c.call_tool("simulate-research-query", json!({ "topic": topic })),
        )
    };
    // The second call starts while the first one's tasks/result holds its session.
    let a = task_id(&call("moss").await.expect("tools/call").result);
    task_until(&c, &a, "the first task is followed", |t| {
        t["statusMessage"].is_string()
    })
    .await;
    let b = task_id(&call("lichen").await.expect("tools/call").result);
    let ids = [a, b];
    let (ta, tb) = tokio::join!(follow(&c, &ids[0]), follow(&c, &ids[1]));
    for ((t, seen), topic) in [(ta, "moss"), (tb, "lichen")] {
        assert_eq!(t["status"], "completed", "{t}");
        assert!(
            text(&t["result"]).contains(&format!("# Research Report: {topic}")),
            "{t}"
        );
        assert!(
            seen.iter().any(|m| m.ends_with("...")),
            "the {topic} task never showed the server's stages; saw {seen:?}"
        );
    }
    h.stop().await;
}
