//! One delivery attempt: the signed POST, its answer read for at most
//! [`READ_MAX`] bytes within the destination's `timeout`, and what it means
//! (any 2xx delivers; a redirect is not followed and counts as a refusal).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use super::sign::signature;
use crate::config::WebhookConfig;
use crate::store::Delivery;
use crate::tls::Http1Client;

/// The most of a receiver's answer read (the rest is dropped with the connection).
pub const READ_MAX: usize = 4 * 1024;

/// How one attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// A 2xx answer.
    Delivered,
    /// Any other status (redirects included: they are not followed).
    Refused(u16),
    /// No answer: the connection failed, or broke.
    Failed(String),
    /// No full answer within the destination's `timeout`.
    TimedOut,
}

impl Attempt {
    /// The `outcome` label of `tasklift_webhook_deliveries_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Refused(_) => "refused",
            Self::Failed(_) => "error",
            Self::TimedOut => "timeout",
        }
    }
}

/// POST `d` to `hook`, signed at `now_secs`.
pub async fn send(
    client: &Http1Client,
    hook: &WebhookConfig,
    d: &Delivery,
    now_secs: u64,
) -> Attempt {
    let sig = signature(&hook.secret.0, &d.id, now_secs, d.body.as_bytes());
    let req = http::Request::post(hook.url.clone())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            http::header::USER_AGENT,
            concat!("tasklift/", env!("CARGO_PKG_VERSION")),
        )
        .header("webhook-id", &d.id)
        .header("webhook-timestamp", now_secs.to_string())
        .header("webhook-signature", sig)
        .body(Full::new(Bytes::from(d.body.clone())));
    let req = match req {
        Ok(r) => r,
        Err(e) => return Attempt::Failed(format!("cannot build the request: {e}")),
    };
    match tokio::time::timeout(hook.timeout, exchange(client, req)).await {
        Ok(a) => a,
        Err(_) => Attempt::TimedOut,
    }
}

/// The request sent, its status, and up to [`READ_MAX`] bytes of its body read.
async fn exchange(client: &Http1Client, req: http::Request<Full<Bytes>>) -> Attempt {
    let resp = match client.request(req).await {
        Ok(r) => r,
        Err(e) => return Attempt::Failed(chain(&e)),
    };
    let status = resp.status();
    let mut body = resp.into_body();
    let mut read = 0;
    while read < READ_MAX {
        match body.frame().await {
            Some(Ok(f)) => read += f.data_ref().map_or(0, Bytes::len),
            Some(Err(e)) if status.is_success() => return Attempt::Failed(chain(&e)),
            _ => break,
        }
    }
    if status.is_success() {
        Attempt::Delivered
    } else {
        Attempt::Refused(status.as_u16())
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The wait before attempt `attempts + 1`: 2 s doubled for each attempt made
/// after the first, at most an hour, less up to half of it at random (jitter, so
/// that receivers back from an outage are not hit by every event at once).
pub fn backoff(attempts: u32) -> Duration {
    let base = Duration::from_secs(2).saturating_mul(1 << attempts.saturating_sub(1).min(12));
    let base = base.min(Duration::from_secs(3600));
    let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    base - base / 2 * jitter / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_retry_comes_within_5s_and_later_ones_wait_longer() {
        for _ in 0..100 {
            let first = backoff(1);
            assert!(first <= Duration::from_secs(2) && first >= Duration::from_secs(1));
            assert!(backoff(4) >= Duration::from_secs(8));
            assert!(backoff(40) <= Duration::from_secs(3600));
        }
    }
}
