//! One request: its era's way there (a modern POST run by whoever reads the
//! call's events, or a legacy session with one retry on a new session after 404),
//! and its cancellation.

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
    /// Start one request. It runs in the task that reads its events: a modern
    /// upstream's JSON answer is the whole call, with no task and no channel of its
    /// own. An SSE answer, or a call to a legacy upstream (its session, the retry
    /// on a new one, the server's requests to the client), gets a reader task.
    /// Cancelling the call drops the request or aborts its reader (closing the HTTP
    /// stream, which is cancellation on modern HTTP) and, on a legacy session,
    /// POSTs `notifications/cancelled`.
    pub(super) fn start(self: &Arc<Self>, req: &Request, ctx: &CallContext) -> UpstreamCall {
        // To an upstream known to be modern the request goes as bytes at once, so
        // nothing keeps its JSON tree for as long as the call runs.
        let ready = match self.known_era_for(ctx) {
            Some(Era::Modern) => {
                let id = self.upstream_id();
                Ready::Modern(req.to_vec_with_id(Some(&id)), modern_headers(req), id)
            }
            _ => Ready::Request(req.clone()),
        };
        let (shared, ctx) = (self.clone(), ctx.clone());
        let stop = Arc::new(Mutex::new(Stop::default()));
        let reader = stop.clone();
        let request = async move {
            let (body, headers, id) = match ready {
                Ready::Modern(body, headers, id) => (body, headers, id),
                Ready::Request(req) => match shared.era_for(&ctx).await {
                    Err(e) => return First::Done(Err(e.to_rpc())),
                    Ok(Era::Modern) => {
                        let id = shared.upstream_id();
                        (req.to_vec_with_id(Some(&id)), modern_headers(&req), id)
                    }
                    Ok(Era::Legacy) => {
                        let (tx, rx) = mpsc::channel(64);
                        let task =
                            tokio::spawn(shared.clone().run_legacy(req, ctx, tx, reader.clone()));
                        reader.lock().expect("cancel lock").reader = Some(task.abort_handle());
                        return First::Stream(rx);
                    }
                },
            };
            let ans = match shared.post(body, headers, &ctx).await {
                Ok(ans) => ans,
                Err(e) => return First::Done(Err(e.to_rpc())),
            };
            match shared.answered_as(ans, true).await {
                Ok(read) => read.into(),
                Err(stream) => {
                    let (tx, rx) = mpsc::channel(64);
                    let task = tokio::spawn(async move { shared.pump(stream, id, tx, None).await });
                    reader.lock().expect("cancel lock").reader = Some(task.abort_handle());
                    First::Stream(rx)
                }
            }
        };
        let shared = self.clone();
        let on_cancel: Box<dyn FnOnce() + Send> = Box::new(move || {
            let Stop { reader, legacy } = std::mem::take(&mut *stop.lock().expect("cancel lock"));
            if let Some(task) = reader {
                task.abort();
            }
            let Some(ci) = legacy else {
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
            events: Events::inline(request),
            canceller: Canceller::on_cancel(on_cancel),
        }
    }

    /// Run one request on a legacy session, sending its events to `tx`.
    async fn run_legacy(
        self: Arc<Self>,
        req: Request,
        ctx: CallContext,
        tx: mpsc::Sender<CallEvent>,
        stop: Arc<Mutex<Stop>>,
    ) {
        let id = self.upstream_id();
        let body =
            serde_json::to_vec(&wire_message(&req, &Era::Legacy, Some(&id))).expect("serializes");
        let mut stale = None;
        let asks = mcp::may_ask(&req.method).then_some((&id, &tx));
        let task = upstream_task_of(&req);
        for attempt in 0..2 {
            let (session, _asker) = match self.call_session(&ctx, stale.as_ref(), asks, task).await
            {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(CallEvent::Done(Err(e.to_rpc()))).await;
                    return;
                }
            };
            stop.lock().expect("cancel lock").legacy = Some(CancelInfo {
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

/// A request as `start` hands it to the call: serialized for an upstream known to
/// be modern, else as it is, until the upstream's era says how it goes.
enum Ready {
    Modern(Vec<u8>, HeaderMap, Value),
    Request(Request),
}

/// What cancelling a call stops: its reader task, once it has one, and on a
/// legacy session the request `notifications/cancelled` names.
#[derive(Default)]
struct Stop {
    reader: Option<tokio::task::AbortHandle>,
    legacy: Option<CancelInfo>,
}

/// What a legacy cancellation needs: the session headers and the upstream request id.
struct CancelInfo {
    headers: HeaderMap,
    id: Value,
    ctx: CallContext,
}
