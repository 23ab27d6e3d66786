//! Legacy client sessions on tasklift's front door (2025-03-26 … 2025-11-25): what a
//! client declared at `initialize`, the server-to-client requests waiting for its
//! answer, and the event logs that let it resume a stream with `Last-Event-ID`.
//!
//! No HTTP here: the rest of `front::legacy` speaks the transport. The engine
//! and upstreams see a session only as the [`ClientPeer`] it hands them
//! ([`ClientSession::peer`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use dashmap::DashMap;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};

mod replay;
mod table;

use crate::store::SessionRecord;
use crate::upstream::ClientPeer;
use replay::StreamLog;
pub use table::{Sessions, TooManySessions};
use tasklift_protocol::jsonrpc::Outcome;

/// How long a request to the client waits for its answer before it fails with an
/// error (so a client that went away cannot keep a call, and its session, busy).
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
/// Events kept per stream for resumption.
const LOG_EVENTS: usize = 512;
/// How long a finished stream can still be resumed.
const KEEP_FINISHED: std::time::Duration = std::time::Duration::from_secs(300);
/// Most finished streams kept per session.
const MAX_FINISHED: usize = 64;
/// The stream number of the session's standalone GET stream.
pub const STANDALONE: u64 = 0;

/// Answers a server-to-client request once the client responds.
pub type Responder = Box<dyn FnOnce(Outcome) + Send>;

/// One legacy client's session.
pub struct ClientSession {
    /// The `Mcp-Session-Id` tasklift issued.
    pub id: String,
    /// The principal that opened it; nobody else may use it.
    pub principal: String,
    /// The negotiated legacy protocol version.
    pub protocol_version: String,
    /// The client's declared capabilities.
    pub capabilities: Value,
    /// The client's `clientInfo`.
    pub client_info: Value,
    /// When it was opened.
    created: Instant,
    /// Milliseconds since `created` of the last request.
    last_seen: AtomicU64,
    /// Open POST calls and GET streams: a session in use is never idle.
    active: AtomicUsize,
    /// The level set with `logging/setLevel`.
    log_level: Mutex<Option<String>>,
    /// URIs the client subscribed to.
    subscriptions: Mutex<BTreeSet<String>>,
    /// Ids for tasklift's requests to the client.
    next_request: AtomicU64,
    /// Server-to-client requests waiting for the client's answer, by JSON id.
    pending: Mutex<HashMap<String, Responder>>,
    /// The client's in-flight requests, by JSON id, for `notifications/cancelled`.
    inflight: DashMap<String, Arc<Notify>>,
    /// Event logs of this session's streams.
    streams: Mutex<HashMap<u64, StreamLog>>,
    /// Stream numbers.
    next_stream: AtomicU64,
    /// Turns true when the session ends: its streams stop and calls are cancelled.
    closed: watch::Sender<bool>,
    /// The task relaying the upstream's change notifications to the GET stream.
    pub(crate) listener: Mutex<Option<tokio::task::AbortHandle>>,
    /// The session as the engine and upstreams see it, built once; it refers back
    /// to the session weakly (the session owns it).
    peer: Arc<ClientPeer>,
    /// How this client's streams poll (2025-11-25 SSE polling).
    polling: Polling,
    /// Tells this process's event ids from those of the process that served the
    /// session before a restart.
    incarnation: String,
    /// When it was opened (Unix ms), kept across restarts.
    created_at_ms: u64,
    /// Whether the store keeps it (saved at initialize, or restored from it).
    kept: std::sync::atomic::AtomicBool,
}

/// SSE polling for 2025-11-25 clients: the `retry` delay of priming events, and how
/// long one connection may read a stream before tasklift closes it (the client
/// resumes with `Last-Event-ID`), so a long call never holds one HTTP response
/// open past a proxy's timeout.
#[derive(Debug, Clone, Copy)]
pub struct Polling {
    /// The `retry` field, in milliseconds.
    pub retry_ms: u64,
    /// Close a connection reading a stream after this long; `None` never.
    pub close_after: Option<std::time::Duration>,
}

impl Default for Polling {
    fn default() -> Self {
        Self {
            retry_ms: 1000,
            close_after: None,
        }
    }
}

impl std::fmt::Debug for ClientSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSession")
            .field("id", &self.id)
            .field("protocol_version", &self.protocol_version)
            .finish()
    }
}

impl ClientSession {
    /// A new session.
    pub fn new(
        principal: String,
        protocol_version: String,
        capabilities: Value,
        client_info: Value,
    ) -> Arc<Self> {
        Self::with_polling(
            principal,
            protocol_version,
            capabilities,
            client_info,
            Polling::default(),
        )
    }

    /// A new session whose streams poll as `polling` says (2025-11-25 clients).
    pub fn with_polling(
        principal: String,
        protocol_version: String,
        capabilities: Value,
        client_info: Value,
        polling: Polling,
    ) -> Arc<Self> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self::open(
            id,
            principal,
            protocol_version,
            capabilities,
            client_info,
            polling,
            wall_ms(),
        )
    }

    /// A session kept in the store, served again (after a restart, or on another
    /// replica) with the id the client knows.
    pub fn restore(rec: SessionRecord, polling: Polling) -> Arc<Self> {
        let s = Self::open(
            rec.id,
            rec.principal,
            rec.protocol_version,
            rec.capabilities,
            rec.client_info,
            polling,
            rec.created_at_ms,
        );
        s.set_kept();
        *s.log_level.lock().expect("lock") = rec.log_level;
        s.subscriptions
            .lock()
            .expect("lock")
            .extend(rec.subscriptions);
        s
    }

    /// What the store keeps of this session, opened at `mount`.
    pub fn record(&self, mount: &str) -> SessionRecord {
        SessionRecord {
            id: self.id.clone(),
            mount: mount.to_string(),
            principal: self.principal.clone(),
            protocol_version: self.protocol_version.clone(),
            capabilities: self.capabilities.clone(),
            client_info: self.client_info.clone(),
            log_level: self.log_level(),
            subscriptions: self.subscriptions(),
            created_at_ms: self.created_at_ms,
            last_seen_ms: wall_ms(),
        }
    }

    /// Whether the store keeps it.
    pub fn kept(&self) -> bool {
        self.kept.load(Ordering::Relaxed)
    }

    /// The store keeps it now.
    pub fn set_kept(&self) {
        self.kept.store(true, Ordering::Relaxed);
    }

    /// When it was last in use (Unix ms; now while a call or stream is open).
    pub fn last_used_ms(&self) -> u64 {
        wall_ms().saturating_sub(self.idle_ms())
    }

    fn open(
        id: String,
        principal: String,
        protocol_version: String,
        capabilities: Value,
        client_info: Value,
        polling: Polling,
        created_at_ms: u64,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me: &Weak<Self>| {
            let me = me.clone();
            let peer = Arc::new(ClientPeer::new(
                id.clone(),
                protocol_version.clone(),
                capabilities.clone(),
                client_info.clone(),
                move |method, params, answer| match me.upgrade() {
                    Some(s) => s.request(method, params, answer, None),
                    // Nothing holds the session any more: nobody could answer.
                    None => {
                        answer(Err(tasklift_protocol::jsonrpc::RpcError::new(
                            tasklift_protocol::jsonrpc::INTERNAL_ERROR,
                            "the client's session has ended",
                        )));
                        Value::Null
                    }
                },
            ));
            Self::build(
                id,
                principal,
                protocol_version,
                capabilities,
                client_info,
                peer,
                polling,
                created_at_ms,
            )
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        id: String,
        principal: String,
        protocol_version: String,
        capabilities: Value,
        client_info: Value,
        peer: Arc<ClientPeer>,
        polling: Polling,
        created_at_ms: u64,
    ) -> Self {
        Self {
            id,
            principal,
            protocol_version,
            capabilities,
            client_info,
            created: Instant::now(),
            last_seen: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            log_level: Mutex::new(None),
            subscriptions: Mutex::new(BTreeSet::new()),
            next_request: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            inflight: DashMap::new(),
            streams: Mutex::new(HashMap::new()),
            next_stream: AtomicU64::new(STANDALONE + 1),
            closed: watch::channel(false).0,
            listener: Mutex::new(None),
            peer,
            polling,
            incarnation: uuid::Uuid::new_v4().simple().to_string()[..8].to_string(),
            created_at_ms,
            kept: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// How this client's streams poll.
    pub fn polling(&self) -> Polling {
        self.polling
    }

    /// Whether the client's revision has SSE polling (priming events, `retry`).
    pub fn polls(&self) -> bool {
        self.protocol_version.as_str() >= "2025-11-25"
    }

    /// Note a request now.
    pub fn touch(&self) {
        self.last_seen
            .store(self.created.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Milliseconds since the last request, or 0 while a call or stream is open.
    pub fn idle_ms(&self) -> u64 {
        if self.active.load(Ordering::Relaxed) > 0 {
            return 0;
        }
        (self.created.elapsed().as_millis() as u64)
            .saturating_sub(self.last_seen.load(Ordering::Relaxed))
    }

    /// Mark a call or stream open until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.active.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// The level from `logging/setLevel`, if any.
    pub fn log_level(&self) -> Option<String> {
        self.log_level.lock().expect("lock").clone()
    }

    /// Set the log level.
    pub fn set_log_level(&self, level: String) {
        *self.log_level.lock().expect("lock") = Some(level);
    }

    /// Add or remove a subscribed URI; true if the set changed.
    pub fn subscribe(&self, uri: &str, on: bool) -> bool {
        let mut s = self.subscriptions.lock().expect("lock");
        if on {
            s.insert(uri.to_string())
        } else {
            s.remove(uri)
        }
    }

    /// The subscribed URIs.
    pub fn subscriptions(&self) -> Vec<String> {
        self.subscriptions
            .lock()
            .expect("lock")
            .iter()
            .cloned()
            .collect()
    }

    /// Whether the client declared a capability (`elicitation`, `sampling`, …).
    pub fn declares(&self, cap: &str) -> bool {
        self.capabilities.get(cap).is_some_and(Value::is_object)
    }

    /// Whether the client declared 2025-11-25 task support for tool calls
    /// (`capabilities.tasks`, or under `experimental`).
    pub fn declares_tasks(&self) -> bool {
        self.capabilities.get("tasks").is_some()
            || self
                .capabilities
                .get("experimental")
                .and_then(|e| e.get("tasks"))
                .is_some()
    }

    /// Turn a server-to-client request into a message for the client, remembering
    /// how to deliver its answer.
    pub fn request(
        self: &Arc<Self>,
        method: &str,
        mut params: Value,
        answer: Responder,
        task: Option<&str>,
    ) -> Value {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        if let (Some(t), Value::Object(p)) = (task, &mut params) {
            let meta = p.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(m) = meta {
                m.insert(
                    "io.modelcontextprotocol/related-task".into(),
                    json!({ "taskId": t }),
                );
            }
        }
        let key = json!(id).to_string();
        self.pending
            .lock()
            .expect("lock")
            .insert(key.clone(), answer);
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(ANSWER_TIMEOUT).await;
            let Some(me) = me.upgrade() else { return };
            let waiting = me.pending.lock().expect("lock").remove(&key);
            if let Some(r) = waiting {
                tracing::info!(session = %me.id, "the client did not answer a request in time");
                r(Err(tasklift_protocol::jsonrpc::RpcError::new(
                    tasklift_protocol::jsonrpc::INTERNAL_ERROR,
                    "the client did not answer in time",
                )));
            }
        });
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// The session as the engine and upstreams see it: who the client is, and a way
    /// to ask it things (through this session while it lives).
    pub fn peer(&self) -> Arc<ClientPeer> {
        self.peer.clone()
    }

    /// The client answered one of tasklift's requests; false if none was waiting.
    pub fn answer(&self, id: &Value, outcome: Outcome) -> bool {
        let waiting = self.pending.lock().expect("lock").remove(&id.to_string());
        match waiting {
            Some(r) => {
                r(outcome);
                true
            }
            None => false,
        }
    }

    /// Register an in-flight client request; `notifications/cancelled` wakes the
    /// returned handle.
    pub fn start_request(&self, id: &Value) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        self.inflight.insert(id.to_string(), n.clone());
        n
    }

    /// The request ended.
    pub fn end_request(&self, id: &Value) {
        self.inflight.remove(&id.to_string());
    }

    /// `notifications/cancelled` for one of the client's requests.
    pub fn cancel_request(&self, id: &Value) -> bool {
        match self.inflight.get(&id.to_string()) {
            Some(n) => {
                n.notify_one();
                true
            }
            None => false,
        }
    }

    /// A handle that turns true when the session ends.
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// End the session: streams stop, calls are cancelled, waiting requests fail.
    pub fn close(&self) {
        self.closed.send_replace(true);
        let waiting = std::mem::take(&mut *self.pending.lock().expect("lock"));
        drop(waiting);
        for n in self.inflight.iter() {
            n.notify_one();
        }
        if let Some(l) = self.listener.lock().expect("lock").take() {
            l.abort();
        }
        self.streams.lock().expect("lock").clear();
    }
}

/// Now, in Unix milliseconds (sessions are kept in wall time, across restarts).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Resolves when a session's `closed` handle turns true.
pub async fn ended(closed: &mut watch::Receiver<bool>) {
    let _ = closed.wait_for(|c| *c).await;
}

/// Keeps a session busy (never idle) while alive.
pub struct Busy(Arc<ClientSession>);

impl Drop for Busy {
    fn drop(&mut self) {
        // Idle time counts from the end of the last call or stream, not its start.
        self.0.touch();
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}
