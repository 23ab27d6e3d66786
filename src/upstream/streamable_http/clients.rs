//! How requests reach an HTTP upstream: per front-door worker, a pool of
//! HTTP/1.1 connections (`http1.rs`) or, with `http2 = true`, one HTTP/2
//! connection (`http2.rs`); both connect through the same connector, each
//! attempt bounded whole by the upstream's `connect_timeout`.

use std::sync::Arc;

use hyper_util::client::legacy::connect::HttpConnector;

use super::http1::Http1Pool;
use super::http2::{Connector, Http2Pool, Timed};
use crate::config::{Transport, UpstreamConfig};
use crate::upstream::UpstreamError;

/// How requests reach the upstream, one per front-door worker: a call uses its
/// worker's, so its connection's driver runs on the same thread.
pub(super) enum Clients {
    /// Pooled HTTP/1.1 connections (http and https, `http1.rs`).
    Http1(Vec<Arc<Http1Pool>>),
    /// `http2 = true`: one HTTP/2 connection per worker (`http2.rs`).
    Http2(Vec<Arc<Http2Pool>>),
}

impl Clients {
    /// The clients of `pools` workers for the upstream at `url`. Fails if a
    /// configured CA file is unreadable.
    pub(super) fn new(
        cfg: &UpstreamConfig,
        url: &http::Uri,
        pools: usize,
    ) -> Result<Self, UpstreamError> {
        let pools = pools.max(1);
        Ok(match cfg.transport {
            Transport::Http { http2: true, .. } => Clients::Http2(
                (0..pools)
                    .map(|_| {
                        let c = connector(cfg, true)?;
                        Ok(Http2Pool::new(c, url.clone(), cfg.connect_timeout))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            _ => Clients::Http1(
                (0..pools)
                    .map(|_| {
                        let c = connector(cfg, false)?;
                        let timed = Timed {
                            inner: c,
                            timeout: cfg.connect_timeout,
                        };
                        Ok(Http1Pool::new(timed, url.clone()))
                    })
                    .collect::<Result<_, _>>()?,
            ),
        })
    }
}

/// TCP with the upstream's connect timeout, and TLS on https:// (ALPN `h2` for
/// an HTTP/2 upstream).
fn connector(cfg: &UpstreamConfig, http2: bool) -> Result<Connector, UpstreamError> {
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
