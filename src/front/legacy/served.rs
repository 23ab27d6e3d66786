//! A request in a legacy session served through the shared pipeline and answered
//! the legacy way: the work runs apart from the connection (a legacy client that
//! goes away has not cancelled; `notifications/cancelled` or the session's end
//! stops it), a call not answered within a second continues on a resumable
//! stream, and a modern upstream's `InputRequiredResult` is turned into real
//! requests to the client, whose answers retry the call.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::session::{self, ClientSession};
use super::shape::{sse_response, upstream_error};
use super::{accepted, legacy_shape, modernize, ok, tasks};
use crate::dispatch::{dispatch, Mount};
use crate::front::State;
use crate::reply::{Reply, StreamItem};
use crate::serving::body::RespBody;
use crate::serving::json_response;
use crate::upstream::CallContext;
use http::{Response, StatusCode};
use tasklift_protocol::jsonrpc::{self, Request, RpcError};

/// How long a call may take before its answer becomes a resumable stream.
const STREAM_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
/// JSON-RPC code for a request the client cancelled.
const REQUEST_CANCELLED: i64 = -32800;

/// Serve a request through the shared pipeline and answer it the legacy way: the
/// first answer as it is, if it comes within the wait; else (or when it is a stream
/// or asks for input) on a resumable stream.
pub(super) async fn call(
    state: &Arc<State>,
    mount: &Mount,
    s: &Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    let id = req.id.clone().expect("requests have ids");
    let shape = shaper(mount, s, &req.method);
    let cancelled = s.start_request(&id);
    let _busy = s.busy();
    let call = Call {
        state: state.clone(),
        path: mount.cfg.path.clone(),
        s: s.clone(),
        req: modernize(s, req),
        ctx,
        id,
        cancelled,
    };
    let (work, mut orx) = call.spawn_work();
    let reply = tokio::select! {
        r = &mut orx => match r {
            Ok(r) => r,
            Err(_) => {
                s.end_request(&call.id);
                return ok(Some(&call.id), Err(RpcError::new(jsonrpc::INTERNAL_ERROR, "the call ended without an answer")));
            }
        },
        _ = call.cancelled.notified() => {
            work.abort();
            s.end_request(&call.id);
            return ok(Some(&call.id), Err(RpcError::new(REQUEST_CANCELLED, "Request cancelled")));
        }
        _ = tokio::time::sleep(stream_after(s)) => {
            let first = First::Pending(orx, AbortOnDrop(work.abort_handle()));
            return call.on_stream(first, shape);
        }
    };
    answer_first(mount, call, reply, shape).await
}

/// How long a call may take before it continues on a resumable stream (with a
/// priming event for 2025-11-25), from when on a dropped connection can be resumed
/// with Last-Event-ID: a second, or less when the client polls and the stream
/// would be closed on it sooner.
fn stream_after(s: &ClientSession) -> std::time::Duration {
    match s.polling().close_after.filter(|_| s.polls()) {
        Some(after) => (after / 2).min(STREAM_AFTER),
        None => STREAM_AFTER,
    }
}

/// The first answer, come within the wait: JSON (a JSON-RPC error too, with 200),
/// the upstream's error status, 202; a stream or an `InputRequiredResult` carried
/// on a resumable stream.
async fn answer_first(
    mount: &Mount,
    call: Call,
    reply: Reply,
    shape: impl Fn(Value) -> Value + Send + 'static,
) -> Response<RespBody> {
    match reply {
        Reply::Json(v) if !is_input_required(&v) => {
            call.s.end_request(&call.id);
            // Legacy transports carry JSON-RPC errors with 200: a 404 would tell the
            // client its session is gone.
            json_response(StatusCode::OK, &shape(v))
        }
        Reply::UpstreamError(status, v) => {
            call.s.end_request(&call.id);
            upstream_error(mount, &call.ctx, status, &shape(v)).await
        }
        Reply::Accepted => {
            call.s.end_request(&call.id);
            accepted()
        }
        reply => call.on_stream(First::Ready(reply), shape),
    }
}

/// A call in a session, from its first answer to its last: what a retry with the
/// client's answers needs, and how the client cancels it.
struct Call {
    state: Arc<State>,
    /// The mount's path (looked up again for each retry).
    path: String,
    s: Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
    id: Value,
    /// Notified by the client's `notifications/cancelled`.
    cancelled: Arc<tokio::sync::Notify>,
}

/// The first answer of a call carried on a stream: there, or still being worked out
/// (aborted if the stream's work is dropped).
enum First {
    Ready(Reply),
    Pending(tokio::sync::oneshot::Receiver<Reply>, AbortOnDrop),
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How results of `method` are shaped for this session.
fn shaper(
    mount: &Mount,
    s: &ClientSession,
    method: &str,
) -> impl Fn(Value) -> Value + Send + 'static {
    let method = method.to_string();
    let tasks = s.polls().then(|| mount.cfg.clone());
    move |v| {
        let mut v = legacy_shape(&method, v);
        if let (Some(cfg), "tools/list") = (&tasks, method.as_str()) {
            tasks::mark_task_support(&mut v, cfg);
        }
        v
    }
}

fn is_input_required(v: &Value) -> bool {
    v.get("result")
        .and_then(|r| r.get("resultType"))
        .and_then(Value::as_str)
        == Some("input_required")
}

impl Call {
    /// The call run apart from the connection: a legacy client that goes away has
    /// not cancelled (it says so with notifications/cancelled). The first answer
    /// comes through the receiver; when no one is left to take it, a streamed
    /// answer still runs to its end (or the session's).
    fn spawn_work(&self) -> (tokio::task::JoinHandle<()>, oneshot::Receiver<Reply>) {
        let (otx, orx) = oneshot::channel();
        let (st, path, r, c) = (
            self.state.clone(),
            self.path.clone(),
            self.req.clone(),
            self.ctx.clone(),
        );
        let (s2, id2) = (self.s.clone(), self.id.clone());
        let work = tokio::spawn(async move {
            let Some(m) = st.mounts.get(&path) else {
                return;
            };
            // A legacy answer is rewritten for its era: parsed, never passed as bytes.
            let reply = dispatch(&st.engine, m, r, c).await.parsed();
            if let Err(reply) = otx.send(reply) {
                // The client went away before any answer. A legacy client has not
                // cancelled by going away, so the call runs to its end (or the session's).
                if let Reply::Stream(mut rx) = reply {
                    let mut closed = s2.closed();
                    tokio::select! {
                        _ = async { while rx.recv().await.is_some() {} } => {}
                        _ = session::ended(&mut closed) => {}
                    }
                }
                s2.end_request(&id2);
            }
        });
        (work, orx)
    }

    /// The rest of the call on a resumable SSE stream of the session.
    fn on_stream(
        self,
        first: First,
        shape: impl Fn(Value) -> Value + Send + 'static,
    ) -> Response<RespBody> {
        let (s, id) = (self.s.clone(), self.id.clone());
        let (tx, rx) = mpsc::channel(32);
        tokio::spawn(self.carry(first, tx));
        sse_response(s.resumable(rx, Some(&id), shape), None)
    }

    /// Carry the call to its end, unless the client cancels it (answered with
    /// `Request cancelled`) or the session ends.
    async fn carry(mut self, first: First, tx: mpsc::Sender<StreamItem>) {
        let (s, cancelled) = (self.s.clone(), self.cancelled.clone());
        let mut closed = s.closed();
        tokio::select! {
            _ = self.rounds(first, &tx) => {}
            _ = cancelled.notified() => {
                let _ = tx.send(StreamItem::Message(jsonrpc::response(Some(&self.id), &Err(RpcError::new(REQUEST_CANCELLED, "Request cancelled"))))).await;
            }
            _ = session::ended(&mut closed) => {}
        }
        s.end_request(&self.id);
    }

    /// The call's answers, round after round. When the answer is an
    /// `InputRequiredResult` (a modern upstream asking for input), ask the client
    /// with real requests on the stream and retry the call with its answers, as a
    /// 2026-07-28 client would; any other answer is the last.
    async fn rounds(&mut self, first: First, tx: &mpsc::Sender<StreamItem>) {
        let mut next = Some(first);
        loop {
            let Some(reply) = self.answer(next.take()).await else {
                return;
            };
            let Some(last) = final_message(reply, tx).await else {
                return;
            };
            if !is_input_required(&last) {
                let _ = tx.send(StreamItem::Message(last)).await;
                return;
            }
            let result = &last["result"];
            let Some(answers) = self.ask_client(result, tx).await else {
                return;
            };
            self.req
                .params
                .insert("inputResponses".into(), Value::Object(answers));
            if let Some(st) = result.get("requestState") {
                self.req.params.insert("requestState".into(), st.clone());
            }
        }
    }

    /// This round's answer: the first one, or the call dispatched again.
    async fn answer(&self, first: Option<First>) -> Option<Reply> {
        match first {
            Some(First::Ready(r)) => Some(r),
            Some(First::Pending(rx, _guard)) => rx.await.ok(),
            None => {
                let mount = self.state.mounts.get(&self.path)?;
                Some(
                    dispatch(
                        &self.state.engine,
                        mount,
                        self.req.clone(),
                        self.ctx.clone(),
                    )
                    .await,
                )
            }
        }
    }

    /// Ask the client each input request on the stream and wait for every answer.
    /// None when the stream or the client is gone, or the client answered with an
    /// error (sent on as the call's answer).
    async fn ask_client(
        &self,
        result: &Value,
        tx: &mpsc::Sender<StreamItem>,
    ) -> Option<Map<String, Value>> {
        let asks = result
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut answers = Map::new();
        let mut waiting = Vec::new();
        for (key, ask) in asks {
            let (otx, orx) = oneshot::channel();
            let method = ask
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let params = ask.get("params").cloned().unwrap_or_else(|| json!({}));
            let msg = self.s.request(
                &method,
                params,
                Box::new(move |o| {
                    let _ = otx.send(o);
                }),
                None,
            );
            tx.send(StreamItem::Message(msg)).await.ok()?;
            waiting.push((key, orx));
        }
        for (key, orx) in waiting {
            match orx.await.ok()? {
                Ok(v) => {
                    answers.insert(key, v);
                }
                Err(e) => {
                    let answer = jsonrpc::response(Some(&self.id), &Err(e));
                    let _ = tx.send(StreamItem::Message(answer)).await;
                    return None;
                }
            }
        }
        Some(answers)
    }
}

/// A reply's final message, on a stream whose status went out with its first byte;
/// a streamed reply's other messages are sent on before it. None when there is
/// none (202, a stream that ended without one) or the stream is gone.
async fn final_message(reply: Reply, tx: &mpsc::Sender<StreamItem>) -> Option<Value> {
    match reply {
        Reply::Json(v) | Reply::UpstreamError(_, v) => Some(v),
        Reply::Raw(b) => Some(crate::reply::raw_message(&b)),
        Reply::Accepted => None,
        Reply::Stream(mut inner) => {
            while let Some(item) = inner.recv().await {
                match item {
                    StreamItem::Message(m) if m.get("method").is_none() => return Some(m),
                    other => tx.send(other).await.ok()?,
                }
            }
            None
        }
    }
}
