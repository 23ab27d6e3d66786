//! The one renderer of the engine's answers: an [`Answer`] becomes the reply to
//! request `id`, with every error code and status from the error map
//! (`errors.rs`); a stream's events become JSON-RPC messages. Both eras' doors
//! render through here; the legacy door reshapes the messages afterwards.

use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::errors::failure_rpc;
use crate::reply::{Reply, StreamItem};
use crate::tasks::{Answer, Event, Failure};
use tasklift_protocol::jsonrpc::{self, RpcError};

/// The reply to request `id` carrying `answer`.
pub fn reply(answer: Answer, id: Option<&Value>) -> Reply {
    match answer {
        Answer::Result(v) => Reply::Json(jsonrpc::response_from(id, Ok(v))),
        Answer::Failed(f) => failed(f, id),
        Answer::Raw(r) => Reply::Raw(r.response(id)),
        Answer::Stream(rx) => Reply::Stream(stream(rx, id.cloned())),
    }
}

/// A failure's reply: an upstream's error keeps the HTTP status it came with
/// (the front door decides whether the caller sees it, `errors.rs`).
fn failed(f: Failure, id: Option<&Value>) -> Reply {
    let e = rpc_of(f);
    match e.http_status {
        Some(status) => Reply::UpstreamError(status, jsonrpc::response_from(id, Err(e))),
        None => Reply::Json(jsonrpc::response_from(id, Err(e))),
    }
}

/// An event as the message it is on the stream answering request `id`.
pub fn item(ev: Event, id: Option<&Value>) -> StreamItem {
    match ev {
        Event::Message(m) => StreamItem::Message(m),
        Event::Notify(method, params) => StreamItem::Message(jsonrpc::notification(method, params)),
        Event::KeepAlive => StreamItem::KeepAlive,
        Event::Final(Ok(v)) => StreamItem::Message(jsonrpc::response_from(id, Ok(v))),
        Event::Final(Err(f)) => StreamItem::Message(jsonrpc::response_from(id, Err(rpc_of(f)))),
    }
}

/// A failure's JSON-RPC error (an upstream's own, moved, not copied).
fn rpc_of(f: Failure) -> RpcError {
    match f {
        Failure::Relayed(e) => e,
        other => failure_rpc(&other),
    }
}

/// The engine's events as the messages of an SSE stream. The client going away
/// drops the engine's receiver at once, which cancels the work behind it.
fn stream(mut rx: mpsc::Receiver<Event>, id: Option<Value>) -> mpsc::Receiver<StreamItem> {
    let (tx, out) = mpsc::channel(32);
    let carry = async move {
        loop {
            let ev = tokio::select! {
                _ = tx.closed() => return,
                ev = rx.recv() => match ev {
                    Some(ev) => ev,
                    None => return,
                },
            };
            if tx.send(item(ev, id.as_ref())).await.is_err() {
                return;
            }
        }
    };
    tokio::spawn(carry.in_current_span());
    out
}
