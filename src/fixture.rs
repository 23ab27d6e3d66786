//! A small, configurable MCP server over Streamable HTTP: the demo's bundled slow
//! server, the upstream the conformance suite reaches through tasklift, and the
//! mock upstream of the integration tests.
//!
//! It speaks either era: `legacy` (2025-11-25: `initialize`, `Mcp-Session-Id`,
//! progress on SSE, `notifications/cancelled`, DELETE) or `modern` (2026-07-28:
//! stateless, `server/discover`, closing the stream cancels). Tools are built with
//! [`Tool`]: sleep, report progress, wait for a test's gate, fail either way.
//!
//! Legacy response streams are resumable: each starts with a priming event (an id
//! and a `retry` delay), every event has an id `s{stream}-{n}`, and a GET with
//! `Last-Event-ID` replays what followed and carries the stream on. On a loopback
//! address the server refuses foreign `Host` and `Origin` headers (DNS rebinding).
//! [`FixtureServer::demo`] also offers the conformance content of
//! [`crate::fixture_content`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::fixture_content::{self, Answer, Content, Peer};
use tasklift_protocol::jsonrpc::{
    self, Incoming as Msg, RpcError, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND,
};

/// A boxed future, as scripted tools and requests that ask the client return.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
/// What a tool computes from its arguments.
type ReplyFn = Arc<dyn Fn(&Value) -> String + Send + Sync>;
/// Which requests a tool sends the client, from its arguments.
type AsksFn = Arc<dyn Fn(&Value) -> Vec<(String, Value)> + Send + Sync>;
/// The result text from the arguments and the client's answers (an error fails the call).
type AnswersFn =
    Arc<dyn Fn(&Value, &[Result<Value, RpcError>]) -> Result<String, RpcError> + Send + Sync>;
/// A tool's whole behaviour, for tools the builder steps do not describe.
type ScriptFn = Arc<dyn Fn(ToolCx) -> BoxFuture<Result<Value, RpcError>> + Send + Sync>;
/// What a call announces to other streams, from its arguments.
type BroadcastFn = Arc<dyn Fn(&Value) -> Vec<Broadcast> + Send + Sync>;
/// Sends a message to the client on the request's channel; false if it was not sent.
pub(crate) type Outlet = Arc<dyn Fn(Value) -> bool + Send + Sync>;
/// Requests sent to clients, waiting for their answers, by request id.
pub type Asked = Arc<Mutex<HashMap<String, tokio::sync::oneshot::Sender<Result<Value, RpcError>>>>>;
/// Sends a request to the client and waits for its answer. The first argument names
/// the request (its JSON-RPC id); `None` numbers it.
pub type Asker = Arc<
    dyn Fn(
            Option<String>,
            String,
            Value,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, RpcError>> + Send>>
        + Send
        + Sync,
>;

/// A notification a tool call sends beyond its own stream.
pub(crate) enum Broadcast {
    /// To every client (on its standalone GET stream, or stdout).
    All(Value),
    /// To the clients subscribed to `uri`.
    Subscribers {
        /// The resource.
        uri: String,
        /// The notification.
        message: Value,
    },
}

/// What a running tool can do besides computing its result.
pub(crate) struct ToolCx {
    /// The call's arguments.
    pub args: Value,
    /// The caller's progress token, if it gave one.
    pub token: Option<Value>,
    /// Asks the client something (legacy: a request on the call's stream).
    pub asker: Option<Asker>,
    /// Sends a notification on the call's stream.
    pub emit: Outlet,
    /// Closes the call's connection without ending its stream (legacy HTTP only).
    pub close: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl ToolCx {
    /// Ask the client and wait for its answer.
    pub async fn ask(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match &self.asker {
            Some(a) => a(None, method.into(), params).await,
            None => Err(RpcError::new(METHOD_NOT_FOUND, "no client to ask")),
        }
    }

    /// Ask with a named request: its JSON-RPC id is `name` (a bridge to 2026-07-28
    /// may use it as the `inputRequests` key). Names must not repeat while outstanding.
    pub async fn ask_named(
        &self,
        name: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        match &self.asker {
            Some(a) => a(Some(name.into()), method.into(), params).await,
            None => Err(RpcError::new(METHOD_NOT_FOUND, "no client to ask")),
        }
    }

    /// Ask several things at once (all requests go out before any answer is awaited).
    pub async fn ask_all<S: Into<String>>(
        &self,
        asks: Vec<(S, Value)>,
    ) -> Vec<Result<Value, RpcError>> {
        let mut pending = Vec::new();
        for (method, params) in asks {
            pending.push(match &self.asker {
                Some(a) => tokio::spawn(a(None, method.into(), params)),
                None => {
                    tokio::spawn(async { Err(RpcError::new(METHOD_NOT_FOUND, "no client to ask")) })
                }
            });
        }
        let mut answers = Vec::new();
        for p in pending {
            answers.push(
                p.await
                    .unwrap_or_else(|e| Err(RpcError::new(INTERNAL_ERROR, e.to_string()))),
            );
        }
        answers
    }

    /// Send a log message (`notifications/message`).
    pub fn log(&self, level: &str, data: &str) {
        (self.emit)(jsonrpc::notification(
            "notifications/message",
            json!({"level": level, "logger": "fixture", "data": data}),
        ));
    }

    /// Report progress, when the caller gave a token.
    pub fn progress(&self, progress: u64, total: u64, message: &str) {
        if let Some(t) = &self.token {
            (self.emit)(jsonrpc::notification(
                "notifications/progress",
                json!({"progressToken": t, "progress": progress, "total": total, "message": message}),
            ));
        }
    }

    /// Close the call's connection, leaving the client to resume the stream; false
    /// where there is no such thing.
    pub fn close_stream(&self) -> bool {
        self.close.as_ref().is_some_and(|c| c())
    }
}

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
    /// Runs instead of the steps above.
    script: Option<ScriptFn>,
    /// Notifications for other streams, sent when the tool is called.
    broadcast: Option<BroadcastFn>,
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
            script: None,
            broadcast: None,
        }
    }

    /// Run `f` instead of the builder's steps (sleep, asks, progress, reply).
    pub(crate) fn script<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(ToolCx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, RpcError>> + Send + 'static,
    {
        self.script = Some(Arc::new(move |cx| Box::pin(f(cx))));
        self
    }

    /// When called, announce what `f` returns on other streams.
    pub(crate) fn broadcast(
        mut self,
        f: impl Fn(&Value) -> Vec<Broadcast> + Send + Sync + 'static,
    ) -> Self {
        self.broadcast = Some(Arc::new(f));
        self
    }

    /// What a call with these arguments announces on other streams.
    pub(crate) fn broadcasts(&self, args: &Value) -> Vec<Broadcast> {
        self.broadcast.as_ref().map(|f| f(args)).unwrap_or_default()
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

    /// Run the tool. `cx.emit` sends the notifications it makes along the way:
    /// progress (under `cx.token`, when the caller gave one) and log messages.
    pub(crate) async fn run(&self, cx: ToolCx) -> Result<Value, RpcError> {
        if let Some(script) = &self.script {
            return script(cx).await;
        }
        let (args, token) = (&cx.args, cx.token.as_ref());
        for m in &self.logs {
            (cx.emit)(jsonrpc::notification(
                "notifications/message",
                json!({"level": "info", "logger": self.name, "data": m}),
            ));
        }
        let mut answered = None;
        if let (Some(asks), Some(on_answers)) = (&self.asks, &self.on_answers) {
            let answers = cx.ask_all(asks(args)).await;
            answered = Some(on_answers(args, &answers)?);
        }
        let total = self.running_time(args);
        if self.progress_steps > 0 {
            let step = total / self.progress_steps;
            for i in 1..=self.progress_steps {
                tokio::time::sleep(step).await;
                if let Some(t) = token {
                    let steps = self.progress_steps;
                    (cx.emit)(jsonrpc::notification(
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
    sessions: Sessions,
    addr: Option<SocketAddr>,
    stop: Option<watch::Sender<bool>>,
    /// Requests sent to clients, waiting for their answers, by request id.
    asked: Asked,
    name: String,
    /// Resources, prompts, completion and log levels (legacy era only), if offered.
    content: Option<Arc<Content>>,
    /// Numbers response streams (their event ids start with `s{n}-`).
    next_stream: Arc<AtomicU64>,
}

type Sessions = Arc<Mutex<HashMap<String, Session>>>;

/// A legacy session: its running calls, by JSON-RPC id, to cancel.
#[derive(Default)]
struct Session {
    calls: HashMap<String, tokio::task::AbortHandle>,
    /// Open GET streams, for notifications that belong to no call.
    streams: Vec<mpsc::UnboundedSender<Bytes>>,
    /// Log level and resource subscriptions.
    peer: Peer,
    /// Response streams a client may resume with `Last-Event-ID`, by stream id.
    replays: HashMap<String, Arc<Mutex<Replay>>>,
}

/// The reconnection delay response streams ask for (`retry`), in milliseconds.
const RETRY_MS: u64 = 500;

/// One response stream: what was sent on it, and the connection carrying it now.
#[derive(Default)]
struct Replay {
    /// Events sent, by number (legacy streams only; the priming event is number 0).
    events: Vec<(u64, Bytes)>,
    seq: u64,
    /// The connection the stream goes out on; none while the client is away.
    conn: Option<mpsc::UnboundedSender<Bytes>>,
    /// Counts connections, so a closing one only detaches itself.
    conn_gen: u64,
    /// The final response went out.
    done: bool,
    /// The server closed a connection (or the client resumed): a connection that
    /// goes away no longer cancels the request.
    detached: bool,
}

/// The sending side of a response stream.
#[derive(Clone)]
struct OutStream {
    /// The stream id, when it is resumable (legacy sessions).
    id: Option<String>,
    state: Arc<Mutex<Replay>>,
    /// Where it is registered for resumption: the sessions and the session id.
    home: Option<(Sessions, String)>,
}

impl OutStream {
    /// Send `msg` (buffered while the client is away); `last` ends the stream.
    fn send(&self, msg: &Value, last: bool) -> bool {
        let mut r = self.state.lock().expect("replay");
        if r.done {
            return false;
        }
        r.seq += 1;
        let event_id = self.id.as_ref().map(|id| format!("{id}-{}", r.seq));
        let ev = sse_event(event_id.as_deref(), msg);
        if self.id.is_some() {
            let n = r.seq;
            r.events.push((n, ev.clone()));
        }
        let delivered = r.conn.as_ref().is_some_and(|c| c.send(ev).is_ok());
        if last {
            r.done = true;
            r.conn = None;
            drop(r);
            if delivered {
                self.forget();
            }
        }
        true
    }

    /// Close the connection but not the stream; false if it cannot be resumed.
    fn close(&self) -> bool {
        let mut r = self.state.lock().expect("replay");
        if self.id.is_none() || r.done {
            return false;
        }
        r.detached = true;
        r.conn = None;
        true
    }

    /// Whether the request lost its only connection before answering.
    fn abandoned(&self) -> bool {
        let r = self.state.lock().expect("replay");
        !r.done && !r.detached
    }

    /// Stop keeping the stream for resumption.
    fn forget(&self) {
        if let (Some(id), Some((sessions, sid))) = (&self.id, &self.home) {
            if let Some(s) = sessions.lock().expect("sessions").get_mut(sid) {
                s.replays.remove(id);
            }
        }
    }
}

/// What a streamed request gets to work with.
struct StreamCx {
    emit: Outlet,
    asker: Asker,
    close: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

/// One SSE event, with an id if given.
fn sse_event(id: Option<&str>, msg: &Value) -> Bytes {
    let mut s = String::new();
    if let Some(id) = id {
        s.push_str(&format!("id: {id}\n"));
    }
    s.push_str(&format!("event: message\ndata: {msg}\n\n"));
    Bytes::from(s)
}

/// The event that opens a resumable stream: an id, the retry delay, empty data.
fn priming_event(id: &str) -> Bytes {
    Bytes::from(format!("id: {id}\nretry: {RETRY_MS}\ndata: \n\n"))
}

/// `s{n}-{seq}` → (`s{n}`, seq).
fn parse_event_id(id: &str) -> Option<(&str, u64)> {
    let (stream, seq) = id.rsplit_once('-')?;
    Some((stream, seq.parse().ok()?))
}

/// The body of every fixture response.
type FixtureBody = BoxBody<Bytes, Infallible>;

/// An SSE body fed by a channel of encoded events; says so on `gone` when hyper drops
/// it (the stream ended, or the client went away).
struct EventBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    gone: Option<oneshot::Sender<()>>,
}

impl Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

impl Drop for EventBody {
    fn drop(&mut self) {
        if let Some(g) = self.gone.take() {
            let _ = g.send(());
        }
    }
}

fn sse_response(
    rx: mpsc::UnboundedReceiver<Bytes>,
    gone: Option<oneshot::Sender<()>>,
) -> Response<FixtureBody> {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(EventBody { rx, gone }.boxed())
        .expect("valid response")
}

/// Whether a `Host` value (`name[:port]`) names this machine.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().map(|h| format!("[{h}]")),
        None => host.split(':').next().map(str::to_string),
    };
    matches!(
        name.as_deref().map(str::to_ascii_lowercase).as_deref(),
        Some("localhost" | "127.0.0.1" | "[::1]")
    )
}

/// Why a request to a loopback server is refused (DNS rebinding), if it is.
fn foreign_request(headers: &HashMap<String, String>) -> Option<String> {
    if let Some(h) = headers.get("host") {
        if !loopback_host(h) {
            return Some(format!("Host {h:?} is not this machine"));
        }
    }
    if let Some(o) = headers.get("origin") {
        let local = o
            .strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
            .is_some_and(|rest| loopback_host(rest.split('/').next().unwrap_or("")));
        if !local {
            return Some(format!("Origin {o:?} is not allowed"));
        }
    }
    None
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
            content: None,
            next_stream: Arc::default(),
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
    /// (ends with `isError`) and `protocol_error_job` (ends with a JSON-RPC error),
    /// tools that ask the client, and the conformance content ([`Self::with_content`]).
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
                    .broadcast(|_| vec![Broadcast::All(jsonrpc::notification("notifications/tools/list_changed", json!({})))])
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
            .with_content()
    }

    /// Also offer the conformance content: its tools, resources, prompts, completion
    /// and log levels (see [`crate::fixture_content`]).
    pub fn with_content(mut self) -> Self {
        let content = Arc::new(Content::default());
        self.tools.extend(fixture_content::tools(&content));
        self.content = Some(content);
        self
    }

    /// The content, if offered.
    pub(crate) fn content(&self) -> Option<&Arc<Content>> {
        self.content.as_ref()
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

    async fn handle(&self, req: http::Request<Incoming>) -> Response<FixtureBody> {
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
        if self.addr.is_some_and(|a| a.ip().is_loopback()) {
            if let Some(why) = foreign_request(&headers) {
                return rpc(
                    StatusCode::FORBIDDEN,
                    &Value::Null,
                    Err(RpcError::new(-32000, format!("Forbidden: {why}"))),
                );
            }
        }
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
                let Some(s) = session.as_ref().and_then(|s| sessions.get_mut(s)) else {
                    return plain(StatusCode::NOT_FOUND, "");
                };
                if let Some(last) = headers.get("last-event-id") {
                    let replay = parse_event_id(last)
                        .and_then(|(stream, seq)| Some((stream, seq, s.replays.get(stream)?)));
                    let Some((stream, seq, replay)) = replay else {
                        return plain(StatusCode::BAD_REQUEST, "unknown Last-Event-ID");
                    };
                    let (stream, replay) = (stream.to_string(), replay.clone());
                    drop(sessions);
                    let (response, finished) = reattach(&replay, seq);
                    if finished {
                        let mut sessions = self.sessions.lock().expect("sessions");
                        if let Some(s) = session.as_ref().and_then(|s| sessions.get_mut(s)) {
                            s.replays.remove(&stream);
                        }
                    }
                    return response;
                }
                let (tx, rx) = mpsc::unbounded_channel();
                s.streams.push(tx);
                return sse_response(rx, None);
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
    ) -> Response<FixtureBody> {
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
                        "capabilities": self.capabilities(),
                        "serverInfo": {"name": self.name, "version": env!("CARGO_PKG_VERSION")},
                        "instructions": "A slow demo server: try slow_compute or generate_report.",
                    })),
                );
                r.headers_mut()
                    .insert("mcp-session-id", sid.parse().expect("uuid is header-safe"));
                return r;
            }
            let Some(sid) = &session else {
                return rpc(
                    StatusCode::BAD_REQUEST,
                    &id,
                    Err(RpcError::new(
                        -32000,
                        "Bad Request: No valid session ID provided",
                    )),
                );
            };
            let answer = {
                let mut sessions = self.sessions.lock().expect("sessions");
                let Some(s) = sessions.get_mut(sid) else {
                    return rpc(
                        StatusCode::NOT_FOUND,
                        &id,
                        Err(RpcError::new(-32001, "Session not found")),
                    );
                };
                self.content
                    .as_ref()
                    .and_then(|c| c.answer(method, &params, &mut s.peer))
            };
            match answer {
                Some(Answer::Now(outcome)) => return rpc(StatusCode::OK, &id, outcome),
                Some(Answer::Asking(work)) => {
                    return self.streamed(session, id, move |cx| work(cx.asker))
                }
                None => {}
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
                let tools: Vec<Value> = self.tools.iter().map(Tool::listing).collect();
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

    /// The legacy `initialize` capabilities.
    pub(crate) fn capabilities(&self) -> Value {
        match &self.content {
            Some(_) => fixture_content::capabilities(),
            None => json!({"tools": {"listChanged": true}}),
        }
    }

    /// Send a call's announcements: each message on one standalone GET stream of every
    /// session it is for (never the same message on two streams of a session, as
    /// 2025-11-25 requires).
    fn broadcast(&self, announcements: Vec<Broadcast>) {
        if announcements.is_empty() {
            return;
        }
        let mut sessions = self.sessions.lock().expect("sessions");
        for b in announcements {
            for s in sessions.values_mut() {
                let msg = match &b {
                    Broadcast::All(m) => m,
                    Broadcast::Subscribers { uri, message }
                        if s.peer.subscriptions.contains(uri) =>
                    {
                        message
                    }
                    Broadcast::Subscribers { .. } => continue,
                };
                // The newest stream: an older one may be a connection the client
                // dropped without the server noticing yet.
                let ev = sse_event(None, msg);
                while let Some(t) = s.streams.last() {
                    if t.send(ev.clone()).is_ok() {
                        break;
                    }
                    s.streams.pop();
                }
            }
        }
    }

    async fn call(
        &self,
        session: Option<String>,
        id: Value,
        params: Value,
    ) -> Response<FixtureBody> {
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
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        self.broadcast(tool.broadcasts(&args));
        if tool.mrtr_rounds > 0 {
            return rpc(StatusCode::OK, &id, Ok(tool.mrtr_step(&params)));
        }
        let token = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let stats = self.stats.clone();
        self.streamed(session, id, move |s| {
            Box::pin(async move {
                stats.running.fetch_add(1, Ordering::Relaxed);
                let _running = Running(stats);
                let cx = ToolCx {
                    args,
                    token,
                    asker: Some(s.asker),
                    emit: s.emit,
                    close: s.close,
                };
                tool.run(cx).await
            })
        })
    }

    /// Answer request `id` with an SSE stream: `work` runs in the background and its
    /// outcome is the last event. A legacy session's stream is resumable; a client
    /// that goes away while the stream is attached cancels the work.
    fn streamed(
        &self,
        session: Option<String>,
        id: Value,
        work: impl FnOnce(StreamCx) -> BoxFuture<Result<Value, RpcError>>,
    ) -> Response<FixtureBody> {
        let resumable = self.era == FixtureEra::Legacy && session.is_some();
        let (tx, rx) = mpsc::unbounded_channel();
        let (gone_tx, gone_rx) = oneshot::channel();
        let stream_id =
            resumable.then(|| format!("s{}", self.next_stream.fetch_add(1, Ordering::Relaxed)));
        if let Some(sid) = &stream_id {
            let _ = tx.send(priming_event(&format!("{sid}-0")));
        }
        let out = OutStream {
            id: stream_id.clone(),
            state: Arc::new(Mutex::new(Replay {
                conn: Some(tx),
                ..Replay::default()
            })),
            home: session
                .clone()
                .filter(|_| resumable)
                .map(|s| (self.sessions.clone(), s)),
        };
        // Log messages below the session's level stay unsent.
        let peer = Peer {
            level: session.as_ref().and_then(|s| {
                let sessions = self.sessions.lock().expect("sessions");
                let s = sessions.get(s)?;
                s.peer.level.clone()
            }),
            ..Peer::default()
        };
        let emit: Outlet = {
            let out = out.clone();
            Arc::new(move |m: Value| peer.wants(&m) && out.send(&m, false))
        };
        let asker = {
            let out = out.clone();
            asker_on(
                Arc::new(move |m: Value| out.send(&m, false)),
                self.asked.clone(),
            )
        };
        let close = stream_id.as_ref().map(|_| {
            let out = out.clone();
            Arc::new(move || out.close()) as Arc<dyn Fn() -> bool + Send + Sync>
        });
        let fut = work(StreamCx { emit, asker, close });
        // Registered before the work starts: a stream that ends at once forgets itself.
        if let (Some(s), Some(sid)) = (&session, stream_id) {
            if let Some(sess) = self.sessions.lock().expect("sessions").get_mut(s) {
                sess.replays.insert(sid, out.state.clone());
            }
        }
        let done = out.clone();
        let rid = id.clone();
        let task = tokio::spawn(async move {
            let outcome = fut.await;
            done.send(&jsonrpc::response(Some(&rid), &outcome), true);
        });
        if let Some(s) = &session {
            if let Some(sess) = self.sessions.lock().expect("sessions").get_mut(s) {
                sess.calls.insert(id.to_string(), task.abort_handle());
            }
        }
        let abort = task.abort_handle();
        tokio::spawn(async move {
            let _ = gone_rx.await;
            if out.abandoned() {
                abort.abort();
            }
        });
        let stats = self.stats.clone();
        tokio::spawn(async move {
            if let Err(e) = task.await {
                if e.is_cancelled() {
                    stats.cancelled.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        sse_response(rx, Some(gone_tx))
    }
}

/// Carry a stream on over a new connection (a GET with `Last-Event-ID`): the events
/// after `seq`, then whatever comes. Also says whether the stream had already ended
/// (it is then replayed whole and needs keeping no longer).
fn reattach(replay: &Arc<Mutex<Replay>>, seq: u64) -> (Response<FixtureBody>, bool) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut r = replay.lock().expect("replay");
    for (_, ev) in r.events.iter().filter(|(n, _)| *n > seq) {
        let _ = tx.send(ev.clone());
    }
    if r.done {
        return (sse_response(rx, None), true);
    }
    let (gone_tx, gone_rx) = oneshot::channel();
    r.conn_gen += 1;
    let generation = r.conn_gen;
    r.conn = Some(tx);
    r.detached = true;
    drop(r);
    let replay = replay.clone();
    tokio::spawn(async move {
        let _ = gone_rx.await;
        let mut r = replay.lock().expect("replay");
        if r.conn_gen == generation {
            r.conn = None;
        }
    });
    (sse_response(rx, Some(gone_tx)), false)
}

/// An asker that sends requests with `send` and waits for answers registered in `asked`.
pub(crate) fn asker_on(send: Outlet, asked: Asked) -> Asker {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    Arc::new(move |name: Option<String>, method: String, params: Value| {
        let (key, id) = match name {
            Some(n) => (n.clone(), json!(n)),
            None => {
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (n.to_string(), json!(n))
            }
        };
        let (otx, orx) = tokio::sync::oneshot::channel();
        asked.lock().expect("asked").insert(key, otx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let sent = send(msg);
        Box::pin(async move {
            if !sent {
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

fn plain(status: StatusCode, text: &'static str) -> Response<FixtureBody> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from_static(text.as_bytes())).boxed())
        .expect("valid response")
}

fn rpc(status: StatusCode, id: &Value, outcome: Result<Value, RpcError>) -> Response<FixtureBody> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(
            Full::new(Bytes::from(
                jsonrpc::response(Some(id), &outcome).to_string(),
            ))
            .boxed(),
        )
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 exchange on a fresh connection; the raw response, read to the end.
    async fn exchange(addr: SocketAddr, head: &str, body: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "{head}\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
            .await
            .expect("the response ends")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn a_closed_stream_resumes_with_last_event_id() {
        let f = FixtureServer::demo()
            .start("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = f.addr.unwrap();
        let init = exchange(addr, "POST /mcp HTTP/1.1", r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#).await;
        let sid = init
            .lines()
            .find_map(|l| l.strip_prefix("mcp-session-id: "))
            .expect("a session")
            .to_string();
        let call = exchange(
            addr,
            &format!("POST /mcp HTTP/1.1\r\nMcp-Session-Id: {sid}"),
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_reconnection","arguments":{}}}"#,
        )
        .await;
        assert!(call.contains("id: s0-0\nretry: 500\ndata: \n\n"), "{call}");
        assert!(
            !call.contains("\"result\""),
            "closed before answering: {call}"
        );
        let resumed = exchange(
            addr,
            &format!("GET /mcp HTTP/1.1\r\nMcp-Session-Id: {sid}\r\nLast-Event-ID: s0-0"),
            "",
        )
        .await;
        assert!(resumed.contains("id: s0-1\n"), "{resumed}");
        assert!(
            resumed.contains(r#""id":2,"jsonrpc":"2.0","result""#),
            "{resumed}"
        );
        f.stop().await;
    }

    #[tokio::test]
    async fn foreign_origins_and_hosts_are_forbidden() {
        let f = FixtureServer::new()
            .start("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = f.addr.unwrap();
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let r = exchange(
            addr,
            "POST /mcp HTTP/1.1\r\nOrigin: http://evil.example.com",
            ping,
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        let r = exchange(
            addr,
            "POST /mcp HTTP/1.1\r\nOrigin: http://localhost:5173",
            ping,
        )
        .await;
        assert!(!r.starts_with("HTTP/1.1 403"), "{r}");
        assert!(
            foreign_request(&HashMap::from([("host".into(), "evil.example.com".into())])).is_some()
        );
        assert!(foreign_request(&HashMap::from([("host".into(), "[::1]:80".into())])).is_none());
        f.stop().await;
    }
}
