//! What every request handler of the front door shares ([`State`]), and the door
//! for 2025-era clients as the front door sees it ([`LegacyClients`]): the front
//! door routes to it and never imports `legacy/`, which depends on the front door;
//! removing 2025-era client support is deleting that folder and the lines of
//! `app.rs` that open it.

use crate::hashing::FastMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use crate::headers::Fields;
use crate::serving::Request;
use http::{header, Response};
use serde_json::Value;

use crate::auth::Authenticator;
use crate::config::ServerConfig;
use crate::dispatch::Mount;
use crate::serving::body::RespBody;
use crate::tasks::Engine;

/// A response on its way.
pub type Responding<'a> = Pin<Box<dyn Future<Output = Response<RespBody>> + Send + 'a>>;

/// The door for 2025-era clients (sessions, SSE answers, resumable streams).
pub trait LegacyClients: Send + Sync {
    /// The session a request names, when legacy clients are served.
    fn session_id(&self, headers: &Fields) -> Option<String>;
    /// Whether a POST is a legacy client's: in a session, or opening one.
    fn takes(&self, session_id: Option<&str>, body: &Value) -> bool;
    /// A legacy client's POST.
    fn post<'a>(
        &'a self,
        state: &'a Arc<State>,
        mount: &'a Mount,
        headers: &'a Fields,
        body: Value,
        session_id: Option<String>,
        peer: SocketAddr,
    ) -> Responding<'a>;
    /// GET (the session's stream, or a resumed one) and DELETE in a session.
    fn stream<'a>(
        &'a self,
        state: &'a State,
        mount: &'a Mount,
        req: Request,
        session_id: &'a str,
        peer: SocketAddr,
    ) -> Responding<'a>;
    /// Sessions open, at every mount.
    fn session_count(&self) -> usize;
    /// Sessions open at one mount path.
    fn sessions_at(&self, path: &str) -> usize;
}

/// Everything a request handler needs.
pub struct State {
    /// Upstreams by mount path.
    pub mounts: FastMap<String, Mount>,
    /// The task engine.
    pub engine: Arc<Engine>,
    /// Counters for `/metrics` (shared with the engine).
    pub metrics: Arc<crate::observe::metrics::Metrics>,
    /// Principal extraction.
    pub auth: Authenticator,
    /// Front-door settings.
    pub cfg: ServerConfig,
    /// Legacy clients: their settings and sessions.
    pub legacy: Arc<dyn LegacyClients>,
    /// Clients already logged for relying on `server.lenient_task_name_header`.
    pub lenient: Lenient,
}

impl State {
    /// What `/readyz` and `/metrics` read.
    pub fn health(&self) -> crate::health::Readings<'_> {
        crate::health::Readings {
            engine: &self.engine,
            mounts: &self.mounts,
            metrics: &self.metrics,
            legacy_sessions: self.legacy.session_count(),
        }
    }
}

/// Clients (address and User-Agent) that sent `tasks/*` without `Mcp-Name` and were
/// let through by `server.lenient_task_name_header`: each is logged once, so an
/// operator knows which clients need it, without a line per poll.
#[derive(Default)]
pub struct Lenient {
    seen: dashmap::DashSet<String>,
}

impl Lenient {
    /// At most this many clients are remembered; later ones are logged at debug.
    const MAX: usize = 4096;

    pub(super) fn note(&self, h: &Fields, peer: SocketAddr, method: &str) {
        let agent = h
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no User-Agent");
        let client = format!("{} {agent}", peer.ip());
        if self.seen.len() < Self::MAX && self.seen.insert(client.clone()) {
            tracing::warn!(%client, %method,
                "accepted tasks/* without the Mcp-Name header (server.lenient_task_name_header); this client does not follow 2026-07-28 here");
        } else {
            tracing::debug!(%client, %method, "accepted tasks/* without the Mcp-Name header");
        }
    }
}
