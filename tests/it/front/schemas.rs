//! Every message tasklift writes itself is valid for the protocol era it is sent
//! in, checked with a JSON Schema validator against the published schemas
//! (`tests/data/schemas/`: MCP 2026-07-28, MCP 2025-11-25, and the Tasks
//! extension's own schema), not by hand. Messages tasklift only forwards are not
//! its to check; those it builds or reshapes are: the `server/discover` and
//! `tools/list` answers it rewrites, task handles and task results, the tool-level
//! handle answers, the notifications of `subscriptions/listen`, legacy sessions'
//! `initialize` and 2025-11-25 tasks, and every JSON-RPC error it answers with.
//!
//! The schema files are the specification's `schema.json` for each, copied
//! unchanged; replace them when the protocol versions tasklift speaks change.
//!
//! Each test drives the real proxy in-process and collects every violation before
//! failing, so one run names them all: the message, and each error with its
//! instance path (and, under `anyOf`/`oneOf`, each branch's errors).

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, ValidatorMap};
use serde_json::{json, Value};
use tasklift_fixture::{FixtureServer, Tool};
use tokio::sync::Notify;

use crate::support::harness::*;

/// One of the schema documents in `tests/data/schemas/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doc {
    /// MCP 2026-07-28.
    Modern,
    /// MCP 2025-11-25.
    Legacy,
    /// The Tasks extension (`io.modelcontextprotocol/tasks`) for 2026-07-28.
    Tasks,
}

use Doc::{Legacy, Modern, Tasks};

impl Doc {
    fn file(self) -> &'static str {
        match self {
            Modern => "2026-07-28.json",
            Legacy => "2025-11-25.json",
            Tasks => "ext-tasks.json",
        }
    }
}

/// The compiled schema document: a validator for each of its `$defs`, built once.
fn schema(doc: Doc) -> &'static ValidatorMap {
    static MAPS: [OnceLock<ValidatorMap>; 3] = [const { OnceLock::new() }; 3];
    MAPS[doc as usize].get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/schemas")
            .join(doc.file());
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        jsonschema::validator_map_for(&value)
            .unwrap_or_else(|e| panic!("{} does not compile: {e}", path.display()))
    })
}

/// The errors of `value` against `#/$defs/{def}` of `doc`, one line each, with the
/// instance path; an `anyOf`/`oneOf` error lists each branch's errors under it.
pub fn errors(doc: Doc, def: &str, value: &Value) -> Vec<String> {
    let pointer = format!("#/$defs/{def}");
    let validator = schema(doc)
        .get(&pointer)
        .unwrap_or_else(|| panic!("no {pointer} in {}", doc.file()));
    let mut out = Vec::new();
    for e in validator.iter_errors(value) {
        describe(&e, 1, &mut out);
    }
    out
}

fn describe(e: &ValidationError<'_>, depth: usize, out: &mut Vec<String>) {
    let pad = "  ".repeat(depth);
    let mut text = e.to_string();
    if text.len() > 400 {
        let mut cut = 400;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(" …");
    }
    out.push(format!(
        "{pad}at instance path \"{}\" (schema {}): {text}",
        e.instance_path().as_str(),
        e.schema_path().as_str()
    ));
    let branches = match e.kind() {
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            context
        }
        _ => return,
    };
    if depth > 3 {
        return;
    }
    for (i, branch) in branches.iter().enumerate() {
        out.push(format!("{pad}  branch {i}:"));
        for sub in branch {
            describe(sub, depth + 2, out);
        }
    }
}

/// The checks of one test: every violation is kept, and [`Check::done`] fails the
/// test naming them all.
#[derive(Default)]
pub struct Check {
    failures: Vec<String>,
    checked: Vec<String>,
}

impl Check {
    pub fn new() -> Self {
        Self::default()
    }

    /// `value` (described as `what`) is a valid `def` of `doc`.
    pub fn is(&mut self, doc: Doc, def: &str, value: &Value, what: &str) {
        let errs = errors(doc, def, value);
        self.checked
            .push(format!("{what} -> {}#/$defs/{def}", doc.file()));
        if !errs.is_empty() {
            let shown = serde_json::to_string_pretty(value).unwrap_or_default();
            self.failures.push(format!(
                "{what}: not a valid {def} ({}):\n{}\nmessage:\n{shown}",
                doc.file(),
                errs.join("\n")
            ));
        }
    }

    /// A JSON-RPC result response of `era` whose result is a `def` of `doc`.
    pub fn result(&mut self, era: Doc, (doc, def): (Doc, &str), msg: &Value, what: &str) {
        if msg.get("result").is_none() {
            self.failures
                .push(format!("{what}: expected a result response, got {msg}"));
            return;
        }
        self.is(era, "JSONRPCResultResponse", msg, what);
        self.is(doc, def, &msg["result"], &format!("{what} (result)"));
    }

    /// Either answer a request may validly get (where tasklift's choice is not
    /// what is checked): an error response, or a result that is a `def` of `doc`.
    pub fn answer(&mut self, era: Doc, def: (Doc, &str), msg: &Value, what: &str) {
        if msg.get("error").is_some() {
            self.error(era, msg, what);
        } else {
            self.result(era, def, msg, what);
        }
    }

    /// A JSON-RPC error response of `era`. For 2026-07-28 its error is also the
    /// schema's own type for its code, where the schema has one (some of those
    /// types are whole responses, some only the error object).
    pub fn error(&mut self, era: Doc, msg: &Value, what: &str) {
        if msg.get("error").is_none() {
            self.failures
                .push(format!("{what}: expected an error response, got {msg}"));
            return;
        }
        self.is(era, "JSONRPCErrorResponse", msg, what);
        if era != Modern {
            self.is(era, "Error", &msg["error"], &format!("{what} (error)"));
            return;
        }
        let (def, whole) = match msg["error"]["code"].as_i64() {
            Some(-32700) => ("ParseError", false),
            Some(-32600) => ("InvalidRequestError", false),
            Some(-32601) => ("MethodNotFoundError", false),
            Some(-32602) => ("InvalidParamsError", false),
            Some(-32603) => ("InternalError", false),
            Some(-32020) => ("HeaderMismatchError", true),
            Some(-32021) => ("MissingRequiredClientCapabilityError", true),
            Some(-32022) => ("UnsupportedProtocolVersionError", true),
            _ => ("Error", false),
        };
        if whole {
            self.is(Modern, def, msg, what);
        } else {
            self.is(Modern, def, &msg["error"], &format!("{what} (error)"));
        }
    }

    /// Every message of an SSE or JSON answer is a JSON-RPC message of `era`.
    pub fn messages(&mut self, era: Doc, r: &Raw, what: &str) {
        let msgs = if r.content_type().starts_with("text/event-stream") {
            r.sse_messages()
        } else {
            vec![r.json()]
        };
        for (i, m) in msgs.iter().enumerate() {
            self.is(era, "JSONRPCMessage", m, &format!("{what} (message {i})"));
        }
    }

    /// Fail naming every violation; with `--nocapture`, list what was checked.
    pub fn done(self) {
        for c in &self.checked {
            eprintln!("checked: {c}");
        }
        assert!(
            self.failures.is_empty(),
            "{} message(s) invalid for their era:\n\n{}",
            self.failures.len(),
            self.failures.join("\n\n")
        );
    }
}

#[test]
fn the_validator_finds_what_each_schema_forbids() {
    // A 2026-07-28 tool result must say its resultType; a 2025-11-25 one need not.
    let plain = json!({"content": [{"type": "text", "text": "x"}]});
    let errs = errors(Modern, "CallToolResult", &plain);
    assert!(errs.iter().any(|e| e.contains("resultType")), "{errs:?}");
    assert!(errors(Legacy, "CallToolResult", &plain).is_empty());
    // A task handle is a task; a tasks/get answer in a status has that status's fields.
    let task = json!({"taskId": "t", "status": "working", "createdAt": "a",
        "lastUpdatedAt": "b", "ttlMs": null, "resultType": "complete"});
    assert!(!errors(Tasks, "CreateTaskResult", &task).is_empty());
    assert!(errors(Tasks, "GetTaskResult", &task).is_empty());
    let failed = json!({"taskId": "t", "status": "failed", "createdAt": "a",
        "lastUpdatedAt": "b", "ttlMs": 1, "resultType": "complete"});
    let errs = errors(Tasks, "FailedTask", &failed);
    assert!(errs.iter().any(|e| e.contains("error")), "{errs:?}");
    // An error's id, when there is one, is a RequestId; the errors carry its path.
    let e = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}});
    let errs = errors(Modern, "JSONRPCErrorResponse", &e);
    assert!(errs.iter().any(|e| e.contains("\"/id\"")), "{errs:?}");
    let e = json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "x"}});
    assert!(errors(Legacy, "JSONRPCErrorResponse", &e).is_empty());
}

const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";
const V25: &str = "2025-11-25";

/// The Tasks extension's type for a `tasks/get` answer in this status.
fn task_def(status: &str) -> &'static str {
    match status {
        "working" => "WorkingTask",
        "input_required" => "InputRequiredTask",
        "completed" => "CompletedTask",
        "failed" => "FailedTask",
        "cancelled" => "CancelledTask",
        other => panic!("no task status {other:?}"),
    }
}

/// clientCapabilities declaring the tasks extension (or not) and elicitation.
fn caps(tasks: bool) -> Value {
    let mut c = json!({"elicitation": {}});
    if tasks {
        c["extensions"] = json!({TASKS_EXT: {}});
    }
    c
}

/// A `tools/call` from a client that declared the tasks extension (and
/// elicitation), its answer.
async fn task_call(h: &Harness, id: u64, tool: &str, args: Value) -> Value {
    call(h, id, tool, args, caps(true), json!({})).await
}

/// A `tools/call` from a client without the tasks extension (it can be asked
/// for elicitation), its answer.
async fn plain_call(h: &Harness, id: u64, tool: &str, args: Value) -> Value {
    call(h, id, tool, args, caps(false), json!({})).await
}

/// A modern `tools/call` with these capabilities (and extra params), its answer.
async fn call(h: &Harness, id: u64, tool: &str, args: Value, caps: Value, extra: Value) -> Value {
    let tasks = caps.get("extensions").is_some();
    let mut params = json!({"name": tool, "arguments": args,
        "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}});
    if let Value::Object(e) = extra {
        for (k, v) in e {
            params[k] = v;
        }
    }
    let r = Post::new(&h.url, id, "tools/call", params, tasks)
        .send()
        .await;
    r.response()
}

/// Poll `tasks/get` until the task has `status`; the last answer (a response).
async fn get_until(h: &Harness, task: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let m = post(&h.url, 90, "tasks/get", json!({"taskId": task}), true)
            .await
            .response();
        if m["result"]["status"] == status {
            return m;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {task} never {status}: {m}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Check a `tasks/get` answer as the extension's `GetTaskResult` and its status's
/// own type; a completed task's result as the `CallToolResult` it stands for.
fn check_get(ck: &mut Check, m: &Value, what: &str) {
    ck.result(Modern, (Tasks, "GetTaskResult"), m, what);
    let status = m["result"]["status"].as_str().unwrap_or_default();
    ck.is(
        Tasks,
        task_def(status),
        &m["result"],
        &format!("{what} ({status})"),
    );
    if status == "completed" {
        ck.is(
            Modern,
            "CallToolResult",
            &m["result"]["result"],
            &format!("{what} (the task's result)"),
        );
    }
}

/// The task id of a `CreateTaskResult` answer, after checking it.
fn created(ck: &mut Check, m: &Value, what: &str) -> String {
    ck.result(Modern, (Tasks, "CreateTaskResult"), m, what);
    m["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: not a task handle: {m}"))
        .to_string()
}

/// The demo tools, `job` held until its gate opens, and these tools tasks at once.
async fn demo_with_job(
    gate: &Arc<Notify>,
    tweak: impl FnOnce(&mut tasklift::config::RawConfig),
) -> Harness {
    let up = FixtureServer::demo().tool(Tool::new("job").gate(gate.clone()));
    Harness::start(up, |c| {
        for t in ["confirm_delete", "protocol_error_job"] {
            c.upstreams[0].tools.insert(t.into(), rule("always"));
        }
        tweak(c)
    })
    .await
}

#[tokio::test]
async fn modern_discover_results_carry_the_extension_validly() {
    let mut ck = Check::new();
    for (era, up) in [
        ("legacy", FixtureServer::demo()),
        (
            "modern",
            FixtureServer::new().modern().tool(Tool::new("echo")),
        ),
    ] {
        let h = Harness::start(up, |_| {}).await;
        for tasks in [true, false] {
            let what = format!("server/discover, {era} upstream, extension declared: {tasks}");
            let m = post(&h.url, 1, "server/discover", json!({}), tasks)
                .await
                .response();
            ck.result(Modern, (Modern, "DiscoverResult"), &m, &what);
            ck.is(Modern, "DiscoverResultResponse", &m, &what);
            ck.is(
                Tasks,
                "TasksExtensionCapability",
                &m["result"]["capabilities"]["extensions"][TASKS_EXT],
                &format!("{what} (the extension's settings)"),
            );
        }
        h.stop().await;
    }
    ck.done();
}

#[tokio::test]
async fn modern_task_handles_and_task_methods_match_the_extension() {
    let gate = Arc::new(Notify::new());
    let h = demo_with_job(&gate, |_| {}).await;
    let mut ck = Check::new();

    // A call past its threshold, from a declaring client.
    let m = task_call(&h, 1, "job", json!({})).await;
    let job = created(&mut ck, &m, "CreateTaskResult (past the threshold)");
    let m = get_until(&h, &job, "working").await;
    check_get(&mut ck, &m, "tasks/get");

    // input_required, answered with tasks/update.
    let m = task_call(&h, 2, "confirm_delete", json!({"filename": "a.txt"})).await;
    let asking = created(&mut ck, &m, "CreateTaskResult (a task at once)");
    let m = get_until(&h, &asking, "input_required").await;
    check_get(&mut ck, &m, "tasks/get");
    let key = m["result"]["inputRequests"]
        .as_object()
        .and_then(|o| o.keys().next().cloned())
        .expect("an input request");
    let answers = json!({key: {"action": "accept", "content": {"confirm": true}}});
    let m = post(
        &h.url,
        3,
        "tasks/update",
        json!({"taskId": asking, "inputResponses": answers}),
        true,
    )
    .await
    .response();
    ck.result(Modern, (Tasks, "UpdateTaskResult"), &m, "tasks/update");
    let m = get_until(&h, &asking, "completed").await;
    check_get(&mut ck, &m, "tasks/get");

    // Completed from the threshold's task.
    gate.notify_one();
    let m = get_until(&h, &job, "completed").await;
    check_get(&mut ck, &m, "tasks/get");

    // Failed with the upstream's JSON-RPC error.
    let m = task_call(&h, 4, "protocol_error_job", json!({})).await;
    let failing = created(&mut ck, &m, "CreateTaskResult");
    let m = get_until(&h, &failing, "failed").await;
    check_get(&mut ck, &m, "tasks/get");

    // Cancelled with tasks/cancel; cancelling again is an error.
    let m = task_call(&h, 5, "slow_compute", json!({"seconds": 60})).await;
    let slow = created(&mut ck, &m, "CreateTaskResult (past the threshold)");
    let m = post(&h.url, 6, "tasks/cancel", json!({"taskId": slow}), true)
        .await
        .response();
    ck.result(Modern, (Tasks, "CancelTaskResult"), &m, "tasks/cancel");
    let m = get_until(&h, &slow, "cancelled").await;
    check_get(&mut ck, &m, "tasks/get");
    let m = post(&h.url, 7, "tasks/cancel", json!({"taskId": slow}), true)
        .await
        .response();
    ck.answer(
        Modern,
        (Tasks, "CancelTaskResult"),
        &m,
        "tasks/cancel of a cancelled task",
    );
    h.stop().await;
    ck.done();
}

/// A task notification for this task in this status.
fn status_is<'a>(id: &'a str, status: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |m| m["params"]["taskId"] == id && m["params"]["status"] == status
}

#[tokio::test]
async fn modern_listen_notifications_and_its_closing_result_are_valid() {
    let gate = Arc::new(Notify::new());
    let mut h = demo_with_job(&gate, |_| {}).await;
    let mut ck = Check::new();
    let m = task_call(&h, 1, "job", json!({})).await;
    let job = created(&mut ck, &m, "CreateTaskResult");
    let m = task_call(&h, 2, "confirm_delete", json!({"filename": "b.txt"})).await;
    let asking = created(&mut ck, &m, "CreateTaskResult");
    get_until(&h, &asking, "input_required").await;

    let mut s = Post::new(
        &h.url,
        3,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [job, asking, "no-such-task"], "toolsListChanged": true}}),
        true,
    )
    .open()
    .await;
    s.message_where("job working", status_is(&job, "working"))
        .await;
    s.message_where("input_required", status_is(&asking, "input_required"))
        .await;
    // A legacy server's list change, reshaped for the stream.
    let trigger = json!({"name": "test_trigger_tool_change"});
    let r = Post::new(&h.url, 4, "tools/call", trigger, false)
        .send()
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    s.message_where("the tool list change", |m| {
        m["method"] == "notifications/tools/list_changed"
    })
    .await;
    gate.notify_one();
    s.message_where("job completed", status_is(&job, "completed"))
        .await;
    h.proxy.as_ref().expect("running").engine.close_streams();
    let done = s.finish_guarded("the listen stream's end").await;
    let msgs = done.sse_messages();
    for (i, m) in msgs.iter().enumerate() {
        let what = format!("subscriptions/listen message {i} ({})", m["method"]);
        match m["method"].as_str() {
            Some("notifications/subscriptions/acknowledged") => {
                ck.is(Modern, "SubscriptionsAcknowledgedNotification", m, &what);
                ck.is(
                    Tasks,
                    "TaskSubscriptionAcknowledgedNotifications",
                    &m["params"]["notifications"],
                    &format!("{what} (taskIds)"),
                );
            }
            Some("notifications/tasks") => {
                ck.is(Modern, "JSONRPCNotification", m, &what);
                ck.is(Tasks, "TaskStatusNotification", m, &what);
                let status = m["params"]["status"].as_str().unwrap_or_default();
                ck.is(
                    Tasks,
                    task_def(status),
                    &m["params"],
                    &format!("{what} ({status})"),
                );
            }
            Some("notifications/tools/list_changed") => {
                ck.is(Modern, "ToolListChangedNotification", m, &what);
                ck.is(
                    Modern,
                    "NotificationMetaObject",
                    &m["params"]["_meta"],
                    &format!("{what} (_meta)"),
                );
            }
            Some(other) => ck.is(Modern, "JSONRPCNotification", m, &format!("{what} {other}")),
            None => {
                ck.result(
                    Modern,
                    (Modern, "SubscriptionsListenResult"),
                    m,
                    "subscriptions/listen closing result",
                );
                ck.is(Modern, "SubscriptionsListenResultResponse", m, &what);
            }
        }
    }
    assert!(
        msgs.last().is_some_and(|m| m.get("result").is_some()),
        "the stream ends with the listen result: {msgs:?}"
    );
    h.proxy.take().expect("running").shutdown().await;
    h.stop().await;
    ck.done();
}

/// tasklift's own answers to a `tools/call` of `tasklift_wait`/`tasklift_cancel`.
fn wait_call(task: &str, secs: f64) -> Value {
    json!({"taskId": task, "waitSeconds": secs})
}

/// What a tool-level handle answer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// The job still runs: a successful result naming its task.
    Running,
    /// A tool error (`isError`).
    ToolError,
    /// A successful result that is not a still-running answer.
    Done,
    /// Either.
    Any,
}

/// The answer `m` is of the kind the test means to check (so the schema check
/// is not of some other answer).
fn answer_is(m: &Value, want: Answer, what: &str) {
    let r = &m["result"];
    let got = if r["isError"] == true {
        Answer::ToolError
    } else if r["structuredContent"]["taskId"].is_string() {
        Answer::Running
    } else {
        Answer::Done
    };
    assert!(
        want == Answer::Any || got == want,
        "{what}: expected {want:?}, got {got:?}: {m}"
    );
}

/// The task id a still-running answer names.
fn handle_of(m: &Value) -> String {
    m["result"]["structuredContent"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a still-running answer: {m}"))
        .to_string()
}

#[tokio::test]
async fn modern_tool_handle_answers_are_valid_call_tool_results() {
    let gate = Arc::new(Notify::new());
    let h = demo_with_job(&gate, |c| {
        c.upstreams[0].non_task_clients = "tool_handles".into();
    })
    .await;
    let mut ck = Check::new();
    let tool_result = |ck: &mut Check, m: &Value, want: Answer, what: &str| {
        answer_is(m, want, what);
        ck.result(Modern, (Modern, "CallToolResult"), m, what);
        ck.is(Modern, "CallToolResultResponse", m, what);
    };

    // The listing offers the two tools, each a valid Tool.
    for (tasks, who) in [(false, "without"), (true, "with")] {
        let m = post(&h.url, 1, "tools/list", json!({}), tasks)
            .await
            .response();
        let what = format!("tools/list {who} the extension");
        ck.result(Modern, (Modern, "ListToolsResult"), &m, &what);
        ck.is(Modern, "ListToolsResultResponse", &m, &what);
        for t in m["result"]["tools"].as_array().into_iter().flatten() {
            ck.is(Modern, "Tool", t, &format!("{what}: tool {}", t["name"]));
        }
    }

    // Still running, then the tool's own result.
    let m = plain_call(&h, 2, "job", json!({})).await;
    tool_result(
        &mut ck,
        &m,
        Answer::Running,
        "still-running answer (past the threshold)",
    );
    let job = handle_of(&m);
    let m = plain_call(&h, 3, "tasklift_wait", wait_call(&job, 0.2)).await;
    tool_result(&mut ck, &m, Answer::Running, "tasklift_wait: still running");
    let m = plain_call(&h, 4, "tasklift_wait", wait_call("no-such-task", 0.0)).await;
    tool_result(
        &mut ck,
        &m,
        Answer::ToolError,
        "tasklift_wait: unknown taskId",
    );
    let m = plain_call(&h, 5, "tasklift_cancel", json!({"taskId": "no-such-task"})).await;
    tool_result(
        &mut ck,
        &m,
        Answer::ToolError,
        "tasklift_cancel: unknown taskId",
    );
    gate.notify_one();
    let m = plain_call(&h, 6, "tasklift_wait", wait_call(&job, 20.0)).await;
    tool_result(
        &mut ck,
        &m,
        Answer::Done,
        "tasklift_wait: the tool's own result",
    );

    // The failure as a tool error; a tool's own isError result.
    for (i, tool) in ["protocol_error_job", "failing_job"]
        .into_iter()
        .enumerate()
    {
        let id = 10 + 2 * i as u64;
        let m = plain_call(&h, id, tool, json!({})).await;
        tool_result(
            &mut ck,
            &m,
            Answer::Running,
            &format!("still-running answer ({tool})"),
        );
        let task = handle_of(&m);
        let m = plain_call(&h, id + 1, "tasklift_wait", wait_call(&task, 20.0)).await;
        tool_result(
            &mut ck,
            &m,
            Answer::ToolError,
            &format!("tasklift_wait: {tool} ended"),
        );
    }

    // Cancelled through tasklift_cancel.
    let m = plain_call(&h, 20, "slow_compute", json!({"seconds": 60})).await;
    let slow = handle_of(&m);
    let m = plain_call(&h, 21, "tasklift_cancel", json!({"taskId": slow})).await;
    tool_result(&mut ck, &m, Answer::Done, "tasklift_cancel: cancelled");
    let m = plain_call(&h, 22, "tasklift_cancel", json!({"taskId": slow})).await;
    tool_result(&mut ck, &m, Answer::Any, "tasklift_cancel: already ended");
    let m = plain_call(&h, 23, "tasklift_wait", wait_call(&slow, 20.0)).await;
    tool_result(&mut ck, &m, Answer::ToolError, "tasklift_wait: cancelled");

    // A question: MRTR for a client that can elicit, words for one that cannot.
    let m = plain_call(&h, 30, "confirm_delete", json!({"filename": "c.txt"})).await;
    tool_result(
        &mut ck,
        &m,
        Answer::Running,
        "still-running answer (a task at once)",
    );
    let asking = handle_of(&m);
    let m = plain_call(&h, 31, "tasklift_wait", wait_call(&asking, 20.0)).await;
    assert_eq!(m["result"]["resultType"], "input_required", "{m}");
    ck.result(
        Modern,
        (Modern, "InputRequiredResult"),
        &m,
        "tasklift_wait: MRTR",
    );
    ck.is(Modern, "CallToolResultResponse", &m, "tasklift_wait: MRTR");
    let key = m["result"]["inputRequests"]
        .as_object()
        .and_then(|o| o.keys().next().cloned())
        .unwrap_or_default();
    let retry = json!({
        "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}},
        "requestState": m["result"]["requestState"],
    });
    let m = call(
        &h,
        32,
        "tasklift_wait",
        wait_call(&asking, 20.0),
        caps(false),
        retry,
    )
    .await;
    tool_result(
        &mut ck,
        &m,
        Answer::Done,
        "tasklift_wait: the result after MRTR",
    );
    let m = plain_call(&h, 33, "confirm_delete", json!({"filename": "d.txt"})).await;
    let mute = handle_of(&m);
    let m = call(
        &h,
        34,
        "tasklift_wait",
        wait_call(&mute, 1.0),
        json!({}),
        json!({}),
    )
    .await;
    tool_result(
        &mut ck,
        &m,
        Answer::Running,
        "tasklift_wait: waiting for input it cannot ask",
    );
    h.stop().await;
    ck.done();
}

#[tokio::test]
async fn modern_input_required_results_of_a_plain_call_are_valid() {
    let h = Harness::start(FixtureServer::demo(), |_| {}).await;
    let mut ck = Check::new();
    for (i, (tool, args)) in [
        ("confirm_delete", json!({"filename": "f.txt"})),
        ("multi_input", json!({})),
    ]
    .into_iter()
    .enumerate()
    {
        let id = 1 + 2 * i as u64;
        let m = call(&h, id, tool, args.clone(), caps(false), json!({})).await;
        assert_eq!(m["result"]["resultType"], "input_required", "{m}");
        let what = format!("tools/call {tool}: InputRequiredResult");
        ck.result(Modern, (Modern, "InputRequiredResult"), &m, &what);
        ck.is(Modern, "CallToolResultResponse", &m, &what);
        let answers: serde_json::Map<String, Value> = m["result"]["inputRequests"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, r)| {
                let field = r["params"]["requestedSchema"]["required"][0]
                    .as_str()
                    .unwrap_or("confirm")
                    .to_string();
                let value = if field == "name" {
                    json!("Ann")
                } else {
                    json!(true)
                };
                (
                    k.clone(),
                    json!({"action": "accept", "content": {field: value}}),
                )
            })
            .collect();
        let retry = json!({"inputResponses": answers, "requestState": m["result"]["requestState"]});
        let m = call(&h, id + 1, tool, args, caps(false), retry).await;
        let what = format!("tools/call {tool}: the result after MRTR");
        ck.result(Modern, (Modern, "CallToolResult"), &m, &what);
        ck.is(Modern, "CallToolResultResponse", &m, &what);
    }
    // A question the client declared no capability for.
    let m = call(
        &h,
        9,
        "test_missing_capability",
        json!({}),
        caps(false),
        json!({}),
    )
    .await;
    ck.answer(
        Modern,
        (Modern, "CallToolResult"),
        &m,
        "sampling the client cannot do",
    );
    h.stop().await;
    ck.done();
}

/// The headers of a well-formed modern POST of `tools/call` `greet`.
fn modern_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "greet"),
    ]
}

#[tokio::test]
async fn modern_errors_are_valid_json_rpc_errors() {
    let h = Harness::start(FixtureServer::demo(), |c| {
        c.server.max_body_bytes = 4096;
    })
    .await;
    let mut ck = Check::new();
    let greet = |id| Post::new(&h.url, id, "tools/call", json!({"name": "greet"}), false);

    let unknown = json!({"taskId": "no-such-task"});
    let refused = [
        (
            1,
            "tasks/get",
            unknown.clone(),
            true,
            "tasks/get of an unknown task",
        ),
        (
            2,
            "tasks/cancel",
            unknown.clone(),
            true,
            "tasks/cancel of an unknown task",
        ),
        (
            4,
            "tasks/get",
            unknown,
            false,
            "tasks/get without the extension declared",
        ),
        (
            5,
            "tasks/list",
            json!({}),
            true,
            "tasks/list (not in the extension)",
        ),
        (
            6,
            "tasks/result",
            json!({"taskId": "x"}),
            true,
            "tasks/result (not in the extension)",
        ),
        (
            7,
            "initialize",
            json!({}),
            true,
            "initialize on the modern door",
        ),
        (8, "ping", json!({}), true, "ping on the modern door"),
        (
            9,
            "subscriptions/listen",
            json!({"notifications": {"taskIds": ["x"]}}),
            false,
            "subscriptions/listen of tasks without the extension",
        ),
    ];
    for (id, method, params, tasks, what) in refused {
        let r = post(&h.url, id, method, params, tasks).await;
        ck.error(Modern, &r.response(), what);
    }
    let update = json!({"taskId": "no-such-task", "inputResponses": {}});
    let m = post(&h.url, 3, "tasks/update", update, true)
        .await
        .response();
    ck.answer(
        Modern,
        (Tasks, "UpdateTaskResult"),
        &m,
        "tasks/update of an unknown task",
    );

    // The front door's refusals.
    let r = raw(
        "POST",
        &h.url,
        &modern_headers(),
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ",
    )
    .await;
    ck.error(Modern, &r.json(), "malformed JSON");
    let r = raw("POST", &h.url, &modern_headers(), "[1, 2]").await;
    ck.error(Modern, &r.json(), "a JSON array");
    let r = raw(
        "POST",
        &h.url,
        &modern_headers(),
        "{\"jsonrpc\": \"2.0\", \"id\": {}, \"method\": \"tools/call\"}",
    )
    .await;
    ck.error(Modern, &r.json(), "an object id");
    let big = json!({"name": "greet", "arguments": {"pad": "x".repeat(8000)}});
    let r = Post::new(&h.url, 10, "tools/call", big, false).send().await;
    ck.error(Modern, &r.json(), "a body over server.max_body_bytes");
    let r = greet(11).without("mcp-method").send().await;
    ck.error(Modern, &r.json(), "no Mcp-Method header");
    let r = greet(12).header("mcp-name", "other").send().await;
    ck.error(Modern, &r.json(), "Mcp-Name disagreeing with the body");
    let r = greet(13)
        .header("mcp-protocol-version", "2030-01-01")
        .edit(|b| {
            b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2030-01-01")
        })
        .send()
        .await;
    ck.error(Modern, &r.json(), "an unsupported protocol version");
    let r = greet(14)
        .edit(|b| {
            b["params"]["_meta"]
                .as_object_mut()
                .unwrap()
                .remove("io.modelcontextprotocol/clientCapabilities");
        })
        .send()
        .await;
    ck.error(Modern, &r.json(), "no clientCapabilities in _meta");
    let r = greet(15).header("content-type", "text/plain").send().await;
    ck.error(Modern, &r.json(), "a body not declared as JSON");
    let r = greet(16)
        .into_url(&h.url.replace("/mcp", "/elsewhere"))
        .send()
        .await;
    ck.error(Modern, &r.json(), "no endpoint at the path");
    let r = raw("GET", &h.url, &[("accept", "text/event-stream")], "").await;
    ck.error(Modern, &r.json(), "GET on the modern endpoint");
    let r = raw("DELETE", &h.url, &[], "").await;
    ck.error(Modern, &r.json(), "DELETE on the modern endpoint");
    h.stop().await;
    ck.done();
}

#[tokio::test]
async fn refusals_of_credentials_and_sessions_are_valid_json_rpc_errors() {
    let h = Harness::start(FixtureServer::demo(), |c| {
        c.auth.mode = "bearer".into();
        c.legacy.max_sessions_per_principal = 1;
    })
    .await;
    let mut ck = Check::new();
    let r = post(&h.url, 1, "tools/list", json!({}), true).await;
    assert_eq!(r.status, 401, "{r:?}");
    ck.error(Modern, &r.json(), "no credentials (modern)");
    let r = legacy_initialize(&h.url, V25, json!({}), &[]).await;
    assert_eq!(r.status, 401, "{r:?}");
    ck.error(Legacy, &r.json(), "no credentials (initialize)");
    let alice = [("authorization", "Bearer alice")];
    let (c, _) = LegacyClient::start_with(&h.url, V25, json!({}), &alice).await;
    let r = raw(
        "GET",
        &h.url,
        &[
            ("mcp-session-id", c.sid.as_str()),
            ("mcp-protocol-version", V25),
            ("accept", "application/json"),
            ("authorization", "Bearer alice"),
        ],
        "",
    )
    .await;
    ck.error(
        Legacy,
        &r.json(),
        "a GET that does not accept an event stream",
    );
    let r = c.with_sid("no-such-session").delete().await;
    ck.error(Legacy, &r.json(), "DELETE of an unknown session");
    let m = legacy_initialize(&h.url, V25, json!({}), &alice)
        .await
        .json();
    let what = "a session past legacy.max_sessions_per_principal (refused, or the oldest evicted)";
    ck.answer(Legacy, (Legacy, "InitializeResult"), &m, what);
    h.stop().await;
    ck.done();
}

#[tokio::test]
async fn modern_limit_refusals_are_valid_json_rpc_errors() {
    let up = FixtureServer::new().tool(Tool::new("forever").sleep(Duration::from_secs(3600)));
    let h = Harness::start(up, |c| {
        c.limits.max_active_tasks_per_principal = 1;
        c.limits.poll_rate_limit = true;
        c.tasks.poll_interval = "1s".into();
    })
    .await;
    let mut ck = Check::new();
    let m = task_call(&h, 1, "forever", json!({})).await;
    let forever = created(&mut ck, &m, "CreateTaskResult");
    let m = task_call(&h, 2, "forever", json!({})).await;
    ck.error(Modern, &m, "too many running tasks");
    let first = post(&h.url, 3, "tasks/get", json!({"taskId": forever}), true).await;
    check_get(&mut ck, &first.response(), "tasks/get");
    let m = post(&h.url, 4, "tasks/get", json!({"taskId": forever}), true)
        .await
        .response();
    ck.error(Modern, &m, "polling faster than pollIntervalMs");
    let m = post(&h.url, 5, "tasks/cancel", json!({"taskId": forever}), true)
        .await
        .response();
    ck.result(Modern, (Tasks, "CancelTaskResult"), &m, "tasks/cancel");
    h.stop().await;

    // A result over the limit fails its task; a call past the concurrency limit.
    let gate = Arc::new(Notify::new());
    let up = FixtureServer::new()
        .tool(
            Tool::new("dump")
                .sleep(Duration::from_millis(500))
                .pad_to(50_000),
        )
        .tool(Tool::new("hold").gate(gate.clone()));
    let h = Harness::start(up, |c| {
        c.limits.max_result_bytes = 10_000;
        c.limits.max_concurrent_calls = 1;
        c.limits.queue_timeout = "300ms".into();
    })
    .await;
    let m = task_call(&h, 1, "dump", json!({})).await;
    let dump = created(&mut ck, &m, "CreateTaskResult");
    let m = get_until(&h, &dump, "failed").await;
    check_get(
        &mut ck,
        &m,
        "tasks/get of a result over limits.max_result_bytes",
    );
    let first = {
        let url = h.url.clone();
        tokio::spawn(async move {
            Post::new(&url, 2, "tools/call", json!({"name": "hold"}), false)
                .send()
                .await
        })
    };
    let stats = h.upstream.stats();
    eventually("the first call runs", GUARD, || {
        stats.running.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let m = call(&h, 3, "hold", json!({}), json!({}), json!({})).await;
    ck.error(Modern, &m, "a call past limits.max_concurrent_calls");
    gate.notify_one();
    let _ = first.await;
    h.stop().await;
    ck.done();
}

/// A legacy session's answer to `method`.
async fn legacy(c: &LegacyClient, id: u64, method: &str, params: Value) -> Value {
    c.request(id, method, params).await.response()
}

/// The 2025-11-25 `Task` of a `CreateTaskResult` answer, after checking it.
fn legacy_created(ck: &mut Check, m: &Value, what: &str) -> String {
    ck.result(Legacy, (Legacy, "CreateTaskResult"), m, what);
    m["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: not a CreateTaskResult: {m}"))
        .to_string()
}

/// Poll a legacy session's `tasks/get` until the task has `status`; checks the answer.
async fn legacy_get_until(ck: &mut Check, c: &LegacyClient, task: &str, status: &str) {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let m = legacy(c, 90, "tasks/get", json!({"taskId": task})).await;
        if m["result"]["status"] == status {
            ck.result(
                Legacy,
                (Legacy, "GetTaskResult"),
                &m,
                &format!("tasks/get ({status})"),
            );
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {task} never {status}: {m}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn legacy_initialize_tasks_and_errors_match_2025_11_25() {
    let gate = Arc::new(Notify::new());
    let h = demo_with_job(&gate, |_| {}).await;
    let mut ck = Check::new();
    for caps in [json!({}), json!({"elicitation": {}, "tasks": {}})] {
        let r = legacy_initialize(&h.url, V25, caps.clone(), &[]).await;
        let m = r.json();
        ck.result(
            Legacy,
            (Legacy, "InitializeResult"),
            &m,
            &format!("initialize, capabilities {caps}"),
        );
    }
    let (c, _) = LegacyClient::start(&h.url, V25, json!({"elicitation": {}})).await;
    let task =
        |name: &str, args: Value| json!({"name": name, "arguments": args, "task": {"ttl": 60000}});

    let m = legacy(&c, 2, "tools/list", json!({})).await;
    ck.result(
        Legacy,
        (Legacy, "ListToolsResult"),
        &m,
        "tools/list (with execution.taskSupport)",
    );
    for t in m["result"]["tools"].as_array().into_iter().flatten() {
        ck.is(
            Legacy,
            "Tool",
            t,
            &format!("tools/list: tool {}", t["name"]),
        );
    }

    // A task of each end.
    let m = legacy(&c, 3, "tools/call", task("job", json!({}))).await;
    let job = legacy_created(&mut ck, &m, "CreateTaskResult");
    legacy_get_until(&mut ck, &c, &job, "working").await;
    let m = legacy(
        &c,
        4,
        "tools/call",
        task("confirm_delete", json!({"filename": "a.txt"})),
    )
    .await;
    let asking = legacy_created(&mut ck, &m, "CreateTaskResult");
    legacy_get_until(&mut ck, &c, &asking, "input_required").await;
    let m = legacy(&c, 5, "tasks/list", json!({})).await;
    ck.result(Legacy, (Legacy, "ListTasksResult"), &m, "tasks/list");

    // The task's question on the tasks/result stream, then its result.
    let mut s = c.open(6, "tasks/result", json!({"taskId": asking})).await;
    let ask = s
        .message_where("the task's question", |m| {
            m["method"] == "elicitation/create"
        })
        .await;
    ck.is(
        Legacy,
        "JSONRPCRequest",
        &ask,
        "elicitation/create on tasks/result",
    );
    ck.is(
        Legacy,
        "ElicitRequest",
        &ask,
        "elicitation/create on tasks/result",
    );
    let yes = json!({"action": "accept", "content": {"confirm": true}});
    assert_eq!(c.respond(&ask["id"], yes).await.status, 202);
    let done = s.finish_guarded("the task's result").await;
    ck.messages(Legacy, &done, "the tasks/result stream");
    let m = done.response();
    ck.result(Legacy, (Legacy, "GetTaskPayloadResult"), &m, "tasks/result");
    ck.is(
        Legacy,
        "CallToolResult",
        &m["result"],
        "tasks/result (a tools/call's result)",
    );
    legacy_get_until(&mut ck, &c, &asking, "completed").await;

    gate.notify_one();
    let m = legacy(&c, 7, "tasks/result", json!({"taskId": job})).await;
    ck.result(Legacy, (Legacy, "GetTaskPayloadResult"), &m, "tasks/result");
    ck.is(
        Legacy,
        "CallToolResult",
        &m["result"],
        "tasks/result (a tools/call's result)",
    );

    let m = legacy(&c, 8, "tools/call", task("failing_job", json!({}))).await;
    let failing = legacy_created(&mut ck, &m, "CreateTaskResult");
    let m = legacy(&c, 9, "tasks/result", json!({"taskId": failing})).await;
    ck.result(
        Legacy,
        (Legacy, "GetTaskPayloadResult"),
        &m,
        "tasks/result of a tool error",
    );
    ck.is(
        Legacy,
        "CallToolResult",
        &m["result"],
        "tasks/result of a tool error",
    );
    let m = legacy(&c, 10, "tools/call", task("protocol_error_job", json!({}))).await;
    let broken = legacy_created(&mut ck, &m, "CreateTaskResult");
    let m = legacy(&c, 11, "tasks/result", json!({"taskId": broken})).await;
    ck.error(Legacy, &m, "tasks/result of a failed task");
    legacy_get_until(&mut ck, &c, &broken, "failed").await;

    let m = legacy(
        &c,
        12,
        "tools/call",
        task("slow_compute", json!({"seconds": 60})),
    )
    .await;
    let slow = legacy_created(&mut ck, &m, "CreateTaskResult");
    let m = legacy(&c, 13, "tasks/cancel", json!({"taskId": slow})).await;
    ck.result(Legacy, (Legacy, "CancelTaskResult"), &m, "tasks/cancel");
    legacy_get_until(&mut ck, &c, &slow, "cancelled").await;
    let m = legacy(&c, 14, "tasks/cancel", json!({"taskId": slow})).await;
    ck.error(Legacy, &m, "tasks/cancel of a cancelled task");
    let m = legacy(&c, 15, "tasks/list", json!({})).await;
    ck.result(Legacy, (Legacy, "ListTasksResult"), &m, "tasks/list");

    // Errors.
    let m = legacy(&c, 20, "tasks/get", json!({"taskId": "no-such-task"})).await;
    ck.error(Legacy, &m, "tasks/get of an unknown task");
    let m = legacy(&c, 21, "tasks/result", json!({"taskId": "no-such-task"})).await;
    ck.error(Legacy, &m, "tasks/result of an unknown task");
    let m = legacy(&c, 22, "tasks/list", json!({"cursor": "not-a-cursor"})).await;
    ck.answer(
        Legacy,
        (Legacy, "ListTasksResult"),
        &m,
        "tasks/list with a bad cursor",
    );
    let m = legacy(&c, 23, "tasks/update", json!({"taskId": job})).await;
    ck.error(Legacy, &m, "tasks/update (not a 2025-11-25 method)");
    let m = legacy(&c, 24, "initialize", json!({})).await;
    ck.error(Legacy, &m, "a second initialize");
    let m = legacy(&c, 26, "ping", json!({})).await;
    ck.result(Legacy, (Legacy, "Result"), &m, "ping");
    let r = c.send(json!("not a message")).await;
    ck.error(Legacy, &r.json(), "a message that is not an object");
    let r = raw(
        "POST",
        &h.url,
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-session-id", c.sid.as_str()),
            ("mcp-protocol-version", V25),
        ],
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ",
    )
    .await;
    ck.error(Legacy, &r.json(), "malformed JSON in a session");
    let r = c
        .with_sid("no-such-session")
        .request(27, "tools/list", json!({}))
        .await;
    ck.error(Legacy, &r.json(), "an unknown session");
    h.stop().await;

    // A tool whose rule forbids tasks, and one that requires them.
    let up = FixtureServer::new()
        .tool(Tool::new("quick"))
        .tool(Tool::new("must"));
    let h = Harness::start(up, |c| {
        c.upstreams[0].tools.insert("quick".into(), rule("never"));
        c.upstreams[0].tools.insert("must".into(), rule("required"));
    })
    .await;
    let (c, _) = LegacyClient::start(&h.url, V25, json!({})).await;
    let m = legacy(&c, 2, "tools/call", task("quick", json!({}))).await;
    ck.error(Legacy, &m, "a task of a tool that forbids them");
    let m = legacy(&c, 3, "tools/call", json!({"name": "must"})).await;
    ck.error(
        Legacy,
        &m,
        "a call without a task of a tool that requires one",
    );
    h.stop().await;
    ck.done();
}

#[tokio::test]
async fn legacy_tool_handle_answers_match_2025_11_25() {
    let gate = Arc::new(Notify::new());
    let h = demo_with_job(&gate, |c| {
        c.upstreams[0].non_task_clients = "tool_handles".into();
    })
    .await;
    let mut ck = Check::new();
    let (c, _) = LegacyClient::start(&h.url, V25, json!({"elicitation": {}})).await;
    let tool_result = |ck: &mut Check, m: &Value, want: Answer, what: &str| {
        answer_is(m, want, what);
        ck.result(Legacy, (Legacy, "CallToolResult"), m, what);
    };
    let wait = |task: &str, secs: f64| json!({"name": "tasklift_wait", "arguments": wait_call(task, secs)});
    let cancel = |task: &str| json!({"name": "tasklift_cancel", "arguments": {"taskId": task}});

    let m = legacy(&c, 1, "tools/list", json!({})).await;
    ck.result(Legacy, (Legacy, "ListToolsResult"), &m, "tools/list");
    for t in m["result"]["tools"].as_array().into_iter().flatten() {
        ck.is(
            Legacy,
            "Tool",
            t,
            &format!("tools/list: tool {}", t["name"]),
        );
    }

    let m = legacy(&c, 2, "tools/call", json!({"name": "job", "arguments": {}})).await;
    tool_result(&mut ck, &m, Answer::Running, "still-running answer");
    let job = handle_of(&m);
    let m = legacy(&c, 3, "tools/call", wait(&job, 0.2)).await;
    tool_result(&mut ck, &m, Answer::Running, "tasklift_wait: still running");
    let m = legacy(&c, 4, "tools/call", wait("no-such-task", 0.0)).await;
    tool_result(
        &mut ck,
        &m,
        Answer::ToolError,
        "tasklift_wait: unknown taskId",
    );
    let m = legacy(&c, 5, "tools/call", cancel("no-such-task")).await;
    tool_result(
        &mut ck,
        &m,
        Answer::ToolError,
        "tasklift_cancel: unknown taskId",
    );
    gate.notify_one();
    let m = legacy(&c, 6, "tools/call", wait(&job, 20.0)).await;
    tool_result(
        &mut ck,
        &m,
        Answer::Done,
        "tasklift_wait: the tool's own result",
    );

    let m = legacy(&c, 7, "tools/call", json!({"name": "protocol_error_job"})).await;
    tool_result(
        &mut ck,
        &m,
        Answer::Running,
        "still-running answer (protocol_error_job)",
    );
    let failing = handle_of(&m);
    let m = legacy(&c, 8, "tools/call", wait(&failing, 20.0)).await;
    tool_result(
        &mut ck,
        &m,
        Answer::ToolError,
        "tasklift_wait: the failure as a tool error",
    );

    let m = legacy(
        &c,
        9,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
    )
    .await;
    let slow = handle_of(&m);
    let m = legacy(&c, 10, "tools/call", cancel(&slow)).await;
    tool_result(&mut ck, &m, Answer::Done, "tasklift_cancel: cancelled");
    let m = legacy(&c, 11, "tools/call", wait(&slow, 20.0)).await;
    tool_result(&mut ck, &m, Answer::ToolError, "tasklift_wait: cancelled");

    // The task's question becomes the session's own request on the wait's stream.
    let m = legacy(
        &c,
        12,
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "e.txt"}}),
    )
    .await;
    tool_result(
        &mut ck,
        &m,
        Answer::Running,
        "still-running answer (a task at once)",
    );
    let asking = handle_of(&m);
    let mut s = c.open(13, "tools/call", wait(&asking, 20.0)).await;
    let ask = s
        .message_where("the task's question", |m| {
            m["method"] == "elicitation/create"
        })
        .await;
    ck.is(
        Legacy,
        "ElicitRequest",
        &ask,
        "elicitation/create on the tasklift_wait stream",
    );
    let yes = json!({"action": "accept", "content": {"confirm": true}});
    assert_eq!(c.respond(&ask["id"], yes).await.status, 202);
    let done = s.finish_guarded("the job's result").await;
    ck.messages(Legacy, &done, "the tasklift_wait stream");
    tool_result(
        &mut ck,
        &done.response(),
        Answer::Done,
        "tasklift_wait: the result after the question",
    );
    h.stop().await;
    ck.done();
}
