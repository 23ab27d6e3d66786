//! Where a message from an upstream goes, the same for every channel it can come
//! on: a call's own HTTP response stream, a legacy session's GET stream, a stdio
//! child's stdout. The transport says what it knows about the calls in flight on
//! the channel ([`Channel`]); [`route`] decides:
//!
//! - a response goes to the call it answers;
//! - a notification goes to the call it is about: the stream's own call, the call
//!   whose progress token (tasklift's own) it carries, or, for a log message, the
//!   call the transport can tell it is for; else it is about no call;
//! - a request to the client (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`) goes to the one call it is proven to belong to: the stream's own
//!   call, the call whose progress token (tasklift's own) it names, or what
//!   [`attribute`] proves (`related-task`, the only call that may ask). Anything
//!   else is refused with an error and logged ([`unattributed`]), never guessed:
//!   a guess could show one caller's prompt to another and hand back their answer.

use serde_json::Value;
use tokio::sync::mpsc;

use super::{attribute, related_task, unattributed, CallEvent, ServerRequest};
use tasklift_protocol::jsonrpc::{self, Incoming as Msg, Outcome};
use tasklift_protocol::mcp;

/// What a transport knows about the calls in flight on one channel.
pub(super) trait Channel {
    /// How the transport names a call.
    type Call: Clone;
    /// Where `call`'s events go; `None` once it has ended.
    fn events(&self, call: Self::Call) -> Option<mpsc::Sender<CallEvent>>;
    /// Take the call a response with `id` ends out of the set: where its events go.
    fn answered(&self, id: &Value, outcome: &Outcome) -> Option<mpsc::Sender<CallEvent>>;
    /// The call whose own stream this is (an HTTP response stream): every
    /// notification and request on it is that call's.
    fn own(&self) -> Option<Self::Call> {
        None
    }
    /// The call a progress token names. Only a transport that gives every call a
    /// token of its own answers: a client's token proves nothing.
    fn by_token(&self, _token: &Value) -> Option<Self::Call> {
        None
    }
    /// The client's own progress token of `call`, put back on the progress relayed to it.
    fn client_token(&self, _call: &Self::Call) -> Option<Value> {
        None
    }
    /// The call a log message (`notifications/message`) with no link of its own
    /// goes to, when the transport can tell it can only be that call's caller's.
    fn for_log(&self) -> Option<Self::Call> {
        None
    }
    /// The calls in flight that may ask the client, each with the upstream task it follows.
    fn askers(&self) -> Vec<(Self::Call, Option<String>)> {
        Vec::new()
    }
    /// What answers the upstream's request `id`; `None` on a channel that may
    /// carry no requests (a modern response stream).
    fn responder(&self, id: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>>;
    /// Keep a request no call in flight can answer for a later call of the one
    /// caller the channel serves, or give it back to be refused.
    fn park(&self, req: ServerRequest) -> Result<(), ServerRequest> {
        Err(req)
    }
}

/// Where [`route`] sends a message.
pub(super) enum Route {
    /// An event for a call in flight: its response (`Done`, its last event), a
    /// notification about it, or a request it is to answer (`Input`).
    Call(mpsc::Sender<CallEvent>, CallEvent),
    /// A response no call on the channel waits for.
    Stray,
    /// A notification about no call in flight (list changes, resource updates),
    /// as a full message.
    Unrelated(Value),
    /// `ping` with this id: liveness, not a question for any client; the
    /// transport answers it.
    Ping(Value),
    /// A request to the client no call could be proven to own: already refused.
    Refused,
    /// A request no call in flight could answer, kept for the caller's next call
    /// (a stdio child serving one caller).
    Parked,
    /// A request (this method) on a channel that may carry none: ignored.
    Forbidden(String),
}

/// A message as an upstream wrote it (an SSE event's data, a stdout line);
/// `None` if it is not JSON-RPC.
pub(super) fn parse(text: &str) -> Option<Msg> {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(Msg::classify)
}

/// Where `msg`, from `upstream` on a channel with `calls` in flight, goes.
pub(super) fn route<F: Channel>(calls: &F, msg: Msg, upstream: &str) -> Route {
    match msg {
        Msg::Response { id, outcome } => match calls.answered(&id, &outcome) {
            Some(tx) => Route::Call(tx, CallEvent::Done(outcome)),
            None => Route::Stray,
        },
        Msg::Notification { method, mut params } => {
            let call = match calls.own() {
                Some(c) => Some(c),
                None => match progress_of(calls, &mut params) {
                    Some(c) => Some(c),
                    // A log message carries no link to its call.
                    None if method == "notifications/message" => calls.for_log(),
                    None => None,
                },
            };
            let message = jsonrpc::notification(&method, params);
            match call.and_then(|c| calls.events(c)) {
                Some(tx) => Route::Call(tx, CallEvent::Notification(message)),
                None => Route::Unrelated(message),
            }
        }
        Msg::Request { id, method, params } => {
            let own = calls.own();
            if own.is_none() && method == "ping" {
                return Route::Ping(id);
            }
            let Some(responder) = calls.responder(&id) else {
                return Route::Forbidden(method);
            };
            let owner = match own {
                Some(c) => Ok(c),
                None => asker(calls, &params),
            };
            let req = ServerRequest::new(method, params, responder).keyed_by(&id);
            let n = match owner.map(|c| calls.events(c)) {
                Ok(Some(tx)) => return Route::Call(tx, CallEvent::Input(req)),
                Ok(None) => 0,
                Err(n) => n,
            };
            let req = if n == 0 {
                match calls.park(req) {
                    Ok(()) => return Route::Parked,
                    Err(req) => req,
                }
            } else {
                req
            };
            unattributed(upstream, req, n);
            Route::Refused
        }
    }
}

/// The call a progress notification's token names, with the client's own token
/// put back in `params`.
fn progress_of<F: Channel>(calls: &F, params: &mut Value) -> Option<F::Call> {
    let call = calls.by_token(params.get("progressToken")?)?;
    if let (Some(t), Value::Object(p)) = (calls.client_token(&call), params) {
        p.insert("progressToken".into(), t);
    }
    Some(call)
}

/// The call a request on a channel that names no call belongs to: the one whose
/// progress token it names (unless it names a task: then only that task's
/// follower), else what [`attribute`] proves among the calls that may ask.
/// `Err(n)`: it cannot be proven, with `n` candidates.
fn asker<F: Channel>(calls: &F, params: &Value) -> Result<F::Call, usize> {
    if related_task(params).is_none() {
        let token = params
            .get("_meta")
            .and_then(|m| m.get(mcp::META_PROGRESS_TOKEN));
        if let Some(c) = token.and_then(|t| calls.by_token(t)) {
            return Ok(c);
        }
    }
    let askers = calls.askers();
    attribute(params, askers.iter().map(|(c, task)| (c, task.as_deref()))).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    /// Calls 0..n on a channel: each with the task it follows, maybe a token of
    /// its own, and the client's token; answers to the upstream land in `answers`.
    #[derive(Default)]
    struct Fake {
        own: Option<usize>,
        txs: Vec<mpsc::Sender<CallEvent>>,
        tasks: Vec<Option<String>>,
        tokens: Vec<(Value, usize, Value)>,
        answers: Arc<Mutex<Vec<Outcome>>>,
    }

    impl Fake {
        fn with_calls(tasks: &[Option<&str>]) -> Self {
            Self {
                txs: tasks.iter().map(|_| mpsc::channel(1).0).collect(),
                tasks: tasks.iter().map(|t| t.map(str::to_string)).collect(),
                ..Self::default()
            }
        }

        /// Which call a route went to.
        fn which(&self, r: &Route) -> Option<usize> {
            match r {
                Route::Call(tx, _) => self.txs.iter().position(|t| t.same_channel(tx)),
                _ => None,
            }
        }
    }

    impl Channel for Fake {
        type Call = usize;
        fn events(&self, call: usize) -> Option<mpsc::Sender<CallEvent>> {
            self.txs.get(call).cloned()
        }
        fn answered(&self, id: &Value, _: &Outcome) -> Option<mpsc::Sender<CallEvent>> {
            self.events(id.as_u64()? as usize)
        }
        fn own(&self) -> Option<usize> {
            self.own
        }
        fn by_token(&self, token: &Value) -> Option<usize> {
            self.tokens.iter().find(|t| &t.0 == token).map(|t| t.1)
        }
        fn client_token(&self, call: &usize) -> Option<Value> {
            self.tokens
                .iter()
                .find(|t| t.1 == *call)
                .map(|t| t.2.clone())
        }
        fn askers(&self) -> Vec<(usize, Option<String>)> {
            self.tasks.iter().cloned().enumerate().collect()
        }
        fn responder(&self, _: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>> {
            let answers = self.answers.clone();
            Some(Box::new(move |o| answers.lock().unwrap().push(o)))
        }
    }

    fn ask(meta: Value) -> Msg {
        let params = json!({"message": "?", "_meta": meta});
        Msg::Request {
            id: json!("q1"),
            method: "elicitation/create".into(),
            params,
        }
    }

    #[test]
    fn a_request_goes_only_to_the_call_it_is_proven_to_belong_to() {
        let mut ch = Fake::with_calls(&[None, None, Some("t1")]);
        ch.tokens.push((json!("tasklift-1"), 1, json!(7)));
        // Two plain calls and no link: refused, with an error to the upstream.
        let r = route(&ch, ask(json!({})), "up");
        assert!(matches!(r, Route::Refused));
        let refused = ch.answers.lock().unwrap().pop();
        assert!(matches!(refused, Some(Err(e)) if e.code == jsonrpc::METHOD_NOT_FOUND));
        // tasklift's own progress token names its call.
        let r = route(&ch, ask(json!({"progressToken": "tasklift-1"})), "up");
        assert_eq!(ch.which(&r), Some(1));
        // A request about a task is that task's follower's, whatever token it carries.
        let tagged = json!({"progressToken": "tasklift-1",
            "io.modelcontextprotocol/related-task": {"taskId": "t1"}});
        assert_eq!(ch.which(&route(&ch, ask(tagged), "up")), Some(2));
        let other = json!({"io.modelcontextprotocol/related-task": {"taskId": "t9"}});
        assert!(matches!(route(&ch, ask(other), "up"), Route::Refused));
        // The only plain call.
        let ch = Fake::with_calls(&[Some("t1"), None]);
        assert_eq!(ch.which(&route(&ch, ask(json!({})), "up")), Some(1));
        // On a call's own stream, everything is that call's, ping included.
        let mut ch = Fake::with_calls(&[None, None]);
        ch.own = Some(0);
        assert_eq!(ch.which(&route(&ch, ask(json!({})), "up")), Some(0));
        let ping = |ch: &Fake| {
            let msg = Msg::Request {
                id: json!(5),
                method: "ping".into(),
                params: Value::Null,
            };
            route(ch, msg, "up")
        };
        assert_eq!(ch.which(&ping(&ch)), Some(0));
        // Elsewhere a ping is left to the transport to answer.
        ch.own = None;
        ch.answers.lock().unwrap().clear();
        assert!(matches!(ping(&ch), Route::Ping(id) if id == json!(5)));
        assert!(ch.answers.lock().unwrap().is_empty());
    }

    #[test]
    fn progress_goes_to_its_call_with_the_clients_token() {
        let mut ch = Fake::with_calls(&[None, None]);
        ch.tokens.push((json!("tasklift-1"), 1, json!(7)));
        let progress = |token: Value| Msg::Notification {
            method: "notifications/progress".into(),
            params: json!({"progressToken": token, "progress": 1}),
        };
        let r = route(&ch, progress(json!("tasklift-1")), "up");
        assert_eq!(ch.which(&r), Some(1));
        let Route::Call(_, CallEvent::Notification(n)) = r else {
            panic!("not a notification")
        };
        assert_eq!(n["params"]["progressToken"], json!(7));
        // A client's token proves nothing.
        assert!(matches!(
            route(&ch, progress(json!(7)), "up"),
            Route::Unrelated(_)
        ));
        let response = |id: u64| Msg::Response {
            id: json!(id),
            outcome: Ok(json!({})),
        };
        assert_eq!(ch.which(&route(&ch, response(0), "up")), Some(0));
        assert!(matches!(route(&ch, response(9), "up"), Route::Stray));
    }
}
