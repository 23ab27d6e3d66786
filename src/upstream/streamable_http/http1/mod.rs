//! HTTP/1.1 upstreams on tasklift's own small client: the call that sends a
//! request writes it and reads the answer on the connection itself.
//!
//! hyper's client gives each connection a task of its own, a request channel
//! (a 32-slot block of about 9 KiB once used), 8 KiB read and write buffers and,
//! through hyper-util, a pool future: about 23 KiB for every running call, each
//! of which holds a connection while the upstream works. Here a call waiting for
//! its answer holds the socket and nothing else (readiness, then a read into a
//! buffer sized for what arrived), and no hand-off between tasks happens on the
//! way.
//!
//! - Requests: origin-form, `Host` from the URL unless the headers carry one,
//!   `Content-Length` always for a body; hop-by-hop headers are not sent. A small
//!   body goes in the same write as the head.
//! - Answers: the head parsed by `httparse` (informational answers skipped), the
//!   body framed as RFC 9112 §6.3 says: none (HEAD, 204, 304), chunked,
//!   `Content-Length`, or until the connection closes.
//! - Connections: per front-door worker, the idle ones kept newest first for
//!   [`IDLE_TIMEOUT`], checked before reuse (a closed one is dropped unused), and
//!   closed by a reaper once stale. A connection goes back only after its body
//!   was read to the end with nothing after it; a body dropped early closes it
//!   (which is cancellation on HTTP). A request whose write fails on a reused
//!   connection goes once more on a new one; one that was written is never sent
//!   twice.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName};
use http::{Method, StatusCode};
use hyper_rustls::MaybeHttpsStream;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::connect::{BoxError, Timed, CONNECTION_SPECIFIC};
use super::{Fields, Head};
pub(super) use body::Http1Body;
use body::{keeps_alive, poll_head};

mod body;

/// How long an idle connection is kept (hyper-util's default was the same).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// An idle connection reused within this is taken on tokio's word that
/// nothing came on it; one idle longer is asked the kernel (see `usable`).
/// Upstreams close idle connections after seconds (Node.js 5 s, uvicorn 5 s).
const ASK_AFTER: Duration = Duration::from_secs(1);
/// Most idle connections kept per worker; more are closed as they come back.
const MAX_IDLE: usize = 1024;
/// Most header fields in an answer's head (hyper's limit).
pub(super) const MAX_HEADERS: usize = 100;
/// Longest answer head read (hyper's default buffer limit is larger; no MCP
/// server's head comes near this).
pub(super) const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size line or trailer section.
pub(super) const MAX_LINE: usize = 8 * 1024;
/// A request body up to this size goes in one write with the head.
const INLINE_BODY: usize = 64 * 1024;
/// The first read of an answer; later reads grow while they fill their room.
const FIRST_READ: usize = 4 * 1024;
/// The largest read.
const MAX_READ: usize = 256 * 1024;

/// Any stream an HTTPS connection reads and writes through.
trait Tls: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Tls for T {}

/// One connection: plain TCP read by readiness (a waiting call holds no
/// buffer), or TLS.
enum Io {
    Plain(TcpStream),
    Tls(Box<dyn Tls>),
}

/// A connection and what was read from it but not yet consumed.
pub(super) struct Conn {
    io: Io,
    pub(super) buf: BytesMut,
    /// How much the next read makes room for.
    next_read: usize,
}

impl Conn {
    fn new(io: Io) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            next_read: FIRST_READ,
        }
    }

    /// Read more into the buffer: the number of bytes read, 0 at end of stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let room = self.next_read;
        let n = match &mut self.io {
            Io::Plain(tcp) => {
                ready!(tcp.poll_read_ready(cx))?;
                self.buf.reserve(room);
                // Through `AsyncRead`, not `try_read_buf`: a read that leaves room
                // shows the socket drained (epoll is edge-triggered) and tokio then
                // forgets its readiness, so `usable` knows an idle connection has
                // nothing to read without a system call. `try_read_buf` kept the
                // readiness until a read came back empty: one more `recvfrom` per
                // call.
                ready!(tokio_util::io::poll_read_buf(
                    Pin::new(tcp),
                    cx,
                    &mut self.buf
                ))?
            }
            Io::Tls(tls) => {
                let mut chunk = [0u8; 16 * 1024];
                let mut rb = ReadBuf::new(&mut chunk[..room.min(16 * 1024)]);
                ready!(Pin::new(tls).poll_read(cx, &mut rb))?;
                self.buf.extend_from_slice(rb.filled());
                rb.filled().len()
            }
        };
        if n >= room {
            self.next_read = (room * 2).min(MAX_READ);
        }
        Poll::Ready(Ok(n))
    }

    async fn write(&mut self, head: &[u8], body: &[u8]) -> io::Result<()> {
        match &mut self.io {
            Io::Plain(tcp) => {
                tcp.write_all(head).await?;
                tcp.write_all(body).await
            }
            Io::Tls(tls) => {
                tls.write_all(head).await?;
                tls.write_all(body).await?;
                tls.flush().await
            }
        }
    }

    /// Whether a connection idle for `idle` can take a request: open, with
    /// nothing unasked-for to read.
    ///
    /// A plain connection reused within [`ASK_AFTER`] is taken on tokio's
    /// readiness: one whose socket it last saw drained costs no system call.
    /// One idle longer is asked the kernel, as the event of an upstream
    /// closing it at its idle timeout may have come since the worker last read
    /// its events.
    fn usable(&mut self, idle: Duration) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        match &mut self.io {
            Io::Plain(tcp) if idle >= ASK_AFTER => nothing_to_read(tcp),
            Io::Plain(tcp) => {
                matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            Io::Tls(tls) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                let mut rb = ReadBuf::new(&mut probe);
                Pin::new(tls).poll_read(&mut cx, &mut rb).is_pending()
            }
        }
    }
}

/// Whether the kernel holds nothing to read on `tcp`, nor its end: a peek.
fn nothing_to_read(tcp: &TcpStream) -> bool {
    let mut probe = [std::mem::MaybeUninit::uninit(); 1];
    let peeked = socket2::SockRef::from(tcp).peek(&mut probe);
    matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// Why an HTTP/1.1 request got no answer.
#[derive(Debug)]
pub(super) enum Http1Failure {
    /// No connection: TCP or TLS failed or timed out.
    Connect(BoxError),
    /// The connection failed or closed before a whole answer head came.
    Dropped(io::Error),
    /// What came back is not an HTTP/1 answer.
    NotHttp(String),
}

/// One worker's connections to an HTTP/1.1 upstream.
pub(super) struct Http1Pool {
    connector: Timed,
    uri: http::Uri,
    /// The request target (path and query) and `Host`, from the URL.
    target: Box<str>,
    host: Box<str>,
    /// Idle connections, oldest first, with when each came back.
    idle: Mutex<VecDeque<(Box<Conn>, Instant)>>,
    /// How long an idle connection is kept ([`IDLE_TIMEOUT`]).
    idle_timeout: Duration,
    reaping: AtomicBool,
}

impl Http1Pool {
    pub(super) fn new(connector: Timed, uri: http::Uri) -> Arc<Self> {
        let target = uri.path_and_query().map_or("/", |p| p.as_str()).into();
        let host = uri.authority().map_or("", |a| a.as_str()).into();
        Arc::new(Self {
            connector,
            uri,
            target,
            host,
            idle: Mutex::new(VecDeque::new()),
            idle_timeout: IDLE_TIMEOUT,
            reaping: AtomicBool::new(false),
        })
    }

    /// Send one request; the answer's head, and its body still streaming.
    pub(super) async fn send(
        self: &Arc<Self>,
        method: &Method,
        headers: &Fields,
        body: &Bytes,
    ) -> Result<(Head, Http1Body), Http1Failure> {
        // Boxed: writing (and, rarely, connecting) is brief; the wait for the
        // answer then holds the connection alone.
        let mut conn = Box::pin(self.sent(method, headers, body)).await?;
        let (parts, framing) = loop {
            let head = poll_fn(|cx| poll_head(&mut conn, cx, method)).await?;
            match head.0.status {
                StatusCode::SWITCHING_PROTOCOLS => {
                    return Err(Http1Failure::NotHttp(
                        "101 Switching Protocols to a request that asked for no upgrade".into(),
                    ))
                }
                s if s.is_informational() => continue,
                _ => break head,
            }
        };
        let keep = keeps_alive(&parts);
        Ok((parts, Http1Body::new(conn, framing, keep, self.clone())))
    }

    /// A connection with the request written on it.
    async fn sent(
        self: &Arc<Self>,
        method: &Method,
        headers: &Fields,
        body: &Bytes,
    ) -> Result<Box<Conn>, Http1Failure> {
        let mut head = self.head(method, headers, body.len());
        let rest: &[u8] = match body.len() <= INLINE_BODY {
            true => {
                head.extend_from_slice(body);
                &[]
            }
            false => body,
        };
        if let Some(mut conn) = self.take_idle() {
            match conn.write(&head, rest).await {
                Ok(()) => return Ok(conn),
                // Closed while idle: the request did not reach the server.
                Err(e) => {
                    tracing::debug!(error = %e, "an idle upstream connection is gone; opening another")
                }
            }
        }
        let mut conn = self.connect().await?;
        conn.write(&head, rest)
            .await
            .map_err(Http1Failure::Dropped)?;
        Ok(conn)
    }

    /// The request line and headers.
    fn head(&self, method: &Method, headers: &Fields, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + len.min(INLINE_BODY));
        out.extend_from_slice(method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        if !headers.contains(&header::HOST) {
            out.extend_from_slice(b"host: ");
            out.extend_from_slice(self.host.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        for (name, value) in headers.iter() {
            if hop_by_hop(name) {
                continue;
            }
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        let takes_body = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
        if len > 0 || takes_body {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(crate::sequence::decimal(len as u64).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    /// A new connection, the attempt bounded by the connect timeout.
    async fn connect(&self) -> Result<Box<Conn>, Http1Failure> {
        let mut connector = self.connector.clone();
        poll_fn(|cx| tower_service::Service::poll_ready(&mut connector, cx))
            .await
            .map_err(Http1Failure::Connect)?;
        let stream = tower_service::Service::call(&mut connector, self.uri.clone())
            .await
            .map_err(Http1Failure::Connect)?;
        Ok(Box::new(Conn::new(match stream {
            MaybeHttpsStream::Http(tcp) => Io::Plain(tcp.into_inner()),
            MaybeHttpsStream::Https(tls) => Io::Tls(Box::new(tls.into_inner())),
        })))
    }

    /// The newest idle connection that is still open, if any.
    fn take_idle(&self) -> Option<Box<Conn>> {
        let mut idle = self.idle.lock().expect("http1 pool");
        while let Some((mut conn, since)) = idle.pop_back() {
            let idle_for = since.elapsed();
            if idle_for >= self.idle_timeout {
                // The rest are older still.
                idle.clear();
                return None;
            }
            if conn.usable(idle_for) {
                return Some(conn);
            }
        }
        None
    }

    /// Keep a connection whose answer was read to the end.
    pub(super) fn put(self: &Arc<Self>, mut conn: Box<Conn>) {
        // What the last answer left of its buffer would otherwise stay with the
        // connection, and with the next call that waits on it.
        conn.buf = BytesMut::new();
        conn.next_read = FIRST_READ;
        let mut idle = self.idle.lock().expect("http1 pool");
        if idle.len() < MAX_IDLE {
            idle.push_back((conn, Instant::now()));
        }
        drop(idle);
        // On the runtime the connection is registered with (a body is read on
        // one; without one, stale connections are still dropped on the next take).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            if !self.reaping.swap(true, Ordering::Relaxed) {
                rt.spawn(reap(Arc::downgrade(self)));
            }
        }
    }

    /// Close the connections idle for the idle timeout.
    fn close_stale(&self) {
        let mut idle = self.idle.lock().expect("http1 pool");
        while idle
            .front()
            .is_some_and(|(_, since)| since.elapsed() >= self.idle_timeout)
        {
            idle.pop_front();
        }
    }

    /// Idle connections kept now.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.lock().expect("http1 pool").len()
    }
}

/// Close stale idle connections every half idle timeout while the pool lives.
async fn reap(pool: Weak<Http1Pool>) {
    loop {
        let Some(every) = pool.upgrade().map(|p| p.idle_timeout / 2) else {
            return;
        };
        tokio::time::sleep(every).await;
        match pool.upgrade() {
            Some(pool) => pool.close_stale(),
            None => return,
        }
    }
}

/// Headers about this connection rather than the message, which tasklift's
/// client sets itself or does not send.
fn hop_by_hop(name: &HeaderName) -> bool {
    *name == header::CONTENT_LENGTH
        || *name == header::TE
        || CONNECTION_SPECIFIC.contains(&name.as_str())
}

#[cfg(test)]
mod tests;
