//! One request: its era's way there (a modern POST, or a legacy session with one
//! retry on a new session after 404), and its cancellation.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, StatusCode};
use serde_json::Value;
use tokio::sync::mpsc;

use super::session::InFlight;
use super::{modern_headers, Shared};
use crate::upstream::{
    cancelled_notification, upstream_task_of, wire_message, CallContext, CallEvent, Canceller, Era,
    Events, First, UpstreamCall,
};
use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp;

impl Shared {
    /// Start one request. To an upstream known to be modern it runs in the task
    /// that reads its events ([`Shared::inline`]); otherwise in a task of its own
    /// ([`Shared::run`]). Cancelling the call drops or aborts it (closing the HTTP
    /// stream, which is cancellation on modern HTTP) and, on a legacy session, POSTs
    /// `notifications/cancelled`.
    pub(super) fn start(self: &Arc<Self>, req: &Request, ctx: &CallContext) -> UpstreamCall {
        if matches!(*self.era.read().expect("era lock"), Some(Era::Modern)) {
            return self.inline(req, ctx);
        }
        let (tx, rx) = mpsc::channel(64);
        let info: Arc<Mutex<Option<CancelInfo>>> = Arc::default();
        let task = tokio::spawn(self.clone().run(req.clone(), ctx.clone(), tx, info.clone()));
        let shared = self.clone();
        let on_cancel: Box<dyn FnOnce() + Send> = Box::new(move || {
            let Some(ci) = info.lock().expect("cancel lock").take() else {
                return;
            };
            tokio::spawn(async move {
                let body = serde_json::to_vec(&cancelled_notification(&ci.id)).expect("serializes");
                match shared.post(body, ci.headers, &ci.ctx).await {
                    Ok(ans) => {
                        let _ = shared.read_all(ans.body).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not send notifications/cancelled upstream")
                    }
                }
            });
        });
        UpstreamCall {
            events: rx.into(),
            canceller: Canceller::new(task.abort_handle(), Some(on_cancel)),
        }
    }

    /// A call to a modern upstream, run by whoever reads its events: no task and
    /// no channel unless the answer is an SSE stream, which a reader task then
    /// pumps (aborted if the call is cancelled). The request goes as bytes, so
    /// nothing keeps its JSON tree for as long as the call runs.
    fn inline(self: &Arc<Self>, req: &Request, ctx: &CallContext) -> UpstreamCall {
        let id = self.upstream_id();
        let body = req.to_vec_with_id(Some(&id));
        let headers = modern_headers(req);
        let (shared, ctx) = (self.clone(), ctx.clone());
        let reader: Arc<Mutex<Option<tokio::task::AbortHandle>>> = Arc::default();
        let streaming = reader.clone();
        let request = async move {
            let ans = match shared.post(body, headers, &ctx).await {
                Ok(ans) => ans,
                Err(e) => return First::Done(Err(e.to_rpc())),
            };
            match shared.answered(ans).await {
                Ok(outcome) => First::Done(outcome),
                Err(stream) => {
                    let (tx, rx) = mpsc::channel(64);
                    let task = tokio::spawn(async move { shared.pump(stream, id, tx, None).await });
                    *streaming.lock().expect("reader lock") = Some(task.abort_handle());
                    First::Stream(rx)
                }
            }
        };
        let on_cancel: Box<dyn FnOnce() + Send> = Box::new(move || {
            if let Some(task) = reader.lock().expect("reader lock").take() {
                task.abort();
            }
        });
        UpstreamCall {
            events: Events::inline(request),
            canceller: Canceller::on_cancel(on_cancel),
        }
    }

    /// Run one request against the upstream, sending its events to `tx`.
    async fn run(
        self: Arc<Self>,
        req: Request,
        ctx: CallContext,
        tx: mpsc::Sender<CallEvent>,
        cancel_info: Arc<Mutex<Option<CancelInfo>>>,
    ) {
        let era = match self.era(&ctx).await {
            Ok(e) => e,
            Err(e) => {
                let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                return;
            }
        };
        let id = self.upstream_id();
        match era {
            Era::Modern => {
                let body = req.to_vec_with_id(Some(&id));
                let headers = modern_headers(&req);
                drop(req);
                self.run_modern(body, headers, ctx, id, tx).await
            }
            Era::Legacy => {
                let body = serde_json::to_vec(&wire_message(&req, &Era::Legacy, Some(&id)))
                    .expect("serializes");
                let mut stale = None;
                let asks = mcp::may_ask(&req.method).then_some((&id, &tx));
                let task = upstream_task_of(&req);
                for attempt in 0..2 {
                    let (session, _asker) =
                        match self.call_session(&ctx, stale.as_ref(), asks, task).await {
                            Ok(s) => s,
                            Err(e) => {
                                let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                                return;
                            }
                        };
                    *cancel_info.lock().expect("cancel lock") = Some(CancelInfo {
                        headers: session.headers(),
                        id: id.clone(),
                        ctx: ctx.clone(),
                    });
                    session.in_flight.fetch_add(1, Ordering::Relaxed);
                    let _busy = InFlight(&session);
                    let ans = match self.post(body.clone(), session.headers(), &ctx).await {
                        Ok(a) => a,
                        Err(e) => {
                            let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                            return;
                        }
                    };
                    if ans.status == StatusCode::NOT_FOUND && session.id.is_some() && attempt == 0 {
                        stale = Some(session.clone());
                        continue;
                    }
                    let finishes = task
                        .filter(|_| matches!(req.method.as_str(), "tasks/result" | "tasks/cancel"))
                        .map(|t| format!("{}\n{t}", self.session_key(&ctx)));
                    if req.params.contains_key("task") || finishes.is_some() {
                        let caller = self.session_key(&ctx);
                        self.pump_task_call(ans, id, tx, &session, (&caller, finishes))
                            .await;
                    } else {
                        self.pump(ans, id, tx, Some(&session)).await;
                    }
                    session.last_used.store(self.now_ms(), Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

impl Shared {
    /// One POST to a modern upstream and its answer, from the serialized request.
    async fn run_modern(
        self: Arc<Self>,
        body: Vec<u8>,
        headers: HeaderMap,
        ctx: CallContext,
        id: Value,
        tx: mpsc::Sender<CallEvent>,
    ) {
        match self.post(body, headers, &ctx).await {
            Ok(ans) => self.pump(ans, id, tx, None).await,
            Err(e) => {
                let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
            }
        }
    }
}

/// What a legacy cancellation needs: the session headers and the upstream request id.
struct CancelInfo {
    headers: HeaderMap,
    id: Value,
    ctx: CallContext,
}
