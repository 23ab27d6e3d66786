//! How requests reach an HTTP upstream, and what their answers' heads and bodies
//! are: per front-door worker, a pool of HTTP/1.1 connections (`http1/`) or,
//! with `http2 = true`, one HTTP/2 connection (`http2.rs`); both connect through the
//! same connector (`connect.rs`).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::connect::{connector, BoxError, Timed};
use super::http1::Http1Body;
use super::http1::Http1Pool;
use super::http2::Http2Pool;
use crate::config::{Transport, UpstreamConfig};
use crate::headers::Fields;
use crate::upstream::UpstreamError;

/// An answer's head as either client reads it: hyper's response parts without
/// the header map (the fields are a list: each is looked up once or twice).
#[derive(Debug)]
pub(super) struct Head {
    pub(super) status: http::StatusCode,
    pub(super) version: http::Version,
    pub(super) headers: Fields,
}

/// The head of an answer h2 read.
impl From<http::response::Parts> for Head {
    fn from(parts: http::response::Parts) -> Self {
        Self {
            status: parts.status,
            version: parts.version,
            headers: Fields::from(parts.headers),
        }
    }
}

/// How requests reach the upstream, one per front-door worker: a call uses its
/// worker's, so its connection's driver runs on the same thread.
pub(super) enum Clients {
    /// Pooled HTTP/1.1 connections (http and https, `http1/`).
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

/// An upstream response's body, from either client.
pub(super) enum ResponseBody {
    Http1(Http1Body),
    Http2(h2::RecvStream),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Http1(b) => Pin::new(b).poll_frame(cx),
            Self::Http2(r) => match r.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    // The window reopens as the body is read, not as it arrives.
                    let _ = r.flow_control().release_capacity(data.len());
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => match r.poll_trailers(cx) {
                    Poll::Ready(Ok(Some(t))) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
                    Poll::Ready(Ok(None)) => Poll::Ready(None),
                    Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e.into()))),
                    Poll::Pending => Poll::Pending,
                },
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Http1(b) => b.is_end_stream(),
            Self::Http2(r) => r.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Http1(b) => b.size_hint(),
            Self::Http2(_) => SizeHint::default(),
        }
    }
}
