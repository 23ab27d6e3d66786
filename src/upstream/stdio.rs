//! stdio upstreams: MCP servers run as child processes, spoken to with
//! newline-delimited JSON-RPC on stdin/stdout.
//!
//! - A pool of `processes` children; each has a supervisor task that spawns it,
//!   detects its era (a `server/discover` probe with a timeout, falling back to
//!   `initialize`), publishes it as ready, and restarts it with backoff when it
//!   exits. Calls in flight when a child exits fail with an error naming the
//!   upstream, the exit status and the child's last stderr line.
//! - Calls from many clients are multiplexed with tasklift's own request ids;
//!   progress notifications are routed back by progress token.
//! - The child's stderr goes to tracing line by line; a stdout line that is not
//!   JSON-RPC is logged and skipped.
//! - Children run in their own process group with `kill_on_drop` and (through
//!   `setpriv --pdeathsig KILL` where it exists) die with tasklift. Shutdown closes
//!   stdin, waits, then SIGTERMs the group, waits, then SIGKILLs it.

use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::router::{self, Channel, Route};
use super::upstream_task_of;
use super::{
    agreed_by_capabilities, cancelled_notification, discover_from_initialize, listen_modern,
    modern_meta, wire_message, CallContext, CallEvent, Canceller, Era, Listening, Upstream,
    UpstreamCall, UpstreamError, UpstreamFuture,
};
use crate::config::{EraSetting, StdioConfig, Transport, UpstreamConfig};
use tasklift_protocol::jsonrpc::{self, Outcome, Request, RpcError, UPSTREAM_ERROR};
use tasklift_protocol::mcp::{self, LEGACY_VERSIONS};

/// After this many exits in a row, each within `HEALTHY_UPTIME` of its start, the
/// upstream is reported unready and calls fail at once.
const CRASH_LOOP_AFTER: u32 = 3;
/// A child that ran this long is considered healthy again.
const HEALTHY_UPTIME: Duration = Duration::from_secs(30);
/// Longest wait between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a call waits for a child to become ready.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How long the legacy handshake may take (npx may first download the server).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// A stdio upstream: a supervised pool of child processes.
pub struct StdioUpstream {
    inner: Arc<Pool>,
}

struct Pool {
    /// Upstream configuration.
    cfg: UpstreamConfig,
    /// Process settings.
    stdio: StdioConfig,
    /// One slot per child process.
    slots: Vec<Arc<Slot>>,
    /// Set at shutdown: supervisors stop restarting and stop their children.
    shutdown: watch::Sender<bool>,
    /// Supervisor tasks, joined at shutdown.
    supervisors: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// How many slots have been started (the pool grows with `isolate_input`).
    started: AtomicUsize,
    /// Held while an isolated call chooses its child and claims it.
    choosing: Mutex<()>,
}

/// One child process position in the pool.
struct Slot {
    /// Position (for logs).
    index: usize,
    /// The running child's connection, `None` while (re)starting.
    conn: watch::Sender<Option<Arc<Conn>>>,
    /// Exit history, for readiness and error messages.
    health: Mutex<Health>,
}

#[derive(Default, Clone)]
struct Health {
    /// Exits in a row without a healthy run.
    failures: u32,
    /// How the last child ended.
    last_exit: Option<String>,
    /// The last line the child wrote to stderr.
    last_stderr: Option<String>,
    /// Restarts so far.
    restarts: u64,
}

/// A live child: its stdin writer and the calls waiting for answers.
struct Conn {
    /// The era detected for this process (set by the handshake).
    era: std::sync::OnceLock<Era>,
    /// Its `server/discover` result (modern) or `initialize` result (legacy).
    info: std::sync::OnceLock<Value>,
    /// Lines to write to stdin.
    stdin: mpsc::Sender<String>,
    /// Calls in flight by upstream id, with their progress token.
    pending: DashMap<u64, (mpsc::Sender<CallEvent>, Option<String>)>,
    /// Whose call each pending one is (log lines are only relayed within one caller).
    owners: DashMap<u64, String>,
    /// The pending calls that may cause a request to the client (see `may_ask`).
    askers: DashMap<u64, ()>,
    /// Progress token -> upstream id. The child sees tasklift's own token for each
    /// call (`tasklift-ID`), never a client's: two callers may well both use `1`.
    tokens: DashMap<String, u64>,
    /// The client's own progress token of each call that has one, restored on the
    /// progress relayed to it.
    client_tokens: DashMap<u64, Value>,
    /// The 2025-11-25 tasks this child created (a `CreateTaskResult` answered a
    /// call): their `tasks/*` requests must come back to this child.
    tasks: DashMap<String, String>,
    /// Pending `tasks/*` calls by upstream id, with the task they are about and
    /// whether their answer ends tasklift's interest in it (`tasks/result`,
    /// `tasks/cancel`): a request whose `related-task` names that task belongs to
    /// that call, and only to it.
    task_calls: DashMap<u64, (String, bool)>,
    /// Upstream-side ids.
    next_id: AtomicU64,
    /// Set when the child exits.
    closed: AtomicBool,
    /// Notifications not tied to a call (list changes, resource updates).
    changes: tokio::sync::broadcast::Sender<Value>,
}

impl Conn {
    /// The era the handshake found (legacy until it has run).
    fn era(&self) -> &Era {
        self.era.get().unwrap_or(&Era::Legacy)
    }

    fn new(stdin: mpsc::Sender<String>) -> Self {
        Self {
            era: std::sync::OnceLock::new(),
            info: std::sync::OnceLock::new(),
            stdin,
            pending: DashMap::new(),
            owners: DashMap::new(),
            askers: DashMap::new(),
            tokens: DashMap::new(),
            client_tokens: DashMap::new(),
            tasks: DashMap::new(),
            task_calls: DashMap::new(),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            changes: tokio::sync::broadcast::channel(64).0,
        }
    }

    /// Register a call and write it; events arrive on the returned receiver.
    async fn send(
        &self,
        msg: Value,
        id: u64,
        token: Option<String>,
        owner: &str,
        asks: bool,
    ) -> Result<mpsc::Receiver<CallEvent>, String> {
        let (tx, rx) = mpsc::channel(64);
        self.owners.insert(id, owner.to_string());
        if asks {
            self.askers.insert(id, ());
        }
        if let Some(t) = &token {
            self.tokens.insert(t.clone(), id);
        }
        self.pending.insert(id, (tx, token));
        if self.stdin.send(msg.to_string()).await.is_err() {
            self.forget(id);
            return Err("its stdin is closed".into());
        }
        Ok(rx)
    }

    /// Calls in flight that may ask and follow no upstream task (those are
    /// attributed by `related-task`).
    fn plain_askers(&self) -> usize {
        self.askers
            .iter()
            .filter(|e| !self.task_calls.contains_key(e.key()))
            .count()
    }

    fn forget(&self, id: u64) -> bool {
        self.owners.remove(&id);
        self.askers.remove(&id);
        self.client_tokens.remove(&id);
        self.task_calls.remove(&id);
        match self.pending.remove(&id) {
            Some((_, (_, token))) => {
                if let Some(t) = token {
                    self.tokens.remove(&t);
                }
                true
            }
            None => false,
        }
    }

    /// A request tasklift makes itself (probe, handshake), with a timeout.
    async fn ask(&self, method: &str, params: Value, timeout: Duration) -> Option<Outcome> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut rx = self.send(msg, id, None, "tasklift", false).await.ok()?;
        let r = tokio::time::timeout(timeout, async {
            while let Some(ev) = rx.recv().await {
                if let CallEvent::Done(o) = ev {
                    return Some(o);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        self.forget(id);
        r
    }
}

/// A child's stdout, for the router: it names no call, but every call has a
/// progress token of tasklift's own there (`tasklift-ID`), unique on the child.
impl Channel for Conn {
    type Call = u64;

    fn events(&self, id: u64) -> Option<mpsc::Sender<CallEvent>> {
        self.pending.get(&id).map(|e| e.value().0.clone())
    }

    /// A response ends its call; a `CreateTaskResult` makes this child the task's
    /// home for the caller, and the answer to `tasks/result` or `tasks/cancel` ends that.
    fn answered(&self, id: &Value, outcome: &Outcome) -> Option<mpsc::Sender<CallEvent>> {
        let id = id.as_u64()?;
        let owner = self.owners.remove(&id).map(|(_, o)| o);
        self.askers.remove(&id);
        self.client_tokens.remove(&id);
        if let Some((_, (task, last))) = self.task_calls.remove(&id) {
            if last {
                self.tasks.remove(&task);
            }
        }
        if let (Ok(r), Some(owner)) = (outcome, owner) {
            if let Some(t) = r.pointer("/task/taskId").and_then(Value::as_str) {
                self.tasks.insert(t.to_string(), owner);
            }
        }
        let (_, (tx, token)) = self.pending.remove(&id)?;
        if let Some(t) = token {
            self.tokens.remove(&t);
        }
        Some(tx)
    }

    fn by_token(&self, token: &Value) -> Option<u64> {
        self.tokens.get(&token.to_string()).map(|e| *e.value())
    }

    fn client_token(&self, id: &u64) -> Option<Value> {
        self.client_tokens.get(id).map(|t| t.value().clone())
    }

    /// The most recent call in flight, but only when every call in flight is the
    /// same caller's (otherwise it could be another caller's log, and it is not relayed).
    fn for_log(&self) -> Option<u64> {
        let mut owners = self.owners.iter().map(|e| e.value().clone());
        let first = owners.next();
        if first.is_some() && owners.all(|o| Some(&o) == first.as_ref()) {
            self.pending.iter().map(|e| *e.key()).max()
        } else {
            None
        }
    }

    fn askers(&self) -> Vec<(u64, Option<String>)> {
        self.askers
            .iter()
            .map(|e| (*e.key(), self.task_calls.get(e.key()).map(|t| t.0.clone())))
            .collect()
    }

    fn responder(&self, id: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>> {
        let stdin = self.stdin.clone();
        let reply_id = id.clone();
        Some(Box::new(move |outcome| {
            let _ = stdin.try_send(jsonrpc::response(Some(&reply_id), &outcome).to_string());
        }))
    }
}

impl StdioUpstream {
    /// Start the pool's supervisors. Children are spawned in the background; calls
    /// wait for them to be ready.
    pub fn start(cfg: UpstreamConfig) -> Result<Self, UpstreamError> {
        let Transport::Stdio(stdio) = cfg.transport.clone() else {
            return Err(UpstreamError::Unreachable {
                name: cfg.name.clone(),
                message: "not a stdio upstream".into(),
            });
        };
        let slots = (0..stdio.max_processes.max(stdio.processes))
            .map(|index| {
                Arc::new(Slot {
                    index,
                    conn: watch::channel(None).0,
                    health: Mutex::default(),
                })
            })
            .collect();
        let pool = Arc::new(Pool {
            cfg,
            stdio,
            slots,
            shutdown: watch::channel(false).0,
            supervisors: Mutex::default(),
            started: AtomicUsize::new(0),
            choosing: Mutex::new(()),
        });
        for _ in 0..pool.stdio.processes {
            let _ = pool.grow();
        }
        Ok(Self { inner: pool })
    }
}

impl Pool {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Start the next slot's supervisor, if the pool has room: its index, or `None`
    /// when the pool is full.
    fn grow(self: &Arc<Self>) -> Option<usize> {
        let mut sup = self.supervisors.lock().expect("supervisors");
        let n = self.started.load(Ordering::Relaxed);
        let slot = self.slots.get(n)?;
        if *self.shutdown.borrow() {
            return None;
        }
        self.started.store(n + 1, Ordering::Relaxed);
        if n >= self.stdio.processes {
            tracing::info!(upstream = %self.name(), process = slot.index,
                "every child has a call that may ask for input; starting another (isolate_input)");
        }
        sup.push(tokio::spawn(self.clone().supervise(slot.clone())));
        Some(n)
    }

    /// Keep one child running in `slot` until shutdown.
    async fn supervise(self: Arc<Self>, slot: Arc<Slot>) {
        let mut backoff = Duration::from_millis(100);
        let mut stop = self.shutdown.subscribe();
        loop {
            if *stop.borrow() {
                return;
            }
            let started = tokio::time::Instant::now();
            let exit = self.run_child(&slot, &mut stop).await;
            slot.conn.send_replace(None);
            let stopping = *stop.borrow();
            {
                let mut h = slot.health.lock().expect("health");
                h.last_exit = Some(exit.clone());
                h.restarts += 1;
                if started.elapsed() >= HEALTHY_UPTIME {
                    h.failures = 0;
                    backoff = Duration::from_millis(100);
                } else {
                    h.failures += 1;
                }
                if !stopping {
                    tracing::warn!(upstream = %self.name(), process = slot.index, exit = %exit,
                        last_stderr = h.last_stderr.as_deref().unwrap_or(""), retry_in = ?backoff, "child process ended; restarting");
                }
            }
            if stopping {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn spawn(&self) -> std::io::Result<Child> {
        let program = &self.stdio.command[0];
        let mut cmd = if setpriv_available() {
            let mut c = Command::new("setpriv");
            c.args(["--pdeathsig", "KILL", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        cmd.args(&self.stdio.command[1..])
            .envs(self.stdio.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(d) = &self.stdio.cwd {
            cmd.current_dir(d);
        }
        cmd.spawn()
    }

    /// Spawn a child, handshake, serve it until it exits or shutdown; returns how it ended.
    async fn run_child(&self, slot: &Arc<Slot>, stop: &mut watch::Receiver<bool>) -> String {
        let name = self.name().to_string();
        let mut child = match self.spawn() {
            Ok(c) => c,
            Err(e) => return format!("could not start {:?}: {e}", self.stdio.command[0]),
        };
        let pid = child.id();
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (in_tx, in_rx) = mpsc::channel::<String>(256);
        // Aborting the writer drops the child's stdin: that is how it is told to stop.
        let writer = tokio::spawn(write_lines(stdin, in_rx));
        let conn = Arc::new(Conn::new(in_tx));
        let (slot2, n2, index) = (slot.clone(), name.clone(), slot.index);
        // Until the handshake is over, the child's stderr is logged at debug: a
        // legacy SDK server answers the `server/discover` probe with pages of
        // validation errors, which say nothing about its health. The last line is
        // still kept for the error a failed start reports.
        let starting = Arc::new(AtomicBool::new(true));
        let quiet = Arc::new(AtomicUsize::new(0));
        let (starting2, quiet2) = (starting.clone(), quiet.clone());
        let err_task = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if starting2.load(Ordering::Relaxed) {
                    quiet2.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(upstream = %n2, process = index, "stderr: {line}");
                } else {
                    tracing::info!(upstream = %n2, process = index, "stderr: {line}");
                }
                slot2.health.lock().expect("health").last_stderr = Some(line);
            }
        });
        let (c2, n3) = (conn.clone(), name.clone());
        let reader = tokio::spawn(async move { read_lines(stdout, c2, &n3).await });
        let handshake = tokio::select! {
            r = self.handshake(&conn) => Some(r),
            status = child.wait() => {
                let _ = tokio::time::timeout(Duration::from_secs(1), err_task).await;
                // The last stderr line is added by whoever reports this (the restart
                // warning, the crash-loop error), so it is not repeated here.
                return format!("exited during start-up ({})", describe(status));
            }
            _ = stop.changed() => None,
        };
        let exit = match handshake {
            None => {
                writer.abort();
                escalate(&mut child, pid, self.stdio.shutdown_grace).await;
                "stopped".to_string()
            }
            Some(Err(e)) => {
                tracing::warn!(upstream = %name, process = slot.index, error = %e, "handshake failed");
                writer.abort();
                escalate(&mut child, pid, self.stdio.shutdown_grace).await;
                format!("handshake failed: {e}")
            }
            Some(Ok((era, info))) => {
                // Lines still in flight from the probe may arrive just after this;
                // a moment later the child's stderr is its own again.
                let (n4, index) = (name.clone(), slot.index);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    starting.store(false, Ordering::Relaxed);
                    let n = quiet.load(Ordering::Relaxed);
                    if n > 0 {
                        tracing::info!(upstream = %n4, process = index, lines = n,
                            "the child wrote to stderr while tasklift detected its protocol era; those lines are logged at debug level");
                    }
                });
                let _ = conn.era.set(era.clone());
                let _ = conn.info.set(info);
                tracing::info!(upstream = %name, process = slot.index, pid = pid.unwrap_or(0), ?era, "child process ready");
                slot.conn.send_replace(Some(conn.clone()));
                tokio::select! {
                    status = child.wait() => describe(status),
                    _ = stop.changed() => {
                        slot.conn.send_replace(None);
                        writer.abort();
                        escalate(&mut child, pid, self.stdio.shutdown_grace).await;
                        "stopped".to_string()
                    }
                }
            }
        };
        slot.conn.send_replace(None);
        conn.closed.store(true, Ordering::Relaxed);
        let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), err_task).await;
        writer.abort();
        let err = RpcError::new(
            UPSTREAM_ERROR,
            format!(
                "upstream {name} exited ({exit}) while the call was running{}",
                last_line(slot)
            ),
        );
        let ids: Vec<u64> = conn.pending.iter().map(|e| *e.key()).collect();
        for id in ids {
            conn.owners.remove(&id);
            conn.client_tokens.remove(&id);
            conn.task_calls.remove(&id);
            if let Some((_, (tx, _))) = conn.pending.remove(&id) {
                let _ = tx.try_send(CallEvent::Done(Err(err.clone())));
            }
        }
        exit
    }

    /// `server/discover`, waiting up to `timeout`: `Some` with the era's answer when
    /// it settles the question, `None` when the child may be legacy.
    async fn discover(
        &self,
        conn: &Conn,
        timeout: Duration,
    ) -> Option<Result<(Era, Value), String>> {
        match conn
            .ask(
                mcp::method::DISCOVER,
                json!({"_meta": modern_meta()}),
                timeout,
            )
            .await
        {
            Some(Ok(r)) if r.get("supportedVersions").is_some() => Some(Ok((Era::Modern, r))),
            Some(Err(e)) if mcp::is_modern_error_code(e.code) => Some(Err(format!(
                "the server is modern but refused tasklift's version: {e}"
            ))),
            other if self.cfg.era == EraSetting::Modern => {
                Some(Err(format!("server/discover failed: {other:?}")))
            }
            _ => None,
        }
    }

    /// Detect the era and learn the server's capabilities.
    async fn handshake(&self, conn: &Conn) -> Result<(Era, Value), String> {
        if self.cfg.era != EraSetting::Legacy {
            let timeout = if self.cfg.era == EraSetting::Modern {
                HANDSHAKE_TIMEOUT
            } else {
                self.stdio.probe_timeout
            };
            if let Some(settled) = self.discover(conn, timeout).await {
                return settled;
            }
        }
        let init = conn
            .ask(
                mcp::method::INITIALIZE,
                json!({
                    "protocolVersion": LEGACY_VERSIONS[0],
                    // What tasklift bridges, as on HTTP: each call's caller decides
                    // what it is actually asked (a caller that cannot answer gets
                    // an error for it, not a question meant for someone else).
                    "capabilities": {"elicitation": {}, "sampling": {}, "roots": {}},
                    "clientInfo": {"name": "tasklift", "version": env!("CARGO_PKG_VERSION")},
                }),
                HANDSHAKE_TIMEOUT,
            )
            .await
            .ok_or("no answer to initialize")?;
        let init = match init {
            Ok(init) => init,
            // A modern child that was slower than the probe refuses initialize with
            // a 2026-07-28 error: it is modern after all, so ask it again, patiently.
            Err(e) if mcp::is_modern_error_code(e.code) && self.cfg.era == EraSetting::Auto => {
                tracing::info!(upstream = %self.name(), "the child refused initialize as a 2026-07-28 server; it was slower than probe_timeout, asking server/discover again");
                return self
                    .discover(conn, HANDSHAKE_TIMEOUT)
                    .await
                    .unwrap_or_else(|| {
                        Err("server/discover failed after initialize was refused as modern".into())
                    });
            }
            Err(e) => return Err(format!("initialize failed: {e}")),
        };
        let version = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !LEGACY_VERSIONS.contains(&version) {
            tracing::warn!(upstream = %self.name(), %version, "child chose an older protocol version; continuing");
        }
        let note = json!({"jsonrpc": "2.0", "method": mcp::method::INITIALIZED});
        conn.stdin
            .send(note.to_string())
            .await
            .map_err(|_| "stdin closed")?;
        Ok((Era::Legacy, init))
    }

    /// A ready child with the fewest calls in flight, waiting for one if none is ready.
    /// With `isolate_input`, a call that may ask for input (`asks`) gets a child with
    /// no other such call, growing the pool up to `max_processes` for it; past that
    /// it shares one, and requests the child cannot attribute are refused.
    /// The child comes with the upstream id of the call, already counted among the
    /// child's askers when `asks` (so two calls picking at once never both take the
    /// same idle child).
    async fn pick(self: &Arc<Self>, asks: bool) -> Result<(Arc<Conn>, u64), RpcError> {
        let deadline = tokio::time::Instant::now() + READY_WAIT;
        let isolate = asks && self.stdio.isolate_input;
        let mut grew: Option<usize> = None;
        let claim = |c: &Arc<Conn>| {
            let id = c.next_id.fetch_add(1, Ordering::Relaxed);
            if asks {
                c.askers.insert(id, ());
            }
            (c.clone(), id)
        };
        loop {
            let live: Vec<Arc<Conn>> = self
                .slots
                .iter()
                .filter_map(|s| s.conn.borrow().clone())
                .filter(|c| !c.closed.load(Ordering::Relaxed))
                .collect();
            if isolate {
                let _choosing = self.choosing.lock().expect("choosing lock");
                if let Some(c) = live
                    .iter()
                    .filter(|c| c.plain_askers() == 0)
                    .min_by_key(|c| c.pending.len())
                {
                    return Ok(claim(c));
                }
                // None idle: start a child for this call (again, if another call
                // took the one it started).
                if grew.is_none_or(|i| self.slots[i].conn.borrow().is_some()) {
                    grew = self.grow();
                }
            }
            let best = live
                .iter()
                .min_by_key(|c| (c.plain_askers(), c.pending.len()))
                .cloned();
            if let Some(c) = best {
                // Wait only for the child this call started, while it starts (and
                // has not failed): then it takes that one or any that went idle.
                let waiting = grew.is_some_and(|i| {
                    let slot = &self.slots[i];
                    slot.conn.borrow().is_none()
                        && slot.health.lock().expect("health").failures == 0
                });
                if !isolate || !waiting {
                    return Ok(claim(&c));
                }
            }
            if let Some(e) = self.crash_looping() {
                return Err(RpcError::new(UPSTREAM_ERROR, e));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RpcError::new(
                    UPSTREAM_ERROR,
                    format!(
                        "upstream {} has no running process (still starting after {READY_WAIT:?})",
                        self.name()
                    ),
                ));
            }
            let mut rxs: Vec<_> = self.slots.iter().map(|s| s.conn.subscribe()).collect();
            let any = futures_any(&mut rxs);
            let _ = tokio::time::timeout(Duration::from_millis(200), any).await;
        }
    }

    /// The live child that created upstream task `task` for `owner`, if any.
    fn home_of(&self, task: &str, owner: &str) -> Option<Arc<Conn>> {
        self.started()
            .iter()
            .filter_map(|s| s.conn.borrow().clone())
            .find(|c| {
                !c.closed.load(Ordering::Relaxed)
                    && c.tasks.get(task).is_some_and(|o| o.value() == owner)
            })
    }

    /// The slots whose supervisor runs (the pool grows with `isolate_input`).
    fn started(&self) -> &[Arc<Slot>] {
        let n = self.started.load(Ordering::Relaxed);
        &self.slots[..n.clamp(1, self.slots.len())]
    }

    /// A ready child, as an upstream error when there is none.
    async fn ready(self: &Arc<Self>) -> Result<Arc<Conn>, UpstreamError> {
        self.pick(false)
            .await
            .map(|(c, _)| c)
            .map_err(|e| UpstreamError::Unreachable {
                name: self.name().to_string(),
                message: e.message,
            })
    }

    /// `Some(explanation)` when every child keeps crashing.
    fn crash_looping(&self) -> Option<String> {
        let hs: Vec<Health> = self
            .started()
            .iter()
            .map(|s| s.health.lock().expect("health").clone())
            .collect();
        if hs.iter().all(|h| h.failures >= CRASH_LOOP_AFTER) {
            let h = &hs[0];
            Some(format!(
                "upstream {} keeps crashing: its process exited {} times in a row (last: {}){}",
                self.name(),
                h.failures,
                h.last_exit.as_deref().unwrap_or("unknown"),
                h.last_stderr
                    .as_deref()
                    .map(|l| format!("; last stderr line: {l}"))
                    .unwrap_or_default()
            ))
        } else {
            None
        }
    }
}

/// Resolve when any of the watched slots changes.
async fn futures_any(rxs: &mut [watch::Receiver<Option<Arc<Conn>>>]) {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut tasks = Vec::new();
    for r in rxs.iter() {
        let mut r = r.clone();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let _ = r.changed().await;
            let _ = tx.send(()).await;
        }));
    }
    drop(tx);
    let _ = rx.recv().await;
    for t in tasks {
        t.abort();
    }
}

fn last_line(slot: &Slot) -> String {
    slot.health
        .lock()
        .expect("health")
        .last_stderr
        .as_deref()
        .map(|l| format!("; last stderr line: {l}"))
        .unwrap_or_default()
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("unknown exit status: {e}"),
    }
}

fn setpriv_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cfg!(target_os = "linux")
            && std::process::Command::new("setpriv")
                .arg("--help")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
    })
}

async fn write_lines(mut stdin: tokio::process::ChildStdin, mut rx: mpsc::Receiver<String>) {
    while let Some(line) = rx.recv().await {
        let mut buf = line.into_bytes();
        buf.push(b'\n');
        if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
    // Channel closed: dropping stdin closes the child's input.
}

async fn read_lines(stdout: tokio::process::ChildStdout, conn: Arc<Conn>, name: &str) {
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(upstream = %name, error = %e, "reading the child's stdout failed");
                return;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let Some(msg) = router::parse(&line) else {
            tracing::warn!(upstream = %name, line = %truncate(&line), "skipping a stdout line that is not JSON-RPC");
            continue;
        };
        match router::route(&*conn, msg, name) {
            Route::Call(tx, ev) => {
                let _ = tx.send(ev).await;
            }
            Route::Unrelated(message) => {
                let method = message["method"].as_str().unwrap_or_default();
                tracing::debug!(upstream = %name, %method, "notification not related to a call in flight");
                let _ = conn.changes.send(message);
            }
            Route::Ping(id) => {
                // Liveness, not a question for any client.
                let _ = conn
                    .stdin
                    .send(jsonrpc::response(Some(&id), &Ok(json!({}))).to_string())
                    .await;
            }
            Route::Stray | Route::Refused | Route::Forbidden(_) => {}
        }
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Who a call is for, as far as a child's messages may be relayed: the principal,
/// and a legacy client's own session (two sessions of one principal are two
/// callers, as they are over HTTP).
fn caller_key(ctx: &CallContext) -> String {
    match &ctx.session {
        Some(s) => format!("{} {}", ctx.principal, s.id),
        None => ctx.principal.clone(),
    }
}

/// A call picked for a child but not yet written to it: forgotten if dropped.
struct Unwritten(Option<(Arc<Conn>, u64)>);

impl Drop for Unwritten {
    fn drop(&mut self) {
        if let Some((conn, id)) = self.0.take() {
            conn.forget(id);
        }
    }
}

/// Wait `grace` for the child to exit on closed stdin, then SIGTERM its process
/// group, wait again, then SIGKILL it. Always reaps the child.
async fn escalate(child: &mut Child, pid: Option<u32>, grace: Duration) {
    if tokio::time::timeout(grace, child.wait()).await.is_ok() {
        return;
    }
    if let Some(pid) = pid {
        signal_group(pid, nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
        signal_group(pid, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = child.kill().await;
}

fn signal_group(pid: u32, sig: nix::sys::signal::Signal) {
    let pgid = nix::unistd::Pid::from_raw(pid as i32);
    if let Err(e) = nix::sys::signal::killpg(pgid, sig) {
        tracing::debug!(error = %e, ?sig, "signalling the child's process group failed");
    }
}

impl Upstream for StdioUpstream {
    fn listen<'a>(
        &'a self,
        filter: &'a serde_json::Map<String, Value>,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Listening> {
        Box::pin(async move {
            let conn = self.inner.ready().await?;
            if conn.era() == &Era::Modern {
                return listen_modern(self, filter, req, ctx).await;
            }
            let caps = conn
                .info
                .get()
                .and_then(|i| i.get("capabilities"))
                .cloned()
                .unwrap_or_default();
            let agreed = agreed_by_capabilities(&caps, filter);
            if agreed.is_empty() {
                return Ok(Listening::none());
            }
            let mut changes = conn.changes.subscribe();
            for uri in agreed
                .get("resourceSubscriptions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
            {
                if let Some(Err(e)) = conn
                    .ask(
                        "resources/subscribe",
                        json!({"uri": uri}),
                        Duration::from_secs(10),
                    )
                    .await
                {
                    tracing::warn!(upstream = %self.inner.name(), %uri, error = %e, "resources/subscribe failed");
                }
            }
            let (tx, rx) = mpsc::channel(64);
            let task = tokio::spawn(async move {
                loop {
                    match changes.recv().await {
                        Ok(n) => {
                            if tx.send(n).await.is_err() {
                                return;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return,
                    }
                }
            });
            Ok(Listening {
                agreed,
                events: rx,
                canceller: Canceller::new(task.abort_handle(), None),
            })
        })
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn era<'a>(&'a self, _ctx: &'a CallContext) -> UpstreamFuture<'a, Era> {
        Box::pin(async move {
            let conn = self.inner.ready().await?;
            Ok(conn.era().clone())
        })
    }

    fn known_era(&self) -> Option<Era> {
        // The first live child whose handshake has run.
        self.inner
            .slots
            .iter()
            .find_map(|s| s.conn.borrow().as_ref().and_then(|c| c.era.get().cloned()))
    }

    fn call<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, UpstreamCall> {
        Box::pin(async move {
            let asks = mcp::may_ask(&req.method);
            let task = upstream_task_of(req);
            let caller = caller_key(ctx);
            // A request about an upstream task goes to the child that created it
            // for this caller.
            let home = task.and_then(|t| self.inner.home_of(t, &caller));
            let (conn, id) = match home {
                Some(c) => {
                    let id = c.next_id.fetch_add(1, Ordering::Relaxed);
                    (c, id)
                }
                None => match self.inner.pick(asks).await {
                    Ok(picked) => picked,
                    Err(e) => return Ok(UpstreamCall::failed(e)),
                },
            };
            // Until the call is written and its canceller armed, dropping this
            // future must not leave it counted on the child.
            let mut unwritten = Unwritten(Some((conn.clone(), id)));
            if let Some(t) = task {
                let last = matches!(req.method.as_str(), "tasks/result" | "tasks/cancel");
                conn.task_calls.insert(id, (t.to_string(), last));
            }
            let idv = json!(id);
            // Progress goes under a token of tasklift's, unique on this child.
            let client_token = req.meta().and_then(|m| m.get(mcp::META_PROGRESS_TOKEN));
            let (msg, token) = match client_token {
                Some(t) => {
                    conn.client_tokens.insert(id, t.clone());
                    let mine = json!(format!("tasklift-{id}"));
                    let mut wire = req.clone();
                    mcp::meta_mut(&mut wire.params)
                        .insert(mcp::META_PROGRESS_TOKEN.into(), mine.clone());
                    (
                        wire_message(&wire, conn.era(), Some(&idv)),
                        Some(mine.to_string()),
                    )
                }
                None => (wire_message(req, conn.era(), Some(&idv)), None),
            };
            let events = match conn.send(msg, id, token, &caller, asks).await {
                Ok(rx) => rx,
                Err(why) => {
                    return Ok(UpstreamCall::failed(RpcError::new(
                        UPSTREAM_ERROR,
                        format!("upstream {}: {why}", self.inner.name()),
                    )))
                }
            };
            unwritten.0 = None;
            let on_cancel: Box<dyn FnOnce() + Send> = Box::new(move || {
                if conn.forget(id) {
                    let _ = conn
                        .stdin
                        .try_send(cancelled_notification(&json!(id)).to_string());
                }
            });
            Ok(UpstreamCall {
                events,
                canceller: Canceller::on_cancel(on_cancel),
            })
        })
    }

    fn notify<'a>(&'a self, req: &'a Request, _ctx: &'a CallContext) -> UpstreamFuture<'a, ()> {
        Box::pin(async move {
            let conn = self.inner.ready().await?;
            let msg = wire_message(req, conn.era(), None);
            let _ = conn.stdin.send(msg.to_string()).await;
            Ok(())
        })
    }

    fn discover<'a>(
        &'a self,
        _req: &'a Request,
        _ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Outcome> {
        Box::pin(async move {
            let conn = match self.inner.pick(false).await {
                Ok((c, _)) => c,
                Err(e) => return Ok(Err(e)),
            };
            let info = conn.info.get().cloned().unwrap_or_default();
            Ok(Ok(match conn.era() {
                Era::Modern => info,
                _ => discover_from_initialize(&info),
            }))
        })
    }

    fn close_idle<'a>(
        &'a self,
        _all: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }

    fn shutdown<'a>(
        &'a self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let _ = self.inner.shutdown.send(true);
            let handles = std::mem::take(&mut *self.inner.supervisors.lock().expect("supervisors"));
            for h in handles {
                let _ = h.await;
            }
        })
    }

    fn restarts(&self) -> Option<u64> {
        Some(
            self.inner
                .slots
                .iter()
                .map(|s| s.health.lock().expect("health").restarts)
                .sum(),
        )
    }

    fn health(&self) -> Result<(), String> {
        match self.inner.crash_looping() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
