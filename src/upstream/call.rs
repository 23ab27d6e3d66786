//! One request in flight upstream, as the `Upstream` trait hands it back: its
//! `UpstreamCall` (events and `Canceller`), the `CallEvent`s it yields, and the
//! `ServerRequest`s a legacy upstream sends the client meanwhile.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::broken;
use tasklift_protocol::jsonrpc::{Outcome, RpcError};
use tasklift_protocol::mcp::method;
use tasklift_protocol::scan::{Layout, Member};

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

/// A modern upstream's successful answer, kept as the bytes it came in: a result
/// object whose `_meta` (if any) has no related-task entry and whose `resultType`
/// is `complete` (or none). Such a
/// result is what tasklift passes on unchanged, so it is never parsed into a
/// `Value` on its way to a synchronous caller: the response is the result's bytes
/// behind the caller's id, with `resultType` added when the upstream left it out.
pub struct RawResult {
    body: Bytes,
    /// Where the result object is in `body`.
    start: usize,
    end: usize,
    /// Where the response's id is in `body`, if it has one.
    id: Option<(usize, usize)>,
    /// It says `"resultType": "complete"` itself.
    complete: bool,
}

impl std::fmt::Debug for RawResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawResult")
            .field("bytes", &(self.end - self.start))
            .finish()
    }
}

/// The top of an answer, borrowed: what decides whether it passes as bytes.
#[derive(Deserialize)]
struct AnswerTop<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<IgnoredAny>,
    method: Option<IgnoredAny>,
}

/// The top of a result, borrowed.
#[derive(Deserialize)]
struct ResultTop<'a> {
    #[serde(borrow, rename = "resultType")]
    result_type: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "_meta")]
    meta: Option<MetaTop>,
}

/// The one `_meta` entry tasklift removes from a result (`finalize_result`): an
/// upstream's related-task, which names a task of the upstream's own. SDK servers
/// put `_meta` (their serverInfo) on every result, so the rest passes.
#[derive(Deserialize)]
struct MetaTop {
    #[serde(rename = "io.modelcontextprotocol/related-task")]
    related_task: Option<IgnoredAny>,
}

/// The `_meta` key of an upstream's related-task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Where an answer's result and its id lie, and whether it says `complete`.
type Found = (usize, usize, Option<(usize, usize)>, bool);

/// Where a scanned answer's result and id lie and whether it says `complete`,
/// when the scan alone decides that it passes as bytes: no `error` or `method`,
/// an object `result` whose `resultType` (if any) is `"complete"` as written,
/// and no related-task in its `_meta`. `None`: `serde_json` decides
/// ([`RawResult::scan`]).
fn passable(text: &str, layout: &Layout) -> Option<Found> {
    let name = |m: &Member| &text[m.name.0..m.name.1];
    let value = |m: &Member| &text[m.value.0..m.value.1];
    let (mut id, mut result) = (None, None);
    for m in &layout.top.members {
        match name(m) {
            "error" | "method" => return None,
            "id" if value(m) == "null" => return None,
            "id" => id = Some(m.value),
            "result" => result = Some(m.value),
            _ => {}
        }
    }
    let result = result?;
    let inner = layout.params.as_ref().filter(|o| o.span == result)?;
    let mut complete = false;
    for m in &inner.members {
        match name(m) {
            "resultType" if value(m) == r#""complete""# => complete = true,
            "resultType" => return None,
            "_meta" => {
                let meta = layout.meta.as_ref().filter(|o| o.span == m.value)?;
                if meta.members.iter().any(|e| name(e) == RELATED_TASK) {
                    return None;
                }
            }
            _ => {}
        }
    }
    Some((result.0, result.1, id, complete))
}

/// [`passable`], decided by `serde_json` reading the answer's top and its
/// result's.
fn parsed_passable(text: &str) -> Option<Found> {
    let top: AnswerTop = serde_json::from_str(text).ok()?;
    if top.error.is_some() || top.method.is_some() {
        return None;
    }
    let result = top.result?.get();
    if !result.starts_with('{') {
        return None;
    }
    let inner: ResultTop = serde_json::from_str(result).ok()?;
    let complete = match inner.result_type.as_deref() {
        _ if inner.meta.is_some_and(|m| m.related_task.is_some()) => return None,
        None => false,
        Some("complete") => true,
        Some(_) => return None,
    };
    let at = |r: &str| r.as_ptr() as usize - text.as_ptr() as usize;
    let start = at(result);
    let id = top.id.map(|i| (at(i.get()), at(i.get()) + i.get().len()));
    Some((start, start + result.len(), id, complete))
}

impl RawResult {
    /// The answer's bytes as a passable result, or the bytes back when the answer
    /// needs the full parse (an error, a request, a related-task to filter out of
    /// `_meta`, another `resultType`, anything malformed).
    pub fn scan(body: Bytes) -> Result<Self, Bytes> {
        // Most answers are decided from a scan of the bytes; what it leaves open,
        // serde_json decides.
        let found = std::str::from_utf8(&body).ok().and_then(|text| {
            tasklift_protocol::scan::scan_response(text)
                .and_then(|layout| passable(text, &layout))
                .or_else(|| parsed_passable(text))
        });
        match found {
            Some((start, end, id, complete)) => Ok(Self {
                body,
                start,
                end,
                id,
                complete,
            }),
            None => Err(body),
        }
    }

    /// The answer it was scanned from.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// Whether it is the response to `id`.
    pub fn id_is(&self, id: &Value) -> bool {
        self.id.is_some_and(|(a, b)| {
            serde_json::from_slice::<Value>(&self.body[a..b]).is_ok_and(|v| &v == id)
        })
    }

    /// The result as a value, `resultType` included.
    pub fn value(&self) -> Value {
        let mut r: Value = serde_json::from_slice(&self.body[self.start..self.end])
            .expect("scanned as a JSON object");
        tasklift_protocol::mcp::mark_complete(&mut r);
        r
    }

    /// The result as an outcome, `resultType` included.
    pub fn outcome(&self) -> Outcome {
        Ok(self.value())
    }

    /// The JSON-RPC response to the caller's request `id`, as bytes.
    pub fn response(&self, id: Option<&Value>) -> Bytes {
        let result = &self.body[self.start..self.end];
        let mut out = Vec::with_capacity(result.len() + 64);
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        serde_json::to_writer(&mut out, id.unwrap_or(&Value::Null)).expect("ids serialize");
        out.extend_from_slice(br#","result":"#);
        if self.complete {
            out.extend_from_slice(result);
        } else {
            out.extend_from_slice(br#"{"resultType":"complete""#);
            let rest = &result[1..];
            let first = rest.iter().find(|b| !b.is_ascii_whitespace());
            if first != Some(&b'}') {
                out.push(b',');
            }
            out.extend_from_slice(rest);
        }
        out.push(b'}');
        Bytes::from(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(s: &str) -> Option<RawResult> {
        RawResult::scan(Bytes::from(s.to_string())).ok()
    }

    fn response(s: &str, id: Value) -> Value {
        let r = scan(s).expect("passes as bytes");
        serde_json::from_slice(&r.response(Some(&id))).expect("a JSON response")
    }

    #[test]
    fn a_plain_result_passes_with_the_callers_id_and_result_type() {
        let up = r#"{"jsonrpc":"2.0","id":"tasklift-9","result":{"content":[{"type":"text","text":"ok \"quoted\" \u00e9"}],"isError":false}}"#;
        assert_eq!(
            response(up, json!(7)),
            json!({"jsonrpc": "2.0", "id": 7, "result": {
                "content": [{"type": "text", "text": "ok \"quoted\" é"}],
                "isError": false, "resultType": "complete"}})
        );
        let complete = r#"{"result": {"resultType": "complete", "x": [1, {"y": null}]}, "id": 3, "jsonrpc": "2.0"}"#;
        assert_eq!(
            response(complete, json!("a-b")),
            json!({"jsonrpc": "2.0", "id": "a-b", "result": {"resultType": "complete", "x": [1, {"y": null}]}})
        );
        for empty in [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{ }}"#,
        ] {
            assert_eq!(
                response(empty, json!(1))["result"],
                json!({"resultType": "complete"}),
                "{empty}"
            );
        }
        // An SDK server's `_meta` (its serverInfo) passes untouched.
        let sdk = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"py","version":""}}}}"#;
        assert_eq!(
            response(sdk, json!(2))["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]
                ["name"],
            "py"
        );
        // The outcome, for readers that need the value, matches.
        let r = scan(up).unwrap();
        assert_eq!(r.outcome().unwrap()["resultType"], "complete");
        // The response's id, as JSON.
        assert!(r.id_is(&json!("tasklift-9")));
        assert!(!r.id_is(&json!("tasklift-90")) && !r.id_is(&json!(9)));
        assert!(scan(complete).unwrap().id_is(&json!(3)));
        assert!(!scan(r#"{"result":{}}"#).unwrap().id_is(&Value::Null));
    }

    #[test]
    fn the_scan_decides_as_serde_json_does() {
        let answers = [
            r#"{"jsonrpc":"2.0","id":"tasklift-9","result":{"content":[{"type":"text","text":"ok"}]}}"#,
            r#" { "result" : { "resultType" : "complete" , "x" : [1, {"y": null}] } , "id" : 3 } "#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"py"}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":null}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":7}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"x":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}"#,
        ];
        let mut decided = 0;
        for a in answers {
            let by_scan = tasklift_protocol::scan::scan_response(a).and_then(|l| passable(a, &l));
            let by_serde = parsed_passable(a);
            if by_scan.is_some() {
                decided += 1;
                assert_eq!(by_scan, by_serde, "{a}");
            }
            // Whichever decides, the answer is what serde_json makes of it.
            let scanned = RawResult::scan(Bytes::from(a.to_string())).ok();
            assert_eq!(
                scanned.map(|r| (r.start, r.end, r.id, r.complete)),
                by_serde,
                "{a}"
            );
        }
        assert!(decided >= 5, "the scan decided only {decided}");
    }

    #[test]
    fn anything_tasklift_must_look_into_gets_the_full_parse() {
        for body in [
            // An error, a request, no result.
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            // A related-task in `_meta` (filtered out), a `_meta` that is not an
            // object, another resultType (an upstream's task).
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"u"}},"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":7,"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required"}}"#,
            // Not an object, a duplicate key, malformed, not UTF-8.
            r#"{"jsonrpc":"2.0","id":1,"result":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"result":{"b":2}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","resultType":"task"}}"#,
        ] {
            assert!(scan(body).is_none(), "{body}");
        }
        let bad = Bytes::from_static(b"{\"result\":{\"a\":\"\xff\"}}");
        assert!(RawResult::scan(bad).is_err());
    }
}
