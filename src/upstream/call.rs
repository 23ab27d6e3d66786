//! One request in flight upstream, as the `Upstream` trait hands it back: its
//! `UpstreamCall` (events and `Canceller`), the `CallEvent`s it yields, and the
//! `ServerRequest`s a legacy upstream sends the client meanwhile.

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::broken;
use super::RawResult;
use tasklift_protocol::jsonrpc::{Outcome, RpcError};
use tasklift_protocol::mcp::method;

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

/// The params of a notification an upstream relayed, when it is progress under
/// `token` (what the engine follows; it never reads the message itself).
pub fn progress_under<'a>(n: &'a Value, token: &Value) -> Option<&'a Value> {
    let params = n.get("params")?;
    let ours = n.get("method").and_then(Value::as_str) == Some(method::PROGRESS)
        && params.get("progressToken") == Some(token);
    ours.then_some(params)
}

/// The level of a relayed log message (`notifications/message`; `Some(None)`
/// for one without a level); `None` for any other notification.
pub fn log_level(n: &Value) -> Option<Option<&str>> {
    if n.get("method").and_then(Value::as_str) != Some("notifications/message") {
        return None;
    }
    Some(n.pointer("/params/level").and_then(Value::as_str))
}

/// A relayed notification with `key` set in its params' `_meta`.
pub fn tag_meta(n: &mut Value, key: &str, value: Value) {
    match n.get_mut("params") {
        Some(Value::Object(p)) => {
            let meta = p.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(m) = meta {
                m.insert(key.into(), value);
            }
        }
        _ => n["params"] = json!({ "_meta": { key: value } }),
    }
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

    /// Run `then` once it has been answered (or dropped unanswered).
    pub fn then(mut self, then: impl FnOnce() + Send + 'static) -> Self {
        if let Some(r) = self.responder.take() {
            self.responder = Some(Box::new(move |outcome| {
                r(outcome);
                then();
            }));
        }
        self
    }

    /// Answer it.
    pub fn answer(mut self, outcome: Outcome) {
        if let Some(r) = self.responder.take() {
            r(outcome);
        }
    }

    /// Answer it with an error object (as tasklift's error map wrote it).
    pub fn refuse(self, error: &Value) {
        self.answer(Err(RpcError::from_value(error)));
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

/// What an upstream call yields next, for a reader that can pass a plain result
/// on as bytes.
pub enum Next {
    /// An event.
    Event(CallEvent),
    /// The call's final answer, a plain result, as bytes.
    Raw(RawResult),
}

/// The events of one upstream call, in order; the last is `Done`. They come from a
/// reader task over a channel, or from the call's request itself, run in whatever
/// task reads them (the caller's, then a task's driver): a modern upstream's call
/// needs no task and no channel of its own unless its answer streams.
pub struct Events(Source);

enum Source {
    /// A reader task sends them.
    Channel(mpsc::Receiver<CallEvent>),
    /// The request is still on its way; it ends in its answer or a stream.
    Pending(Pin<Box<dyn Future<Output = First> + Send>>),
    /// The answer, until it is read (then `None`: the call is over).
    Answered(Option<Outcome>),
    /// The answer as bytes, until it is read.
    Passed(Option<RawResult>),
}

/// How a call run in its reader's task first ends.
pub enum First {
    /// With its answer.
    Done(Outcome),
    /// With a plain result, as the bytes it came in.
    Raw(RawResult),
    /// With a stream of events, read by a task of its own from here on.
    Stream(mpsc::Receiver<CallEvent>),
}

impl Events {
    /// Events of `request`, run by whoever reads them.
    pub fn inline(request: impl Future<Output = First> + Send + 'static) -> Self {
        Self(Source::Pending(Box::pin(request)))
    }

    /// [`Events::inline`] for a request already boxed.
    pub fn pending(request: Pin<Box<dyn Future<Output = First> + Send>>) -> Self {
        Self(Source::Pending(request))
    }

    /// The next event; `None` once the call is over, or when it broke without an
    /// answer. Cancel-safe: a dropped `recv` loses nothing (the request it was
    /// running is kept here).
    pub async fn recv(&mut self) -> Option<CallEvent> {
        self.next(false).await.map(|n| match n {
            Next::Event(e) => e,
            Next::Raw(r) => CallEvent::Done(r.outcome()),
        })
    }

    /// The next event, or with `raw`, a final plain result as the bytes it came in
    /// (without `raw` it is parsed into `Done`). Cancel-safe like [`Events::recv`].
    pub async fn next(&mut self, raw: bool) -> Option<Next> {
        loop {
            match &mut self.0 {
                Source::Channel(rx) => return rx.recv().await.map(Next::Event),
                Source::Answered(o) => return o.take().map(|o| Next::Event(CallEvent::Done(o))),
                Source::Passed(r) => {
                    return r.take().map(|r| match raw {
                        true => Next::Raw(r),
                        false => Next::Event(CallEvent::Done(r.outcome())),
                    })
                }
                Source::Pending(request) => {
                    self.0 = match request.as_mut().await {
                        First::Done(o) => Source::Answered(Some(o)),
                        First::Raw(r) => Source::Passed(Some(r)),
                        First::Stream(rx) => Source::Channel(rx),
                    }
                }
            }
        }
    }
}

impl From<mpsc::Receiver<CallEvent>> for Events {
    fn from(rx: mpsc::Receiver<CallEvent>) -> Self {
        Self(Source::Channel(rx))
    }
}

/// An in-flight upstream request. Dropping it cancels the request upstream.
pub struct UpstreamCall {
    /// Events in order; the last is `Done`. Events that end without `Done`
    /// mean the upstream broke mid-call.
    pub events: Events,
    /// Cancels the request when dropped (or when `cancel` is called).
    pub canceller: Canceller,
}

impl UpstreamCall {
    /// A call that failed before it started.
    pub fn failed(e: RpcError) -> Self {
        Self {
            events: Events(Source::Answered(Some(Err(e)))),
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
