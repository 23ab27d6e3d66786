//! HTTP/2 upstreams (`http2 = true`) on h2's client itself: one connection per
//! front-door worker, every request a stream on it.
//!
//! hyper-util's pooled client costs a running call about 6 KiB over HTTP/2: its
//! boxed request future (3.3 KB, held until the answer's headers come, which for
//! a slow call is the whole call), and a task hyper spawns per request to wait on
//! the response (2.5 KB) with its channels. A stream here is h2's own state and a
//! `ResponseFuture` of a few words in the caller's future.
//!
//! - Connecting: the same connector as HTTP/1.1 upstreams (TLS with ALPN `h2` on
//!   https://, h2c with prior knowledge on http://), the whole attempt (TCP, TLS,
//!   the preface) bounded by the upstream's `connect_timeout`. One attempt runs at
//!   a time; the requests that waited on a failed one get its error.
//! - A dead connection (closed, GOAWAY, no answer to a ping within 20 s) is
//!   forgotten, and the next request opens a new one. A request that finds the
//!   connection dead before it is sent goes once more on a new one: nothing of it
//!   reached the server.
//! - Flow control: windows of 2 MiB per stream and 5 MiB per connection (hyper's
//!   defaults), released as the body is read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use hyper_util::rt::TokioIo;

use super::connect::{timed_out, BoxError, Connector, CONNECTION_SPECIFIC};

/// Receive window of one stream (hyper's default).
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
/// Receive window of the connection (hyper's default).
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// Most request body bytes buffered per stream before the window opens.
const MAX_SEND_BUFFER: usize = 400 * 1024;
/// Framing overhead h2 lets wait unread before it takes the peer for an abuser
/// and closes the connection (`ENHANCE_YOUR_CALM`, "too_many_data_frames"): each
/// unread DATA frame under 256 bytes counts 256 minus its length. Its default is
/// half the connection window, sized for large frames; every answer to a call is
/// one small frame, and when thousands of held calls are answered at once (the
/// scale benchmark's 100,000) they arrive faster than their tasks read them, so
/// the default closed the connection and failed every call still on it. Four
/// windows cover answers of 64 bytes and more filling the whole window (the
/// window still bounds what waits: 5 MiB of data).
const DATA_FRAME_BUDGET: usize = 4 * CONNECTION_WINDOW as usize;
/// How often an open connection is pinged, and how long a ping may go unanswered.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// Why an HTTP/2 request got no response.
#[derive(Debug)]
pub(super) enum Http2Failure {
    /// No connection: TCP, TLS, or the HTTP/2 handshake failed (shared with the
    /// requests that waited on that attempt).
    Connect(Arc<dyn std::error::Error + Send + Sync>),
    /// The connection or the stream broke, or the answer was not HTTP/2.
    Stream(h2::Error),
}

/// `headers` without those HTTP/2 forbids (RFC 9113 §8.2.2: connection-specific
/// fields, and `TE` other than `trailers`), which h2 refuses to send: a configured
/// or forwarded `Connection` header must not fail every call.
pub(super) fn without_connection_headers(mut headers: http::HeaderMap) -> http::HeaderMap {
    use http::header::TE;
    for name in CONNECTION_SPECIFIC {
        headers.remove(name);
    }
    if headers.get(TE).is_some_and(|v| v != "trailers") {
        headers.remove(TE);
    }
    headers
}

/// One worker's connection to an HTTP/2 upstream.
pub(super) struct Http2Pool {
    connector: Connector,
    uri: http::Uri,
    /// The longest a connection attempt (TCP, TLS and the preface) may take.
    connect_timeout: Duration,
    /// The open connection, with its number (so a closing connection forgets
    /// itself, not its successor).
    open: Mutex<Option<(u64, SendRequest<Bytes>)>>,
    /// One connection attempt at a time, and why the last one failed.
    connecting: tokio::sync::Mutex<Option<Arc<dyn std::error::Error + Send + Sync>>>,
    /// Connection attempts begun.
    attempts: AtomicU64,
    opened: AtomicU64,
}

impl Http2Pool {
    pub(super) fn new(
        connector: Connector,
        uri: http::Uri,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            connector,
            uri,
            connect_timeout,
            open: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(None),
            attempts: AtomicU64::new(0),
            opened: AtomicU64::new(0),
        })
    }

    /// Send `req` with `body`; the response's headers come through the future
    /// returned.
    pub(super) async fn send(
        self: &Arc<Self>,
        req: http::Request<()>,
        body: Bytes,
    ) -> Result<h2::client::ResponseFuture, Http2Failure> {
        let mut fresh = false;
        let (response, mut stream) = loop {
            let (n, send) = self.connection().await?;
            match send.ready().await {
                Ok(mut ready) => {
                    break ready
                        .send_request(req, body.is_empty())
                        .map_err(Http2Failure::Stream)?
                }
                // The connection died while idle: the request never left.
                Err(e) if !fresh => {
                    tracing::debug!(error = %e, "the upstream's HTTP/2 connection is gone; opening another");
                    self.forget(n);
                    fresh = true;
                }
                Err(e) => return Err(Http2Failure::Stream(e)),
            }
        };
        if !body.is_empty() {
            stream.send_data(body, true).map_err(Http2Failure::Stream)?;
        }
        // The stream lives on in `response` (dropping it resets the stream).
        drop(stream);
        Ok(response)
    }

    /// The open connection, or a new one.
    async fn connection(self: &Arc<Self>) -> Result<(u64, SendRequest<Bytes>), Http2Failure> {
        let open = self.open.lock().expect("http2 pool").clone();
        match open {
            Some(open) => Ok(open),
            // Boxed: a request's future keeps room for what it awaits, and it
            // lives as long as the call; connecting is rare and takes kilobytes.
            None => Box::pin(self.connect()).await,
        }
    }

    /// Open a connection, unless another caller just did. Callers that waited on
    /// an attempt that failed get its error rather than trying again one after
    /// another: to an upstream that does not answer, each would wait out the
    /// connect timeout in turn.
    async fn connect(self: &Arc<Self>) -> Result<(u64, SendRequest<Bytes>), Http2Failure> {
        let seen = self.attempts.load(Ordering::Acquire);
        let mut last = self.connecting.lock().await;
        if let Some(open) = self.open.lock().expect("http2 pool").clone() {
            return Ok(open);
        }
        if let (true, Some(why)) = (self.attempts.load(Ordering::Acquire) != seen, last.as_ref()) {
            return Err(Http2Failure::Connect(why.clone()));
        }
        self.attempts.fetch_add(1, Ordering::Release);
        // The connector times the TCP connection only; a TLS handshake the peer
        // never answers would otherwise hold every caller of this worker.
        let opened = match tokio::time::timeout(self.connect_timeout, self.dial()).await {
            Ok(opened) => opened,
            Err(_) => Err(Http2Failure::Connect(Arc::new(timed_out(
                self.connect_timeout,
            )))),
        };
        *last = match &opened {
            Err(Http2Failure::Connect(why)) => Some(why.clone()),
            _ => None,
        };
        opened
    }

    /// One connection attempt.
    async fn dial(self: &Arc<Self>) -> Result<(u64, SendRequest<Bytes>), Http2Failure> {
        let failed = |e: BoxError| Http2Failure::Connect(Arc::from(e));
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| tower_service::Service::poll_ready(&mut connector, cx))
            .await
            .map_err(failed)?;
        let io = tower_service::Service::call(&mut connector, self.uri.clone())
            .await
            .map_err(failed)?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_send_buffer_size(MAX_SEND_BUFFER)
            .data_frame_budget(DATA_FRAME_BUDGET)
            .enable_push(false)
            .handshake::<_, Bytes>(TokioIo::new(io))
            .await
            .map_err(|e| failed(e.into()))?;
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(drive(connection, Arc::downgrade(self), n));
        *self.open.lock().expect("http2 pool") = Some((n, send.clone()));
        Ok((n, send))
    }

    /// Forget connection `n` if it is still the open one.
    fn forget(&self, n: u64) {
        let mut open = self.open.lock().expect("http2 pool");
        if open.as_ref().is_some_and(|(m, _)| *m == n) {
            *open = None;
        }
    }
}

/// Run a connection until it closes or stops answering pings, then forget it.
async fn drive<T>(mut connection: h2::client::Connection<T, Bytes>, pool: Weak<Http2Pool>, n: u64)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut pings = connection.ping_pong();
    let keep_alive = async {
        let Some(pings) = pings.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(KEEP_ALIVE).await;
            match tokio::time::timeout(KEEP_ALIVE, pings.ping(h2::Ping::opaque())).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return format!("ping failed: {e}"),
                Err(_) => return format!("no answer to a ping within {KEEP_ALIVE:?}"),
            }
        }
    };
    tokio::select! {
        ended = &mut connection => match ended {
            Ok(()) => tracing::debug!("the upstream closed its HTTP/2 connection"),
            Err(e) => tracing::info!(error = %e, "the upstream's HTTP/2 connection broke"),
        },
        why = keep_alive => tracing::warn!(reason = %why, "closing the upstream's HTTP/2 connection"),
    }
    if let Some(pool) = pool.upgrade() {
        pool.forget(n);
    }
}
