//! A request as tasklift's handlers read it, from either server: tasklift's own
//! HTTP/1.1 reader ([`h1`](super::h1)) or hyper (a connection handed to it).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::headers::Fields;

/// A request: hyper's head without its header map (the fields are a list,
/// [`Fields`]), and its body.
#[derive(Debug)]
pub struct Request {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub headers: Fields,
    pub body: ReqBody,
}

impl Request {
    /// A request hyper read.
    pub fn from_hyper(req: http::Request<Incoming>) -> Self {
        let (parts, body) = req.into_parts();
        Self {
            method: parts.method,
            uri: parts.uri,
            version: parts.version,
            headers: Fields::from(parts.headers),
            body: ReqBody::Streamed(body),
        }
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    pub fn headers(&self) -> &Fields {
        &self.headers
    }
}

/// A request's body: read whole before the handler runs (a request read here),
/// or hyper's stream (a connection handed to hyper).
#[derive(Debug)]
pub enum ReqBody {
    /// The whole body; `None` once taken.
    Whole(Option<Bytes>),
    /// hyper's body stream.
    Streamed(Incoming),
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ReqBody::Whole(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            ReqBody::Streamed(i) => Pin::new(i).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Whole(b) => b.as_ref().is_none_or(Bytes::is_empty),
            ReqBody::Streamed(i) => i.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Whole(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ReqBody::Streamed(i) => i.size_hint(),
        }
    }
}
