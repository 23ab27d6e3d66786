//! A request in a legacy session served through the shared pipeline and answered
//! the legacy way: the work runs apart from the connection (a legacy client that
//! goes away has not cancelled; `notifications/cancelled` or the session's end
//! stops it), a call not answered within a second continues on a resumable
//! stream, and a modern upstream's `InputRequiredResult` is turned into real
//! requests to the client, whose answers retry the call.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

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

/// Serve a request through the shared pipeline and answer it the legacy way.
pub(super) async fn call(
    state: &Arc<State>,
    mount: &Mount,
    s: &Arc<ClientSession>,
    req: Request,
    ctx: CallContext,
) -> Response<RespBody> {
    let id = req.id.clone().expect("requests have ids");
    let method = req.method.clone();
    let shape = shaper(mount, s, &method);
    let cancelled = s.start_request(&id);
    let _busy = s.busy();
    let req = modernize(s, req);
    // The call runs apart from the connection: a legacy client that goes away has not
    // cancelled (it says so with notifications/cancelled). A call not answered soon
    // gets a resumable stream (with a priming event for 2025-11-25), so from then on
    // a dropped connection can be resumed with Last-Event-ID.
    let wait = match s.polling().close_after.filter(|_| s.polls()) {
        Some(after) => (after / 2).min(STREAM_AFTER),
        None => STREAM_AFTER,
    };
    let (otx, mut orx) = tokio::sync::oneshot::channel();
    let (st, path, r, c) = (
        state.clone(),
        mount.cfg.path.clone(),
        req.clone(),
        ctx.clone(),
    );
    let (s2, id2) = (s.clone(), id.clone());
    let work = tokio::spawn(async move {
        let Some(m) = st.mounts.get(&path) else {
            return;
        };
        // A legacy answer is rewritten for its era: parsed, never passed as bytes.
        let reply = dispatch(&st.engine, m, r, c).await.parsed();
        if let Err(reply) = otx.send(reply) {
            // The client went away before any answer. A legacy client has not cancelled
            // by going away, so the call runs to its end (or the session's).
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
    let reply = tokio::select! {
        r = &mut orx => match r {
            Ok(r) => r,
            Err(_) => {
                s.end_request(&id);
                return ok(Some(&id), Err(RpcError::new(jsonrpc::INTERNAL_ERROR, "the call ended without an answer")));
            }
        },
        _ = cancelled.notified() => {
            work.abort();
            s.end_request(&id);
            return ok(Some(&id), Err(RpcError::new(REQUEST_CANCELLED, "Request cancelled")));
        }
        _ = tokio::time::sleep(wait) => {
            let first = First::Pending(orx, AbortOnDrop(work.abort_handle()));
            let rx = continue_call(state.clone(), mount.cfg.path.clone(), s.clone(), req, ctx, first, cancelled);
            return sse_response(s.resumable(rx, Some(&id), shape), None);
        }
    };
    match reply {
        Reply::Json(v) if !is_input_required(&v) => {
            s.end_request(&id);
            // Legacy transports carry JSON-RPC errors with 200: a 404 would tell the
            // client its session is gone.
            json_response(StatusCode::OK, &shape(v))
        }
        Reply::UpstreamError(status, v) => {
            s.end_request(&id);
            upstream_error(mount, &ctx, status, &shape(v)).await
        }
        Reply::Accepted => {
            s.end_request(&id);
            accepted()
        }
        reply => {
            let rx = continue_call(
                state.clone(),
                mount.cfg.path.clone(),
                s.clone(),
                req,
                ctx,
                First::Ready(reply),
                cancelled,
            );
            let rx = s.resumable(rx, Some(&id), shape);
            sse_response(rx, None)
        }
    }
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

/// Carry a streamed reply to its end. When the answer is an `InputRequiredResult`
/// (a modern upstream asking for input), ask the client with real requests on the
/// stream and retry the call with its answers, as a 2026-07-28 client would.
fn continue_call(
    state: Arc<State>,
    path: String,
    s: Arc<ClientSession>,
    mut req: Request,
    ctx: CallContext,
    first: First,
    cancelled: Arc<tokio::sync::Notify>,
) -> mpsc::Receiver<StreamItem> {
    let (tx, rx) = mpsc::channel(32);
    let id = req.id.clone().expect("requests have ids");
    tokio::spawn(async move {
        let mut reply = Some(first);
        let mut closed = s.closed();
        let work = async {
            loop {
                let r = match reply.take() {
                    Some(First::Ready(r)) => r,
                    Some(First::Pending(rx, _guard)) => match rx.await {
                        Ok(r) => r,
                        Err(_) => return,
                    },
                    None => {
                        let Some(mount) = state.mounts.get(&path) else {
                            return;
                        };
                        dispatch(&state.engine, mount, req.clone(), ctx.clone()).await
                    }
                };
                let last = match r {
                    // On a stream, whose status went out with its first byte.
                    Reply::Json(v) | Reply::UpstreamError(_, v) => v,
                    Reply::Raw(b) => crate::reply::raw_message(&b),
                    Reply::Accepted => return,
                    Reply::Stream(mut inner) => {
                        let mut last = None;
                        while let Some(item) = inner.recv().await {
                            match item {
                                StreamItem::Message(m) if m.get("method").is_none() => {
                                    last = Some(m);
                                    break;
                                }
                                other => {
                                    if tx.send(other).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                        match last {
                            Some(m) => m,
                            None => return,
                        }
                    }
                };
                if !is_input_required(&last) {
                    let _ = tx.send(StreamItem::Message(last)).await;
                    return;
                }
                // Ask the client each input request and wait for every answer.
                let result = &last["result"];
                let asks = result
                    .get("inputRequests")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let mut answers = Map::new();
                let mut waiting = Vec::new();
                for (key, ask) in asks {
                    let (otx, orx) = tokio::sync::oneshot::channel();
                    let method = ask
                        .get("method")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let params = ask.get("params").cloned().unwrap_or_else(|| json!({}));
                    let msg = s.request(
                        &method,
                        params,
                        Box::new(move |o| {
                            let _ = otx.send(o);
                        }),
                        None,
                    );
                    if tx.send(StreamItem::Message(msg)).await.is_err() {
                        return;
                    }
                    waiting.push((key, orx));
                }
                for (key, orx) in waiting {
                    match orx.await {
                        Ok(Ok(v)) => {
                            answers.insert(key, v);
                        }
                        Ok(Err(e)) => {
                            let _ = tx
                                .send(StreamItem::Message(jsonrpc::response(Some(&id), &Err(e))))
                                .await;
                            return;
                        }
                        Err(_) => return,
                    }
                }
                req.params
                    .insert("inputResponses".into(), Value::Object(answers));
                if let Some(st) = result.get("requestState") {
                    req.params.insert("requestState".into(), st.clone());
                }
            }
        };
        tokio::select! {
            _ = work => {}
            _ = cancelled.notified() => {
                let _ = tx.send(StreamItem::Message(jsonrpc::response(Some(&id), &Err(RpcError::new(REQUEST_CANCELLED, "Request cancelled"))))).await;
            }
            _ = session::ended(&mut closed) => {}
        }
        s.end_request(&id);
    });
    rx
}
