//! Legacy sessions: one slot per caller (`session_key`), opened with tasklift's
//! own `initialize` and re-opened on 404, extra sessions for calls that may ask
//! the client for input (`call_session`), and closing them (DELETE) when idle or
//! when the client's session ends.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::{HeaderValue, Method};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::{Answer, Asking, Fields, Session, SessionSlot, Shared, SESSION_HEADER};
use crate::upstream::{offers_tool_tasks, CallContext, CallEvent, Era, UpstreamError};
use tasklift_protocol::mcp::{self, LEGACY_VERSIONS};

/// How the session key of a caller keyed by its principal alone begins.
const PRINCIPAL_KEY: &str = "principal:";

impl Shared {
    pub(super) fn session_key(&self, ctx: &CallContext) -> String {
        // A caller with neither a session of its own nor credentials passed on is
        // keyed by its principal alone, which is a keyed hash already: nothing to
        // hash for each of its calls (and no hex key has a `:`).
        if ctx.session.is_none() && ctx.authorization.is_none() {
            // Written out, not `format!`: asked twice per call, its machinery
            // was 600 instructions of a legacy call's.
            let mut key = String::with_capacity(PRINCIPAL_KEY.len() + ctx.principal.len());
            key.push_str(PRINCIPAL_KEY);
            key.push_str(&ctx.principal);
            return key;
        }
        let mut h = Sha256::new();
        h.update(ctx.principal.as_bytes());
        h.update([0]);
        match &ctx.session {
            // A legacy client gets an upstream session of its own, like it would
            // have without tasklift in between (its credentials may be refreshed).
            Some(s) => h.update(s.id.as_bytes()),
            None => {
                if let Some(a) = &ctx.authorization {
                    h.update(a.as_bytes());
                }
            }
        }
        hex(&h.finalize())
    }

    /// The `initialize` result the upstream gives the 2025 client of `ctx` (its
    /// `session`): that of the client's own upstream session, when tasklift speaks
    /// 2025 to the upstream for it (`era_for`); `None` when it speaks 2026-07-28.
    pub(super) async fn legacy_initialize(
        self: &Arc<Self>,
        ctx: &CallContext,
    ) -> Result<Option<Value>, UpstreamError> {
        Ok(match self.era_for(ctx).await? {
            Era::Legacy => Some(self.session(ctx, None).await?.init.clone()),
            Era::Modern => None,
        })
    }

    /// The caller's session, opened if needed; `stale` is a session that just failed
    /// with 404 and must be replaced.
    pub(super) async fn session(
        self: &Arc<Self>,
        ctx: &CallContext,
        stale: Option<&Arc<Session>>,
    ) -> Result<Arc<Session>, UpstreamError> {
        let (s, _) = self
            .session_keyed(ctx, &self.session_key(ctx), stale)
            .await?;
        Ok(s)
    }

    /// The caller's upstream session, when one is open: looked up without
    /// waiting, opening or marking it used (the call that follows does).
    pub(super) fn open_session(&self, ctx: &CallContext) -> Option<Arc<Session>> {
        let slot = self.sessions.get(&self.session_key(ctx))?.clone();
        let current = slot.current.lock().expect("sessions lock").clone();
        current
    }

    /// [`Shared::session`] for the caller whose `session_key` is `key`. An open
    /// session is taken without waiting; opening one waits for the slot's
    /// `opening` lock, so one caller's requests open one session, not one each.
    /// The slot comes with it, for the caller's other sessions.
    async fn session_keyed(
        self: &Arc<Self>,
        ctx: &CallContext,
        key: &str,
        stale: Option<&Arc<Session>>,
    ) -> Result<(Arc<Session>, Arc<SessionSlot>), UpstreamError> {
        let fresh = |s: &Arc<Session>| stale.is_none_or(|st| !Arc::ptr_eq(st, s));
        loop {
            let slot = self.slot(key);
            // Marked used under the lock `close_idle` takes it out with, so it
            // never closes a session just handed out.
            if let Some(s) = slot.current.lock().expect("sessions lock").as_ref() {
                if fresh(s) {
                    s.last_used.store(self.now_ms(), Ordering::Relaxed);
                    return Ok((s.clone(), slot.clone()));
                }
            }
            let _opening = slot.opening.lock().await;
            // `close_idle` or `end_session` may have emptied this slot and dropped
            // it from the map while we waited: a session opened in it would never
            // be closed.
            if !self
                .sessions
                .get(key)
                .is_some_and(|e| Arc::ptr_eq(e.value(), &slot))
            {
                continue;
            }
            let cur = slot.current.lock().expect("sessions lock").clone();
            if let Some(s) = cur {
                if fresh(&s) {
                    s.last_used.store(self.now_ms(), Ordering::Relaxed);
                    return Ok((s, slot.clone()));
                }
                tracing::info!(upstream = %self.cfg.name, "legacy session expired; initializing a new one");
            }
            let s = Box::pin(self.open(ctx)).await?;
            *slot.current.lock().expect("sessions lock") = Some(s.clone());
            return Ok((s, slot.clone()));
        }
    }

    /// A new session, its GET stream open before any call needs it. Callers box
    /// it: its future is 6 KB (the `initialize` exchange), and a call's future
    /// would otherwise keep room for it as long as the call runs.
    async fn open(self: &Arc<Self>, ctx: &CallContext) -> Result<Arc<Session>, UpstreamError> {
        let s = Arc::new(self.initialize(ctx).await?);
        self.open_get_stream(&s).await;
        Ok(s)
    }

    /// The session a request runs on, and, for a request that may ask the client for
    /// input, its registration among the session's askers (made before the request
    /// is sent, so a question on the GET stream finds it). Such a request gets a
    /// session with no other asker, opening one (up to `sessions_per_caller`) when
    /// the caller's are all busy; past that it shares the least busy one, and
    /// questions there are refused rather than guessed.
    pub(super) async fn call_session(
        self: &Arc<Self>,
        ctx: &CallContext,
        stale: Option<&Arc<Session>>,
        asks: Option<(&Value, &mpsc::Sender<CallEvent>)>,
        task: Option<&str>,
    ) -> Result<(Arc<Session>, Option<Asker>), UpstreamError> {
        let register = |s: &Arc<Session>, (id, tx): (&Value, &mpsc::Sender<CallEvent>)| {
            s.askers.lock().expect("askers lock").push(Asking {
                id: id.clone(),
                tx: tx.clone(),
                task: task.map(str::to_string),
            });
            Asker {
                session: s.clone(),
                id: id.clone(),
            }
        };
        // A request about an upstream task goes to the session that created it: the
        // server keeps its tasks per session.
        let key = self.session_key(ctx);
        let home_key = task.map(|t| format!("{key}\n{t}"));
        if let Some(home) = home_key
            .as_ref()
            .and_then(|k| self.task_homes.get(k).and_then(|w| w.upgrade()))
            .filter(|h| stale.is_none_or(|st| !Arc::ptr_eq(st, h)))
        {
            home.last_used.store(self.now_ms(), Ordering::Relaxed);
            let asker = asks.map(|a| register(&home, a));
            return Ok((home, asker));
        }
        let (main, slot) = self.session_keyed(ctx, &key, stale).await?;
        let Some(asks) = asks else {
            return Ok((main, None));
        };
        let claim = |s: &Arc<Session>| register(s, asks);
        // A server without sessions answers every request on its own stream: its
        // questions always name their call.
        if main.id.is_none() {
            return Ok((main.clone(), Some(claim(&main))));
        }
        let plain = |s: &Arc<Session>| {
            s.askers
                .lock()
                .expect("askers lock")
                .iter()
                .filter(|a| a.task.is_none())
                .count()
        };
        let idle = |s: &Arc<Session>| plain(s) == 0;
        loop {
            {
                // Chosen and claimed under one lock: two calls never both take the
                // same idle session.
                let mut extra = slot.extra.lock().expect("sessions lock");
                if let Some(st) = stale {
                    extra.retain(|s| !Arc::ptr_eq(s, st));
                }
                let all = || std::iter::once(&main).chain(extra.iter());
                let chosen = match all().find(|s| idle(s)) {
                    Some(s) => Some(s),
                    None if extra.len() + 1 < self.cfg.sessions_per_caller => None,
                    None => all().min_by_key(|s| plain(s)),
                };
                if let Some(s) = chosen.cloned() {
                    s.last_used.store(self.now_ms(), Ordering::Relaxed);
                    let asker = claim(&s);
                    return Ok((s, Some(asker)));
                }
            }
            // Every session is taken and there is room for one more: one opening at
            // a time, and none if another call opened one (or freed its own) while
            // this one waited.
            let _opening = slot.opening.lock().await;
            let room = {
                let extra = slot.extra.lock().expect("sessions lock");
                !std::iter::once(&main).chain(extra.iter()).any(&idle)
                    && extra.len() + 1 < self.cfg.sessions_per_caller
            };
            if room {
                let s = Box::pin(self.open(ctx)).await?;
                let mut extra = slot.extra.lock().expect("sessions lock");
                extra.push(s);
                tracing::debug!(upstream = %self.cfg.name, sessions = extra.len() + 1,
                    "opened another session for a caller whose calls may ask for input");
            }
        }
    }

    /// The slot of sessions of the caller whose `session_key` is `key`.
    fn slot(&self, key: &str) -> Arc<SessionSlot> {
        if let Some(slot) = self.sessions.get(key) {
            return slot.clone();
        }
        self.sessions
            .entry(key.to_string())
            .or_insert_with(|| Arc::new(SessionSlot::default()))
            .clone()
    }

    /// POST the `initialize` of `ctx`'s client (see [`initialize_request`]): the
    /// answer, and the id it went with.
    pub(super) async fn post_initialize(
        self: &Arc<Self>,
        ctx: &CallContext,
    ) -> Result<(Answer, Value), UpstreamError> {
        let id = self.upstream_id();
        let msg = initialize_request(ctx, &id);
        let ans = self
            .post(
                serde_json::to_vec(&msg).expect("serializes"),
                Fields::default(),
                ctx,
            )
            .await?;
        Ok((ans, id))
    }

    async fn initialize(self: &Arc<Self>, ctx: &CallContext) -> Result<Session, UpstreamError> {
        let fail = |m: String| UpstreamError::Handshake {
            name: self.cfg.name.clone(),
            message: m,
        };
        let (ans, id) = self.post_initialize(ctx).await?;
        let sid = ans.headers.get(&SESSION_HEADER).cloned();
        let init = match self.read_response(ans, &id).await? {
            Ok(r) => r,
            Err(e) => return Err(fail(e.to_string())),
        };
        let version = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !LEGACY_VERSIONS.contains(&version.as_str()) {
            return Err(fail(format!(
                "the server chose protocol version {version:?}; tasklift speaks {} to legacy servers",
                LEGACY_VERSIONS.join(", ")
            )));
        }
        let session = Session {
            id: sid,
            version: HeaderValue::from_str(&version).expect("known versions are header-safe"),
            tool_tasks: offers_tool_tasks(&init),
            init,
            last_used: AtomicU64::new(self.now_ms()),
            in_flight: AtomicUsize::new(0),
            opener: CallContext {
                principal: ctx.principal.clone(),
                authorization: ctx.authorization.clone(),
                ..CallContext::default()
            },
            askers: Mutex::new(Vec::new()),
            changes: tokio::sync::broadcast::channel(64).0,
            get_stream: Mutex::new(None),
        };
        let note = json!({"jsonrpc": "2.0", "method": mcp::method::INITIALIZED});
        let ans = self
            .post(
                serde_json::to_vec(&note).expect("serializes"),
                session.headers(),
                ctx,
            )
            .await?;
        let _ = self.read_all(ans.body).await;
        tracing::info!(upstream = %self.cfg.name, version = %version, "opened legacy session");
        Ok(session)
    }

    /// End a session upstream (DELETE), if the server gave it an id.
    async fn close(&self, s: &Session) {
        if let Some(h) = s.get_stream.lock().expect("get stream lock").take() {
            h.abort();
        }
        if s.id.is_some() {
            if let Ok(ans) = self
                .send(&Method::DELETE, None, &s.headers(), &s.opener)
                .await
            {
                let _ = self.read_all(ans.body).await;
            }
        }
    }

    /// A legacy client's session ended: close the upstream sessions kept for it.
    pub(super) async fn end_session(&self, ctx: &CallContext) {
        let Some((_, slot)) = self.sessions.remove(&self.session_key(ctx)) else {
            return;
        };
        let opening = slot.opening.lock().await;
        let mut all: Vec<Arc<Session>> =
            std::mem::take(&mut *slot.extra.lock().expect("sessions lock"));
        all.extend(slot.current.lock().expect("sessions lock").take());
        drop(opening);
        for s in all {
            self.close(&s).await;
            tracing::debug!(upstream = %self.cfg.name, "closed a legacy session of an ended client session");
        }
    }

    /// Close the sessions idle for `session_idle` (or, with `all`, every session not
    /// in use); a caller's main session goes only after its extra ones.
    pub(super) async fn close_idle(&self, all: bool) {
        let idle_ms = self.cfg.session_idle.as_millis() as u64;
        let now = self.now_ms();
        let slots: Vec<(String, Arc<SessionSlot>)> = self
            .sessions
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        self.task_homes.retain(|_, w| w.strong_count() > 0);
        let closable = |s: &Session| {
            let idle = now.saturating_sub(s.last_used.load(Ordering::Relaxed)) >= idle_ms;
            s.in_flight.load(Ordering::Relaxed) == 0 && (all || idle)
        };
        for (key, slot) in slots {
            // Extra sessions first: the main one goes only once they are gone.
            let done: Vec<Arc<Session>> = {
                let mut extra = slot.extra.lock().expect("sessions lock");
                let (done, keep) = std::mem::take(&mut *extra)
                    .into_iter()
                    .partition(|s| closable(s));
                *extra = keep;
                done
            };
            for s in done {
                self.close(&s).await;
                tracing::debug!(upstream = %self.cfg.name, "closed an idle extra legacy session");
            }
            // Not while a session is being opened in the slot (it would be left in
            // a slot no longer in the map): extra ones are added only under
            // `opening`, so none is while it is held here.
            let Ok(opening) = slot.opening.try_lock() else {
                continue;
            };
            if !slot.extra.lock().expect("sessions lock").is_empty() {
                continue;
            }
            let s = {
                let mut cur = slot.current.lock().expect("sessions lock");
                let Some(s) = cur.as_ref() else { continue };
                if !closable(s) {
                    continue;
                }
                let s = cur.take().expect("checked");
                // Out of the map before the slot is unlocked: a caller that finds
                // it empty then sees it is gone and makes a new one (see `session`).
                self.sessions.remove(&key);
                s
            };
            drop(opening);
            self.close(&s).await;
            tracing::debug!(upstream = %self.cfg.name, "closed idle legacy session");
        }
    }
}

/// tasklift's `initialize` for `ctx`'s upstream session. For a legacy client's own
/// session: its version, capabilities and name, as it would initialize the server
/// itself.
pub(super) fn initialize_request(ctx: &CallContext, id: &Value) -> Value {
    let (version, caps, info) = match &ctx.session {
        Some(s) if LEGACY_VERSIONS.contains(&s.protocol_version.as_str()) => (
            s.protocol_version.as_str(),
            s.capabilities.clone(),
            s.client_info.clone(),
        ),
        // Modern callers: offer what tasklift bridges; each request's own
        // capabilities decide what its caller is actually asked.
        _ => (
            LEGACY_VERSIONS[0],
            json!({"elicitation": {}, "sampling": {}, "roots": {}}),
            json!({"name": "tasklift", "version": env!("CARGO_PKG_VERSION")}),
        ),
    };
    json!({
        "jsonrpc": "2.0", "id": id, "method": mcp::method::INITIALIZE,
        "params": {"protocolVersion": version, "capabilities": caps, "clientInfo": info},
    })
}

/// A call registered among its session's `askers`; unregisters on drop.
pub(super) struct Asker {
    session: Arc<Session>,
    id: Value,
}

impl Drop for Asker {
    fn drop(&mut self) {
        self.session
            .askers
            .lock()
            .expect("askers lock")
            .retain(|a| a.id != self.id);
    }
}

/// A request using a session: counted in its in-flight count (so `close_idle`
/// leaves the session alone) until dropped.
pub(super) struct InFlight(Arc<Session>);

impl InFlight {
    pub(super) fn new(session: &Arc<Session>) -> Self {
        session.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(session.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}
