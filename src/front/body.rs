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
    SseBody { rx }.boxed()
}

/// Streams `StreamItem`s as SSE events. When the client goes away hyper drops the
/// body, the receiver closes, and the sender side cancels the work.
struct SseBody {
    rx: mpsc::Receiver<StreamItem>,
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
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
