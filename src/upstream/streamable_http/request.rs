//! One request: its era's way there (a modern POST run by whoever reads the
//! call's events, or a legacy session with one retry on a new session after 404),
//! and its cancellation.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use http::{Method, StatusCode};
use serde_json::Value;
use tokio::sync::mpsc;

use super::response::{Read, Started};
use super::session::{Asker, InFlight};
use super::{modern_headers, Fields, Session, Shared};
use crate::upstream::{
    cancelled_notification, legacy_bytes, upstream_task_of, CallContext, CallEvent, Canceller, Era,
    Events, First, UpstreamCall, UpstreamError,
};
use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp;

/// A request's bytes at their length: a slow call keeps them (for a retry after
/// 429 or 503) as long as it runs, and serde_json's buffer grows by doubling.
fn kept(mut body: Vec<u8>) -> Vec<u8> {
    body.shrink_to_fit();
    body
}

impl Shared {
    /// Start one request. It runs in the task that reads its events: a JSON answer
    /// is the whole call, with no task and no channel of its own. An SSE answer, a
    /// question from a legacy server before its answer, or a legacy request about
    /// one of the server's own tasks gets a reader task. Cancelling the call drops
    /// the request or aborts its reader (closing the HTTP stream, which is
    /// cancellation on modern HTTP) and, on a legacy session, POSTs
    /// `notifications/cancelled`.
    pub(super) fn start(self: &Arc<Self>, req: &Request, ctx: &CallContext) -> UpstreamCall {
        // To an upstream whose era is known the request goes as bytes at once, so
        // nothing keeps its JSON tree for as long as the call runs.
        let ready = match self.known_era_for(ctx) {
            Some(Era::Modern) => {
                let id = self.upstream_id();
                Ready::Modern(kept(req.to_vec_with_id(Some(&id))), modern_headers(req), id)
            }
            Some(Era::Legacy)
                if upstream_task_of(req).is_none() && !req.params.contains_key("task") =>
            {
                Ready::Legacy(self.legacy_call(req))
            }
            _ => Ready::Request(req.clone()),
        };
        let (shared, ctx) = (self.clone(), ctx.clone());
        let stop = Arc::new(Mutex::new(Stop::default()));
        let reader = stop.clone();
        // Each way is a future of its own: a slow call's future then keeps room
        // for its own way only, and the modern one borrows what it sends rather
        // than moving it into the futures it awaits (each would keep a copy).
        let request: Pin<Box<dyn Future<Output = First> + Send>> = match ready {
            Ready::Modern(body, headers, id) => {
                Box::pin(shared.modern(body.into(), headers, id, ctx, reader))
            }
            Ready::Legacy(call) => Box::pin(shared.legacy_inline(call, ctx, reader)),
            Ready::Request(req) => Box::pin(async move {
                // Boxed: finding the era is rare and its future is 6 KB, which this
                // one would otherwise keep room for as long as the call runs.
                match Box::pin(shared.era_for(&ctx)).await {
                    Err(e) => First::Done(Err(e.to_rpc())),
                    Ok(Era::Modern) => {
                        let id = shared.upstream_id();
                        let body = kept(req.to_vec_with_id(Some(&id)));
                        let headers = modern_headers(&req);
                        shared.modern(body.into(), headers, id, ctx, reader).await
                    }
                    Ok(Era::Legacy)
                        if upstream_task_of(&req).is_none() && !req.params.contains_key("task") =>
                    {
                        let call = shared.legacy_call(&req);
                        shared.legacy_inline(call, ctx, reader).await
                    }
                    Ok(Era::Legacy) => {
                        let (tx, rx) = mpsc::channel(64);
                        let task =
                            tokio::spawn(shared.clone().run_legacy(req, ctx, tx, reader.clone()));
                        reader.lock().expect("cancel lock").reader = Some(task.abort_handle());
                        First::Stream(rx)
                    }
                }
            }),
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
                match shared.post(body, ci.session.headers(), &ci.ctx).await {
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
            events: Events::pending(request),
            canceller: Canceller::on_cancel(on_cancel),
        }
    }

    /// A request to a modern upstream: one POST; its JSON answer is the call, an
    /// SSE answer is read here until its first event and by a reader task after
    /// that if it goes on.
    ///
    /// A slow call's future is this one, waiting in `send` for as long as the
    /// upstream works, so it is kept small: an async block (an async fn would
    /// keep each argument twice), what it sends borrowed from it, and reading the
    /// answer boxed (a brief step whose future is larger than the wait's).
    #[allow(clippy::manual_async_fn)] // an async fn keeps its arguments twice
    fn modern(
        self: Arc<Self>,
        body: Bytes,
        headers: Fields,
        id: Value,
        ctx: CallContext,
        reader: Arc<Mutex<Stop>>,
    ) -> impl Future<Output = First> + Send {
        async move {
            let ans = match self.send(&Method::POST, Some(&body), &headers, &ctx).await {
                Ok(ans) => ans,
                Err(e) => return First::Done(Err(e.to_rpc())),
            };
            let read = Box::pin(async {
                let stream = match self.answered_as(ans, true).await {
                    Ok(read) => return Ok(read),
                    Err(stream) => stream,
                };
                self.first_answer(stream, &id).await
            });
            match read.await {
                Ok(read) => read.into(),
                Err(started) => {
                    let (tx, rx) = mpsc::channel(64);
                    let task =
                        tokio::spawn(async move { self.pump_started(started, id, tx, None).await });
                    reader.lock().expect("cancel lock").reader = Some(task.abort_handle());
                    First::Stream(rx)
                }
            }
        }
    }

    /// A request for a legacy session, not about one of the server's own tasks.
    fn legacy_call(&self, req: &Request) -> LegacyCall {
        let id = self.upstream_id();
        LegacyCall {
            body: kept(legacy_bytes(req, Some(&id))).into(),
            asks: mcp::may_ask(&req.method),
            id,
        }
    }

    /// Run `call` on a legacy session in the task that reads its events, like a
    /// modern call: a JSON answer ends it with no task or channel read by another.
    /// An SSE answer is pumped by a reader task; so is the rest of the call when the
    /// server asks the client something (on the session's GET stream, routed to the
    /// call's channel) before it answers, since nobody reads that channel until the
    /// call hands its events over.
    async fn legacy_inline(
        self: Arc<Self>,
        call: LegacyCall,
        ctx: CallContext,
        stop: Arc<Mutex<Stop>>,
    ) -> First {
        let (tx, mut rx) = mpsc::channel(64);
        let mut posted = Box::pin(
            self.clone()
                .legacy_post(call, ctx, tx.clone(), stop.clone()),
        );
        let asked = tokio::select! {
            biased;
            p = &mut posted => match p {
                Posted::Read(read) => return read.into(),
                Posted::Stream(stream) => {
                    let task = tokio::spawn(async move { stream.pump(&self, tx).await });
                    stop.lock().expect("cancel lock").reader = Some(task.abort_handle());
                    return First::Stream(rx);
                }
            },
            Some(ev) = rx.recv() => ev,
        };
        // Asked before the answer: a reader task hands the question on first, then
        // whatever else comes, and finishes the call on the same channel.
        let (out, events) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            if out.send(asked).await.is_err() {
                return;
            }
            let finish = async {
                match posted.await {
                    Posted::Read(read) => {
                        let outcome = match read {
                            Read::Done(o) => o,
                            Read::Raw(r) => r.outcome(),
                        };
                        let _ = tx.send(CallEvent::Done(outcome)).await;
                    }
                    Posted::Stream(stream) => stream.pump(&self, tx).await,
                }
            };
            let forward = async {
                while let Some(ev) = rx.recv().await {
                    let done = matches!(ev, CallEvent::Done(_));
                    if out.send(ev).await.is_err() || done {
                        return;
                    }
                }
            };
            tokio::join!(finish, forward);
        });
        stop.lock().expect("cancel lock").reader = Some(task.abort_handle());
        First::Stream(events)
    }

    /// POST `call` on the caller's session (once more on a new session after 404):
    /// its answer read, or its SSE stream with what pumping it needs.
    async fn legacy_post(
        self: Arc<Self>,
        call: LegacyCall,
        ctx: CallContext,
        tx: mpsc::Sender<CallEvent>,
        stop: Arc<Mutex<Stop>>,
    ) -> Posted {
        let failed = |e: UpstreamError| Posted::Read(Read::Done(Err(e.to_rpc())));
        let mut stale = None;
        loop {
            let asks = call.asks.then_some((&call.id, &tx));
            let (session, asker) = match self.call_session(&ctx, stale.as_ref(), asks, None).await {
                Ok(s) => s,
                Err(e) => return failed(e),
            };
            stop.lock().expect("cancel lock").legacy = Some(Box::new(CancelInfo {
                session: session.clone(),
                id: call.id.clone(),
                ctx: ctx.clone(),
            }));
            let busy = InFlight::new(&session);
            let headers = session.headers();
            let ans = match self
                .send(&Method::POST, Some(&call.body), &headers, &ctx)
                .await
            {
                Ok(a) => a,
                Err(e) => return failed(e),
            };
            if ans.status == StatusCode::NOT_FOUND && session.id.is_some() && stale.is_none() {
                stale = Some(session);
                continue;
            }
            let read = match self.answered_as(ans, true).await {
                Ok(read) => Ok(read),
                Err(stream) => self.first_answer(stream, &call.id).await,
            };
            session.last_used.store(self.now_ms(), Ordering::Relaxed);
            return match read {
                Ok(read) => Posted::Read(read),
                Err(started) => Posted::Stream(Box::new(LegacyStream {
                    started,
                    id: call.id,
                    session,
                    _held: (busy, asker),
                })),
            };
        }
    }

    /// Run one request about one of a legacy server's own tasks on the session that
    /// holds the task, sending its events to `tx`.
    async fn run_legacy(
        self: Arc<Self>,
        req: Request,
        ctx: CallContext,
        tx: mpsc::Sender<CallEvent>,
        stop: Arc<Mutex<Stop>>,
    ) {
        let id = self.upstream_id();
        let body = bytes::Bytes::from(legacy_bytes(&req, Some(&id)));
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
            stop.lock().expect("cancel lock").legacy = Some(Box::new(CancelInfo {
                session: session.clone(),
                id: id.clone(),
                ctx: ctx.clone(),
            }));
            let _busy = InFlight::new(&session);
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

/// A legacy request as bytes, with its upstream id and whether the server may ask
/// the client something while it runs.
struct LegacyCall {
    body: bytes::Bytes,
    id: Value,
    asks: bool,
}

/// A legacy POST, answered.
enum Posted {
    /// The answer, read: the call is over.
    Read(Read),
    /// An SSE stream to pump.
    Stream(Box<LegacyStream>),
}

/// A legacy call's SSE answer, started, and what stays held while it is pumped: the
/// session's in-flight count and the call's place among its askers.
struct LegacyStream {
    started: Started,
    id: Value,
    session: Arc<Session>,
    _held: (InFlight, Option<Asker>),
}

impl LegacyStream {
    async fn pump(self, shared: &Arc<Shared>, tx: mpsc::Sender<CallEvent>) {
        shared
            .pump_started(self.started, self.id, tx, Some(&self.session))
            .await;
        self.session
            .last_used
            .store(shared.now_ms(), Ordering::Relaxed);
    }
}

/// A request as `start` hands it to the call: serialized for an upstream known to
/// be modern, else as it is, until the upstream's era says how it goes.
enum Ready {
    Modern(Vec<u8>, Fields, Value),
    Legacy(LegacyCall),
    Request(Request),
}

/// What cancelling a call stops: its reader task, once it has one, and on a
/// legacy session the request `notifications/cancelled` names.
#[derive(Default)]
struct Stop {
    reader: Option<tokio::task::AbortHandle>,
    /// Boxed: only legacy calls have it, and every call keeps a `Stop`.
    legacy: Option<Box<CancelInfo>>,
}

/// What a legacy cancellation needs: the session and the upstream request id.
struct CancelInfo {
    session: Arc<Session>,
    id: Value,
    ctx: CallContext,
}
