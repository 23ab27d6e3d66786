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
//! This file holds the pool's state and the `Upstream` impl; each concern is a
//! file of its own: `child.rs` (a child's life: spawn, handshake, restart,
//! stop), `pool.rs` (which ready child takes a call), `conn.rs` (a live child's
//! calls in flight and the writer of its stdin), `reader.rs` (its stdout, routed).

mod child;
mod conn;
mod pool;
mod reader;
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
    wire_message, CallContext, CallEvent, Canceller, Era, Listening, Upstream, UpstreamCall,
    UpstreamError, UpstreamFuture,
};
use crate::config::{StdioConfig, Transport, UpstreamConfig};
use tasklift_protocol::jsonrpc::{Outcome, Request};
use tasklift_protocol::mcp;

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
            match home {
                Some(conn) => send::to_home(&self.inner, req, &caller, task, conn).await,
                None => send::to_pool(&self.inner, req, caller, asks, task).await,
            }
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
