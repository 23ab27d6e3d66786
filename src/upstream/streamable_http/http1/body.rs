//! An answer's head and body: parsing the head, the body's framing (RFC 9112
//! §6.3), and reading it off the connection as it is polled.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{Method, StatusCode, Version};
use http_body::{Frame, SizeHint};

use super::{
    BoxError, Conn, Fields, Head, Http1Failure, Http1Pool, MAX_HEAD, MAX_HEADERS, MAX_LINE,
};

/// Whether the connection may carry another request after this answer: not
/// after `Connection: close` or HTTP/1.0, and not after an answer with both
/// `Transfer-Encoding` and `Content-Length` (RFC 9112 §6.1: read as chunked,
/// then close, as the two may disagree about where the next answer starts).
pub(super) fn keeps_alive(head: &Head) -> bool {
    let h = &head.headers;
    head.version == Version::HTTP_11
        && !h
            .get_all(header::CONNECTION)
            .any(|v| crate::headers::lists_token(v.as_bytes(), "close"))
        && !(h.contains(header::TRANSFER_ENCODING) && h.contains(header::CONTENT_LENGTH))
}

/// How an answer's body is delimited.
pub(super) enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

impl Framing {
    fn reusable(&self) -> bool {
        !matches!(self, Framing::UntilClose)
    }

    fn state(self) -> State {
        match self {
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        }
    }
}

/// Read until a whole answer head is in, and parse it.
pub(super) fn poll_head(
    conn: &mut Conn,
    cx: &mut Context<'_>,
    method: &Method,
) -> Poll<Result<(Head, Framing), Http1Failure>> {
    loop {
        if !conn.buf.is_empty() {
            if let Some((parts, framing, len)) = parse_head(&conn.buf, method)? {
                conn.buf.advance(len);
                return Poll::Ready(Ok((parts, framing)));
            }
            if conn.buf.len() > MAX_HEAD {
                return Poll::Ready(Err(Http1Failure::NotHttp(format!(
                    "an answer head longer than {MAX_HEAD} bytes"
                ))));
            }
        }
        let read = ready!(conn.poll_fill(cx)).map_err(Http1Failure::Dropped)?;
        if read == 0 {
            return Poll::Ready(Err(Http1Failure::Dropped(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                match conn.buf.is_empty() {
                    true => "the connection closed before an answer",
                    false => "the connection closed in the middle of the answer's head",
                },
            ))));
        }
    }
}

/// An answer's head from the start of `buf`, with its framing and length, or
/// `None` while it is incomplete.
fn parse_head(buf: &[u8], method: &Method) -> Result<Option<(Head, Framing, usize)>, Http1Failure> {
    let not_http = |m: String| Http1Failure::NotHttp(m);
    // Uninitialised: filling 100 empty fields (3.2 KB) on every parse cost more
    // than the parse.
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut answer = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut answer,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(not_http(format!("invalid answer head: {e}"))),
    };
    let code = answer.code.unwrap_or_default();
    let status = StatusCode::from_u16(code).map_err(|e| not_http(format!("status {code}: {e}")))?;
    let mut headers = Fields::with_capacity(answer.headers.len());
    for field in answer.headers.iter() {
        let name = crate::headers::name(field.name.as_bytes())
            .ok_or_else(|| not_http(format!("invalid header name {:?}", field.name)))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|e| not_http(format!("header {name}: {e}")))?;
        headers.append(name, value);
    }
    let framing = framing(status, method, &headers).map_err(not_http)?;
    let head = Head {
        status,
        version: match answer.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        },
        headers,
    };
    Ok(Some((head, framing, len)))
}

/// How the body after this head is delimited (RFC 9112 §6.3).
pub(super) fn framing(
    status: StatusCode,
    method: &Method,
    headers: &Fields,
) -> Result<Framing, String> {
    if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Length(0));
    }
    if let Some(last) = headers.get_all(header::TRANSFER_ENCODING).last() {
        let chunked = last
            .as_bytes()
            .rsplit(|b| *b == b',')
            .next()
            .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        return Ok(match chunked {
            true => Framing::Chunked,
            false => Framing::UntilClose,
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for n in value.as_bytes().split(|b| *b == b',') {
            let n = std::str::from_utf8(n.trim_ascii())
                .ok()
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| format!("invalid Content-Length {value:?}"))?;
            match length {
                Some(m) if m != n => return Err(format!("conflicting Content-Length {value:?}")),
                _ => length = Some(n),
            }
        }
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

/// Where reading a body is.
#[derive(Clone, Copy)]
enum State {
    /// This many bytes to go.
    Length(u64),
    /// At a chunk-size line.
    ChunkSize,
    /// This many bytes of a chunk to go, then its CRLF.
    ChunkData(u64),
    ChunkEnd,
    /// After the last chunk: trailer fields up to an empty line.
    Trailers,
    /// Whatever comes until the connection closes.
    UntilClose,
    Done,
}

/// An answer's body, read from its connection as it is polled; read to the end,
/// it gives the connection back to the pool.
pub(in super::super) struct Http1Body {
    conn: Option<Box<Conn>>,
    state: State,
    pool: Arc<Http1Pool>,
    /// Whether the connection may be kept once the body is read.
    keep: bool,
}

impl Http1Body {
    /// The body after a head framed as `framing`, on `conn`, which goes back to
    /// `pool` once the body is read if `keep` (and the framing) allow.
    pub(super) fn new(conn: Box<Conn>, framing: Framing, keep: bool, pool: Arc<Http1Pool>) -> Self {
        let mut body = Http1Body {
            keep: keep && framing.reusable(),
            conn: Some(conn),
            state: framing.state(),
            pool,
        };
        if matches!(body.state, State::Length(0)) {
            body.finish();
        }
        body
    }

    /// The body is read: keep the connection if it can take another request.
    fn finish(&mut self) {
        self.state = State::Done;
        if let Some(conn) = self.conn.take() {
            if self.keep && conn.buf.is_empty() {
                self.pool.put(conn);
            }
        }
    }

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            match self.state {
                State::Done => return Poll::Ready(None),
                State::Length(0) => {
                    self.finish();
                    return Poll::Ready(None);
                }
                State::Length(n) | State::ChunkData(n) if !conn.buf.is_empty() => {
                    let take = n.min(conn.buf.len() as u64);
                    let data = conn.buf.split_to(take as usize).freeze();
                    self.state = match self.state {
                        State::Length(_) => State::Length(n - take),
                        _ if n == take => State::ChunkEnd,
                        _ => State::ChunkData(n - take),
                    };
                    if matches!(self.state, State::Length(0)) {
                        // The last bytes: the connection goes back now, as a
                        // reader that sees the end may not poll again.
                        self.finish();
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
                State::UntilClose if !conn.buf.is_empty() => {
                    return Poll::Ready(Some(Ok(conn.buf.split().freeze())));
                }
                State::ChunkSize | State::ChunkEnd | State::Trailers => {
                    if let Some(line) = take_line(&mut conn.buf) {
                        self.state = match self.state {
                            State::ChunkEnd if line.is_empty() => State::ChunkSize,
                            State::ChunkEnd => return broke("a chunk longer than its size"),
                            State::ChunkSize => match chunk_size(&line) {
                                Some(0) => State::Trailers,
                                Some(n) => State::ChunkData(n),
                                None => {
                                    let line = String::from_utf8_lossy(&line);
                                    return broke(&format!("invalid chunk size {line:?}"));
                                }
                            },
                            _ if line.is_empty() => {
                                self.finish();
                                return Poll::Ready(None);
                            }
                            _ => State::Trailers,
                        };
                        continue;
                    }
                    if conn.buf.len() > MAX_LINE {
                        return broke("a chunk-size line or trailer too long");
                    }
                }
                _ => {}
            }
            let read = match ready!(conn.poll_fill(cx)) {
                Ok(read) => read,
                // poll_frame lets the connection go on any error.
                Err(e) => {
                    let e = io::Error::new(e.kind(), format!("error reading the body: {e}"));
                    return Poll::Ready(Some(Err(e.into())));
                }
            };
            if read == 0 {
                self.conn = None;
                return match self.state {
                    State::UntilClose => {
                        self.state = State::Done;
                        Poll::Ready(None)
                    }
                    _ => broke("the connection closed before the body ended"),
                };
            }
        }
    }
}

/// A body that cannot be read further.
fn broke(why: &str) -> Poll<Option<Result<Bytes, BoxError>>> {
    Poll::Ready(Some(Err(io::Error::new(
        io::ErrorKind::InvalidData,
        why.to_owned(),
    )
    .into())))
}

/// The next line of `buf` without its line ending, if a whole one is there
/// (split off, not copied: a chunked body has a few per answer).
fn take_line(buf: &mut BytesMut) -> Option<BytesMut> {
    let end = buf.iter().position(|b| *b == b'\n')?;
    let mut line = buf.split_to(end + 1);
    let len = line.len() - 1 - usize::from(line.ends_with(b"\r\n"));
    line.truncate(len);
    Some(line)
}

/// A chunk-size line's size (extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let hex = line.split(|b| *b == b';').next()?.trim_ascii();
    let hex = std::str::from_utf8(hex).ok()?;
    (!hex.is_empty() && hex.len() <= 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

impl http_body::Body for Http1Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let body = self.get_mut();
        let polled = body.poll_data(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            body.state = State::Done;
            body.conn = None;
        }
        polled.map(|d| d.map(|d| d.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Length(n) => SizeHint::with_exact(n),
            State::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
