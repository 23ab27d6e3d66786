//! MCP servers people install from the package registries, each compared with
//! direct use (issue 28, point 6). Pinned and installed by
//! scripts/install-registry-servers (npm: `@modelcontextprotocol/server-filesystem`,
//! `server-memory`, `server-sequential-thinking`, under target/tools/registry) and
//! scripts/install-peers-python (PyPI: `mcp-server-git`, `mcp-server-time`,
//! `mcp-server-fetch`, `mcp-server-sqlite`, `excel-mcp-server`, as venvs
//! target/tools/py-NAME); both run from scripts/install-test-tools.
//!
//! Each test starts the server twice, directly and behind tasklift (in-process, the
//! server as its stdio child; excel-mcp-server over its own Streamable HTTP, where
//! both sides talk to one server), and sends both the same requests in the same
//! order, so servers that keep state (a knowledge graph, a database, a thought
//! history) stay in step. Every answer through tasklift must equal the direct one:
//! the tool list, the initialize or discover result, a handful of calls with real
//! results (checked on the direct answer too, so two equal failures do not pass),
//! and the error cases (unknown tool, bad arguments, a path outside the allowed
//! directories, unknown methods). A test collects every difference and fails with
//! all of them, naming the server, the era, the step, and both answers.
//!
//! Each server is compared in both eras: a 2025-11-25 client (a session opened with
//! `initialize`, `MCP-Protocol-Version: 2025-11-25`) against the server driven
//! directly as a 2025-11-25 client, and a 2026-07-28 client (per-request `_meta`)
//! against the server driven directly in 2026-07-28 where it speaks it (the servers
//! built on the Python SDK mcp 2.3: git, time, fetch, excel), or else against its
//! 2025-11-25 answers (the Node servers and mcp-server-sqlite, which speak only
//! that era), allowing only what 2026-07-28 adds to every result (see
//! [`Bed::through_as_legacy`]).
//!
//! Nothing reaches past 127.0.0.1: mcp-server-fetch reads a page the test serves.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tasklift_fixture::FixtureServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::support::harness::*;
use crate::support::registry::{py_server, registry_server, tools_dir, INSTALL};
use crate::support::stdio::StdioHarness;

// ---------------------------------------------------------------------------
// A server driven directly over stdio
// ---------------------------------------------------------------------------

/// A server run as a child whose stdin and stdout the test speaks newline-delimited
/// JSON-RPC on, as a client would; killed when dropped, its stderr kept in a file.
pub(crate) struct StdioPeer {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::sync::mpsc::UnboundedReceiver<Value>,
    next: u64,
    /// 2026-07-28: every request carries the per-request `_meta`.
    modern: bool,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl StdioPeer {
    pub(crate) async fn spawn(command: &[String], env: &[(String, String)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr.log");
        let mut child = tokio::process::Command::new(&command[0])
            .args(&command[1..])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let msg = serde_json::from_str(&line)
                    .unwrap_or_else(|_| json!({"not JSON-RPC on stdout": line}));
                if tx.send(msg).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            next: 0,
            modern: false,
            stderr,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    async fn write(&mut self, msg: &Value) {
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("writing to the child: {e}\n{}", self.log()));
        self.stdin.flush().await.unwrap();
    }

    /// Send a request and return the whole response message. Requests the server
    /// sends meanwhile are answered (`ping`) or refused; notifications are dropped.
    pub(crate) async fn request(&mut self, method: &str, mut params: Value) -> Value {
        if self.modern {
            let mut m = meta(false);
            if let Some(Value::Object(given)) = params.get("_meta") {
                for (k, v) in given {
                    m[k] = v.clone();
                }
            }
            params["_meta"] = m;
        }
        self.next += 1;
        let id = self.next;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write(&msg).await;
        loop {
            let got = tokio::time::timeout(GUARD, self.lines.recv()).await;
            let m = match got {
                Ok(Some(m)) => m,
                Ok(None) => panic!(
                    "the child closed stdout before answering {method} (exit {:?}):\n{}",
                    self.child.try_wait(),
                    self.log()
                ),
                Err(_) => panic!("no answer to {method} in {GUARD:?}:\n{}", self.log()),
            };
            if m.get("method").is_none() && m["id"] == id {
                return m;
            }
            if let (Some(asked), Some(rid)) = (m["method"].as_str(), m.get("id")) {
                let answer = if asked == "ping" {
                    json!({"jsonrpc": "2.0", "id": rid, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": rid,
                           "error": {"code": -32601, "message": "Method not found"}})
                };
                self.write(&answer).await;
            }
        }
    }

    /// A 2025-11-25 `initialize` (with no client capabilities) and
    /// `notifications/initialized`; the initialize response.
    pub(crate) async fn initialize(&mut self) -> Value {
        let init = self
            .request(
                "initialize",
                initialize_body(0, "2025-11-25", json!({}))["params"].clone(),
            )
            .await;
        self.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        init
    }

    /// Speak 2026-07-28 from now on, starting as tasklift does, with
    /// `server/discover`; its response.
    pub(crate) async fn discover(&mut self) -> Value {
        self.modern = true;
        self.request("server/discover", json!({})).await
    }
}

// ---------------------------------------------------------------------------
// The two sides of a comparison
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Era {
    /// 2025-11-25, a session opened with `initialize`.
    Legacy,
    /// 2026-07-28, per-request `_meta`.
    Modern,
}

impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Era::Legacy => "2025-11-25",
            Era::Modern => "2026-07-28",
        })
    }
}

/// One answer: the JSON-RPC message, and the HTTP status when it came over HTTP.
#[derive(Debug)]
struct Reply {
    status: Option<u16>,
    msg: Value,
}

impl Reply {
    /// An answer read from a child's stdout.
    fn stdio(msg: Value) -> Self {
        Self { status: None, msg }
    }
}

/// The JSON-RPC message of an HTTP answer (JSON or SSE), or what came instead.
fn message_of(r: &Raw) -> Value {
    let is_sse = r.content_type().starts_with("text/event-stream");
    let parsed = if is_sse {
        r.sse_messages()
            .into_iter()
            .rfind(|m| m.get("method").is_none())
    } else {
        serde_json::from_str(&r.body).ok()
    };
    parsed.unwrap_or_else(|| json!({"not a JSON-RPC answer": r.body}))
}

/// A client speaking to one side.
enum Side {
    /// The server's own stdio, either era.
    Child(StdioPeer),
    /// A 2025-11-25 session over Streamable HTTP (tasklift's or the server's own).
    Session(LegacyClient, u64),
    /// 2026-07-28 requests over Streamable HTTP.
    Modern(String, u64),
}

impl Side {
    async fn ask(&mut self, method: &str, params: Value) -> Reply {
        match self {
            Side::Child(p) => Reply::stdio(p.request(method, params).await),
            Side::Session(c, id) => {
                *id += 1;
                let r = c.request(*id, method, params).await;
                Reply {
                    status: Some(r.status),
                    msg: message_of(&r),
                }
            }
            Side::Modern(url, id) => {
                *id += 1;
                let r = guarded(method, Post::new(url, *id, method, params, false).send()).await;
                Reply {
                    status: Some(r.status),
                    msg: message_of(&r),
                }
            }
        }
    }
}

/// A 2025-11-25 session on `url` (no client capabilities): the client and the
/// answer to its `initialize`.
async fn session(url: &str) -> (Side, Reply) {
    let r = legacy_initialize(url, "2025-11-25", json!({}), &[]).await;
    let reply = Reply {
        status: Some(r.status),
        msg: message_of(&r),
    };
    let sid = r
        .headers
        .get("mcp-session-id")
        .unwrap_or_else(|| panic!("initialize on {url} answered without Mcp-Session-Id: {r:?}"))
        .to_str()
        .unwrap()
        .to_string();
    let c = LegacyClient {
        url: url.to_string(),
        sid,
        version: "2025-11-25".into(),
        extra: vec![],
    };
    let ack = c.notify("notifications/initialized", json!({})).await;
    assert_eq!(
        ack.status, 202,
        "notifications/initialized on {url}: {ack:?}"
    );
    (Side::Session(c, 1), reply)
}

/// tasklift, in front of a stdio child or an HTTP server.
enum Proxy {
    Stdio(Box<StdioHarness>),
    Http(Box<Harness>),
}

impl Proxy {
    fn url(&self) -> String {
        match self {
            Proxy::Stdio(h) => h.url.clone(),
            Proxy::Http(h) => h.url.clone(),
        }
    }

    async fn stop(self) {
        match self {
            Proxy::Stdio(h) => h.stop().await,
            Proxy::Http(h) => h.stop().await,
        }
    }
}

/// A command line and its environment.
#[derive(Clone)]
struct Command {
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

impl Command {
    fn new(argv: Vec<String>) -> Self {
        Self { argv, env: vec![] }
    }

    fn env(mut self, k: &str, v: &Path) -> Self {
        self.env.push((k.into(), v.display().to_string()));
        self
    }
}

/// How a server is run.
enum Serve {
    /// Over stdio: the direct child's command, and tasklift's child's (the same,
    /// or another state file).
    Stdio { direct: Command, through: Command },
    /// A Streamable HTTP server already listening at this URL, for both sides.
    Http(String),
}

impl Serve {
    /// Both children run the same command.
    fn stdio(c: Command) -> Self {
        Serve::Stdio {
            direct: c.clone(),
            through: c,
        }
    }
}

// ---------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------

/// One server, directly and through tasklift, in one era.
struct Bed {
    server: &'static str,
    era: Era,
    /// The era the direct side speaks: the test's era, or 2025-11-25 for a server
    /// that speaks only that.
    direct_era: Era,
    direct: Side,
    through: Side,
    proxy: Proxy,
    /// The direct side's `serverInfo`, which a 2026-07-28 result carries in `_meta`.
    server_info: Value,
    /// Every difference found so far.
    diffs: Vec<String>,
}

/// At most `n` characters of `v`'s JSON.
fn short(v: &Value, n: usize) -> String {
    let s = v.to_string();
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Where `want` and `got` differ: one line per differing leaf, with its JSON
/// pointer and both values (cut short), at most 12 lines.
fn json_diff(want: &Value, got: &Value) -> String {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let p = format!("{path}/{k}");
                    match (x.get(k), y.get(k)) {
                        (Some(a), Some(b)) => walk(&p, a, b, out),
                        (Some(a), None) => out.push(format!("{p}: {} | missing", short(a, 200))),
                        (None, Some(b)) => out.push(format!("{p}: missing | {}", short(b, 200))),
                        (None, None) => {}
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (a, b)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}/{i}"), a, b, out);
                }
            }
            _ if a != b => out.push(format!("{path}: {} | {}", short(a, 300), short(b, 300))),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", want, got, &mut out);
    let more = out.len().saturating_sub(12);
    out.truncate(12);
    if more > 0 {
        out.push(format!("… and {more} more"));
    }
    out.iter().map(|l| format!("\n    {l}")).collect::<String>()
}

/// Remove `key` from an object (no-op on anything else).
fn drop_key(v: &mut Value, key: &str) -> Option<Value> {
    v.as_object_mut().and_then(|o| o.remove(key))
}

const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The `tasks` capability tasklift declares to a 2025-11-25 session.
fn legacy_tasks_capability() -> Value {
    json!({"cancel": {}, "list": {}, "requests": {"tools": {"call": {}}}})
}

const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";

impl Bed {
    /// Start `serve` directly and behind tasklift, open both sides in `era`
    /// (the direct side in `direct_era`) and compare the handshakes.
    async fn start(server: &'static str, era: Era, direct_era: Era, serve: Serve) -> Self {
        let (direct_child, proxy) = match &serve {
            Serve::Stdio { direct, through } => {
                let child = StdioPeer::spawn(&direct.argv, &direct.env).await;
                let through = through.clone();
                let h = StdioHarness::start_command(
                    |_| through.argv,
                    |raw| {
                        raw.upstreams[0].name = server.into();
                        raw.upstreams[0].env = through.env.into_iter().collect();
                        // A hang guard: a Python server takes a second or two to
                        // import, more on a busy machine.
                        raw.upstreams[0].probe_timeout = "30s".into();
                    },
                )
                .await;
                (Some(child), Proxy::Stdio(Box::new(h)))
            }
            Serve::Http(url) => {
                let dir = tempfile::tempdir().unwrap();
                let h = Harness::front(FixtureServer::new(), url, dir, |raw| {
                    raw.upstreams[0].name = server.into();
                })
                .await;
                (None, Proxy::Http(Box::new(h)))
            }
        };
        let url = proxy.url();
        let mut diffs = Vec::new();
        // The direct side's handshake, and the server's own serverInfo.
        let (direct, direct_hello) = match (direct_child, &serve, direct_era) {
            (Some(mut p), _, Era::Legacy) => {
                let m = p.initialize().await;
                (Side::Child(p), Reply::stdio(m))
            }
            (Some(mut p), _, Era::Modern) => {
                let m = p.discover().await;
                (Side::Child(p), Reply::stdio(m))
            }
            (None, Serve::Http(u), Era::Legacy) => session(u).await,
            (None, Serve::Http(u), Era::Modern) => {
                let mut s = Side::Modern(u.clone(), 0);
                let r = s.ask("server/discover", json!({})).await;
                (s, r)
            }
            _ => unreachable!(),
        };
        let hello = &direct_hello.msg["result"];
        assert!(
            hello.is_object(),
            "{server}: the direct handshake failed: {}",
            direct_hello.msg
        );
        let server_info = match direct_era {
            Era::Legacy => hello["serverInfo"].clone(),
            Era::Modern => hello["_meta"][SERVER_INFO].clone(),
        };
        let through = match era {
            Era::Legacy => {
                let (s, r) = session(&url).await;
                // The initialize result a 2025-11-25 client sees: the server's own.
                let mut want = direct_hello.msg.clone();
                let mut got = r.msg;
                for m in [&mut want, &mut got] {
                    drop_key(m, "id");
                    drop_key(m, "jsonrpc");
                }
                // tasklift serves 2025-11-25 tasks itself, for any server, and says
                // so (README, "2025-11-25 tasks"): that capability is taken out.
                if want["result"]["capabilities"].get("tasks").is_none() {
                    let caps = &mut got["result"]["capabilities"];
                    let tasks = drop_key(caps, "tasks");
                    if tasks.as_ref() != Some(&legacy_tasks_capability()) {
                        diffs.push(format!(
                            "{server} {era}: initialize: capabilities.tasks through tasklift is {tasks:?}, expected {}",
                            legacy_tasks_capability()
                        ));
                    }
                }
                if want != got {
                    diffs.push(format!(
                        "{server} {era}: initialize (pointer: direct | through){}",
                        json_diff(&want, &got)
                    ));
                }
                // HTTP status: the server's own, or 200 for a stdio server.
                let status = direct_hello.status.or(Some(200));
                if status != r.status {
                    diffs.push(format!(
                        "{server} {era}: initialize: HTTP {:?} through tasklift, expected {status:?}",
                        r.status
                    ));
                }
                s
            }
            Era::Modern => Side::Modern(url, 0),
        };
        let mut bed = Self {
            server,
            era,
            direct_era,
            direct,
            through,
            proxy,
            server_info,
            diffs,
        };
        if era == Era::Modern {
            bed.compare_discover(direct_hello).await;
        }
        bed
    }

    /// 2026-07-28 `server/discover` through tasklift against the server's own
    /// discover result, or its initialize result for a 2025-11-25-only server
    /// (capabilities, serverInfo, instructions: what tasklift derives discover
    /// from). tasklift adds the tasks extension to the capabilities (it serves the
    /// extension itself, for any server): that one key is taken out.
    async fn compare_discover(&mut self, direct: Reply) {
        let mut got = self.through.ask("server/discover", json!({})).await;
        let ext = got.msg["result"]["capabilities"]["extensions"]
            .as_object_mut()
            .and_then(|e| e.remove(TASKS_EXT));
        if ext.is_none() {
            self.diff(
                "server/discover",
                "tasklift's discover result declares the tasks extension",
                short(&got.msg, 300),
            );
        }
        if got.msg["result"]["capabilities"]["extensions"] == json!({}) {
            drop_key(&mut got.msg["result"]["capabilities"], "extensions");
        }
        let mut want = direct.msg.clone();
        if self.direct_era == Era::Modern {
            self.compare("server/discover", "server/discover", direct, got);
            return;
        }
        // From the initialize result: the fields it shares with discover.
        let init = want["result"].take();
        let r = &got.msg["result"];
        let pick = |v: &Value| {
            json!({
                "capabilities": v["capabilities"],
                "instructions": v["instructions"],
            })
        };
        let (w, g) = (pick(&init), pick(r));
        if w != g {
            let d = json_diff(&w, &g);
            self.diffs.push(format!(
                "{} {}: server/discover against initialize (pointer: direct | through){d}",
                self.server, self.era
            ));
        }
        if r["_meta"][SERVER_INFO] != init["serverInfo"] {
            self.diff(
                "server/discover (serverInfo)",
                &init["serverInfo"],
                &r["_meta"][SERVER_INFO],
            );
        }
        let versions = r["supportedVersions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !versions.contains(&json!("2026-07-28")) {
            self.diff(
                "server/discover (supportedVersions)",
                "2026-07-28",
                short(r, 300),
            );
        }
        if got.status != Some(200) {
            self.diff("server/discover (HTTP status)", 200, got.status);
        }
    }

    fn diff(&mut self, what: &str, want: impl std::fmt::Display, got: impl std::fmt::Debug) {
        self.diffs.push(format!(
            "{} {}: {what}\n    direct:  {want}\n    through: {got:?}",
            self.server, self.era
        ));
    }

    /// A 2026-07-28 answer through tasklift as the 2025-11-25 server said it,
    /// for a server that speaks only 2025-11-25. Taken out, each checked first:
    /// `resultType` (every 2026-07-28 result has one; here `complete`),
    /// `_meta["io.modelcontextprotocol/serverInfo"]` (a 2026-07-28 result SHOULD
    /// name its server: when there, it must be the server's own `serverInfo`),
    /// and on cacheable results (lists, `resources/read`) `ttlMs` and
    /// `cacheScope` (required in 2026-07-28; tasklift adds `list_ttl_ms` and
    /// `list_cache_scope` for a legacy server).
    fn through_as_legacy(&mut self, what: &str, method: &str, msg: &mut Value) {
        let Some(result) = msg.get_mut("result") else {
            return;
        };
        match drop_key(result, "resultType") {
            Some(t) if t == "complete" => {}
            other => {
                let other = other.map(|v| v.to_string()).unwrap_or("none".into());
                self.diffs.push(format!(
                    "{} {}: {what}: a 2026-07-28 result with resultType {other}, not \"complete\"",
                    self.server, self.era
                ));
            }
        }
        let info = result
            .get_mut("_meta")
            .and_then(|m| drop_key(m, SERVER_INFO));
        if info.is_some() && info.as_ref() != Some(&self.server_info) {
            self.diffs.push(format!(
                "{} {}: {what}: _meta[{SERVER_INFO}] is {info:?}, the server's is {}",
                self.server, self.era, self.server_info
            ));
        }
        if result.get("_meta") == Some(&json!({})) {
            drop_key(result, "_meta");
        }
        if method.ends_with("/list") || method == "resources/read" {
            for key in ["ttlMs", "cacheScope"] {
                if drop_key(result, key).is_none() {
                    self.diffs.push(format!(
                        "{} {}: {what}: a 2026-07-28 cacheable result without {key}",
                        self.server, self.era
                    ));
                }
            }
        }
    }

    /// `execution.taskSupport` in a tool list is tasklift's, not the server's
    /// (README, "2025-11-25 tasks"): to a 2025-11-25 session it offers tasks for
    /// every tool (`optional`, as no tool rule says otherwise); a 2026-07-28 list
    /// carries none (the extension has no per-tool field). Checked on the through
    /// side, then taken out of both.
    fn task_support(&mut self, want: &mut Value, got: &mut Value) {
        let expected = match self.era {
            Era::Legacy => Some(json!("optional")),
            Era::Modern => None,
        };
        let strip = |tool: &mut Value| {
            let support = tool
                .get_mut("execution")
                .and_then(|e| drop_key(e, "taskSupport"));
            if tool.get("execution") == Some(&json!({})) {
                drop_key(tool, "execution");
            }
            support
        };
        for tool in got["result"]["tools"].as_array_mut().into_iter().flatten() {
            let name = tool["name"].clone();
            let support = strip(tool);
            if support != expected {
                self.diffs.push(format!(
                    "{} {}: tools/list: {name}'s execution.taskSupport through tasklift is {support:?}, expected {expected:?}",
                    self.server, self.era
                ));
            }
        }
        for tool in want["result"]["tools"].as_array_mut().into_iter().flatten() {
            strip(tool);
        }
    }

    /// Compare the answers to one step, recording what differs.
    fn compare(&mut self, what: &str, method: &str, direct: Reply, through: Reply) {
        let (mut want, mut got) = (direct.msg, through.msg);
        for m in [&mut want, &mut got] {
            drop_key(m, "id");
            drop_key(m, "jsonrpc");
        }
        if self.era == Era::Modern && self.direct_era == Era::Legacy {
            self.through_as_legacy(what, method, &mut got);
        }
        if method == "tools/list" {
            self.task_support(&mut want, &mut got);
        }
        if want != got {
            self.diffs.push(format!(
                "{} {}: {what} ({method}) (pointer: direct | through){}",
                self.server,
                self.era,
                json_diff(&want, &got)
            ));
        }
        // HTTP status: the server's own where it has one (over HTTP); for a stdio
        // server, what the era's transport asks: in a 2025-11-25 session an answer
        // is 200 (errors in-band); in 2026-07-28 a result is 200 and -32601 is 404
        // (the transport's MUST; other codes are left to the proxy).
        let code = got["error"]["code"].as_i64();
        let expected = match (direct.status, self.era, code) {
            (Some(s), _, _) => Some(s),
            (None, Era::Legacy, _) => Some(200),
            (None, Era::Modern, None) => Some(200),
            (None, Era::Modern, Some(-32601)) => Some(404),
            (None, Era::Modern, Some(_)) => None,
        };
        if let Some(expected) = expected.filter(|e| Some(*e) != through.status) {
            self.diffs.push(format!(
                "{} {}: {what} ({method}): HTTP {} through tasklift, expected {expected} (answer: {})",
                self.server,
                self.era,
                through.status.map_or("none".into(), |s| s.to_string()),
                short(&got, 300)
            ));
        }
    }

    /// One request to both sides; the direct answer's message, for the test to
    /// check the server really did the work.
    async fn step(&mut self, what: &str, method: &str, params: Value) -> Value {
        self.step_with(what, method, params, |_| {}).await
    }

    /// `step`, with `norm` applied to both answers before they are compared (for a
    /// value that legitimately differs between two calls, such as the current time).
    async fn step_with(
        &mut self,
        what: &str,
        method: &str,
        params: Value,
        norm: impl Fn(&mut Value),
    ) -> Value {
        let mut d = self.direct.ask(method, params.clone()).await;
        let mut t = self.through.ask(method, params).await;
        let direct = d.msg.clone();
        norm(&mut d.msg);
        norm(&mut t.msg);
        self.compare(what, method, d, t);
        direct
    }

    /// A `tools/call` on both sides; the direct result (or error message).
    async fn call(&mut self, what: &str, tool: &str, arguments: Value) -> Value {
        self.step(
            what,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )
        .await
    }

    /// The steps every server gets: its tool list, the methods it lists besides,
    /// an unknown tool, an unknown method, and for a 2025-11-25 session `ping` and
    /// `resources/subscribe` (answered by tasklift for the session: it must say
    /// what the server says). `tools` are the tool names the server must list.
    async fn common(&mut self, tools: &[&str]) {
        let list = self.step("tools/list", "tools/list", json!({})).await;
        let names: Vec<&str> = list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: tools/list: {list}", self.server))
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        for t in tools {
            assert!(
                names.contains(t),
                "{}: {t} is listed: {names:?}",
                self.server
            );
        }
        for method in ["resources/list", "resources/templates/list", "prompts/list"] {
            self.step(method, method, json!({})).await;
        }
        self.call("an unknown tool", "no_such_tool", json!({"x": 1}))
            .await;
        self.step("an unknown method", "no/such/method", json!({}))
            .await;
        if self.era == Era::Legacy {
            self.step("ping", "ping", json!({})).await;
            self.step(
                "resources/subscribe",
                "resources/subscribe",
                json!({"uri": "file:///nowhere"}),
            )
            .await;
        }
    }

    /// Stop tasklift; fail with every difference found.
    async fn finish(self) {
        self.proxy.stop().await;
        if !self.diffs.is_empty() {
            panic!(
                "{} differences between {} directly and through tasklift ({}):\n{}",
                self.diffs.len(),
                self.server,
                self.era,
                self.diffs.join("\n")
            );
        }
    }
}

/// The text of a tool result's first content block (or the error's message).
fn text(msg: &Value) -> &str {
    msg["result"]["content"][0]["text"]
        .as_str()
        .or_else(|| msg["error"]["message"].as_str())
        .unwrap_or_default()
}

/// A tool result that is not an error (checked on the direct answer).
fn ok(msg: &Value) -> &str {
    assert!(
        msg["result"].is_object() && msg["result"]["isError"] != true,
        "expected a successful tool result: {msg}"
    );
    text(msg)
}

/// A tool result with `isError` (checked on the direct answer).
fn tool_error(msg: &Value) -> &str {
    assert_eq!(msg["result"]["isError"], true, "expected isError: {msg}");
    text(msg)
}

// ---------------------------------------------------------------------------
// @modelcontextprotocol/server-filesystem
// ---------------------------------------------------------------------------

/// Both children are allowed the same directory, so the paths in their answers
/// are the same: each write is done twice, with the same content.
async fn filesystem(era: Era) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("podkatalog")).unwrap();
    std::fs::write(root.join("żółw.txt"), "Zażółć gęślą jaźń\n").unwrap();
    let mut command = registry_server("filesystem");
    command.push(root.display().to_string());
    let serve = Serve::stdio(Command::new(command));
    let mut b = Bed::start("server-filesystem", era, Era::Legacy, serve).await;
    b.common(&["read_text_file", "write_file", "list_directory"])
        .await;
    let r = b
        .call(
            "list_allowed_directories",
            "list_allowed_directories",
            json!({}),
        )
        .await;
    assert!(ok(&r).contains(&root.display().to_string()), "{r}");
    let r = b
        .call(
            "list a directory",
            "list_directory",
            json!({"path": root.display().to_string()}),
        )
        .await;
    assert!(ok(&r).contains("[FILE] żółw.txt"), "{r}");
    let r = b
        .call(
            "read a file with a unicode name",
            "read_text_file",
            json!({"path": root.join("żółw.txt").display().to_string()}),
        )
        .await;
    assert_eq!(ok(&r), "Zażółć gęślą jaźń\n");
    let written = root.join("日本語-ファイル.txt");
    let r = b
        .call(
            "write a file with a unicode name",
            "write_file",
            json!({"path": written.display().to_string(), "content": "こんにちは 🌸\n"}),
        )
        .await;
    assert!(ok(&r).starts_with("Successfully wrote"), "{r}");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "こんにちは 🌸\n"
    );
    let r = b
        .call(
            "read it back",
            "read_text_file",
            json!({"path": written.display().to_string(), "head": 1}),
        )
        .await;
    assert_eq!(ok(&r), "こんにちは 🌸");
    let r = b
        .call(
            "search by a unicode pattern",
            "search_files",
            json!({"path": root.display().to_string(), "pattern": "**/*語*"}),
        )
        .await;
    assert!(ok(&r).contains("日本語-ファイル.txt"), "{r}");
    // Errors.
    let r = b
        .call(
            "read a path outside the allowed directory",
            "read_text_file",
            json!({"path": "/etc/hostname"}),
        )
        .await;
    assert!(tool_error(&r).contains("Access denied"), "{r}");
    let r = b
        .call(
            "write a path outside the allowed directory",
            "write_file",
            json!({"path": "/tmp/tasklift-registry-outside.txt", "content": "x"}),
        )
        .await;
    assert!(tool_error(&r).contains("Access denied"), "{r}");
    assert!(!Path::new("/tmp/tasklift-registry-outside.txt").exists());
    let r = b
        .call(
            "read a missing file",
            "read_text_file",
            json!({"path": root.join("brak.txt").display().to_string()}),
        )
        .await;
    tool_error(&r);
    let r = b
        .call("bad arguments", "read_text_file", json!({"path": 42}))
        .await;
    assert!(tool_error(&r).contains("-32602"), "{r}");
    b.finish().await;
}

#[tokio::test]
async fn server_filesystem_2025() {
    filesystem(Era::Legacy).await;
}

#[tokio::test]
async fn server_filesystem_2026() {
    filesystem(Era::Modern).await;
}

// ---------------------------------------------------------------------------
// @modelcontextprotocol/server-memory
// ---------------------------------------------------------------------------

/// Each child keeps its graph in a file of its own (MEMORY_FILE_PATH); after the
/// same calls the two files are the same.
async fn memory(era: Era) {
    let dir = tempfile::tempdir().unwrap();
    let direct_file = dir.path().join("direct.jsonl");
    let through_file = dir.path().join("through.jsonl");
    let command = Command::new(registry_server("memory"));
    let serve = Serve::Stdio {
        direct: command.clone().env("MEMORY_FILE_PATH", &direct_file),
        through: command.env("MEMORY_FILE_PATH", &through_file),
    };
    let mut b = Bed::start("server-memory", era, Era::Legacy, serve).await;
    b.common(&["create_entities", "read_graph", "search_nodes"])
        .await;
    let r = b
        .call(
            "create entities",
            "create_entities",
            json!({"entities": [
                {"name": "Żaneta", "entityType": "osoba", "observations": ["lubi kawę ☕"]},
                {"name": "Kraków", "entityType": "miasto", "observations": []},
            ]}),
        )
        .await;
    assert!(ok(&r).contains("Żaneta"), "{r}");
    b.call(
        "create a relation",
        "create_relations",
        json!({"relations": [{"from": "Żaneta", "to": "Kraków", "relationType": "mieszka w"}]}),
    )
    .await;
    let r = b.call("read the graph", "read_graph", json!({})).await;
    let graph = &r["result"]["structuredContent"];
    assert_eq!(graph["entities"].as_array().map(Vec::len), Some(2), "{r}");
    assert_eq!(graph["relations"][0]["relationType"], "mieszka w", "{r}");
    let r = b
        .call("search", "search_nodes", json!({"query": "kawę"}))
        .await;
    assert!(ok(&r).contains("Żaneta"), "{r}");
    b.step(
        "read the graph resource",
        "resources/read",
        json!({"uri": "memory://knowledge-graph"}),
    )
    .await;
    // The same entity again: nothing new.
    b.call(
        "create an existing entity",
        "create_entities",
        json!({"entities": [{"name": "Żaneta", "entityType": "osoba", "observations": []}]}),
    )
    .await;
    // Errors.
    let r = b
        .call(
            "bad arguments",
            "create_entities",
            json!({"entities": "nie lista"}),
        )
        .await;
    assert!(tool_error(&r).contains("-32602"), "{r}");
    let r = b
        .call(
            "observations for a missing entity",
            "add_observations",
            json!({"observations": [{"entityName": "Nikt", "contents": ["x"]}]}),
        )
        .await;
    assert!(tool_error(&r).contains("Nikt"), "{r}");
    b.finish().await;
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    assert!(read(&direct_file).contains("Żaneta"));
    assert_eq!(
        read(&direct_file),
        read(&through_file),
        "server-memory {era}: the graph files differ"
    );
}

#[tokio::test]
async fn server_memory_2025() {
    memory(Era::Legacy).await;
}

#[tokio::test]
async fn server_memory_2026() {
    memory(Era::Modern).await;
}

// ---------------------------------------------------------------------------
// @modelcontextprotocol/server-sequential-thinking
// ---------------------------------------------------------------------------

/// The thought history lives in the process: each child starts empty and gets
/// the same thoughts.
async fn sequential_thinking(era: Era) {
    let serve = Serve::stdio(Command::new(registry_server("sequential-thinking")));
    let mut b = Bed::start("server-sequential-thinking", era, Era::Legacy, serve).await;
    b.common(&["sequentialthinking"]).await;
    let thought = |n: u64, next: bool| {
        json!({"thought": format!("Krok {n}: rozważ ☕"), "thoughtNumber": n,
               "totalThoughts": 2, "nextThoughtNeeded": next})
    };
    let r = b
        .call("the first thought", "sequentialthinking", thought(1, true))
        .await;
    assert_eq!(
        r["result"]["structuredContent"]["thoughtHistoryLength"], 1,
        "{r}"
    );
    let r = b
        .call(
            "the second thought",
            "sequentialthinking",
            thought(2, false),
        )
        .await;
    assert_eq!(
        r["result"]["structuredContent"]["thoughtHistoryLength"], 2,
        "{r}"
    );
    let r = b
        .call(
            "bad arguments",
            "sequentialthinking",
            json!({"thought": "bez numeru"}),
        )
        .await;
    assert!(tool_error(&r).contains("-32602"), "{r}");
    b.finish().await;
}

#[tokio::test]
async fn server_sequential_thinking_2025() {
    sequential_thinking(Era::Legacy).await;
}

#[tokio::test]
async fn server_sequential_thinking_2026() {
    sequential_thinking(Era::Modern).await;
}

// ---------------------------------------------------------------------------
// mcp-server-git
// ---------------------------------------------------------------------------

/// `git` in `dir` with a fixed identity and dates (panics on failure).
fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Zażółć Tester",
            "-c",
            "user.email=t@example.invalid",
        ])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_DATE", "2026-01-02T03:04:05Z")
        .env("GIT_COMMITTER_DATE", "2026-01-02T03:04:05Z")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// One repository made with `git init`, read by both children: a commit, a file
/// changed since and one untracked.
async fn git_server(era: Era) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().canonicalize().unwrap().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("żółw.txt"), "pierwsza linia\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "Pierwszy commit: żółw"]);
    std::fs::write(repo.join("żółw.txt"), "pierwsza linia\ndruga linia\n").unwrap();
    std::fs::write(repo.join("nowy-plik.md"), "# nowy\n").unwrap();
    let repo_path = repo.display().to_string();
    let command = Command::new(vec![
        py_server("git", "mcp-server-git"),
        "--repository".into(),
        repo_path.clone(),
    ]);
    let mut b = Bed::start("mcp-server-git", era, era, Serve::stdio(command)).await;
    b.common(&["git_status", "git_log", "git_diff_unstaged"])
        .await;
    let r = b
        .call("git_status", "git_status", json!({"repo_path": repo_path}))
        .await;
    assert!(ok(&r).contains("nowy-plik.md"), "{r}");
    let r = b
        .call(
            "git_log",
            "git_log",
            json!({"repo_path": repo_path, "max_count": 5}),
        )
        .await;
    assert!(ok(&r).contains("Pierwszy commit: żółw"), "{r}");
    let r = b
        .call(
            "git_diff_unstaged",
            "git_diff_unstaged",
            json!({"repo_path": repo_path}),
        )
        .await;
    assert!(ok(&r).contains("+druga linia"), "{r}");
    b.call(
        "git_branch",
        "git_branch",
        json!({"repo_path": repo_path, "branch_type": "local"}),
    )
    .await;
    // Errors.
    let r = b
        .call(
            "a repository outside the allowed one",
            "git_status",
            json!({"repo_path": dir.path().display().to_string()}),
        )
        .await;
    assert!(
        tool_error(&r).contains("outside the allowed repository"),
        "{r}"
    );
    let r = b
        .call(
            "bad arguments",
            "git_log",
            json!({"repo_path": repo_path, "max_count": "dużo"}),
        )
        .await;
    tool_error(&r);
    let r = b.call("missing arguments", "git_status", json!({})).await;
    tool_error(&r);
    b.finish().await;
}

#[tokio::test]
async fn mcp_server_git_2025() {
    git_server(Era::Legacy).await;
}

#[tokio::test]
async fn mcp_server_git_2026() {
    git_server(Era::Modern).await;
}

// ---------------------------------------------------------------------------
// mcp-server-time
// ---------------------------------------------------------------------------

/// The current time differs between two calls: the `datetime` of a
/// get_current_time result is replaced (in `structuredContent` and in the text
/// that repeats it) once checked to be a date and time.
fn now_removed(msg: &mut Value) {
    let Some(dt) = msg["result"]["structuredContent"]["datetime"]
        .as_str()
        .map(str::to_string)
    else {
        return;
    };
    assert!(
        dt.len() >= 19 && dt.as_bytes()[10] == b'T',
        "a datetime: {dt}"
    );
    msg["result"]["structuredContent"]["datetime"] = json!("<now>");
    if let Some(t) = msg["result"]["content"][0]["text"].as_str() {
        msg["result"]["content"][0]["text"] = json!(t.replace(&dt, "<now>"));
    }
}

async fn time_server(era: Era) {
    let command = Command::new(vec![
        py_server("time", "mcp-server-time"),
        "--local-timezone".into(),
        "Europe/Warsaw".into(),
    ]);
    let mut b = Bed::start("mcp-server-time", era, era, Serve::stdio(command)).await;
    b.common(&["get_current_time", "convert_time"]).await;
    let r = b
        .step_with(
            "get_current_time",
            "tools/call",
            json!({"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}),
            now_removed,
        )
        .await;
    assert!(ok(&r).contains("+09:00"), "{r}");
    let r = b
        .call(
            "convert_time",
            "convert_time",
            json!({"source_timezone": "Europe/Warsaw", "time": "14:30",
                   "target_timezone": "America/New_York"}),
        )
        .await;
    assert!(ok(&r).contains("America/New_York"), "{r}");
    // Errors.
    let r = b
        .call(
            "an unknown timezone",
            "get_current_time",
            json!({"timezone": "Mars/Olympus_Mons"}),
        )
        .await;
    assert!(tool_error(&r).contains("Invalid timezone"), "{r}");
    let r = b
        .call(
            "a time that is not HH:MM",
            "convert_time",
            json!({"source_timezone": "Europe/Warsaw", "time": "25:99",
                   "target_timezone": "Asia/Tokyo"}),
        )
        .await;
    tool_error(&r);
    let r = b
        .call("missing arguments", "get_current_time", json!({}))
        .await;
    tool_error(&r);
    b.finish().await;
}

#[tokio::test]
async fn mcp_server_time_2025() {
    time_server(Era::Legacy).await;
}

#[tokio::test]
async fn mcp_server_time_2026() {
    time_server(Era::Modern).await;
}

// ---------------------------------------------------------------------------
// mcp-server-fetch
// ---------------------------------------------------------------------------

const PAGE: &str = "<html><head><title>Zażółć</title></head><body>\
<h1>Strona testowa</h1><p>Gęślą <b>jaźń</b> — fetched from 127.0.0.1.</p></body></html>";

/// An HTTP server on 127.0.0.1 with one page, `/strona.html`; anything else
/// (robots.txt too) is 404. Stops when the test's runtime ends.
async fn page_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf);
                let path = head.split_whitespace().nth(1).unwrap_or("/");
                let (status, body, kind) = if path == "/strona.html" {
                    ("200 OK", PAGE, "text/html; charset=utf-8")
                } else {
                    ("404 Not Found", "not found", "text/plain")
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(resp.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

async fn fetch_server(era: Era) {
    // readabilipy runs `npm install` at the first fetch when its JavaScript side is
    // missing: scripts/install-peers-python installs it, so none happens here.
    let exe = py_server("fetch", "mcp-server-fetch");
    let venv = tools_dir().join("py-fetch/lib");
    let js = std::fs::read_dir(&venv)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| {
            e.path()
                .join("site-packages/readabilipy/javascript/node_modules")
        })
        .find(|p| p.join(".tasklift-installed-lock.json").is_file());
    assert!(
        js.is_some(),
        "readabilipy's JavaScript dependencies are not installed in {}: {INSTALL}",
        venv.display()
    );
    let base = page_server().await;
    let page = format!("{base}/strona.html");
    // The page is on 127.0.0.1: the server refuses private addresses unless told.
    let command = Command::new(vec![
        exe,
        "--ignore-robots-txt".into(),
        "--allow-private-ips".into(),
    ]);
    let mut b = Bed::start("mcp-server-fetch", era, era, Serve::stdio(command)).await;
    b.common(&["fetch"]).await;
    let r = b.call("fetch a page", "fetch", json!({"url": page})).await;
    assert!(ok(&r).contains("Strona testowa"), "{r}");
    assert!(ok(&r).contains("Gęślą **jaźń**"), "{r}");
    let r = b
        .call("fetch it raw", "fetch", json!({"url": page, "raw": true}))
        .await;
    assert!(ok(&r).contains("<title>Zażółć</title>"), "{r}");
    let r = b
        .call(
            "fetch a part, raw",
            "fetch",
            json!({"url": page, "raw": true, "max_length": 12, "start_index": 3}),
        )
        .await;
    assert!(ok(&r).contains("start_index of 15"), "{r}");
    let r = b
        .step(
            "the fetch prompt",
            "prompts/get",
            json!({"name": "fetch", "arguments": {"url": page}}),
        )
        .await;
    assert!(r["result"]["messages"].is_array(), "{r}");
    // Errors.
    let r = b
        .call(
            "a page that is not there",
            "fetch",
            json!({"url": format!("{base}/brak.html")}),
        )
        .await;
    assert!(tool_error(&r).contains("404"), "{r}");
    let r = b
        .call("not a URL", "fetch", json!({"url": "nie adres"}))
        .await;
    tool_error(&r);
    let r = b
        .call(
            "a length out of range",
            "fetch",
            json!({"url": page, "max_length": 0}),
        )
        .await;
    tool_error(&r);
    b.finish().await;
}

#[tokio::test]
async fn mcp_server_fetch_2025() {
    fetch_server(Era::Legacy).await;
}

#[tokio::test]
async fn mcp_server_fetch_2026() {
    fetch_server(Era::Modern).await;
}

// ---------------------------------------------------------------------------
// mcp-server-sqlite
// ---------------------------------------------------------------------------

/// Each child has a database of its own; it speaks only 2025-11-25 (mcp 1.30).
async fn sqlite_server(era: Era) {
    let dir = tempfile::tempdir().unwrap();
    let exe = py_server("sqlite", "mcp-server-sqlite");
    let db = |name: &str| {
        Command::new(vec![
            exe.clone(),
            "--db-path".into(),
            dir.path().join(name).display().to_string(),
        ])
    };
    let serve = Serve::Stdio {
        direct: db("direct.db"),
        through: db("through.db"),
    };
    let mut b = Bed::start("mcp-server-sqlite", era, Era::Legacy, serve).await;
    b.common(&["read_query", "write_query", "create_table"])
        .await;
    let r = b
        .call(
            "create a table",
            "create_table",
            json!({"query": "CREATE TABLE notatki (id INTEGER PRIMARY KEY, tekst TEXT)"}),
        )
        .await;
    assert_eq!(ok(&r), "Table created successfully");
    let r = b
        .call(
            "insert",
            "write_query",
            json!({"query": "INSERT INTO notatki (tekst) VALUES ('zażółć 🌸'), ('jaźń')"}),
        )
        .await;
    assert!(ok(&r).contains("'affected_rows': 2"), "{r}");
    let r = b
        .call(
            "read_query",
            "read_query",
            json!({"query": "SELECT tekst FROM notatki ORDER BY id"}),
        )
        .await;
    assert!(ok(&r).contains("zażółć 🌸"), "{r}");
    b.call("list_tables", "list_tables", json!({})).await;
    b.call(
        "describe_table",
        "describe_table",
        json!({"table_name": "notatki"}),
    )
    .await;
    b.call(
        "append_insight",
        "append_insight",
        json!({"insight": "Żółwie są powolne"}),
    )
    .await;
    let r = b
        .step(
            "read the memo resource",
            "resources/read",
            json!({"uri": "memo://insights"}),
        )
        .await;
    assert!(
        r["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Żółwie"),
        "{r}"
    );
    b.step(
        "the demo prompt",
        "prompts/get",
        json!({"name": "mcp-demo", "arguments": {"topic": "żółwie"}}),
    )
    .await;
    // Errors (this server answers most of them as text, without isError).
    let r = b
        .call(
            "a query on a missing table",
            "read_query",
            json!({"query": "SELECT * FROM brak"}),
        )
        .await;
    assert!(text(&r).contains("no such table"), "{r}");
    let r = b
        .call(
            "a write through read_query",
            "read_query",
            json!({"query": "DELETE FROM notatki"}),
        )
        .await;
    assert!(text(&r).contains("Only SELECT"), "{r}");
    let r = b.call("missing arguments", "read_query", json!({})).await;
    tool_error(&r);
    b.finish().await;
}

#[tokio::test]
async fn mcp_server_sqlite_2025() {
    sqlite_server(Era::Legacy).await;
}

#[tokio::test]
async fn mcp_server_sqlite_2026() {
    sqlite_server(Era::Modern).await;
}

// ---------------------------------------------------------------------------
// excel-mcp-server, over its own Streamable HTTP
// ---------------------------------------------------------------------------

/// `excel-mcp-server streamable-http` on a free port of 127.0.0.1, workbooks
/// allowed in `dir`; killed when dropped.
struct ExcelServer {
    _child: tokio::process::Child,
    url: String,
}

impl ExcelServer {
    async fn start(dir: &Path) -> Self {
        let exe = py_server("excel", "excel-mcp-server");
        let log = dir.join("server.log");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let allowed = dir.join("skoroszyty");
        std::fs::create_dir_all(&allowed).unwrap();
        let mut child = tokio::process::Command::new(&exe)
            .args(["streamable-http", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .arg("--allow-dir")
            .arg(&allowed)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {exe}: {e}"));
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        let deadline = tokio::time::Instant::now() + GUARD;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("excel-mcp-server exited ({status}):\n{}", read());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "excel-mcp-server did not listen on {port} in {GUARD:?}:\n{}",
                read()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            _child: child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

/// One server for both sides: each workbook is created with `overwrite`, so both
/// sides' writes leave the same file.
async fn excel(era: Era) {
    let dir = tempfile::tempdir().unwrap();
    let server = ExcelServer::start(dir.path()).await;
    let mut b = Bed::start(
        "excel-mcp-server",
        era,
        era,
        Serve::Http(server.url.clone()),
    )
    .await;
    b.common(&["create_workbook", "write_range", "read_range"])
        .await;
    let book = "raport-żółw.xlsx";
    let r = b
        .call(
            "create a workbook",
            "create_workbook",
            json!({"path": book, "sheets": ["Arkusz ☕"], "overwrite": true}),
        )
        .await;
    assert!(ok(&r).contains(book), "{r}");
    let r = b
        .call(
            "write a range",
            "write_range",
            json!({"path": book, "sheet": "Arkusz ☕", "at": "A1",
                   "rows": [["Zażółć", 1], ["jaźń", 2.5], ["=B1+B2", null]]}),
        )
        .await;
    assert!(ok(&r).contains("cells_written"), "{r}");
    let r = b
        .call(
            "read it",
            "read_range",
            json!({"path": book, "sheet": "Arkusz ☕", "range": "A1:B3"}),
        )
        .await;
    assert!(ok(&r).contains("jaźń"), "{r}");
    b.call(
        "describe_workbook",
        "describe_workbook",
        json!({"path": book}),
    )
    .await;
    b.call("list_workbooks", "list_workbooks", json!({})).await;
    // Errors.
    let r = b
        .call(
            "a path outside the allowed directory",
            "create_workbook",
            json!({"path": "/tmp/tasklift-registry-outside.xlsx"}),
        )
        .await;
    assert!(tool_error(&r).contains("outside the allowed"), "{r}");
    let r = b
        .call(
            "bad arguments",
            "write_range",
            json!({"path": book, "sheet": "Arkusz ☕", "at": "A1", "rows": "nie lista"}),
        )
        .await;
    tool_error(&r);
    let r = b
        .call("missing arguments", "read_range", json!({"path": book}))
        .await;
    tool_error(&r);
    let r = b
        .call(
            "a workbook that exists",
            "create_workbook",
            json!({"path": book}),
        )
        .await;
    assert!(tool_error(&r).contains("already exists"), "{r}");
    // A JSON-RPC error from the server: -32602 (HTTP 400 in 2026-07-28).
    let r = b
        .step(
            "an unknown resource",
            "resources/read",
            json!({"uri": "file:///brak.xlsx"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    b.finish().await;
}

#[tokio::test]
async fn excel_mcp_server_2025() {
    excel(Era::Legacy).await;
}

#[tokio::test]
async fn excel_mcp_server_2026() {
    excel(Era::Modern).await;
}
