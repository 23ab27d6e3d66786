//! Where a legacy client comes in: the session a request names, the POST entry
//! (an `initialize` without modern `_meta`, or anything in a session), the
//! session's GET stream and DELETE, and the table of open sessions with its
//! reaper. The front door calls [`session_id`], [`takes`], [`post_entry`] and
//! [`session_stream`]; everything else of the 2025-era client support is in this
//! folder.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::headers::Fields;
use crate::serving::Request as HttpRequest;
use bytes::Bytes;
use http::{header, Response, StatusCode};
use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;

use super::super::errors::Rejected;
use super::super::{context, forbidden_origin, LegacyClients, Responding, State};
use super::session::{ClientSession, Sessions};
use super::{get, initialize, post};
use crate::config::LegacyConfig;
use crate::dispatch::Mount;
use crate::serving::body::{self, RespBody};
use crate::store::{SessionStore, TaskStore};
use crate::upstream::CallContext;
use http::Method;
use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp;

/// Legacy clients: their settings, and the sessions open at each mount path.
pub struct Legacy {
    /// The `[legacy]` settings.
    pub cfg: LegacyConfig,
    sessions: HashMap<String, Sessions>,
    /// Where sessions are kept across restarts (the task store, when it keeps them).
    store: Option<Arc<dyn TaskStore>>,
}

impl Legacy {
    /// No sessions yet, at the given mount paths; sessions are kept in `store`'s
    /// session table when it has one.
    pub fn new<'a>(
        cfg: LegacyConfig,
        paths: impl IntoIterator<Item = &'a String>,
        store: Option<Arc<dyn TaskStore>>,
    ) -> Self {
        let sessions = paths
            .into_iter()
            .map(|p| (p.clone(), Sessions::default()))
            .collect();
        Self {
            cfg,
            sessions,
            store: store.filter(|s| s.sessions().is_some()),
        }
    }

    fn kept(&self) -> Option<&dyn SessionStore> {
        self.store.as_deref().and_then(|s| s.sessions())
    }

    /// Keep a session across restarts (durably, before its id is handed out). A
    /// store that cannot take it (a full disk, a lost database) leaves the session
    /// working in this process only.
    pub async fn keep(&self, mount: &Mount, s: &ClientSession) {
        if let Some(k) = self.kept() {
            match k.save_session(&s.record(&mount.cfg.path)).await {
                Ok(()) => s.set_kept(),
                Err(e) => {
                    tracing::warn!(session = %s.id, error = %e, "could not store a legacy session; it will not survive a restart");
                }
            }
        }
    }

    /// Forget a kept session (deleted by the client, or expired).
    pub async fn forget(&self, id: &str) {
        if let Some(k) = self.kept() {
            if let Err(e) = k.drop_session(id).await {
                tracing::warn!(session = %id, error = %e, "could not delete a stored legacy session");
            }
        }
    }

    /// A session this process does not hold, served again from the store: opened
    /// before a restart, or on another replica. Only for its own principal, at its
    /// own mount, and not past its idle time.
    async fn restore(
        &self,
        mount: &Mount,
        id: &str,
        principal: &str,
    ) -> Result<Option<Arc<ClientSession>>, Rejected> {
        let Some(k) = self.kept() else {
            return Ok(None);
        };
        let rec = match k.load_session(id).await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "could not read a stored legacy session");
                return Err(Rejected::StoreUnavailable(format!(
                    "the session store could not be read ({e}); try again"
                )));
            }
        };
        if rec.principal != principal || rec.mount != mount.cfg.path {
            return Ok(None);
        }
        let idle = self.cfg.session_idle.as_millis() as u64;
        if super::session::wall_ms().saturating_sub(rec.last_seen_ms) >= idle {
            self.forget(id).await;
            return Ok(None);
        }
        let s = ClientSession::restore(rec, self.polling());
        match self
            .sessions(mount)
            .adopt(s, self.cfg.max_sessions_per_principal)
        {
            Ok((s, evicted)) => {
                if let Some(old) = evicted {
                    self.forget(&old.id).await;
                    let ctx = CallContext {
                        principal: old.principal.clone(),
                        session: Some(old.peer()),
                        ..CallContext::default()
                    };
                    mount.upstream.end_session(&ctx).await;
                }
                tracing::info!(session = %s.id, version = %s.protocol_version, upstream = %mount.cfg.name, "legacy client session restored from the store");
                Ok(Some(s))
            }
            Err(e) => Err(Rejected::TooManySessions(e.to_string())),
        }
    }

    /// How 2025-11-25 clients' streams poll.
    pub fn polling(&self) -> super::session::Polling {
        super::session::Polling {
            retry_ms: self.cfg.sse_retry.as_millis() as u64,
            close_after: Some(self.cfg.stream_max).filter(|d| !d.is_zero()),
        }
    }

    /// The sessions open at a mount.
    pub fn sessions(&self, mount: &Mount) -> &Sessions {
        self.sessions
            .get(&mount.cfg.path)
            .expect("a session table for every mount")
    }

    /// Sessions open at the mount at `path`.
    pub fn sessions_at(&self, path: &str) -> usize {
        self.sessions.get(path).map_or(0, Sessions::len)
    }

    /// Sessions open in all.
    pub fn session_count(&self) -> usize {
        self.sessions.values().map(Sessions::len).sum()
    }
}

impl LegacyClients for Legacy {
    fn session_id(&self, headers: &Fields) -> Option<String> {
        headers
            .get(&crate::headers::SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .filter(|_| self.cfg.enabled)
    }

    fn takes(&self, session_id: Option<&str>, value: &Value) -> bool {
        self.cfg.enabled && (session_id.is_some() || is_legacy_initialize(value))
    }

    fn post<'a>(
        &'a self,
        state: &'a Arc<State>,
        mount: &'a Mount,
        headers: &'a Fields,
        body: Value,
        session_id: Option<String>,
        peer: SocketAddr,
    ) -> Responding<'a> {
        Box::pin(post_entry(
            state, self, mount, headers, body, session_id, peer,
        ))
    }

    fn stream<'a>(
        &'a self,
        state: &'a State,
        mount: &'a Mount,
        req: HttpRequest,
        session_id: &'a str,
        peer: SocketAddr,
    ) -> Responding<'a> {
        Box::pin(session_stream(state, self, mount, req, session_id, peer))
    }

    fn session_count(&self) -> usize {
        Legacy::session_count(self)
    }

    fn sessions_at(&self, path: &str) -> usize {
        Legacy::sessions_at(self, path)
    }
}

/// Whether a message opens a legacy session: `initialize` without modern `_meta`.
pub fn is_legacy_initialize(v: &Value) -> bool {
    v.get("method").and_then(Value::as_str) == Some(mcp::method::INITIALIZE)
        && v.get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(mcp::META_PROTOCOL_VERSION))
            .is_none()
}

/// A legacy client's POST, counted in `tasklift_requests_total` by its shape.
async fn post_entry(
    state: &Arc<State>,
    legacy: &Legacy,
    mount: &Mount,
    headers: &Fields,
    value: Value,
    session_id: Option<String>,
    peer: SocketAddr,
) -> Response<RespBody> {
    let ctx = match context(state, mount, headers, value.get("id")) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let method = value
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let span = tracing::info_span!("legacy", method = ?method, client.addr = %peer, upstream = %mount.cfg.name);
    let r = async {
        match &session_id {
            Some(sid) => match find_session(legacy, mount, sid, &ctx.principal).await {
                Ok(s) => {
                    let at = super::At {
                        state,
                        legacy,
                        mount,
                    };
                    post(at, s, headers, value, ctx, peer).await
                }
                Err(r) => *r,
            },
            None => match Request::from_value(value) {
                Ok(req) if req.id.is_some() => initialize(legacy, mount, req, ctx).await,
                Ok(_) => Rejected::BadSessionRequest(
                    "Invalid request: initialize must be a request with an id".into(),
                )
                .response(None),
                Err(e) => Rejected::Malformed(e).response(None),
            },
        }
    }
    .instrument(span)
    .await;
    // Legacy answers carry JSON-RPC errors with 200, so only the shape is counted.
    if let Some(m) = &method {
        let outcome = match r.status() {
            StatusCode::ACCEPTED => "accepted",
            s if !s.is_success() => "rejected",
            _ if r
                .headers()
                .get(header::CONTENT_TYPE)
                .is_some_and(|c| c == "text/event-stream") =>
            {
                "stream"
            }
            _ => "ok",
        };
        state.metrics.request(m, outcome);
    }
    r
}

/// GET (the session's stream, or a resumed one) and DELETE in a legacy session.
async fn session_stream(
    state: &State,
    legacy: &Legacy,
    mount: &Mount,
    req: HttpRequest,
    sid: &str,
    peer: SocketAddr,
) -> Response<RespBody> {
    if let Some(r) = forbidden_origin(state, req.headers(), peer) {
        return r;
    }
    let ctx = match context(state, mount, req.headers(), None) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let s = match find_session(legacy, mount, sid, &ctx.principal).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if req.method() == Method::DELETE {
        delete(legacy, mount, &s.id, ctx).await
    } else {
        get(mount, s, req.headers(), ctx)
    }
}

/// The session a request names (held here, or kept in the store from before a
/// restart), or the 404 a client must answer by initializing again.
pub async fn find_session(
    legacy: &Legacy,
    mount: &Mount,
    id: &str,
    principal: &str,
) -> Result<Arc<ClientSession>, Box<Response<RespBody>>> {
    let found = match legacy.sessions(mount).get(id, principal) {
        Some(s) => Some(s),
        None => legacy
            .restore(mount, id, principal)
            .await
            .map_err(|r| Box::new(r.response(None)))?,
    };
    match found {
        Some(s) => {
            s.touch();
            Ok(s)
        }
        None => Err(Box::new(
            Rejected::SessionNotFound { hint: true }.response(None),
        )),
    }
}

/// DELETE: end the session, and the upstream's session for it.
pub async fn delete(
    legacy: &Legacy,
    mount: &Mount,
    id: &str,
    ctx: CallContext,
) -> Response<RespBody> {
    match legacy.sessions(mount).remove(id) {
        Some(s) => {
            legacy.forget(id).await;
            let mut ctx = ctx;
            ctx.session = Some(s.peer());
            mount.upstream.end_session(&ctx).await;
            tracing::info!(session = %s.id, "legacy client session closed by the client");
            Response::builder()
                .status(StatusCode::OK)
                .body(body::full(Bytes::new()))
                .expect("valid response")
        }
        None => Rejected::SessionNotFound { hint: false }.response(None),
    }
}

/// Close sessions idle longer than the configured time (and their upstream sessions).
///
/// Kept sessions in use are refreshed in the store, and kept sessions idle too
/// long (also those of a replica or process that is gone) are deleted there. At
/// shutdown (`all`) every session closes here and upstream, but stays kept: the
/// next start serves it again.
async fn reap(state: &State, legacy: &Legacy, all: bool) {
    let idle_ms = legacy.cfg.session_idle.as_millis() as u64;
    for mount in state.mounts.values() {
        let sessions = legacy.sessions(mount);
        let stale = if all {
            sessions.all()
        } else {
            sessions.idle(idle_ms)
        };
        let mut stale = stale;
        if let Some(k) = legacy.kept() {
            let seen: Vec<(String, u64)> = sessions
                .all()
                .into_iter()
                .filter(|s| s.kept())
                .map(|s| (s.id.clone(), s.last_used_ms()))
                .collect();
            match k.touch_sessions(&seen).await {
                // Deleted by the client through another replica: it ends here too.
                Ok(gone) => {
                    for id in gone {
                        if let Some(s) = sessions.get_any(&id) {
                            if !stale.iter().any(|x| x.id == id) {
                                tracing::info!(session = %id, "legacy client session deleted elsewhere; closing it here");
                                stale.push(s);
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not refresh stored legacy sessions"),
            }
        }
        for s in stale {
            sessions.remove(&s.id);
            if !all {
                legacy.forget(&s.id).await;
            }
            let ctx = CallContext {
                principal: s.principal.clone(),
                session: Some(s.peer()),
                ..CallContext::default()
            };
            mount.upstream.end_session(&ctx).await;
            if all {
                tracing::debug!(session = %s.id, "legacy client session closed at shutdown; it is kept for the next start");
            } else {
                tracing::info!(session = %s.id, "legacy client session closed after being idle");
            }
        }
    }
    if let (Some(k), false) = (legacy.kept(), all) {
        let now = super::session::wall_ms();
        match k.purge_sessions(now.saturating_sub(idle_ms)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "deleted stored legacy sessions idle too long"),
            Err(e) => tracing::warn!(error = %e, "could not delete expired stored legacy sessions"),
        }
    }
}

/// Close idle sessions until `shutdown`; then close them all (with their upstream
/// sessions), before the upstreams stop.
pub async fn run_reaper(
    state: Arc<State>,
    legacy: Arc<Legacy>,
    mut shutdown: watch::Receiver<bool>,
) {
    let every = (legacy.cfg.session_idle / 4).clamp(
        std::time::Duration::from_millis(100),
        // Also how soon a session deleted through another replica ends here.
        std::time::Duration::from_secs(5),
    );
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => reap(&state, &legacy, false).await,
            _ = shutdown.changed() => {
                reap(&state, &legacy, true).await;
                return;
            }
        }
    }
}
