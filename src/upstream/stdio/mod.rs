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
//!
//! - `scope` decides who shares a pool: every caller (`shared`), or each
//!   principal or legacy session with a pool of its own (`scopes.rs`).
//!
//! This file holds the pool's state and the `Upstream` impl; each concern is a
//! file of its own: `scopes.rs` (whose pool serves a call), `child.rs` (a
//! child's life: spawn, handshake, restart, stop), `pool.rs` (which ready child
//! takes a call), `send.rs` (a call written to it), `conn.rs` (a live child's
//! calls in flight and the writer of its stdin), `reader.rs` (its stdout, routed).

mod child;
mod conn;
mod pool;
mod reader;
mod scopes;
mod send;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::upstream_task_of;
use super::{
    agreed_by_capabilities, cancelled_notification, discover_from_initialize, listen_modern,
    offers_tool_tasks, wire_message, CallContext, CallEvent, Canceller, Era, Listening, Upstream,
    UpstreamCall, UpstreamError, UpstreamFuture,
};
use crate::config::{StdioConfig, Transport, UpstreamConfig};
use tasklift_protocol::jsonrpc::{Outcome, Request, RpcError};
use tasklift_protocol::mcp;

/// A stdio upstream: supervised pools of child processes (one, or one per caller).
pub struct StdioUpstream {
    scopes: Arc<scopes::Scopes>,
}

/// The one caller a pool serves (`scope` other than `shared`).
struct Owner {
    /// Its scope id (`{scope}`, `TASKLIFT_SCOPE`).
    id: String,
    /// It declared `roots`: its children are told the client has roots, and their
    /// `roots/list` goes to it. Unset until a request of the caller's carrying its
    /// capabilities arrives (the era question that may start the pool has none).
    roots: std::sync::OnceLock<bool>,
    /// Signalled when `roots` is set.
    decided: tokio::sync::Notify,
}

impl Owner {
    fn new(id: String, roots: Option<bool>) -> Self {
        let o = Self {
            id,
            roots: std::sync::OnceLock::new(),
            decided: tokio::sync::Notify::new(),
        };
        if let Some(r) = roots {
            o.decide(r);
        }
        o
    }

    /// Settle `roots` (the first answer stands).
    fn decide(&self, roots: bool) {
        if self.roots.set(roots).is_ok() {
            self.decided.notify_waiters();
        }
    }

    /// Whether the caller has roots, waiting up to `limit` for a
    /// request that says; no answer by then is no.
    async fn has_roots(&self, limit: Duration) -> bool {
        let decided = self.decided.notified();
        tokio::pin!(decided);
        decided.as_mut().enable();
        if self.roots.get().is_none() {
            let _ = tokio::time::timeout(limit, decided).await;
        }
        self.decide(false);
        self.roots.get().copied().unwrap_or(false)
    }
}

struct Pool {
    /// The caller it serves, unless shared.
    owner: Option<Owner>,
    /// Upstream configuration.
    cfg: UpstreamConfig,
    /// Process settings.
    stdio: StdioConfig,
    /// One slot per child process.
    slots: Vec<Arc<Slot>>,
    /// Set at shutdown: supervisors stop restarting and stop their children.
    shutdown: watch::Sender<bool>,
    /// The era a child's handshake found, as soon as it is known (before a
    /// legacy child's `initialize`, which may wait for its caller's capabilities).
    detected: watch::Sender<Option<Era>>,
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
    /// The current child has settled (answered a request, or run for
    /// `SETTLE`): its exit starts a new count.
    settled: bool,
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
    /// The child serves one caller who has roots: its `roots/list` with no call
    /// in flight (a server asks at start, and after `roots/list_changed`) waits
    /// here for that caller's next call, instead of being refused.
    parks_roots: AtomicBool,
    /// Such requests, waiting.
    parked: Mutex<Vec<super::ServerRequest>>,
}

impl StdioUpstream {
    /// Start the upstream: with `scope = "shared"` its pool's supervisors start
    /// now; otherwise each caller's start on its first request. Children are
    /// spawned in the background; calls wait for them to be ready.
    pub fn start(cfg: UpstreamConfig) -> Result<Self, UpstreamError> {
        let Transport::Stdio(stdio) = cfg.transport.clone() else {
            return Err(UpstreamError::Unreachable {
                name: cfg.name.clone(),
                message: "not a stdio upstream".into(),
            });
        };
        Ok(Self {
            scopes: scopes::Scopes::start(cfg, stdio),
        })
    }

    /// The pool serving `ctx` (started for it if need be); the error a caller
    /// gets when `max_scopes` refuses it.
    /// A child of the caller's pool that has finished its handshake (what
    /// `discover` and `offers_tool_tasks` read).
    async fn handshaken(&self, req: &Request, ctx: &CallContext) -> Result<Arc<Conn>, RpcError> {
        Ok(self.pool(Some(req), ctx)?.pick(false).await?.0)
    }

    fn pool(&self, req: Option<&Request>, ctx: &CallContext) -> Result<Arc<Pool>, RpcError> {
        let caps = req
            .and_then(|r| r.meta())
            .and_then(|m| m.get(mcp::META_CLIENT_CAPABILITIES));
        self.scopes.pool(ctx, caps)
    }

    /// [`Self::pool`], where an upstream error is wanted.
    fn pool_or_unreachable(
        &self,
        req: Option<&Request>,
        ctx: &CallContext,
    ) -> Result<Arc<Pool>, UpstreamError> {
        self.pool(req, ctx).map_err(|e| UpstreamError::Unreachable {
            name: self.scopes.name().to_string(),
            message: e.message,
        })
    }
}

impl Pool {
    /// A pool of children for `owner` (every caller when `None`), its first
    /// `processes` starting now.
    fn start(cfg: UpstreamConfig, stdio: StdioConfig, owner: Option<Owner>) -> Arc<Self> {
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
            owner,
            cfg,
            stdio,
            slots,
            shutdown: watch::channel(false).0,
            detected: watch::channel(None).0,
            supervisors: Mutex::default(),
            started: AtomicUsize::new(0),
            choosing: Mutex::new(()),
        });
        for _ in 0..pool.stdio.processes {
            let _ = pool.grow();
        }
        pool
    }

    fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The owner's scope id, when the pool is one caller's.
    fn scope_id(&self) -> Option<&str> {
        self.owner.as_ref().map(|o| o.id.as_str())
    }

    /// Its children are told the client has roots (known once a child has been
    /// initialized).
    fn claims_roots(&self) -> bool {
        self.owner
            .as_ref()
            .is_some_and(|o| o.roots.get() == Some(&true))
    }

    /// A call (or an upstream task) is in flight on one of its children.
    fn busy(&self) -> bool {
        self.slots.iter().any(|s| {
            s.conn
                .borrow()
                .as_ref()
                .is_some_and(|c| !c.pending.is_empty() || !c.tasks.is_empty())
        })
    }

    fn restarts(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.health.lock().expect("health").restarts)
            .sum()
    }

    /// Stop its supervisors and children, and wait for them.
    async fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        let handles = std::mem::take(&mut *self.supervisors.lock().expect("supervisors"));
        for h in handles {
            let _ = h.await;
        }
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

impl Upstream for StdioUpstream {
    fn listen<'a>(
        &'a self,
        filter: &'a serde_json::Map<String, Value>,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Listening> {
        Box::pin(async move {
            let pool = self.pool_or_unreachable(Some(req), ctx)?;
            let conn = pool.ready().await?;
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
                    tracing::warn!(upstream = %pool.name(), %uri, error = %e, "resources/subscribe failed");
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
        self.scopes.name()
    }

    fn era<'a>(&'a self, ctx: &'a CallContext) -> UpstreamFuture<'a, Era> {
        Box::pin(async move {
            // Every child runs the same command: any child's era is the answer,
            // without starting one for a caller who has none yet.
            if let Some(p) = self.scopes.existing(ctx) {
                return Ok(p.ready().await?.era().clone());
            }
            if let Some(era) = self.known_era() {
                return Ok(era);
            }
            // The first child: its era is known before a legacy child's
            // initialize, which waits for the capabilities of the caller's
            // request right behind this question.
            let pool = self.pool_or_unreachable(None, ctx)?;
            let mut detected = pool.detected.subscribe();
            let found = match tokio::time::timeout(
                Duration::from_secs(60),
                detected.wait_for(Option::is_some),
            )
            .await
            {
                Ok(Ok(era)) => era.clone(),
                _ => None,
            };
            match found {
                Some(era) => Ok(era),
                None => Ok(pool.ready().await?.era().clone()),
            }
        })
    }

    fn known_era(&self) -> Option<Era> {
        // The era any child's handshake found, now or before.
        self.scopes.learned_era()
    }

    fn call<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, UpstreamCall> {
        Box::pin(async move {
            let pool = match self.pool(Some(req), ctx) {
                Ok(p) => p,
                Err(e) => return Ok(UpstreamCall::failed(e)),
            };
            let asks = mcp::may_ask(&req.method);
            let task = upstream_task_of(req);
            let caller = caller_key(ctx);
            // A request about an upstream task goes to the child that created it
            // for this caller.
            let home = task.and_then(|t| pool.home_of(t, &caller));
            match home {
                Some(conn) => send::to_home(&pool, req, &caller, task, conn).await,
                None => send::to_pool(&pool, req, caller, asks, task).await,
            }
        })
    }

    fn notify<'a>(&'a self, req: &'a Request, ctx: &'a CallContext) -> UpstreamFuture<'a, ()> {
        Box::pin(async move {
            // A caller with no children of its own has nothing to tell them.
            let Some(pool) = self.scopes.existing(ctx) else {
                return Ok(());
            };
            // Only children told the client has roots hear that they changed (a
            // shared child was told nothing of any one caller's roots).
            if req.method == "notifications/roots/list_changed" && !pool.claims_roots() {
                return Ok(());
            }
            let conn = pool.ready().await?;
            let msg = wire_message(req, conn.era(), None);
            let _ = conn.stdin.send(msg.to_string()).await;
            Ok(())
        })
    }

    fn discover<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> UpstreamFuture<'a, Outcome> {
        Box::pin(async move {
            let conn = match self.handshaken(req, ctx).await {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            let info = conn.info.get().cloned().unwrap_or_default();
            Ok(Ok(match conn.era() {
                Era::Modern => info,
                _ => discover_from_initialize(&info),
            }))
        })
    }

    fn offers_tool_tasks<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> super::Plain<'a, bool> {
        // Read from the child's handshake as it is kept (an `initialize` or a
        // discover result: the capabilities sit at the same place in both).
        Box::pin(async move {
            self.handshaken(req, ctx)
                .await
                .is_ok_and(|conn| conn.info.get().is_some_and(offers_tool_tasks))
        })
    }

    fn close_idle<'a>(&'a self, _all: bool) -> super::Plain<'a, ()> {
        Box::pin(async {})
    }

    fn end_session<'a>(&'a self, ctx: &'a CallContext) -> super::Plain<'a, ()> {
        self.scopes.end(ctx);
        Box::pin(async {})
    }

    fn shutdown<'a>(&'a self) -> super::Plain<'a, ()> {
        Box::pin(self.scopes.shutdown())
    }

    fn restarts(&self) -> Option<u64> {
        Some(self.scopes.restarts())
    }

    fn health(&self) -> Result<(), String> {
        match self.scopes.crash_looping() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
