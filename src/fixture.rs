//! A small, configurable MCP server over Streamable HTTP: the demo's bundled slow
//! server, the upstream the conformance suite reaches through tasklift, and the
//! mock upstream of the integration tests.
//!
//! It speaks either era: `legacy` (2025-11-25: `initialize`, `Mcp-Session-Id`,
//! progress on SSE, `notifications/cancelled`, DELETE) or `modern` (2026-07-28:
//! stateless, `server/discover`, closing the stream cancels). Tools are built with
//! [`Tool`]: sleep, report progress, wait for a test's gate, fail either way.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};

use crate::jsonrpc::{
    self, Incoming as Msg, RpcError, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND,
};
use crate::reply::StreamItem;
use crate::server::body::{self, RespBody};

/// What a tool computes from its arguments.
type ReplyFn = Arc<dyn Fn(&Value) -> String + Send + Sync>;
/// Which requests a tool sends the client, from its arguments.
type AsksFn = Arc<dyn Fn(&Value) -> Vec<(String, Value)> + Send + Sync>;
/// The result text from the arguments and the client's answers (an error fails the call).
type AnswersFn =
    Arc<dyn Fn(&Value, &[Result<Value, RpcError>]) -> Result<String, RpcError> + Send + Sync>;
/// Requests sent to clients, waiting for their answers, by request id.
pub type Asked = Arc<Mutex<HashMap<String, tokio::sync::oneshot::Sender<Result<Value, RpcError>>>>>;
/// Sends a request to the client and waits for its answer.
pub type Asker = Arc<
    dyn Fn(
            String,
            Value,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, RpcError>> + Send>>
        + Send
        + Sync,
>;

/// A fixture tool.
#[derive(Clone)]
pub struct Tool {
    name: String,
    description: String,
    schema: Value,
    /// Fixed running time.
    sleep: Duration,
    /// Argument holding a running time in seconds (overrides `sleep`).
    sleep_arg: Option<String>,
    /// Progress notifications sent while running (spread over the running time).
    progress_steps: u32,
    /// Held until the test releases it.
    gate: Option<Arc<Notify>>,
    /// Result text.
    reply: ReplyFn,
    /// Result carries `isError: true`.
    is_error: bool,
    /// Answer with this JSON-RPC error instead of a result.
    rpc_error: Option<(i64, String)>,
    /// Pad the result text to this many bytes.
    pad_to: usize,
    /// Requests sent to the client (all at once) before running.
    asks: Option<AsksFn>,
    /// Result from the answers.
    on_answers: Option<AnswersFn>,
    /// Log messages (`notifications/message`, level info) sent while running.
    logs: Vec<String>,
    /// Modern input rounds (`InputRequiredResult`) before the result; 0: none.
    mrtr_rounds: u32,
}

impl Tool {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its `tools/list` entry.
    pub fn listing(&self) -> Value {
        json!({"name": self.name, "description": self.description, "inputSchema": self.schema})
    }

    /// A tool that answers `"{name} done"` at once.
    pub fn new(name: &str) -> Self {
        let n = name.to_string();
        Self {
            name: name.into(),
            description: format!("fixture tool {name}"),
            schema: json!({"type": "object", "properties": {}}),
            sleep: Duration::ZERO,
            sleep_arg: None,
            progress_steps: 0,
            gate: None,
            reply: Arc::new(move |_| format!("{n} done")),
            is_error: false,
            rpc_error: None,
            pad_to: 0,
            asks: None,
            on_answers: None,
            logs: Vec::new(),
            mrtr_rounds: 0,
        }
    }

    /// Send this log message (level info) while running.
    pub fn log(mut self, message: &str) -> Self {
        self.logs.push(message.into());
        self
    }

    /// Before running, ask the client these requests (legacy style: server-to-client
    /// requests on the call's stream), all at once, and build the result from the
    /// answers.
    pub fn ask(
        mut self,
        asks: impl Fn(&Value) -> Vec<(String, Value)> + Send + Sync + 'static,
        on_answers: impl Fn(&Value, &[Result<Value, RpcError>]) -> Result<String, RpcError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.asks = Some(Arc::new(asks));
        self.on_answers = Some(Arc::new(on_answers));
        self
    }
    /// Ask the modern way: answer `rounds` times with an `InputRequiredResult`
    /// (one elicitation `q{k}`, `requestState` `round-{k}`) before the result. A
    /// retry without the answer to the round's question gets it asked again.
    pub fn mrtr(mut self, rounds: u32) -> Self {
        self.mrtr_rounds = rounds;
        self
    }

    /// The answer to a call of an `mrtr` tool: the next round, or the result.
    fn mrtr_step(&self, params: &Value) -> Value {
        let asked = params
            .get("requestState")
            .and_then(Value::as_str)
            .and_then(|s| s.strip_prefix("round-"))
            .and_then(|k| k.parse::<u32>().ok())
            .unwrap_or(0);
        let answer = params
            .get("inputResponses")
            .and_then(|r| r.get(format!("q{asked}")));
        let next = match answer {
            Some(_) => asked + 1,
            None => asked.max(1),
        };
        if next > self.mrtr_rounds {
            let text = answer
                .and_then(|a| a["content"]["answer"].as_str())
                .unwrap_or("");
            let text = format!(
                "{}: {} rounds, last answer {text}",
                self.name, self.mrtr_rounds
            );
            return json!({"content": [{"type": "text", "text": text}]});
        }
        json!({
            "resultType": "input_required",
            "inputRequests": {format!("q{next}"): {"method": "elicitation/create", "params": {
                "mode": "form", "message": format!("Question {next} of {}?", self.mrtr_rounds),
                "requestedSchema": {"type": "object",
                    "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
            }}},
            "requestState": format!("round-{next}"),
        })
    }

    /// Describe it.
    pub fn description(mut self, d: &str) -> Self {
        self.description = d.into();
        self
    }
    /// Its input schema.
    pub fn schema(mut self, s: Value) -> Self {
        self.schema = s;
        self
    }
    /// Run for this long.
    pub fn sleep(mut self, d: Duration) -> Self {
        self.sleep = d;
        self
    }
    /// Run for as many seconds as this argument says.
    pub fn sleep_arg(mut self, arg: &str, default_secs: f64) -> Self {
        self.sleep_arg = Some(arg.into());
        self.sleep = Duration::from_secs_f64(default_secs);
        self
    }
    /// Send this many progress notifications while running.
    pub fn progress(mut self, steps: u32) -> Self {
        self.progress_steps = steps;
        self
    }
    /// Wait for the gate before answering.
    pub fn gate(mut self, g: Arc<Notify>) -> Self {
        self.gate = Some(g);
        self
    }
    /// Compute the result text from the arguments.
    pub fn reply(mut self, f: impl Fn(&Value) -> String + Send + Sync + 'static) -> Self {
        self.reply = Arc::new(f);
        self
    }
    /// Mark the result `isError: true`.
    pub fn tool_error(mut self) -> Self {
        self.is_error = true;
        self
    }
    /// Answer with a JSON-RPC error.
    pub fn rpc_error(mut self, code: i64, msg: &str) -> Self {
        self.rpc_error = Some((code, msg.into()));
        self
    }
    /// Make the result text at least `bytes` long.
    pub fn pad_to(mut self, bytes: usize) -> Self {
        self.pad_to = bytes;
        self
    }

    fn running_time(&self, args: &Value) -> Duration {
        match self
            .sleep_arg
            .as_ref()
            .and_then(|a| args.get(a))
            .and_then(Value::as_f64)
        {
            Some(s) if s >= 0.0 => Duration::from_secs_f64(s.min(86_400.0)),
            _ => self.sleep,
        }
    }

    /// Run the tool. `emit` sends the notifications it makes along the way: progress
    /// (under `token`, when the caller gave one) and log messages.
    pub(crate) async fn run(
        &self,
        args: &Value,
        token: Option<&Value>,
        asker: Option<Asker>,
        emit: impl Fn(Value),
    ) -> Result<Value, RpcError> {
        for m in &self.logs {
            emit(jsonrpc::notification(
                "notifications/message",
                json!({"level": "info", "logger": self.name, "data": m}),
            ));
        }
        let mut answered = None;
        if let (Some(asks), Some(on_answers)) = (&self.asks, &self.on_answers) {
            let mut pending = Vec::new();
            for (method, params) in asks(args) {
                pending.push(match &asker {
                    Some(a) => tokio::spawn(a(method, params)),
                    None => tokio::spawn(async {
                        Err(RpcError::new(METHOD_NOT_FOUND, "no client to ask"))
                    }),
                });
            }
            let mut answers = Vec::new();
            for p in pending {
                answers.push(
                    p.await
                        .unwrap_or_else(|e| Err(RpcError::new(INTERNAL_ERROR, e.to_string()))),
                );
            }
            answered = Some(on_answers(args, &answers)?);
        }
        let total = self.running_time(args);
        if self.progress_steps > 0 {
            let step = total / self.progress_steps;
            for i in 1..=self.progress_steps {
                tokio::time::sleep(step).await;
                if let Some(t) = token {
                    let steps = self.progress_steps;
                    emit(jsonrpc::notification(
                        "notifications/progress",
                        json!({"progressToken": t, "progress": i, "total": steps,
                            "message": format!("step {i} of {steps} done")}),
                    ));
                }
            }
        } else {
            tokio::time::sleep(total).await;
        }
        if let Some(g) = &self.gate {
            g.notified().await;
        }
        if let Some((code, msg)) = &self.rpc_error {
            return Err(RpcError::new(*code, msg.clone()));
        }
        let mut text = answered.unwrap_or_else(|| (self.reply)(args));
        if text.len() < self.pad_to {
            text.push_str(&"x".repeat(self.pad_to - text.len()));
        }
        let mut r = json!({"content": [{"type": "text", "text": text}]});
        if self.is_error {
            r["isError"] = json!(true);
        }
        Ok(r)
    }
}

/// What the fixture saw, for tests to assert on.
#[derive(Default)]
pub struct Stats {
    /// `initialize` requests answered.
    pub initializes: AtomicUsize,
    /// Sessions closed with DELETE.
    pub deletes: AtomicUsize,
    /// Tool calls started.
    pub calls: AtomicUsize,
    /// Tool calls that ended because they were cancelled (notification or disconnect).
    pub cancelled: AtomicUsize,
    /// Tool calls currently running.
    pub running: AtomicUsize,
    /// Headers of every POST, in order (lower-case names).
    pub headers: Mutex<Vec<HashMap<String, String>>>,
    /// Every JSON message POSTed, in order, as received.
    pub bodies: Mutex<Vec<Value>>,
    /// Headers of every DELETE, in order (lower-case names).
    pub delete_headers: Mutex<Vec<HashMap<String, String>>>,
}

/// The server's protocol era.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FixtureEra {
    /// 2025-11-25 with sessions.
    Legacy,
    /// 2026-07-28, stateless.
    Modern,
}

/// Builder and handle of a fixture server.
#[derive(Clone)]
pub struct FixtureServer {
    era: FixtureEra,
    tools: Vec<Tool>,
    stats: Arc<Stats>,
    sessions: Arc<Mutex<HashMap<String, Session>>>,
    addr: Option<SocketAddr>,
    stop: Option<watch::Sender<bool>>,
    /// Requests sent to clients, waiting for their answers, by request id.
    asked: Asked,
    name: String,
}

/// A legacy session: its running calls, by JSON-RPC id, to cancel.
#[derive(Default)]
struct Session {
    calls: HashMap<String, tokio::task::AbortHandle>,
    /// Open GET streams, for notifications that belong to no call.
    streams: Vec<mpsc::Sender<StreamItem>>,
}

impl Default for FixtureServer {
    fn default() -> Self {
        Self::new()
    }
}

impl FixtureServer {
    /// An empty legacy server.
    pub fn new() -> Self {
        Self {
            era: FixtureEra::Legacy,
            tools: Vec::new(),
            stats: Arc::default(),
            sessions: Arc::default(),
            addr: None,
            stop: None,
            asked: Arc::default(),
            name: "tasklift-fixture".into(),
        }
    }

    /// Speak 2026-07-28.
    pub fn modern(mut self) -> Self {
        self.era = FixtureEra::Modern;
        self
    }

    /// Speak 2025-11-25 (the default).
    pub fn legacy(mut self) -> Self {
        self.era = FixtureEra::Legacy;
        self
    }

    /// Add a tool.
    pub fn tool(mut self, t: Tool) -> Self {
        self.tools.push(t);
        self
    }

    /// The server behind `tasklift demo` and the conformance run: `greet` (instant),
    /// `slow_compute` (seconds, with progress), `generate_report`, `failing_job`
    /// (ends with `isError`) and `protocol_error_job` (ends with a JSON-RPC error).
    pub fn demo() -> Self {
        Self::new()
            .tool(
                Tool::new("greet")
                    .description("Says hello at once.")
                    .schema(json!({"type": "object", "properties": {"name": {"type": "string", "default": "World"}}}))
                    .reply(|a| format!("Hello, {}!", a.get("name").and_then(Value::as_str).unwrap_or("World"))),
            )
            .tool(
                Tool::new("slow_compute")
                    .description("Computes for `seconds` seconds, reporting progress every second.")
                    .schema(json!({"type": "object", "properties": {
                        "seconds": {"type": "number", "default": 3}, "label": {"type": "string"}}}))
                    .sleep_arg("seconds", 3.0)
                    .reply(|a| {
                        let s = a.get("seconds").and_then(Value::as_f64).unwrap_or(3.0);
                        let l = a.get("label").and_then(Value::as_str).unwrap_or("job");
                        format!("computed {l} in {s} s")
                    }),
            )
            .tool(
                Tool::new("generate_report")
                    .description("Builds a report of `pages` pages, one second per page, reporting progress.")
                    .schema(json!({"type": "object", "properties": {"pages": {"type": "integer", "default": 5}}}))
                    .sleep_arg("pages", 5.0)
                    .progress(5)
                    .reply(|a| {
                        let p = a.get("pages").and_then(Value::as_u64).unwrap_or(5);
                        format!("Monthly report: {p} pages, revenue up 12% on last month.")
                    }),
            )
            .tool(
                Tool::new("confirm_delete")
                    .description("Asks the user to confirm (elicitation) before deleting `filename`.")
                    .schema(json!({"type": "object", "properties": {"filename": {"type": "string"}}}))
                    .ask(
                        |a| {
                            let f = a.get("filename").and_then(Value::as_str).unwrap_or("file");
                            vec![("elicitation/create".into(), json!({
                                "mode": "form",
                                "message": format!("Delete {f}?"),
                                "requestedSchema": {"type": "object",
                                    "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
                            }))]
                        },
                        |a, answers| {
                            let f = a.get("filename").and_then(Value::as_str).unwrap_or("file");
                            let ok = answers[0].as_ref().map_err(Clone::clone)?;
                            let yes = ok["action"] == "accept" && ok["content"]["confirm"] == json!(true);
                            Ok(if yes { format!("Deleted {f}.") } else { format!("Kept {f}.") })
                        },
                    ),
            )
            .tool(
                Tool::new("multi_input")
                    .description("Asks two questions at once (elicitation), then answers.")
                    .ask(
                        |_| {
                            let form = |m: &str, field: &str, ty: &str| json!({"mode": "form", "message": m,
                                "requestedSchema": {"type": "object", "properties": {field: {"type": ty}}, "required": [field]}});
                            vec![
                                ("elicitation/create".into(), form("Your name?", "name", "string")),
                                ("elicitation/create".into(), form("Proceed?", "confirm", "boolean")),
                            ]
                        },
                        |_, answers| {
                            let name = answers[0].as_ref().map_err(Clone::clone)?["content"]["name"].clone();
                            let confirm = answers[1].as_ref().map_err(Clone::clone)?["content"]["confirm"].clone();
                            Ok(format!("name {name}, confirm {confirm}"))
                        },
                    ),
            )
            .tool(
                Tool::new("test_tool_with_task")
                    .description("Asks for a name (elicitation), then works for 3 s.")
                    .sleep(Duration::from_secs(3))
                    .ask(
                        |_| vec![("elicitation/create".into(), json!({"mode": "form", "message": "What is your name?",
                            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}))],
                        |_, answers| {
                            let a = answers[0].as_ref().map_err(Clone::clone)?;
                            Ok(format!("Hello, {}!", a["content"]["name"].as_str().unwrap_or("stranger")))
                        },
                    ),
            )
            .tool(
                Tool::new("test_streaming_elicitation")
                    .description("Asks for confirmation mid-call (elicitation), then answers.")
                    .ask(
                        |_| vec![("elicitation/create".into(), json!({"mode": "form", "message": "Continue?",
                            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}))],
                        |_, answers| Ok(format!("answered: {}", answers[0].as_ref().map_err(Clone::clone)?["action"])),
                    ),
            )
            .tool(
                Tool::new("test_trigger_tool_change")
                    .description("Announces that the tool list changed (notifications/tools/list_changed).")
                    .reply(|_| "tool list change announced".into()),
            )
            .tool(
                Tool::new("test_logging_tool")
                    .description("Logs two messages while it works.")
                    .log("starting the work")
                    .log("work done")
                    .reply(|_| "logged".into()),
            )
            .tool(
                Tool::new("test_missing_capability")
                    .description("Needs an LLM sample (sampling); fails if the client cannot give one.")
                    .ask(
                        |_| vec![("sampling/createMessage".into(), json!({"maxTokens": 20,
                            "messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}]}))],
                        |_, answers| {
                            let a = answers[0].as_ref().map_err(Clone::clone)?;
                            Ok(format!("sampled: {}", a["content"]["text"].as_str().unwrap_or("")))
                        },
                    ),
            )
            .tool(
                Tool::new("failing_job")
                    .description("Runs for a second, then reports a tool error (isError).")
                    .sleep(Duration::from_secs(1))
                    .tool_error()
                    .reply(|_| "the job failed: disk quota exceeded".into()),
            )
            .tool(
                Tool::new("protocol_error_job")
                    .description("Runs for half a second, then fails with a JSON-RPC error.")
                    .sleep(Duration::from_millis(500))
                    .rpc_error(INTERNAL_ERROR, "protocol_error_job always fails at the protocol level"),
            )
    }

    /// The tools, for serving them over another transport.
    pub(crate) fn tool_list(&self) -> &[Tool] {
        &self.tools
    }

    /// The tool named `name`.
    pub(crate) fn find_tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Counters and captured headers.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Forget every legacy session, as a server restart would: the next request with
    /// an old session id gets 404.
    pub fn expire_sessions(&self) {
        self.sessions.lock().expect("sessions").clear();
    }

    /// The endpoint URL, once started.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr.expect("started"))
    }

    /// Bind and serve in the background.
    pub async fn start(mut self, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        self.addr = Some(listener.local_addr()?);
        let (tx, mut rx) = watch::channel(false);
        self.stop = Some(tx);
        let me = Arc::new(self.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    r = listener.accept() => match r { Ok(s) => s, Err(_) => continue },
                    _ = rx.changed() => return,
                };
                let me = me.clone();
                let svc = service_fn(move |req| {
                    let me = me.clone();
                    async move { Ok::<_, Infallible>(me.handle(req).await) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc),
                );
            }
        });
        Ok(self)
    }

    /// Stop accepting connections.
    pub async fn stop(&self) {
        if let Some(s) = &self.stop {
            let _ = s.send(true);
        }
    }

    async fn handle(&self, req: http::Request<Incoming>) -> Response<RespBody> {
        let headers: HashMap<String, String> = req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let session = headers.get("mcp-session-id").cloned();
        match *req.method() {
            Method::POST => {}
            Method::DELETE if self.era == FixtureEra::Legacy => {
                self.stats
                    .delete_headers
                    .lock()
                    .expect("headers")
                    .push(headers);
                let removed =
                    session.and_then(|s| self.sessions.lock().expect("sessions").remove(&s));
                if let Some(s) = removed {
                    self.stats.deletes.fetch_add(1, Ordering::Relaxed);
                    s.calls.values().for_each(|c| c.abort());
                    return plain(StatusCode::OK, "");
                }
                return plain(StatusCode::NOT_FOUND, "");
            }
            Method::GET if self.era == FixtureEra::Legacy => {
                let mut sessions = self.sessions.lock().expect("sessions");
                let Some(s) = session.and_then(|s| sessions.get_mut(&s)) else {
                    return plain(StatusCode::NOT_FOUND, "");
                };
                let (tx, rx) = mpsc::channel(16);
                s.streams.push(tx);
                return Response::builder()
                    .header(header::CONTENT_TYPE, "text/event-stream")
                    .body(body::sse(rx))
                    .expect("valid response");
            }
            _ => return plain(StatusCode::METHOD_NOT_ALLOWED, ""),
        }
        self.stats.headers.lock().expect("headers").push(headers);
        let bytes = req
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let parsed = serde_json::from_slice::<Value>(&bytes).ok();
        if let Some(v) = &parsed {
            self.stats.bodies.lock().expect("bodies").push(v.clone());
        }
        let Some(msg) = parsed.and_then(Msg::classify) else {
            return rpc(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                Err(RpcError::new(-32700, "Parse error")),
            );
        };
        match msg {
            Msg::Request { id, method, params } => self.request(session, id, &method, params).await,
            Msg::Notification { method, params } => {
                if method == "notifications/cancelled" {
                    let target = params
                        .get("requestId")
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    if let Some(s) = session.and_then(|s| {
                        self.sessions
                            .lock()
                            .expect("sessions")
                            .get_mut(&s)
                            .and_then(|s| s.calls.remove(&target))
                    }) {
                        s.abort();
                    }
                }
                plain(StatusCode::ACCEPTED, "")
            }
            Msg::Response { id, outcome } => {
                let key = id
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| id.to_string());
                if let Some(w) = self.asked.lock().expect("asked").remove(&key) {
                    let _ = w.send(outcome);
                }
                plain(StatusCode::ACCEPTED, "")
            }
        }
    }

    async fn request(
        &self,
        session: Option<String>,
        id: Value,
        method: &str,
        params: Value,
    ) -> Response<RespBody> {
        if self.era == FixtureEra::Legacy {
            if method == "initialize" {
                self.stats.initializes.fetch_add(1, Ordering::Relaxed);
                let sid = uuid::Uuid::new_v4().to_string();
                self.sessions
                    .lock()
                    .expect("sessions")
                    .insert(sid.clone(), Session::default());
                let asked = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("2025-11-25");
                let version = if ["2025-11-25", "2025-06-18", "2025-03-26"].contains(&asked) {
                    asked
                } else {
                    "2025-11-25"
                };
                let mut r = rpc(
                    StatusCode::OK,
                    &id,
                    Ok(json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": true}},
                        "serverInfo": {"name": self.name, "version": env!("CARGO_PKG_VERSION")},
                        "instructions": "A slow demo server: try slow_compute or generate_report.",
                    })),
                );
                r.headers_mut()
                    .insert("mcp-session-id", sid.parse().expect("uuid is header-safe"));
                return r;
            }
            match &session {
                None => {
                    return rpc(
                        StatusCode::BAD_REQUEST,
                        &id,
                        Err(RpcError::new(
                            -32000,
                            "Bad Request: No valid session ID provided",
                        )),
                    )
                }
                Some(s) if !self.sessions.lock().expect("sessions").contains_key(s) => {
                    return rpc(
                        StatusCode::NOT_FOUND,
                        &id,
                        Err(RpcError::new(-32001, "Session not found")),
                    )
                }
                Some(_) => {}
            }
        }
        match method {
            "server/discover" if self.era == FixtureEra::Modern => rpc(
                StatusCode::OK,
                &id,
                Ok(json!({
                    "resultType": "complete", "supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "public",
                    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": self.name, "version": "1"}},
                })),
            ),
            "ping" => rpc(StatusCode::OK, &id, Ok(json!({}))),
            "tools/list" => {
                let tools: Vec<Value> = self
                    .tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": t.schema}))
                    .collect();
                rpc(StatusCode::OK, &id, Ok(json!({"tools": tools})))
            }
            "tools/call" => self.call(session, id, params).await,
            _ if self.era == FixtureEra::Modern => rpc(
                StatusCode::NOT_FOUND,
                &id,
                Err(RpcError::new(
                    METHOD_NOT_FOUND,
                    format!("Method not found: {method}"),
                )),
            ),
            _ => rpc(
                StatusCode::OK,
                &id,
                Err(RpcError::new(
                    METHOD_NOT_FOUND,
                    format!("Method not found: {method}"),
                )),
            ),
        }
    }

    async fn call(&self, session: Option<String>, id: Value, params: Value) -> Response<RespBody> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(tool) = self.tools.iter().find(|t| t.name == name).cloned() else {
            return rpc(
                StatusCode::OK,
                &id,
                Err(RpcError::new(
                    INVALID_PARAMS,
                    format!("Unknown tool: {name}"),
                )),
            );
        };
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        if name == "test_trigger_tool_change" {
            // The tool list "changed": tell every session's GET stream.
            let n = jsonrpc::notification("notifications/tools/list_changed", json!({}));
            for s in self.sessions.lock().expect("sessions").values_mut() {
                s.streams
                    .retain(|t| t.try_send(StreamItem::Message(n.clone())).is_ok());
            }
        }
        if tool.mrtr_rounds > 0 {
            return rpc(StatusCode::OK, &id, Ok(tool.mrtr_step(&params)));
        }
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let token = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let (tx, rx) = mpsc::channel::<StreamItem>(16);
        let stats = self.stats.clone();
        let rid = id.clone();
        let asker = asker_on(tx.clone(), self.asked.clone());
        let ltx = tx.clone();
        let task = tokio::spawn(async move {
            stats.running.fetch_add(1, Ordering::Relaxed);
            let _running = Running(stats.clone());
            let emit = |n| {
                let _ = ltx.try_send(StreamItem::Message(n));
            };
            let outcome = tokio::select! {
                o = tool.run(&args, token.as_ref(), Some(asker), emit) => o,
                _ = tx.closed() => {
                    stats.cancelled.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let _ = tx
                .send(StreamItem::Message(jsonrpc::response(Some(&rid), &outcome)))
                .await;
        });
        if let Some(s) = &session {
            if let Some(sess) = self.sessions.lock().expect("sessions").get_mut(s) {
                sess.calls.insert(id.to_string(), task.abort_handle());
            }
        }
        let stats = self.stats.clone();
        tokio::spawn(async move {
            if let Err(e) = task.await {
                if e.is_cancelled() {
                    stats.cancelled.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(body::sse(rx))
            .expect("valid response")
    }
}

/// An asker that writes requests to `out` and waits for answers registered in `asked`.
pub(crate) fn asker_on(out: mpsc::Sender<StreamItem>, asked: Asked) -> Asker {
    Arc::new(move |method: String, params: Value| {
        let id = format!("ask-{}", uuid::Uuid::new_v4().simple());
        let (otx, orx) = tokio::sync::oneshot::channel();
        asked.lock().expect("asked").insert(id.clone(), otx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let out = out.clone();
        Box::pin(async move {
            if out.send(StreamItem::Message(msg)).await.is_err() {
                return Err(RpcError::new(INTERNAL_ERROR, "the client went away"));
            }
            orx.await
                .unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "the request was dropped")))
        })
    })
}

/// Decrements `running` when a tool task ends, however it ends.
struct Running(Arc<Stats>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<RespBody> {
    Response::builder()
        .status(status)
        .body(body::full(Bytes::from_static(text.as_bytes())))
        .expect("valid response")
}

fn rpc(status: StatusCode, id: &Value, outcome: Result<Value, RpcError>) -> Response<RespBody> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::full(
            jsonrpc::response(Some(id), &outcome).to_string(),
        ))
        .expect("valid response")
}
