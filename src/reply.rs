//! What a handled request turns into on the wire, independent of hyper: a single
//! JSON message, an SSE stream of messages and keep-alives, or `202 Accepted`.

use serde_json::Value;
use tokio::sync::mpsc;

/// One item on an SSE response stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A JSON-RPC message (notifications, then the final response).
    Message(Value),
    /// A keep-alive comment.
    KeepAlive,
    /// A JSON-RPC message with an SSE event id (resumable legacy streams).
    Event {
        /// The event id.
        id: String,
        /// The message.
        message: Value,
    },
    /// A priming event: an id and the reconnection delay, no message (2025-11-25).
    Prime {
        /// The event id.
        id: String,
        /// The `retry` field, in milliseconds.
        retry_ms: u64,
    },
}

/// The answer to one POST.
#[derive(Debug)]
pub enum Reply {
    /// A single JSON-RPC response.
    Json(Value),
    /// A single JSON-RPC error response, and the HTTP status (not a success) the
    /// upstream answered it with: the front door decides whether its caller sees
    /// that status too (`front::errors`).
    UpstreamError(u16, Value),
    /// A single JSON-RPC response with a result, as bytes: an upstream's plain
    /// result passed on without being parsed (see `upstream::RawResult`).
    Raw(bytes::Bytes),
    /// An SSE stream; the final response is the last message. Dropping the receiver
    /// (the client went away) cancels the work behind it.
    Stream(mpsc::Receiver<StreamItem>),
    /// A notification was accepted.
    Accepted,
}

impl Reply {
    /// The reply with a `Raw` response parsed into `Json`, for callers that
    /// rewrite the message.
    pub fn parsed(self) -> Reply {
        match self {
            Reply::Raw(b) => Reply::Json(raw_message(&b)),
            other => other,
        }
    }
}

/// The message of a `Reply::Raw`, parsed.
pub fn raw_message(raw: &[u8]) -> Value {
    use tasklift_protocol::jsonrpc::{response, RpcError, INTERNAL_ERROR};
    serde_json::from_slice(raw).unwrap_or_else(|e| {
        let msg = format!("tasklift could not read back an upstream's answer: {e}");
        response(None, &Err(RpcError::new(INTERNAL_ERROR, msg)))
    })
}
