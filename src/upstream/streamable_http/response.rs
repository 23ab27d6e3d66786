//! Reading the answer to one POST: a JSON body or an SSE stream whose messages
//! the router delivers (everything on a call's own stream is that call's), with
//! broken legacy streams resumed by `Last-Event-ID`.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use super::ResponseBody;
use http::{header, HeaderName, HeaderValue, Method};
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Answer, Fields, Session, Shared, MAX_RESUME_DELAY_MS};
use crate::upstream::router::{self, Channel, Route};
use crate::upstream::{broken, broken_by, CallEvent, First, RawResult, UpstreamError};
use tasklift_protocol::jsonrpc::{self, Incoming as Msg, Outcome, RpcError};
use tasklift_protocol::sse::SseParser;

/// A whole (not streamed) answer, read.
pub(super) enum Read {
    /// Its outcome.
    Done(Outcome),
    /// A plain result, as bytes.
    Raw(RawResult),
}

impl From<Read> for First {
    fn from(r: Read) -> Self {
        match r {
            Read::Done(o) => First::Done(o),
            Read::Raw(r) => First::Raw(r),
        }
    }
}

/// How many times one response stream is resumed after the server closed it.
const MAX_RESUMES: u32 = 20;

impl Shared {
    /// Read the single response to `id` from a JSON or SSE answer, ignoring notifications.
    pub(super) async fn read_response(
        self: &Arc<Self>,
        ans: Answer,
        id: &Value,
    ) -> Result<Outcome, UpstreamError> {
        let (tx, mut rx) = mpsc::channel(16);
        self.pump(ans, id.clone(), tx, None).await;
        while let Some(ev) = rx.recv().await {
            if let CallEvent::Done(o) = ev {
                return Ok(o);
            }
        }
        Err(UpstreamError::BadResponse {
            name: self.cfg.name.clone(),
            status: 200,
            message: "no JSON-RPC response in the body".into(),
        })
    }

    /// The outcome of an answer that is not a stream: an HTTP error, or a JSON body.
    /// An SSE stream is handed back, for [`Shared::pump`].
    pub(super) async fn answered(self: &Arc<Self>, ans: Answer) -> Result<Outcome, Answer> {
        Ok(match self.answered_as(ans, false).await? {
            Read::Raw(r) => r.outcome(),
            Read::Done(o) => o,
        })
    }

    /// [`Shared::answered`], with a plain result kept as bytes when `raw`
    /// ([`RawResult`]).
    pub(super) async fn answered_as(
        self: &Arc<Self>,
        ans: Answer,
        raw: bool,
    ) -> Result<Read, Answer> {
        let name = &self.cfg.name;
        let is_sse = ans
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if !ans.status.is_success() {
            let status = ans.status;
            let ans_headers = ans.headers;
            let body = self.read_all(ans.body).await.unwrap_or_default();
            let outcome = match serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(Msg::classify)
            {
                // The server's own error: it keeps the status it came with, which the
                // front door may pass on (`front::errors`).
                Some(Msg::Response {
                    outcome: Err(e), ..
                }) => Err(e.with_http_status(status.as_u16())),
                _ => Err(RpcError::new(
                    jsonrpc::UPSTREAM_ERROR,
                    format!(
                        "upstream {name} answered HTTP {status}{}: {}",
                        retry_note(&ans_headers),
                        String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
                    ),
                )),
            };
            return Ok(Read::Done(outcome));
        }
        if is_sse {
            return Err(ans);
        }
        let body = match self.read_all(ans.body).await {
            Ok(b) => b,
            Err(e) => return Ok(Read::Done(Err(e.to_rpc()))),
        };
        let body = match raw {
            true => match RawResult::scan(body) {
                Ok(r) => return Ok(Read::Raw(r)),
                Err(body) => body,
            },
            false => body,
        };
        Ok(Read::Done(
            match tasklift_protocol::json::from_bytes::<Value>(&body)
                .ok()
                .and_then(Msg::classify)
            {
                Some(Msg::Response { outcome, .. }) => outcome,
                _ => Err(RpcError::new(
                    jsonrpc::UPSTREAM_ERROR,
                    format!("upstream {name} answered with a body that is not a JSON-RPC response"),
                )),
            },
        ))
    }

    /// Turn an answer into events on `tx`: notifications, then `Done`. Server-initiated
    /// requests on a legacy stream are answered so the upstream is not left waiting.
    pub(super) async fn pump(
        self: &Arc<Self>,
        ans: Answer,
        id: Value,
        tx: mpsc::Sender<CallEvent>,
        session: Option<&Session>,
    ) {
        match self.answered(ans).await {
            Ok(outcome) => {
                let _ = tx.send(CallEvent::Done(outcome)).await;
            }
            Err(stream) => {
                let started = Started::new(stream.body);
                self.pump_started(started, id, tx, session).await
            }
        }
    }

    /// Read an SSE answer in the caller's task until its first event: when that is
    /// the call's own response (a quick tool on an SDK server, which answers every
    /// POST as a stream), the call is over without a reader task, its result kept
    /// as bytes when it can pass unchanged. Otherwise (a notification or a request
    /// first, or a stream that ended without a word, to be resumed) the stream, with
    /// what was read of it, goes to [`Shared::pump_started`].
    pub(super) async fn first_answer(&self, stream: Answer, id: &Value) -> Result<Read, Started> {
        let mut started = Started::new(stream.body);
        loop {
            let Some((events, ended)) = started.reading.next(&self.cfg.name).await else {
                continue;
            };
            let Some(first) = events.iter().position(|d| !d.trim().is_empty()) else {
                // Only a priming event (an id, no data): it set the resumption point.
                if ended {
                    started.ended = true;
                    return Err(started);
                }
                continue;
            };
            let mut events = events;
            match own_response(std::mem::take(&mut events[first]), id) {
                Ok(read) => {
                    if !ended {
                        release(started.reading.body);
                    }
                    return Ok(read);
                }
                Err(data) => events[first] = data,
            }
            started.pending = events;
            started.ended = ended;
            return Err(started);
        }
    }

    /// [`Shared::pump`] for a stream already started (by [`Shared::first_answer`]).
    pub(super) async fn pump_started(
        self: &Arc<Self>,
        mut started: Started,
        id: Value,
        tx: mpsc::Sender<CallEvent>,
        session: Option<&Session>,
    ) {
        let name = &self.cfg.name;
        let stream = OwnStream {
            shared: self,
            id: &id,
            tx: &tx,
            session,
        };
        let reading = &mut started.reading;
        let (mut events, mut ended) = (std::mem::take(&mut started.pending), started.ended);
        loop {
            if reading.deliver(&stream, events, name).await.is_break() {
                if !ended {
                    release(started.reading.body);
                }
                return;
            }
            if ended && !self.resume(reading, session).await {
                break;
            }
            (events, ended) = reading.next(name).await.unwrap_or_default();
        }
        let _ = tx.send(CallEvent::Done(Err(reading.error(name)))).await;
    }

    /// A legacy server may close a response stream mid-call and expect the
    /// client to resume it with `Last-Event-ID` on a GET (2025-11-25 SSE polling):
    /// whether `reading` goes on, on the resumed stream.
    async fn resume(self: &Arc<Self>, reading: &mut Reading, session: Option<&Session>) -> bool {
        let (Some(s), Some(last)) = (session, reading.parser.last_event_id.clone()) else {
            return false;
        };
        if reading.resumes >= MAX_RESUMES {
            return false;
        }
        reading.resumes += 1;
        let delay = reading
            .parser
            .retry_ms
            .unwrap_or(0)
            .min(MAX_RESUME_DELAY_MS);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let Some(body) = self.resume_stream(s, &last).await else {
            return false;
        };
        tracing::debug!(upstream = %self.cfg.name, last_event_id = %last, "resumed the upstream's response stream");
        reading.restart(body, last);
        true
    }

    /// `pump` for a request that starts or ends an upstream task: a
    /// `CreateTaskResult` makes this session the task's home for this caller
    /// (`caller`: its session key), where its `tasks/*` requests must go; the
    /// answer to a `tasks/result` or `tasks/cancel` (`finishes`: the home's key)
    /// ends that, unless tasklift could not get one (it will ask again).
    pub(super) async fn pump_task_call(
        self: &Arc<Self>,
        ans: Answer,
        id: Value,
        tx: mpsc::Sender<CallEvent>,
        session: &Arc<Session>,
        (caller, finishes): (&str, Option<String>),
    ) {
        let (itx, mut irx) = mpsc::channel(16);
        let forward = async {
            while let Some(ev) = irx.recv().await {
                if let CallEvent::Done(outcome) = &ev {
                    if let Some(t) = outcome
                        .as_ref()
                        .ok()
                        .and_then(|r| r.pointer("/task/taskId"))
                        .and_then(Value::as_str)
                    {
                        self.task_homes
                            .insert(format!("{caller}\n{t}"), Arc::downgrade(session));
                    }
                    let answered = outcome
                        .as_ref()
                        .map_or_else(|e| e.code != jsonrpc::UPSTREAM_ERROR, |_| true);
                    if let Some(k) = finishes.as_ref().filter(|_| answered) {
                        self.task_homes.remove(k);
                    }
                }
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        };
        tokio::join!(self.pump(ans, id, itx, Some(session)), forward);
    }

    /// Reopen a legacy response stream after `last` with a GET carrying `Last-Event-ID`.
    async fn resume_stream(self: &Arc<Self>, s: &Session, last: &str) -> Option<ResponseBody> {
        let mut h = s.headers();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(
            HeaderName::from_static("last-event-id"),
            HeaderValue::from_str(last).ok()?,
        );
        match self.send(&Method::GET, None, &h, &s.opener).await {
            Ok(ans) if ans.status.is_success() => Some(ans.body),
            Ok(ans) => {
                tracing::warn!(upstream = %self.cfg.name, status = %ans.status, "the upstream refused to resume a response stream");
                None
            }
            Err(e) => {
                tracing::warn!(upstream = %self.cfg.name, error = %e, "could not resume a response stream");
                None
            }
        }
    }
}

/// How long what is left of a response stream after the call's own answer is
/// read in the background before it is dropped (see [`release`]).
const RELEASE_LIMIT: Duration = Duration::from_secs(2);

/// What is left of a response stream once the call's own answer is in: read to
/// its end, so that its connection goes back to the pool. Dropped unread, an
/// HTTP/1.1 body closes its connection (cancellation, to the server), and every
/// SDK server ends its SSE answers with a last chunk that comes with the answer
/// or just after it: each call would open a new connection. What is already
/// here is read at once; a stream that goes on is read in the background for up
/// to [`RELEASE_LIMIT`] (its events are nobody's now: the call is answered), then
/// dropped.
fn release(mut body: ResponseBody) {
    use http_body::Body;
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match std::pin::Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(_))) => continue,
            Poll::Ready(_) => return,
            Poll::Pending => break,
        }
    }
    tokio::spawn(async move {
        let rest = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(RELEASE_LIMIT, rest).await;
    });
}

/// ` (Retry-After: 30)` when the answer carries `Retry-After`, for the error a
/// caller sees: when it may try again.
fn retry_note(headers: &Fields) -> String {
    headers
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(|v| format!(" (Retry-After: {})", v.trim()))
        .unwrap_or_default()
}

/// The call's own response, when `data` (an SSE event's) is it: as bytes when it
/// can pass unchanged (taking the event's text without a copy), else parsed;
/// `data` back when it is something else.
fn own_response(data: String, id: &Value) -> Result<Read, String> {
    match RawResult::scan_text(data) {
        Ok(raw) if raw.id_is(id) => Ok(Read::Raw(raw)),
        Ok(raw) => Err(String::from_utf8(Vec::from(raw.into_body())).expect("it was a String")),
        Err(data) => match router::parse(&data) {
            Some(Msg::Response { id: got, outcome }) if &got == id => Ok(Read::Done(outcome)),
            _ => Err(data),
        },
    }
}

/// A response stream whose first events were read in the caller's task: the
/// stream, those events (not yet delivered) and whether it ended with them.
pub(super) struct Started {
    reading: Reading,
    pending: Vec<String>,
    ended: bool,
}

impl Started {
    fn new(body: ResponseBody) -> Self {
        Self {
            reading: Reading {
                parser: SseParser::default(),
                body,
                resumes: 0,
                broke: None,
            },
            pending: Vec::new(),
            ended: false,
        }
    }
}

/// A response stream being read, across its resumptions.
struct Reading {
    parser: SseParser,
    body: ResponseBody,
    /// Resumptions since the server last made progress.
    resumes: u32,
    /// Why the stream last broke, if it did not simply end.
    broke: Option<String>,
}

impl Reading {
    /// The events of the next frame, and whether the stream ended with it;
    /// `None` for a frame that carries no data.
    async fn next(&mut self, name: &str) -> Option<(Vec<String>, bool)> {
        match self.body.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Some((self.parser.feed(&data), false)),
                Err(_) => None,
            },
            Some(Err(e)) => {
                let cause = crate::upstream::chain(&*e);
                tracing::warn!(upstream = %name, error = %cause, "upstream stream broke");
                self.broke = Some(cause);
                Some((Vec::new(), true))
            }
            None => Some((self.parser.finish().into_iter().collect(), true)),
        }
    }

    /// Route `events` to their calls; `Break` once the call's own answer is delivered.
    async fn deliver(
        &mut self,
        stream: &OwnStream<'_>,
        events: Vec<String>,
        name: &str,
    ) -> ControlFlow<()> {
        if events.iter().any(|d| !d.trim().is_empty()) {
            self.resumes = 0; // the server is making progress
        }
        for data in events {
            // A priming event (an id, no data) only sets the resumption point.
            if data.trim().is_empty() {
                continue;
            }
            let Some(msg) = router::parse(&data) else {
                tracing::warn!(upstream = %name, "skipping an SSE event that is not JSON-RPC");
                continue;
            };
            match router::route(stream, msg, name) {
                Route::Call(to, ev) => {
                    let done = matches!(ev, CallEvent::Done(_));
                    let _ = to.send(ev).await;
                    if done {
                        return ControlFlow::Break(());
                    }
                }
                Route::Stray => {
                    tracing::warn!(upstream = %name, "response for another request on this stream; ignored")
                }
                Route::Forbidden(method) => tracing::warn!(upstream = %name, %method,
                    "a modern upstream sent a request on a response stream, which 2026-07-28 forbids; ignored"),
                // Everything on a call's own stream is that call's.
                Route::Unrelated(_) | Route::Ping(_) | Route::Refused | Route::Parked => {}
            }
        }
        ControlFlow::Continue(())
    }

    /// Go on reading `body`, the stream resumed after `last`.
    fn restart(&mut self, body: ResponseBody, last: String) {
        self.body = body;
        self.broke = None;
        let retry = self.parser.retry_ms;
        self.parser = SseParser::default();
        self.parser.last_event_id = Some(last);
        self.parser.retry_ms = retry;
    }

    /// The call's error when the stream ended without its answer.
    fn error(&self, name: &str) -> RpcError {
        match &self.broke {
            Some(cause) => broken_by(name, cause),
            None => broken(name),
        }
    }
}

/// A call's own response stream, for the router: everything on it is that call's.
struct OwnStream<'a> {
    shared: &'a Arc<Shared>,
    /// The call's upstream request id.
    id: &'a Value,
    /// Where its events go.
    tx: &'a mpsc::Sender<CallEvent>,
    /// The legacy session it runs on, where the server may ask the client; a
    /// modern response stream carries no requests.
    session: Option<&'a Session>,
}

impl Channel for OwnStream<'_> {
    type Call = mpsc::Sender<CallEvent>;

    fn events(&self, call: Self::Call) -> Option<mpsc::Sender<CallEvent>> {
        Some(call)
    }

    fn answered(&self, id: &Value, _: &Outcome) -> Option<mpsc::Sender<CallEvent>> {
        (id == self.id).then(|| self.tx.clone())
    }

    fn own(&self) -> Option<Self::Call> {
        Some(self.tx.clone())
    }

    fn responder(&self, id: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>> {
        self.session.map(|s| {
            self.shared
                .responder(s.headers(), s.opener.clone(), id.clone())
        })
    }
}
