//! The era of an HTTP upstream: configured, or detected once by a modern
//! `server/discover` probe and cached.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{json, Value};

use super::{Shared, METHOD_HEADER, VERSION_HEADER};
use crate::upstream::{modern_meta, CallContext, Era, UpstreamError};
use tasklift_protocol::jsonrpc::Incoming as Msg;
use tasklift_protocol::mcp::{self, MODERN_VERSION};

/// Longest a request waits for the era to be known (its turn at the probe and
/// the probe itself). The probe runs before a call's threshold race, so an upstream
/// that accepts connections and never answers would otherwise hold the call with
/// no handle and no keep-alive. Nothing is cached; the next request probes again.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

impl Shared {
    /// Detect and cache the era.
    pub(super) async fn era(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        if let Some(e) = self.era.read().expect("era lock").clone() {
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
        if let Some(e) = self.era.read().expect("era lock").clone() {
            return Ok(e);
        }
        let era = self.probe(ctx).await?;
        tracing::info!(upstream = %self.cfg.name, era = ?era, "detected upstream era");
        *self.era.write().expect("era lock") = Some(era.clone());
        Ok(era)
    }

    async fn probe(self: &Arc<Self>, ctx: &CallContext) -> Result<Era, UpstreamError> {
        let id = self.upstream_id();
        let msg = json!({
            "jsonrpc": "2.0", "id": id, "method": mcp::method::DISCOVER,
            "params": {"_meta": modern_meta()},
        });
        let mut h = HeaderMap::new();
        h.insert(
            VERSION_HEADER.clone(),
            HeaderValue::from_static(MODERN_VERSION),
        );
        h.insert(
            METHOD_HEADER.clone(),
            HeaderValue::from_static(mcp::method::DISCOVER),
        );
        let ans = self
            .post(serde_json::to_vec(&msg).expect("serializes"), h, ctx)
            .await?;
        let status = ans.status;
        // Authentication, rate limits and timeouts say nothing about the era: report
        // them and probe again on the next request instead of caching "legacy".
        let not_an_era_signal = matches!(
            status,
            StatusCode::UNAUTHORIZED
                | StatusCode::FORBIDDEN
                | StatusCode::PROXY_AUTHENTICATION_REQUIRED
                | StatusCode::REQUEST_TIMEOUT
                | StatusCode::TOO_MANY_REQUESTS
        );
        if status.is_server_error() || not_an_era_signal {
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
