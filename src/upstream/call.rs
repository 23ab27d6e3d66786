//! One request in flight upstream, as the `Upstream` trait hands it back: its
//! `UpstreamCall` (events and `Canceller`), the `CallEvent`s it yields, and the
//! `ServerRequest`s a legacy upstream sends the client meanwhile.

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::broken;
use tasklift_protocol::jsonrpc::{Outcome, RpcError};

/// Something an upstream sent about an in-flight request.
#[derive(Debug)]
pub enum CallEvent {
    /// A notification related to the request (progress, log message), as a full message.
    Notification(Value),
    /// A legacy server asked the client something mid-call (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`) and waits for the answer.
    Input(ServerRequest),
    /// The final response.
    Done(Outcome),
}

/// A request from a legacy upstream to the client, with the way to answer it on the
/// upstream's channel. Dropping it unanswered answers with an error, so the upstream
/// never waits forever.
pub struct ServerRequest {
    /// The method (`elicitation/create`, …).
    pub method: String,
    /// Its params.
    pub params: Value,
    /// The upstream's own request id when it is a short string: it names the
    /// request, and tasklift uses it as the `inputRequests` key (else `input-N`).
    pub key: Option<String>,
    /// Sends the JSON-RPC response upstream.
    responder: Option<Box<dyn FnOnce(Outcome) + Send>>,
}

impl std::fmt::Debug for ServerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerRequest")
            .field("method", &self.method)
            .finish()
    }
}

impl ServerRequest {
    /// A request answered by `responder`.
    pub fn new(method: String, params: Value, responder: Box<dyn FnOnce(Outcome) + Send>) -> Self {
        Self {
            method,
            params,
            key: None,
            responder: Some(responder),
        }
    }

    /// Name the request after the upstream's request id, if that is a short string of
    /// letters, digits, `_`, `-`, `.` or `:`.
    pub fn keyed_by(mut self, id: &Value) -> Self {
        self.key = id
            .as_str()
            .filter(|s| {
                !s.is_empty()
                    && s.len() <= 64
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
            })
            .map(str::to_string);
        self
    }

    /// The request as an MRTR `inputRequests` entry.
    pub fn as_input_request(&self) -> Value {
        let mut params = self.params.clone();
        if let Some(Value::Object(m)) = params.get_mut("_meta") {
            m.remove("io.modelcontextprotocol/related-task");
        }
        json!({"method": self.method, "params": params})
    }

    /// Answer it.
    pub fn answer(mut self, outcome: Outcome) {
        if let Some(r) = self.responder.take() {
            r(outcome);
        }
    }
}

impl Drop for ServerRequest {
    fn drop(&mut self) {
        if let Some(r) = self.responder.take() {
            r(Err(RpcError::new(
                tasklift_protocol::jsonrpc::INTERNAL_ERROR,
                "the client did not answer this request (the call was cancelled or its state expired)",
            )));
        }
    }
}

/// An in-flight upstream request. Dropping it cancels the request upstream.
pub struct UpstreamCall {
    /// Events in order; the last is `Done`. A channel that closes without `Done`
    /// means the upstream broke mid-call.
    pub events: mpsc::Receiver<CallEvent>,
    /// Cancels the request when dropped (or when `cancel` is called).
    pub canceller: Canceller,
}

impl UpstreamCall {
    /// A call that failed before it started.
    pub fn failed(e: RpcError) -> Self {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(CallEvent::Done(Err(e)));
        Self {
            events: rx,
            canceller: Canceller::none(),
        }
    }

    /// Wait for the final outcome, ignoring notifications.
    pub async fn outcome(mut self, upstream: &str) -> Outcome {
        while let Some(ev) = self.events.recv().await {
            if let CallEvent::Done(o) = ev {
                self.canceller.disarm();
                return o;
            }
        }
        self.canceller.disarm();
        Err(broken(upstream))
    }
}

/// Cancels an upstream request: aborts the reader (closing the HTTP stream, which
/// is cancellation on modern HTTP) and runs the transport's extra step (a
/// `notifications/cancelled` for legacy sessions).
pub struct Canceller {
    /// The task reading the response.
    reader: Option<tokio::task::AbortHandle>,
    /// Extra cancellation step, run at most once.
    on_cancel: Option<Box<dyn FnOnce() + Send>>,
}

impl Canceller {
    /// A canceller for a reader task and an optional extra step.
    pub fn new(
        reader: tokio::task::AbortHandle,
        on_cancel: Option<Box<dyn FnOnce() + Send>>,
    ) -> Self {
        Self {
            reader: Some(reader),
            on_cancel,
        }
    }

    /// A canceller that runs `f` when the call is cancelled.
    pub fn on_cancel(f: Box<dyn FnOnce() + Send>) -> Self {
        Self {
            reader: None,
            on_cancel: Some(f),
        }
    }

    /// A canceller with nothing to cancel.
    pub fn none() -> Self {
        Self {
            reader: None,
            on_cancel: None,
        }
    }

    /// The request finished: nothing to cancel any more.
    pub fn disarm(&mut self) {
        self.reader = None;
        self.on_cancel = None;
    }

    /// Cancel now.
    pub fn cancel(&mut self) {
        if let Some(r) = self.reader.take() {
            r.abort();
        }
        if let Some(f) = self.on_cancel.take() {
            f();
        }
    }
}

impl Drop for Canceller {
    fn drop(&mut self) {
        self.cancel();
    }
}
