//! Legacy client sessions kept beside the tasks, so that a 2025-era client's
//! `Mcp-Session-Id` keeps working after tasklift restarts (and, on a shared store,
//! on any replica): what `initialize` declared, who opened the session, and when
//! it was last used. Streams and the requests in flight are not kept: they belong
//! to the process that served them (`front::legacy::session`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreFuture;

/// What a legacy session needs to be served again after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The `Mcp-Session-Id` tasklift issued.
    pub id: String,
    /// The mount path the session was opened at (a session serves one upstream).
    pub mount: String,
    /// The principal that opened it: nobody else may use it.
    pub principal: String,
    /// The negotiated legacy protocol version.
    pub protocol_version: String,
    /// The client's declared capabilities.
    pub capabilities: Value,
    /// The client's `clientInfo`.
    pub client_info: Value,
    /// The level set with `logging/setLevel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// URIs the client subscribed to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<String>,
    /// When it was opened (Unix ms).
    pub created_at_ms: u64,
    /// When it was last seen in use (Unix ms), refreshed every few seconds while it
    /// is: a record not refreshed for the idle time is expired.
    pub last_seen_ms: u64,
}

/// Where legacy sessions are kept. Writes made at `initialize` are durable before
/// the client gets its session id; later refreshes need not be.
pub trait SessionStore: Send + Sync {
    /// Insert or replace a session.
    fn save_session<'a>(&'a self, rec: &'a SessionRecord) -> StoreFuture<'a, ()>;
    /// The session with this id, if one is kept.
    fn load_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>>;
    /// Note when each of these sessions was last in use (id, Unix ms); returns the
    /// ids no longer kept (deleted meanwhile, here or by another replica).
    fn touch_sessions<'a>(&'a self, seen: &'a [(String, u64)]) -> StoreFuture<'a, Vec<String>>;
    /// Forget a session (the client deleted it, or it expired).
    fn drop_session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()>;
    /// Forget every session last seen before `before_ms`; how many went.
    fn purge_sessions(&self, before_ms: u64) -> StoreFuture<'_, usize>;
}
