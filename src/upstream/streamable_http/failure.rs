//! How a request to the upstream failed or asked to be sent again: where it
//! broke (connecting, the TLS handshake, a connection dropped after sending, an
//! answer that is not HTTP), and a short `Retry-After` to wait out.

use std::time::Duration;

use http::{header, StatusCode};

use super::http1::Http1Failure;
use super::http2::Http2Failure;
use super::{Fields, Shared, MAX_RETRY_AFTER};
use crate::upstream::chain;
use crate::upstream::UpstreamError;

impl Shared {
    /// Why an HTTP/1.1 request got no response, by where it broke: connecting
    /// (refused, timed out, the TLS handshake), a connection that closed or was
    /// reset after the request went out, or an answer that is not HTTP.
    pub(super) fn http1_failed(&self, e: Http1Failure) -> UpstreamError {
        let name = self.cfg.name.clone();
        match e {
            Http1Failure::Connect(e) => self.unreachable(&*e),
            Http1Failure::Dropped(e) => UpstreamError::Dropped {
                name,
                message: format!("connection error: {}", chain(&e)),
            },
            Http1Failure::NotHttp(message) => UpstreamError::NotHttp { name, message },
        }
    }

    /// A connection attempt's failure (TCP, TLS, or the attempt's timeout).
    fn unreachable(&self, e: &(dyn std::error::Error + 'static)) -> UpstreamError {
        let cause = chain(e);
        // After the TCP connection, hyper-rustls reports the handshake's failure
        // as an `io::Error` (the TCP connector's are its own type).
        let handshake = self.url.scheme_str() == Some("https") && e.is::<std::io::Error>();
        let message = match handshake || is_tls(e) {
            true => format!("TLS handshake failed: {cause}"),
            false => cause,
        };
        UpstreamError::Unreachable {
            name: self.cfg.name.clone(),
            message,
        }
    }
}

impl Shared {
    /// [`Shared::http1_failed`] for an HTTP/2 upstream: no connection (TCP, TLS,
    /// the handshake), an answer that is not HTTP/2 (h2 names a protocol error of
    /// its own), or a connection or stream that broke.
    pub(super) fn http2_failed(&self, e: &Http2Failure) -> UpstreamError {
        let name = self.cfg.name.clone();
        match e {
            Http2Failure::Connect(e) => self.unreachable(&**e),
            Http2Failure::Stream(e) if e.is_library() && !e.is_io() => {
                let reason = e.reason().unwrap_or(h2::Reason::PROTOCOL_ERROR);
                let message = format!(
                    "not an HTTP/2 answer ({reason}); is the upstream's `http2 = true` right? {e}"
                );
                match reason {
                    h2::Reason::PROTOCOL_ERROR
                    | h2::Reason::FRAME_SIZE_ERROR
                    | h2::Reason::COMPRESSION_ERROR => UpstreamError::NotHttp { name, message },
                    _ => UpstreamError::Dropped {
                        name,
                        message: chain(e),
                    },
                }
            }
            Http2Failure::Stream(e) => UpstreamError::Dropped {
                name,
                message: chain(e),
            },
        }
    }
}

/// The wait a `429 Too Many Requests` or `503 Service Unavailable` asks for with
/// `Retry-After` in seconds, if it is short enough to wait out ([`MAX_RETRY_AFTER`]).
/// An HTTP date is not waited for.
pub(super) fn retry_after(status: StatusCode, headers: &Fields) -> Option<Duration> {
    if !matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        return None;
    }
    let secs: u64 = headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let wait = Duration::from_secs(secs);
    (wait <= MAX_RETRY_AFTER).then_some(wait)
}

/// Whether a rustls error is in `e` or its sources, also wrapped in `io::Error`s
/// (whose `source` skips the error they wrap).
fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    sources(e).any(|s| {
        s.is::<rustls::Error>()
            || s.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| is_tls(inner))
    })
}

/// An error and its sources.
fn sources<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| <dyn std::error::Error>::source(*e))
}
