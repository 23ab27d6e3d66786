//! Response bodies: a whole JSON message, or an SSE stream fed by a channel.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;

use crate::reply::StreamItem;
use tasklift_protocol::sse;

/// The body type of every tasklift response.
pub type RespBody = BoxBody<Bytes, Infallible>;

/// A complete body.
pub fn full(b: impl Into<Bytes>) -> RespBody {
    Full::new(b.into()).boxed()
}

/// An SSE body that ends after the channel closes.
pub fn sse(rx: mpsc::Receiver<StreamItem>) -> RespBody {
    SseBody { rx, span: None }.boxed()
}

/// [`sse`], with the span of the request it answers: the answer on the stream
/// (a result, an error) is recorded on it, and it ends with the stream.
/// An SSE body is only ever sent with 200, so that is its span's HTTP status.
pub fn sse_traced(
    rx: mpsc::Receiver<StreamItem>,
    mut span: crate::observe::spans::Span,
) -> RespBody {
    span.set("http.response.status_code", 200i64);
    let span = span.is_recording().then_some(span);
    SseBody { rx, span }.boxed()
}

/// Streams `StreamItem`s as SSE events. When the client goes away hyper drops the
/// body, the receiver closes, and the sender side cancels the work.
struct SseBody {
    rx: mpsc::Receiver<StreamItem>,
    span: Option<crate::observe::spans::Span>,
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(StreamItem::Message(v))) => {
                if let Some(s) = &mut self.span {
                    if v.get("id").is_some() {
                        s.record_answer(&v);
                    }
                }
                let text = sse::encode_event(&v.to_string());
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(text)))))
            }
            Poll::Ready(Some(StreamItem::KeepAlive)) => Poll::Ready(Some(Ok(Frame::data(
                Bytes::from_static(sse::KEEPALIVE.as_bytes()),
            )))),
            Poll::Ready(Some(StreamItem::Event { id, message })) => {
                let text = sse::encode_tagged(&id, Some(&message.to_string()), None);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(text)))))
            }
            Poll::Ready(Some(StreamItem::Prime { id, retry_ms })) => {
                let text = sse::encode_tagged(&id, None, Some(retry_ms));
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(text)))))
            }
            Poll::Ready(None) => {
                self.span.take();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `resp` with `span` ending when its body has been sent (or the client went
/// away): a streamed call's span lasts as long as the call. The HTTP status is
/// recorded on it.
pub fn with_span(
    resp: http::Response<RespBody>,
    mut span: crate::observe::spans::Span,
) -> http::Response<RespBody> {
    if !span.is_recording() {
        return resp;
    }
    span.set(
        "http.response.status_code",
        i64::from(resp.status().as_u16()),
    );
    resp.map(|inner| {
        Traced {
            inner,
            span: Some(span),
        }
        .boxed()
    })
}

/// A body carrying the span of the request it answers, ended with the body.
struct Traced {
    inner: RespBody,
    span: Option<crate::observe::spans::Span>,
}

impl Body for Traced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            self.span.take();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A JSON response.
pub fn json_response(status: http::StatusCode, v: &serde_json::Value) -> http::Response<RespBody> {
    json_bytes(status, v.to_string())
}

/// A JSON response whose body is already serialized.
pub fn json_bytes(status: http::StatusCode, json: impl Into<Bytes>) -> http::Response<RespBody> {
    // Built in place, its content type a static value: the builder copied the
    // text of the type into a new allocation for every answer.
    let mut resp = http::Response::new(full(json));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}
