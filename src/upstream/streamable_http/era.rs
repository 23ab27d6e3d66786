//! The era of an HTTP upstream: configured, or detected once by a modern
//! `server/discover` probe and cached; and whether a modern one also serves 2025
//! clients (a dual-era server), by what it answers a legacy `initialize`, which
//! decides the era spoken to it for each caller (`era_for`).

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode};
use serde_json::{json, Value};

use super::{Fields, Shared, METHOD_HEADER, SESSION_HEADER, VERSION_HEADER};
use crate::config::EraSetting;
use crate::upstream::{modern_meta, CallContext, Era, UpstreamError};
use tasklift_protocol::jsonrpc::Incoming as Msg;
use tasklift_protocol::mcp::{self, LEGACY_VERSIONS, MODERN_VERSION};

/// Longest a request waits for the era to be known (its turn at the probe and
/// the probe itself). The probe runs before a call's threshold race, so an upstream
/// that accepts connections and never answers would otherwise hold the call with
/// no handle and no keep-alive. Nothing is cached; the next request probes again.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

impl Shared {
    /// Detect and cache the era.
    pub(super) async fn era(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        if let Some(e) = self.era.get().cloned() {
            return Ok(e);
        }
        tokio::time::timeout(PROBE_TIMEOUT, self.detect(ctx))
            .await
            .unwrap_or_else(|_| {
                Err(UpstreamError::NoAnswer {
                    name: self.cfg.name.clone(),
                    what: "the protocol era probe (server/discover)",
                    within: PROBE_TIMEOUT,
                })
            })
    }

    async fn detect(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        let _guard = self.detecting.lock().await;
        if let Some(e) = self.era.get().cloned() {
            return Ok(e);
        }
        let era = self.probe(ctx).await?;
        tracing::info!(upstream = %self.cfg.name, era = ?era, "detected upstream era");
        // Only set here, under `detecting`.
        let _ = self.era.set(era.clone());
        Ok(era)
    }

    /// The era tasklift speaks to the upstream for the caller of `ctx`: the
    /// upstream's, except for a 2025 client (one with a `session` on tasklift) in
    /// front of a modern upstream that serves 2025 clients too (a dual-era server,
    /// as the 2026-07-28 versioning page allows). That client's requests go to it
    /// as the client would send them, on a 2025 session of its own, so it answers
    /// as it answers a 2025 client: its capabilities at `initialize`, its methods,
    /// its errors and their statuses, which need not be what it tells 2026 clients.
    pub(super) async fn era_for(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        if let Some(e) = self.known_era_for(ctx) {
            return Ok(e);
        }
        Ok(match self.era(ctx).await? {
            Era::Modern if ctx.session.is_some() && self.serves_legacy(ctx).await? => Era::Legacy,
            era => era,
        })
    }

    /// [`Shared::era_for`], if it is known without asking the upstream.
    pub(super) fn known_era_for(&self, ctx: &CallContext) -> Option<Era> {
        let era = self.era.get().cloned()?;
        // A configured era is spoken to every client.
        if era == Era::Legacy || ctx.session.is_none() || self.cfg.era != EraSetting::Auto {
            return Some(era);
        }
        self.legacy_too.get().map(|&dual| match dual {
            true => Era::Legacy,
            false => Era::Modern,
        })
    }

    /// Whether a modern upstream also serves 2025 clients: asked once, with the
    /// first 2025 client's `initialize` (the session it opens is closed at once),
    /// and remembered like the era. An answer that says nothing about it (as for
    /// the era probe, or a body that broke off) is not remembered: 2026-07-28 for
    /// now, and the next 2025 client's request asks again.
    async fn serves_legacy(self: &Arc<Self>, ctx: &CallContext) -> Result<bool, UpstreamError> {
        let _one = self.detecting.lock().await;
        if let Some(dual) = self.legacy_too.get() {
            return Ok(*dual);
        }
        let Some(dual) = self.legacy_probe(ctx).await? else {
            return Ok(false);
        };
        tracing::info!(upstream = %self.cfg.name, dual,
            "asked whether the modern upstream also serves 2025 clients (their sessions then speak 2025 to it)");
        let _ = self.legacy_too.set(dual);
        Ok(dual)
    }

    /// A legacy `initialize` to a modern upstream: whether it answered as a 2025
    /// server (its session is then DELETEd) or refused, or `None` for an answer
    /// that says neither.
    async fn legacy_probe(
        self: &Arc<Self>,
        ctx: &CallContext,
    ) -> Result<Option<bool>, UpstreamError> {
        let (ans, id) = self.post_initialize(ctx).await?;
        if ans.status.is_server_error() || not_an_era_signal(ans.status) {
            tracing::info!(upstream = %self.cfg.name, status = %ans.status,
                "the upstream did not say whether it serves 2025 clients");
            return Ok(None);
        }
        let sid = ans.headers.get(&SESSION_HEADER).cloned();
        let init = match self.read_response(ans, &id).await {
            Ok(Ok(init)) => init,
            Ok(Err(_)) => return Ok(Some(false)),
            Err(e) => {
                tracing::info!(upstream = %self.cfg.name, error = %e,
                    "the upstream did not say whether it serves 2025 clients");
                return Ok(None);
            }
        };
        let version = init.get("protocolVersion").and_then(Value::as_str);
        let Some(version) = version.filter(|v| LEGACY_VERSIONS.contains(v)) else {
            return Ok(Some(false));
        };
        if let Some(sid) = sid {
            let mut h = Fields::with_capacity(2);
            h.append(SESSION_HEADER.clone(), sid);
            h.append(
                VERSION_HEADER.clone(),
                HeaderValue::from_str(version).expect("known versions are header-safe"),
            );
            match self.send(&Method::DELETE, None, &h, ctx).await {
                Ok(ans) => {
                    let _ = self.read_all(ans.body).await;
                }
                Err(e) => {
                    tracing::debug!(upstream = %self.cfg.name, error = %e, "could not close the probe's legacy session")
                }
            }
        }
        Ok(Some(true))
    }

    async fn probe(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        let id = self.upstream_id();
        let msg = json!({
            "jsonrpc": "2.0", "id": id, "method": mcp::method::DISCOVER,
            "params": {"_meta": modern_meta()},
        });
        let mut h = Fields::with_capacity(2);
        h.append(
            VERSION_HEADER.clone(),
            HeaderValue::from_static(MODERN_VERSION),
        );
        h.append(
            METHOD_HEADER.clone(),
            HeaderValue::from_static(mcp::method::DISCOVER),
        );
        let ans = self
            .post(serde_json::to_vec(&msg).expect("serializes"), h, ctx)
            .await?;
        let status = ans.status;
        // Authentication, rate limits and timeouts say nothing about the era: report
        // them and probe again on the next request instead of caching "legacy".
        if status.is_server_error() || not_an_era_signal(status) {
            return Err(UpstreamError::BadResponse {
                name: self.cfg.name.clone(),
                status: status.as_u16(),
                message: "while detecting the protocol era".into(),
            });
        }
        if status.is_client_error() {
            let body = self.read_all(ans.body).await.unwrap_or_default();
            return Ok(
                match serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(Msg::classify)
                {
                    Some(Msg::Response {
                        outcome: Err(e), ..
                    }) if mcp::is_modern_error_code(e.code) => Era::Modern,
                    _ => Era::Legacy,
                },
            );
        }
        // A JSON answer that broke off says nothing about the era either.
        let is_sse = ans
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if !is_sse {
            let body = self.read_all(ans.body).await?;
            return Ok(
                match serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(Msg::classify)
                {
                    Some(Msg::Response { outcome: Ok(r), .. })
                        if r.get("supportedVersions").is_some() =>
                    {
                        Era::Modern
                    }
                    Some(Msg::Response {
                        outcome: Err(e), ..
                    }) if mcp::is_modern_error_code(e.code) => Era::Modern,
                    _ => Era::Legacy,
                },
            );
        }
        Ok(match self.read_response(ans, &id).await {
            Ok(Ok(r)) if r.get("supportedVersions").is_some() => Era::Modern,
            Ok(Err(e)) if mcp::is_modern_error_code(e.code) => Era::Modern,
            _ => Era::Legacy,
        })
    }
}

/// Authentication, rate limits and timeouts: statuses that say nothing about the
/// protocol versions a server speaks.
fn not_an_era_signal(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::UNAUTHORIZED
            | StatusCode::FORBIDDEN
            | StatusCode::PROXY_AUTHENTICATION_REQUIRED
            | StatusCode::REQUEST_TIMEOUT
            | StatusCode::TOO_MANY_REQUESTS
    )
}
