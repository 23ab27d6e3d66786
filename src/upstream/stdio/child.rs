//! A child's life in its slot: spawn it, detect its era and learn its
//! capabilities (handshake), publish it as ready, fail its calls when it exits,
//! restart it with backoff, and stop it at shutdown (closed stdin, SIGTERM, SIGKILL).

use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::conn::write_lines;
use super::reader::read_lines;
use super::{Conn, Pool, Slot};
use crate::config::EraSetting;
use crate::upstream::{modern_meta, CallEvent, Era};
use tasklift_protocol::jsonrpc::{RpcError, UPSTREAM_ERROR};
use tasklift_protocol::mcp::{self, LEGACY_VERSIONS};

/// A child that answered the handshake and ran this long since is healthy: the
/// crash count clears, so readiness reflects the child that serves now.
const SETTLE: Duration = Duration::from_secs(3);
/// Longest wait between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a child serving one caller who has roots gets, once initialized, to
/// ask for them before its first call is written.
const GREETING: Duration = Duration::from_millis(500);
/// How long a caller's child waits, before its `initialize`, for a request of
/// the caller's saying whether it has roots (the question that started the pool
/// may carry no capabilities; the call right behind it does).
const DECIDE_ROOTS: Duration = Duration::from_secs(1);
/// How long the legacy handshake may take (npx may first download the server).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

impl Pool {
    /// Start the next slot's supervisor, if the pool has room: its index, or `None`
    /// when the pool is full.
    pub(super) fn grow(self: &Arc<Self>) -> Option<usize> {
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
            let exit = self.run_child(&slot, &mut stop).await;
            slot.conn.send_replace(None);
            let stopping = *stop.borrow();
            {
                let mut h = slot.health.lock().expect("health");
                h.last_exit = Some(exit.clone());
                h.restarts += 1;
                // A child that settled ran healthy: this exit is the first of a
                // new count, and the next start is quick again.
                if std::mem::take(&mut h.settled) {
                    h.failures = 1;
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
        // A caller's own children: `{scope}` names the caller (a file of its own
        // for a server that keeps its state in one).
        let fill = |s: &str| match self.scope_id() {
            Some(id) => s.replace("{scope}", id),
            None => s.to_string(),
        };
        let program = &fill(&self.stdio.command[0]);
        let mut cmd = if setpriv_available() {
            let mut c = Command::new("setpriv");
            c.args(["--pdeathsig", "KILL", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        cmd.args(self.stdio.command[1..].iter().map(|a| fill(a)))
            .envs(self.stdio.env.iter().map(|(k, v)| (k, fill(v))))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(id) = self.scope_id() {
            cmd.env("TASKLIFT_SCOPE", id);
        }
        if let Some(d) = &self.stdio.cwd {
            cmd.current_dir(fill(&d.to_string_lossy()));
        }
        cmd.spawn()
    }

    /// Spawn a child, handshake, serve it until it exits or shutdown; returns how it ended.
    async fn run_child(&self, slot: &Arc<Slot>, stop: &mut watch::Receiver<bool>) -> String {
        let mut c = match self.spawn() {
            Ok(child) => self.start_io(slot, child),
            Err(e) => return format!("could not start {:?}: {e}", self.stdio.command[0]),
        };
        let handshake = tokio::select! {
            r = self.handshake(&c.conn) => Some(r),
            status = c.child.wait() => return c.exited_starting(status).await,
            _ = stop.changed() => None,
        };
        let exit = match handshake {
            None => {
                c.stop(self.stdio.shutdown_grace).await;
                "stopped".to_string()
            }
            Some(Err(e)) => {
                tracing::warn!(upstream = %self.name(), process = slot.index, error = %e, "handshake failed");
                c.stop(self.stdio.shutdown_grace).await;
                format!("handshake failed: {e}")
            }
            Some(Ok((era, info))) => {
                self.publish(slot, &c, era, info);
                self.serve(slot, &mut c, stop).await
            }
        };
        self.wind_down(slot, c, &exit).await;
        exit
    }

    /// Connect the child's stdin, stdout and stderr to tasklift.
    fn start_io(&self, slot: &Arc<Slot>, mut child: Child) -> Started {
        let name = self.name().to_string();
        let pid = child.id();
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (in_tx, in_rx) = mpsc::channel(256);
        let conn = Arc::new(Conn::new(in_tx));
        let writer = tokio::spawn(write_lines(stdin, in_rx, conn.clone()));
        let quiet = QuietStart::new();
        let stderr = tokio::spawn(log_stderr(
            stderr,
            slot.clone(),
            name.clone(),
            quiet.clone(),
        ));
        let c2 = conn.clone();
        let reader = tokio::spawn(async move { read_lines(stdout, c2, &name).await });
        Started {
            child,
            pid,
            conn,
            writer,
            reader,
            stderr,
            quiet,
        }
    }

    /// The handshake succeeded: the child serves calls from now on.
    fn publish(&self, slot: &Slot, c: &Started, era: Era, info: Value) {
        c.quiet.end_soon(self.name().to_string(), slot.index);
        let _ = c.conn.era.set(era.clone());
        let _ = c.conn.info.set(info);
        tracing::info!(upstream = %self.name(), process = slot.index, pid = c.pid.unwrap_or(0), ?era,
            scope = self.scope_id().unwrap_or("shared"), "child process ready");
        slot.conn.send_replace(Some(c.conn.clone()));
    }

    /// Serve the ready child until it exits or shutdown; returns how it ended.
    async fn serve(
        &self,
        slot: &Slot,
        c: &mut Started,
        stop: &mut watch::Receiver<bool>,
    ) -> String {
        let settle = tokio::time::sleep(SETTLE);
        tokio::pin!(settle);
        let mut settled = false;
        loop {
            tokio::select! {
                status = c.child.wait() => return describe(status),
                _ = stop.changed() => {
                    slot.conn.send_replace(None);
                    c.stop(self.stdio.shutdown_grace).await;
                    return "stopped".to_string();
                }
                _ = &mut settle, if !settled => {
                    settled = true;
                    self.mark_settled(slot);
                }
            }
        }
    }

    /// The child has served for [`SETTLE`]: its crash count clears.
    fn mark_settled(&self, slot: &Slot) {
        let mut h = slot.health.lock().expect("health");
        h.settled = true;
        if h.failures > 0 {
            tracing::info!(upstream = %self.name(), process = slot.index, after = ?SETTLE,
                "the restarted child is serving; its crash count is cleared");
        }
        h.failures = 0;
    }

    /// The child is gone: unpublish it, let its output drain, and fail the calls
    /// it never answered.
    async fn wind_down(&self, slot: &Slot, c: Started, exit: &str) {
        slot.conn.send_replace(None);
        c.conn.closed.store(true, Ordering::Relaxed);
        let _ = tokio::time::timeout(Duration::from_secs(1), c.reader).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), c.stderr).await;
        c.writer.abort();
        let err = RpcError::new(
            UPSTREAM_ERROR,
            format!(
                "upstream {} exited ({exit}) while the call was running{}",
                self.name(),
                last_line(slot)
            ),
        );
        fail_pending(&c.conn, &err);
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
                if let Ok((era, _)) = &settled {
                    self.detected.send_replace(Some(era.clone()));
                }
                return settled;
            }
        }
        self.detected.send_replace(Some(Era::Legacy));
        if let Some(o) = &self.owner {
            let roots = o.has_roots(DECIDE_ROOTS).await;
            conn.parks_roots.store(roots, Ordering::Relaxed);
        }
        let init = conn
            .ask(
                mcp::method::INITIALIZE,
                json!({
                    "protocolVersion": LEGACY_VERSIONS[0],
                    // What tasklift bridges, as on HTTP: each call's caller decides
                    // what it is actually asked (a caller that cannot answer gets
                    // an error for it, not a question meant for someone else).
                    "capabilities": self.client_capabilities(),
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
        if self.claims_roots() {
            // A server that uses roots asks for them as soon as it is initialized
            // (the filesystem server narrows its directories to them): let it ask
            // before the first call is written, so that call carries the question
            // to the client and runs with the answer, as it would directly.
            let until = tokio::time::Instant::now() + GREETING;
            while !conn.has_parked() && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Ok((Era::Legacy, init))
    }

    /// What tasklift tells a legacy child it can do for it: elicitation and
    /// sampling (each call's caller is asked, or the child gets an error), and
    /// roots only when the child serves one caller who has them. A shared
    /// child's `roots/list` could not be put to any one caller, and a server keeps
    /// the roots it is given for every later call, whoever makes it.
    fn client_capabilities(&self) -> Value {
        if self.claims_roots() {
            json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}})
        } else {
            json!({"elicitation": {}, "sampling": {}})
        }
    }
}

/// A spawned child and the tasks that carry its stdin, stdout and stderr.
struct Started {
    child: Child,
    pid: Option<u32>,
    conn: Arc<Conn>,
    /// Aborting the writer drops the child's stdin: that is how it is told to stop.
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
    stderr: JoinHandle<()>,
    quiet: QuietStart,
}

impl Started {
    /// The child exited before the handshake was over; returns how it ended.
    async fn exited_starting(self, status: std::io::Result<ExitStatus>) -> String {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.stderr).await;
        // The last stderr line is added by whoever reports this (the restart
        // warning, the crash-loop error), so it is not repeated here.
        format!("exited during start-up ({})", describe(status))
    }

    /// Close the child's stdin and make sure it exits.
    async fn stop(&mut self, grace: Duration) {
        self.writer.abort();
        escalate(&mut self.child, self.pid, grace).await;
    }
}

/// Until the handshake is over, the child's stderr is logged at debug: a
/// legacy SDK server answers the `server/discover` probe with pages of
/// validation errors, which say nothing about its health. The last line is
/// still kept for the error a failed start reports.
#[derive(Clone)]
struct QuietStart {
    starting: Arc<AtomicBool>,
    /// Lines logged at debug so far.
    lines: Arc<AtomicUsize>,
}

impl QuietStart {
    fn new() -> Self {
        QuietStart {
            starting: Arc::new(AtomicBool::new(true)),
            lines: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Lines still in flight from the probe may arrive just after the handshake;
    /// a moment later the child's stderr is its own again.
    fn end_soon(&self, name: String, index: usize) {
        let quiet = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            quiet.starting.store(false, Ordering::Relaxed);
            let n = quiet.lines.load(Ordering::Relaxed);
            if n > 0 {
                tracing::info!(upstream = %name, process = index, lines = n,
                    "the child wrote to stderr while tasklift detected its protocol era; those lines are logged at debug level");
            }
        });
    }
}

/// Log the child's stderr, keeping its last line for the errors that report an exit.
async fn log_stderr(stderr: ChildStderr, slot: Arc<Slot>, name: String, quiet: QuietStart) {
    let index = slot.index;
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if quiet.starting.load(Ordering::Relaxed) {
            quiet.lines.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(upstream = %name, process = index, "stderr: {line}");
        } else {
            tracing::info!(upstream = %name, process = index, "stderr: {line}");
        }
        slot.health.lock().expect("health").last_stderr = Some(line);
    }
}

/// Fail every call still waiting for the child's answer.
fn fail_pending(conn: &Conn, err: &RpcError) {
    let ids: Vec<u64> = conn.pending.iter().map(|e| *e.key()).collect();
    for id in ids {
        conn.owners.remove(&id);
        conn.client_tokens.remove(&id);
        conn.task_calls.remove(&id);
        if let Some((_, (tx, _))) = conn.pending.remove(&id) {
            let _ = tx.try_send(CallEvent::Done(Err(err.clone())));
        }
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
