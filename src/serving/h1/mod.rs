//! HTTP/1.1 connections on tasklift's own small server, with hyper for what it
//! does not take.
//!
//! hyper's server spent about 16,000 instructions on each proxied call (its
//! dispatcher's state machine, a `Connection` header check, the head's encoder,
//! buffered I/O), more than a quarter of the call. The requests MCP clients send
//! are few in shape: `POST` with a `Content-Length` body, `GET` and `DELETE`
//! without one, in HTTP/1.1 (or 1.0 asking to be kept alive). Those are read here: the head parsed by
//! `httparse`, the body read whole (at most `server.max_body_bytes`) before the
//! handler runs, the answer written in one write when its length is known
//! (`Content-Length`), chunked as it comes otherwise (an SSE stream).
//!
//! Anything else hands the connection, with what was read of it, to hyper for
//! the rest of its life: other methods, `Transfer-Encoding`, `Expect`,
//! `Upgrade`, a body over the limit (which hyper streams to the handler's 413), a
//! head that does not parse or exceeds 64 KiB or 100 fields (hyper's 400 and
//! 431). Behaviour kept from hyper's server, so a connection behaves the same
//! either way:
//!
//! - the header read timeout runs from when the connection waits for a request's
//!   head (an idle kept-alive connection included) until the head is read; when
//!   it fires the connection closes without an answer;
//! - a client that closes its side while its request runs cancels the request
//!   (its handler, or the answer's stream, is dropped); data that comes instead
//!   (a pipelined request) is kept for after the answer and ends the watch;
//! - `Connection: close` from the client is answered with `connection: close`
//!   and the connection closes; at shutdown an idle connection closes at once
//!   and a busy one after its answer;
//! - every answer carries `date`; 1xx, 204 and 304 carry no body.

use std::future::Future;
use std::io::{self, Write};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, Response, StatusCode, Uri, Version};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::body::RespBody;
use super::request::{ReqBody, Request};
use crate::headers::Fields;

/// Longest request head read here; a longer one goes to hyper (whose limit is
/// about 400 KiB).
const MAX_HEAD: usize = 64 * 1024;
/// Most header fields read here (hyper's limit; more go to hyper for its 431).
const MAX_HEADERS: usize = 100;

/// How a connection served here ended.
pub enum Ended {
    /// Closed: by the client, after `Connection: close`, at shutdown, or on an
    /// I/O error.
    Closed,
    /// No complete head came within the header read timeout.
    TimedOut,
    /// A request this server does not take: hyper serves the connection from
    /// here, starting with the bytes already read (`Prefixed`).
    HandOver(Bytes),
}

/// What one connection needs: the header read timeout, the largest body read
/// here, and the shutdown signal.
pub struct Settings {
    pub header_timeout: Duration,
    pub max_body: usize,
    pub shutdown: watch::Receiver<bool>,
}

/// Serve requests on `io` until it closes or must go to hyper. `answer` is
/// called once per request with the request.
pub async fn serve<F, Fut>(io: &mut TcpStream, set: &Settings, answer: F) -> Ended
where
    F: Fn(Request) -> Fut,
    Fut: Future<Output = Response<RespBody>>,
{
    let mut buf = BytesMut::with_capacity(4096);
    let mut out = Vec::with_capacity(1024);
    let mut waits = Waits::new(set);
    loop {
        let head = match read_head(io, &mut buf, set, &mut waits).await {
            Step::Head(h) => h,
            Step::Closed => return Ended::Closed,
            Step::TimedOut => return Ended::TimedOut,
            Step::HandOver => return Ended::HandOver(buf.freeze()),
        };
        while buf.len() < head.head_len + head.body_len {
            buf.reserve(head.head_len + head.body_len - buf.len());
            match io.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return Ended::Closed, // gone mid-body
                Ok(_) => {}
            }
        }
        let close = head.close || *set.shutdown.borrow();
        let http10 = head.http10;
        let req = match head.request(&mut buf) {
            Ok(r) => r,
            Err(()) => {
                let _ = io.write_all(BAD_REQUEST).await;
                return Ended::Closed;
            }
        };
        // Built where it stays, as hyper's slot needed: the handler's future is
        // several KB, and moving it would copy it per request.
        let fut = Box::into_pin(Box::write(Box::new_uninit(), answer(req)));
        let Some(resp) = or_gone(fut, io, &mut buf).await else {
            return Ended::Closed;
        };
        let close = close || *set.shutdown.borrow();
        match respond(io, &mut buf, &mut out, resp, (http10, close)).await {
            Ok(true) if !close => settle(&mut buf, &mut out),
            _ => return Ended::Closed,
        }
    }
}

/// Most a kept-alive connection holds on to between requests in each of its
/// buffers.
const KEEP: usize = 64 * 1024;

/// The buffers after an answer, made small again after a large request or
/// answer (a body read whole, an answer written in one piece), keeping any
/// bytes of the next request: kept, they would hold that much memory for as
/// long as the connection stays open.
fn settle(buf: &mut BytesMut, out: &mut Vec<u8>) {
    if buf.capacity() > KEEP {
        *buf = BytesMut::from(&buf[..]);
    }
    if out.capacity() > KEEP {
        *out = Vec::with_capacity(1024);
    }
}

/// A request head read and checked as this server takes it.
struct Head {
    head_len: usize,
    body_len: usize,
    method: Method,
    /// The request target, as a range of the head.
    target: (usize, usize),
    /// Each field's name, and its value as a range of the head.
    fields: Vec<(HeaderName, (usize, usize))>,
    /// An HTTP/1.0 request (answered in HTTP/1.0).
    http10: bool,
    /// The connection closes after this request.
    close: bool,
}

enum Step {
    Head(Head),
    Closed,
    TimedOut,
    HandOver,
}

/// What a connection waits on besides its socket while it waits for a head,
/// set up once per connection: setting a timer and a shutdown watch for every
/// request, and taking them down after, was a tenth of this server's work.
struct Waits {
    /// Fires at or before the head's deadline: a deadline only moves later, so
    /// the timer is moved only when it fires early (`read_head`).
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Ends when shutdown begins.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Waits {
    fn new(set: &Settings) -> Self {
        let mut rx = set.shutdown.clone();
        Waits {
            timer: Box::pin(tokio::time::sleep(set.header_timeout)),
            stop: Box::pin(async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }),
        }
    }
}

/// The next request's head: read until it parses, within the header read
/// timeout. An idle connection closes at shutdown.
async fn read_head(
    io: &mut TcpStream,
    buf: &mut BytesMut,
    set: &Settings,
    waits: &mut Waits,
) -> Step {
    let deadline = tokio::time::Instant::now() + set.header_timeout;
    loop {
        if !buf.is_empty() {
            match parse(buf, set.max_body) {
                Parsed::Head(h) => return Step::Head(h),
                Parsed::HandOver => return Step::HandOver,
                Parsed::Partial if buf.len() >= MAX_HEAD => return Step::HandOver,
                Parsed::Partial => {}
            }
        }
        let idle = buf.is_empty();
        if idle && *set.shutdown.borrow() {
            return Step::Closed;
        }
        buf.reserve(4096);
        tokio::select! {
            biased;
            r = io.read_buf(buf) => match r {
                Ok(0) | Err(_) => return Step::Closed,
                Ok(_) => {}
            },
            () = waits.timer.as_mut() => {
                if tokio::time::Instant::now() >= deadline {
                    return Step::TimedOut;
                }
                // Set for an earlier head: moved to this one's deadline.
                waits.timer.as_mut().reset(deadline);
            }
            () = waits.stop.as_mut(), if idle => return Step::Closed,
        }
    }
}

enum Parsed {
    Head(Head),
    Partial,
    HandOver,
}

/// The head at the start of `buf`, when it is complete and of a request this
/// server takes.
fn parse(buf: &[u8], max_body: usize) -> Parsed {
    // Uninitialised, as the upstream client's: filling 100 empty fields (3.2 KB)
    // on every parse costs more than the parse.
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut fields,
    );
    let head_len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::HandOver,
    };
    let method = match req.method {
        Some("POST") => Method::POST,
        Some("GET") => Method::GET,
        Some("DELETE") => Method::DELETE,
        _ => return Parsed::HandOver,
    };
    let (Some(version @ (0 | 1)), Some(target)) = (req.version, req.path) else {
        return Parsed::HandOver;
    };
    if !target.starts_with('/') {
        return Parsed::HandOver;
    }
    let at = |s: &[u8]| {
        let start = s.as_ptr() as usize - buf.as_ptr() as usize;
        (start, start + s.len())
    };
    let mut body_len = None;
    let (mut close, mut keep_alive) = (false, false);
    let mut named = Vec::with_capacity(req.headers.len());
    for f in req.headers.iter() {
        let Some(name) = crate::headers::name(f.name.as_bytes()) else {
            return Parsed::HandOver;
        };
        if name == http::header::CONTENT_LENGTH {
            match (body_len, content_length(f.value)) {
                (None, Some(n)) if n <= max_body => body_len = Some(n),
                _ => return Parsed::HandOver,
            }
        } else if name == http::header::TRANSFER_ENCODING
            || name == http::header::EXPECT
            || name == http::header::UPGRADE
        {
            return Parsed::HandOver;
        } else if name == http::header::CONNECTION {
            close |= crate::headers::lists_token(f.value, "close");
            keep_alive |= crate::headers::lists_token(f.value, "keep-alive");
        }
        named.push((name, at(f.value)));
    }
    Parsed::Head(Head {
        head_len,
        body_len: body_len.unwrap_or(0),
        method,
        target: at(target.as_bytes()),
        fields: named,
        http10: version == 0,
        // HTTP/1.0 closes unless the client asks to keep the connection.
        close: close || (version == 0 && !keep_alive),
    })
}

/// The first request in `bytes` as this server reads it, or `None` when it is
/// incomplete, goes to hyper, or is refused with a 400. (For the fuzzer: the
/// parse and the request built from it, without a socket.)
pub fn first_request(bytes: &[u8], max_body: usize) -> Option<Request> {
    let Parsed::Head(head) = parse(bytes, max_body) else {
        return None;
    };
    if bytes.len() < head.head_len + head.body_len {
        return None;
    }
    head.request(&mut BytesMut::from(bytes)).ok()
}

/// A `Content-Length` value: digits only.
fn content_length(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 15 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

impl Head {
    /// The request, taking its head and body from the front of `buf`. The
    /// field values and target are slices of the head, not copies.
    fn request(self, buf: &mut BytesMut) -> Result<Request, ()> {
        let head = buf.split_to(self.head_len).freeze();
        let body = buf.split_to(self.body_len).freeze();
        let uri =
            Uri::from_maybe_shared(head.slice(self.target.0..self.target.1)).map_err(|_| ())?;
        // Sized first: collected through a `Result`, the list grew twice.
        let mut headers = Fields::with_capacity(self.fields.len());
        for (name, (a, b)) in self.fields {
            let value = HeaderValue::from_maybe_shared(head.slice(a..b)).map_err(|_| ())?;
            headers.append(name, value);
        }
        Ok(Request {
            method: self.method,
            uri,
            version: if self.http10 {
                Version::HTTP_10
            } else {
                Version::HTTP_11
            },
            headers,
            body: ReqBody::Whole(Some(body)),
        })
    }
}

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// `fut`'s output, or `None` when the client closes its side first (which drops
/// `fut`: cancellation). Bytes that come instead are kept in `buf` for the next
/// request, and the watch stops, as hyper's does.
async fn or_gone<T>(
    fut: impl Future<Output = T>,
    io: &mut TcpStream,
    buf: &mut BytesMut,
) -> Option<T> {
    let mut fut = pin!(fut);
    let mut watching = buf.is_empty();
    loop {
        tokio::select! {
            biased;
            v = &mut fut => return Some(v),
            r = io.read_buf(buf), if watching => match r {
                Ok(0) | Err(_) => return None,
                Ok(_) => watching = false,
            },
        }
    }
}

/// Write `resp`: its head and, when its length is known, its body in one write;
/// else its body as it comes, chunked (HTTP/1.0: as it is, then the connection
/// closes). `Ok(false)` when the connection must close: the client went away
/// during a stream, or an HTTP/1.0 stream ended.
async fn respond(
    io: &mut TcpStream,
    buf: &mut BytesMut,
    out: &mut Vec<u8>,
    resp: Response<RespBody>,
    (http10, close): (bool, bool),
) -> io::Result<bool> {
    let (parts, mut body) = resp.into_parts();
    out.clear();
    out.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        // The framing is this writer's, whatever a handler set.
        if name == http::header::CONTENT_LENGTH || name == http::header::TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    date(out);
    let status = parts.status;
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        out.extend_from_slice(b"\r\n");
        io.write_all(out).await?;
        return Ok(true);
    }
    if let Some(n) = body.size_hint().exact() {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(crate::sequence::decimal(n).as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                out.extend_from_slice(&data);
            }
        }
        io.write_all(out).await?;
        return Ok(true);
    }
    if http10 {
        out.extend_from_slice(b"\r\n");
        io.write_all(out).await?;
        while let Some(Some(Ok(frame))) = or_gone(body.frame(), io, buf).await {
            if let Ok(data) = frame.into_data() {
                io.write_all(&data).await?;
            }
        }
        return Ok(false);
    }
    out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
    io.write_all(out).await?;
    loop {
        let Some(frame) = or_gone(body.frame(), io, buf).await else {
            return Ok(false);
        };
        let Some(Ok(frame)) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue; // trailers: not sent
        };
        if data.is_empty() {
            continue;
        }
        out.clear();
        let _ = write!(out, "{:x}\r\n", data.len());
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\r\n");
        io.write_all(out).await?;
    }
    io.write_all(b"0\r\n\r\n").await?;
    Ok(true)
}

/// The `date` field, formatted once a second per thread.
fn date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((0, String::new())) };
    }
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != secs || text.is_empty() {
            *at = secs;
            *text = format!("date: {}\r\n", httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(text.as_bytes());
    });
}

/// A connection handed to hyper: what was read of it first, then the socket.
pub struct Prefixed {
    pub read: Bytes,
    pub io: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.read.is_empty() {
            let n = self.read.len().min(out.remaining());
            out.put_slice(&self.read[..n]);
            self.read.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, out)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, b)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
