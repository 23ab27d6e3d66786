//! What both clients connect with: TCP, and TLS on https://, each attempt
//! bounded whole by the upstream's `connect_timeout`.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;

use crate::config::UpstreamConfig;
use crate::upstream::UpstreamError;

/// Header fields about a connection rather than a message (RFC 9110 §7.6.1),
/// which neither client passes on from the configuration or the caller: each
/// client manages its own connection (and HTTP/2 forbids them).
pub(super) const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "transfer-encoding",
    "upgrade",
    "keep-alive",
    "proxy-connection",
];

/// Any error a response body or a connection attempt reports.
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TCP, and TLS on https://.
pub(super) type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// [`Connector`] with the whole attempt bounded (TCP, then TLS): the connector
/// times the TCP connection only, and a TLS handshake the peer never answers
/// would hold a call for good. The HTTP/1.1 pool (`http1/`) connects through it.
#[derive(Clone)]
pub(super) struct Timed {
    pub(super) inner: Connector,
    pub(super) timeout: Duration,
}

/// What [`Connector`] connects.
type Stream = <Connector as tower_service::Service<http::Uri>>::Response;

impl tower_service::Service<http::Uri> for Timed {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (connecting, timeout) = (self.inner.call(uri), self.timeout);
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(Box::new(timed_out(timeout)) as BoxError),
            }
        })
    }
}

/// The error of a connection attempt that took longer than `timeout`.
pub(super) fn timed_out(timeout: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no connection within {timeout:?}"),
    )
}

/// TCP with the upstream's connect timeout, and TLS on https:// (ALPN `h2` for
/// an HTTP/2 upstream).
pub(super) fn connector(cfg: &UpstreamConfig, http2: bool) -> Result<Connector, UpstreamError> {
    let tls = crate::tls::client_config(true, cfg.ca_file.as_deref()).map_err(|message| {
        UpstreamError::Unreachable {
            name: cfg.name.clone(),
            message,
        }
    })?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(cfg.connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    Ok(match http2 {
        true => https.enable_http2().wrap_connector(http),
        false => https.enable_http1().wrap_connector(http),
    })
}
