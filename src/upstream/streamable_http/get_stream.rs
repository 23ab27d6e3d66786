//! A legacy session's standalone GET stream: open for the session's life
//! (reopened with `Last-Event-ID`), its requests routed to the call they are
//! proven to belong to, its other notifications to `subscriptions/listen`.

use std::ops::ControlFlow;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::ResponseBody;
use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::session::InFlight;
use super::{Answer, Fields, Session, Shared, MAX_RESUME_DELAY_MS};
use crate::upstream::router::{self, Channel, Route};
use crate::upstream::{
    agreed_by_capabilities, CallContext, CallEvent, Canceller, Listening, UpstreamError,
};
use tasklift_protocol::jsonrpc::Outcome;
use tasklift_protocol::sse::SseParser;

impl Shared {
    /// A legacy session's change notifications: `resources/subscribe` for the URIs,
    /// then the session's GET stream.
    pub(super) async fn listen_legacy(
        self: &Arc<Self>,
        filter: &serde_json::Map<String, Value>,
        ctx: &CallContext,
    ) -> Result<Listening, UpstreamError> {
        let s = self.session(ctx, None).await?;
        let caps = s.init.get("capabilities").cloned().unwrap_or_default();
        let agreed = agreed_by_capabilities(&caps, filter);
        if agreed.is_empty() {
            return Ok(Listening::none());
        }
        let uris = agreed
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for uri in uris {
            let id = self.upstream_id();
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe", "params": {"uri": uri}});
            let ans = self
                .post(
                    serde_json::to_vec(&msg).expect("serializes"),
                    s.headers(),
                    ctx,
                )
                .await?;
            if let Ok(Err(e)) = self.read_response(ans, &id).await {
                tracing::warn!(upstream = %self.cfg.name, %uri, error = %e, "resources/subscribe failed");
            }
        }
        if s.id.is_none() {
            tracing::info!(upstream = %self.cfg.name, "the legacy upstream keeps no sessions, so it has no GET stream; no change notifications");
            return Ok(Listening::none());
        }
        // The session's one GET stream (opened with the session) carries them; a
        // second GET would be refused by servers that allow one per session.
        let mut changes = s.changes.subscribe();
        let (tx, rx) = mpsc::channel(64);
        let session = s.clone();
        let busy = InFlight::new(&session);
        let task = tokio::spawn(async move {
            let _busy = busy;
            loop {
                match changes.recv().await {
                    Ok(n) => {
                        if tx.send(n).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(
                            skipped = n,
                            "a listener fell behind the upstream's change notifications"
                        );
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Listening {
            agreed,
            events: rx,
            canceller: Canceller::new(task.abort_handle(), None),
        })
    }

    /// Open `s`'s standalone GET stream and read it for as long as the session
    /// lives: requests to the client go to the call they belong to ([`SessionStream`]),
    /// other messages to the session's listeners. A stream the server ends is
    /// reopened (with `Last-Event-ID`); a server without one (405) is left alone.
    ///
    /// Resolves once the first GET has been answered (or could not be), so that a
    /// call sent on a new session finds the stream open: servers drop a request
    /// with no related request id when no GET stream is there to carry it.
    pub(super) async fn open_get_stream(self: &Arc<Self>, s: &Arc<Session>) {
        if s.id.is_none() {
            return; // no session, no standalone stream
        }
        let (opened, is_open) = oneshot::channel::<()>();
        let stream = GetStream {
            shared: self.clone(),
            session: Arc::downgrade(s),
            opened: Some(opened),
            last: None,
            retry_ms: None,
            failures: 0,
        };
        let task = tokio::spawn(stream.run());
        *s.get_stream.lock().expect("get stream lock") = Some(task.abort_handle());
        let _ = tokio::time::timeout(self.cfg.connect_timeout, is_open).await;
    }
}

/// What the server made of a GET for the session's stream.
enum Opened {
    Stream(Answer),
    /// Refused for now, or not sent: try again later.
    Retry,
    /// The session has no GET stream.
    Never,
}

/// A session's standalone GET stream, reopened for as long as the session lives.
struct GetStream {
    shared: Arc<Shared>,
    session: Weak<Session>,
    /// Told once the first GET has been answered (or could not be).
    opened: Option<oneshot::Sender<()>>,
    /// Where the stream left off, for `Last-Event-ID`.
    last: Option<String>,
    /// The `retry` the server asked for.
    retry_ms: Option<u64>,
    /// Opens that failed (or streams that ended) in a row.
    failures: u32,
}

impl GetStream {
    /// Open the stream, read it, and reopen it, until the session or its stream is gone.
    async fn run(mut self) {
        loop {
            let Some((headers, opener)) = self.request() else {
                return;
            };
            let sent = self
                .shared
                .send(&Method::GET, None, &headers, &opener)
                .await;
            if let Some(o) = self.opened.take() {
                let _ = o.send(());
            }
            let ans = match self.opened(sent) {
                Opened::Stream(ans) => ans,
                Opened::Retry => {
                    self.back_off().await;
                    continue;
                }
                Opened::Never => return,
            };
            if self.read(ans.body).await.is_break() {
                return;
            }
            self.back_off().await;
        }
    }

    /// The GET's headers and the context it goes with; `None` once the session is gone.
    fn request(&self) -> Option<(Fields, CallContext)> {
        let sess = self.session.upgrade()?;
        let mut h = sess.headers();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        if let Some(v) = self
            .last
            .as_deref()
            .and_then(|l| HeaderValue::from_str(l).ok())
        {
            h.insert(HeaderName::from_static("last-event-id"), v);
        }
        Some((h, sess.opener.clone()))
    }

    fn opened(&self, sent: Result<Answer, UpstreamError>) -> Opened {
        let name = &self.shared.cfg.name;
        match sent {
            Ok(a) if a.status.is_success() => Opened::Stream(a),
            // Gone (404), never offered (405), or refused (4xx): the
            // session has no GET stream; nothing to retry.
            Ok(a)
                if a.status.is_client_error()
                    && a.status != StatusCode::CONFLICT
                    && a.status != StatusCode::TOO_MANY_REQUESTS =>
            {
                tracing::debug!(upstream = %name, status = %a.status, "the legacy upstream offers no GET stream on this session");
                Opened::Never
            }
            Ok(a) => {
                tracing::debug!(upstream = %name, status = %a.status, "the session's GET stream was refused for now; retrying");
                Opened::Retry
            }
            Err(e) => {
                tracing::debug!(upstream = %name, error = %e, "could not open the session's GET stream; retrying");
                Opened::Retry
            }
        }
    }

    /// Wait before the next GET, longer after each failure in a row.
    async fn back_off(&mut self) {
        self.failures += 1;
        tokio::time::sleep(get_backoff(self.retry_ms, self.failures)).await;
    }

    /// Read the stream until the server ends it, noting where it left off;
    /// `Break` once the session is gone.
    async fn read(&mut self, mut body: ResponseBody) -> ControlFlow<()> {
        let mut parser = SseParser::default();
        parser.last_event_id = self.last.clone();
        let mut got_data = false;
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            got_data = true;
            for ev in parser.feed(&data) {
                if self.deliver(&ev).await.is_break() {
                    return ControlFlow::Break(());
                }
            }
        }
        // The server ended it (idle timeouts, SSE polling): reopen where it
        // left off, after the `retry` it asked for.
        self.last = parser.last_event_id.clone();
        self.retry_ms = parser.retry_ms.or(self.retry_ms);
        if got_data {
            self.failures = 0; // it was serving: a plain reopen
        }
        ControlFlow::Continue(())
    }

    /// Route one event of the stream; `Break` once the session is gone.
    async fn deliver(&self, ev: &str) -> ControlFlow<()> {
        let Some(msg) = router::parse(ev) else {
            return ControlFlow::Continue(());
        };
        let Some(sess) = self.session.upgrade() else {
            return ControlFlow::Break(());
        };
        let stream = SessionStream {
            shared: &self.shared,
            session: &sess,
        };
        match router::route(&stream, msg, &self.shared.cfg.name) {
            Route::Call(to, ev) => {
                if let Err(e) = to.send(ev).await {
                    drop(e); // the call just ended: dropping a request answers it
                }
            }
            Route::Unrelated(message) => {
                let _ = sess.changes.send(message);
            }
            Route::Ping(id) => {
                if let Some(answer) = stream.responder(&id) {
                    answer(Ok(json!({})));
                }
            }
            Route::Stray | Route::Refused | Route::Parked | Route::Forbidden(_) => {}
        }
        ControlFlow::Continue(())
    }
}

/// A legacy session's GET stream, for the router: it names no call, so a request
/// on it goes to the session's call it is proven to belong to, else is refused.
struct SessionStream<'a> {
    shared: &'a Arc<Shared>,
    session: &'a Session,
}

impl Channel for SessionStream<'_> {
    type Call = mpsc::Sender<CallEvent>;

    fn events(&self, call: Self::Call) -> Option<mpsc::Sender<CallEvent>> {
        Some(call)
    }

    /// The GET stream answers none of tasklift's requests.
    fn answered(&self, _: &Value, _: &Outcome) -> Option<mpsc::Sender<CallEvent>> {
        None
    }

    fn askers(&self) -> Vec<(Self::Call, Option<String>)> {
        let askers = self.session.askers.lock().expect("askers lock");
        askers
            .iter()
            .map(|a| (a.tx.clone(), a.task.clone()))
            .collect()
    }

    fn responder(&self, id: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>> {
        let s = self.session;
        Some(
            self.shared
                .responder(s.headers(), s.opener.clone(), id.clone()),
        )
    }
}

/// How long to wait before reopening a session's GET stream: the server's `retry`
/// (capped) after it ended the stream, else a backoff from 400 ms doubling to 30 s
/// over repeated failures.
fn get_backoff(retry_ms: Option<u64>, failures: u32) -> Duration {
    let backoff = 200u64.saturating_mul(1 << failures.min(8)).min(30_000);
    match retry_ms {
        Some(r) if failures <= 1 => Duration::from_millis(r.min(MAX_RESUME_DELAY_MS)),
        _ => Duration::from_millis(backoff),
    }
}
