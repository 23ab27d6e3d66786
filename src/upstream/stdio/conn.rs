//! A live child's connection: the calls in flight on it (by tasklift's own ids,
//! with their progress tokens, owners and upstream tasks), and the writer of its
//! stdin.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::Conn;
use crate::upstream::{related_task, CallEvent, Era, ServerRequest};
use tasklift_protocol::jsonrpc::Outcome;

impl Conn {
    /// The era the handshake found (legacy until it has run).
    pub(super) fn era(&self) -> &Era {
        self.era.get().unwrap_or(&Era::Legacy)
    }

    /// A connection writing to `stdin`.
    pub(super) fn new(stdin: mpsc::Sender<String>) -> Self {
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
            parks_roots: AtomicBool::new(false),
            parked: std::sync::Mutex::default(),
        }
    }

    /// Keep a request that no call in flight can answer for the owner's next call
    /// (`Err` gives it back): only `roots/list`, only on a child that serves one
    /// caller who has roots. A server asks it as soon as it is initialized, and
    /// again when told the roots changed, with no call in flight either time.
    pub(super) fn park(&self, req: ServerRequest) -> Result<(), ServerRequest> {
        if self.parks_roots.load(Ordering::Relaxed)
            && req.method == "roots/list"
            && related_task(&req.params).is_none()
        {
            self.parked.lock().expect("parked").push(req);
            Ok(())
        } else {
            Err(req)
        }
    }

    /// The requests waiting for the owner's next call.
    pub(super) fn take_parked(&self) -> Vec<ServerRequest> {
        std::mem::take(&mut *self.parked.lock().expect("parked"))
    }

    /// Whether a request is waiting.
    pub(super) fn has_parked(&self) -> bool {
        !self.parked.lock().expect("parked").is_empty()
    }

    /// Register a call and write it; events arrive on the returned receiver. An
    /// error when its stdin is closed (the child has exited, or is exiting): the
    /// call was never seen, and is forgotten here.
    pub(super) async fn send(
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
    pub(super) fn plain_askers(&self) -> usize {
        self.askers
            .iter()
            .filter(|e| !self.task_calls.contains_key(e.key()))
            .count()
    }

    pub(super) fn forget(&self, id: u64) -> bool {
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
    pub(super) async fn ask(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Option<Outcome> {
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

/// Write lines to the child's stdin until the channel closes or a write fails
/// (the child has exited: a broken pipe). Then `conn` is closed, so no call picks
/// it and a call's send fails at once (it goes to the next child); lines already
/// queued are dropped, and their calls fail when the exit is reaped (see
/// `send.rs` for those that never reached a live child).
pub(super) async fn write_lines(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::Receiver<String>,
    conn: std::sync::Arc<Conn>,
) {
    while let Some(line) = rx.recv().await {
        let mut buf = line.into_bytes();
        buf.push(b'\n');
        if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
            conn.closed.store(true, Ordering::Relaxed);
            rx.close();
            return;
        }
    }
    // Channel closed: dropping stdin closes the child's input.
}
