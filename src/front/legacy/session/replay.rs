//! Streams a legacy client can resume: each message of a response stream (and of
//! the session's standalone GET stream) is logged with an event id, a disconnect
//! does not stop the work behind it, and a GET with `Last-Event-ID` picks it up
//! again. 2025-11-25 clients poll: a long stream's connection is closed after a
//! while and the client resumes it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc;

use super::{ended, ClientSession, KEEP_FINISHED, LOG_EVENTS, MAX_FINISHED, STANDALONE};
use crate::reply::StreamItem;

/// The events of one stream, kept for resumption.
#[derive(Default)]
pub(super) struct StreamLog {
    /// (sequence number, message).
    events: VecDeque<(u64, Value)>,
    /// The next sequence number.
    next_seq: u64,
    /// The connection currently reading it, if any.
    live: Option<mpsc::Sender<StreamItem>>,
    /// The request it answers, tagged for its event ids.
    request: Option<String>,
    /// No more events will come.
    done: bool,
    /// When it finished.
    done_at: Option<Instant>,
}

/// Request ids longer than this (as JSON) are not written into event ids.
const MAX_TAGGED_ID: usize = 200;

/// An SSE event id: `<incarnation>_<stream>_<seq>`, and for the response stream of
/// a request `_<request id>` (its JSON, base64url). The incarnation tells this
/// process's streams from those of an earlier one (stream numbers start again
/// after a restart); the request id lets tasklift answer a request whose stream it
/// no longer holds with an error instead of leaving the client waiting.
fn event_id(inc: &str, stream: u64, seq: u64, request: Option<&str>) -> String {
    match request {
        Some(r) => format!("{inc}_{stream}_{seq}_{r}"),
        None => format!("{inc}_{stream}_{seq}"),
    }
}

/// An event id read back from `Last-Event-ID`.
struct EventId<'a> {
    inc: &'a str,
    stream: u64,
    seq: u64,
    /// The request id, still encoded.
    request: Option<&'a str>,
}

/// Parse an event id made by [`event_id`] (base64url may itself contain `_`).
fn parse_event_id(id: &str) -> Option<EventId<'_>> {
    let mut parts = id.splitn(4, '_');
    let inc = parts.next().filter(|i| !i.is_empty())?;
    let stream = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    Some(EventId {
        inc,
        stream,
        seq,
        request: parts.next(),
    })
}

/// A request id as it goes into an event id, unless it is too long.
fn tag_request(id: &Value) -> Option<String> {
    use base64::Engine;
    let json = id.to_string();
    (json.len() <= MAX_TAGGED_ID)
        .then(|| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json))
}

/// The request id an event id carries.
fn untag_request(tag: &str) -> Option<Value> {
    use base64::Engine;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tag)
        .ok()?;
    serde_json::from_slice::<Value>(&json)
        .ok()
        .filter(|v| v.is_string() || v.is_number())
}

impl ClientSession {
    /// Close the connection `tx` reading `stream` after the polling time, if it is
    /// still the one reading it then (the work behind the stream goes on).
    fn close_later(self: &Arc<Self>, stream: u64, tx: &mpsc::Sender<StreamItem>) {
        let Some(after) = self.polling.close_after.filter(|_| self.polls()) else {
            return;
        };
        let me = Arc::downgrade(self);
        let tx = tx.downgrade();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let (Some(me), Some(tx)) = (me.upgrade(), tx.upgrade()) else {
                return;
            };
            let mut streams = me.streams.lock().expect("lock");
            if let Some(log) = streams.get_mut(&stream) {
                if log.live.as_ref().is_some_and(|l| l.same_channel(&tx)) {
                    tracing::debug!(session = %me.id, stream, "closing a long stream; the client resumes it with Last-Event-ID");
                    log.live = None;
                }
            }
        });
    }

    /// Carry a response stream through a resumable log: every message gets an event
    /// id, a disconnect does not stop the work behind it (legacy clients cancel
    /// explicitly), and a GET with `Last-Event-ID` picks it up again. `shape` turns
    /// each message into what this client should see.
    /// `request` is the id of the request the stream answers.
    pub fn resumable(
        self: &Arc<Self>,
        mut rx: mpsc::Receiver<StreamItem>,
        request: Option<&Value>,
        shape: impl Fn(Value) -> Value + Send + 'static,
    ) -> mpsc::Receiver<StreamItem> {
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let request = request.and_then(tag_request);
        let (tx, out) = mpsc::channel(64);
        if self.polls() {
            let _ = tx.try_send(StreamItem::Prime {
                id: event_id(&self.incarnation, stream, 0, request.as_deref()),
                retry_ms: self.polling.retry_ms,
            });
        }
        self.close_later(stream, &tx);
        let mut streams = self.streams.lock().expect("lock");
        prune(&mut streams);
        // A closed session keeps no logs: the stream ends at once (`tx` drops).
        if !*self.closed.borrow() {
            streams.insert(
                stream,
                StreamLog {
                    next_seq: 1,
                    live: Some(tx),
                    request,
                    ..StreamLog::default()
                },
            );
        }
        let me = self.clone();
        let busy = self.busy();
        let mut closed = self.closed();
        tokio::spawn(async move {
            let _busy = busy;
            loop {
                let item = tokio::select! {
                    item = rx.recv() => item,
                    _ = ended(&mut closed) => None,
                };
                match item {
                    Some(StreamItem::Message(v)) => me.push(stream, shape(v)).await,
                    Some(StreamItem::KeepAlive) => {
                        let live = me.live(stream);
                        if let Some(l) = live {
                            let _ = l.send(StreamItem::KeepAlive).await;
                        }
                    }
                    Some(other) => {
                        let live = me.live(stream);
                        if let Some(l) = live {
                            let _ = l.send(other).await;
                        }
                    }
                    None => break,
                }
            }
            let mut streams = me.streams.lock().expect("lock");
            if let Some(log) = streams.get_mut(&stream) {
                log.done = true;
                log.done_at = Some(Instant::now());
                log.live = None;
            }
        });
        out
    }

    fn live(&self, stream: u64) -> Option<mpsc::Sender<StreamItem>> {
        self.streams
            .lock()
            .expect("lock")
            .get(&stream)
            .and_then(|l| l.live.clone())
    }

    /// Append a message to a stream's log and send it to whoever reads the stream.
    async fn push(&self, stream: u64, msg: Value) {
        let (live, id) = {
            let mut streams = self.streams.lock().expect("lock");
            // `close` dropped the logs; a log made again here would number its
            // events from 1 and reuse ids its clients already saw.
            if *self.closed.borrow() {
                return;
            }
            let log = streams.entry(stream).or_default();
            let seq = log.next_seq.max(1);
            log.next_seq = seq + 1;
            log.events.push_back((seq, msg.clone()));
            if log.events.len() > LOG_EVENTS {
                log.events.pop_front();
            }
            let id = event_id(&self.incarnation, stream, seq, log.request.as_deref());
            (log.live.clone(), id)
        };
        if let Some(l) = live {
            if l.send(StreamItem::Event { id, message: msg })
                .await
                .is_err()
            {
                // The client went away; the log keeps the event for its return.
                let mut streams = self.streams.lock().expect("lock");
                if let Some(log) = streams.get_mut(&stream) {
                    if log.live.as_ref().is_some_and(|x| x.same_channel(&l)) {
                        log.live = None;
                    }
                }
            }
        }
    }

    /// A message for the standalone GET stream (kept if nobody listens yet).
    pub async fn notify(&self, msg: Value) {
        self.push(STANDALONE, msg).await;
    }

    /// Open the standalone GET stream, or resume a stream after `last_event_id`.
    /// Replaces any connection already reading that stream.
    pub fn open_stream(
        self: &Arc<Self>,
        last_event_id: Option<&str>,
    ) -> mpsc::Receiver<StreamItem> {
        let last = last_event_id.and_then(parse_event_id);
        let mut streams = self.streams.lock().expect("lock");
        if *self.closed.borrow() {
            // An ended session serves no stream: this one ends at once.
            return mpsc::channel(1).1;
        }
        let (stream, after) = match &last {
            Some(e)
                if e.inc == self.incarnation
                    && (e.stream == STANDALONE || streams.contains_key(&e.stream)) =>
            {
                (e.stream, e.seq)
            }
            // A request's stream this process does not hold (tasklift restarted,
            // or the stream was forgotten): the request gets an error rather than
            // a client left waiting for an answer that will never come.
            Some(EventId {
                inc,
                stream,
                request: Some(tag),
                ..
            }) if *stream != STANDALONE => match untag_request(tag) {
                Some(request) => {
                    let restarted = *inc != self.incarnation;
                    return self.lost(&mut streams, &request, tag, restarted);
                }
                None => (STANDALONE, u64::MAX),
            },
            // Unknown or forgotten stream: the standalone stream, from now on.
            _ => (STANDALONE, u64::MAX),
        };
        let log = streams.entry(stream).or_default();
        let request = log.request.clone();
        let replay: Vec<(u64, Value)> = log
            .events
            .iter()
            .filter(|(s, _)| after != u64::MAX && *s > after)
            .cloned()
            .collect();
        let (tx, rx) = mpsc::channel(replay.len() + 64);
        // A resumed stream primes again, so the client knows it can resume it again.
        if stream != STANDALONE && self.polls() {
            let _ = tx.try_send(StreamItem::Prime {
                id: event_id(&self.incarnation, stream, after, request.as_deref()),
                retry_ms: self.polling.retry_ms,
            });
        }
        for (seq, message) in replay {
            let _ = tx.try_send(StreamItem::Event {
                id: event_id(&self.incarnation, stream, seq, request.as_deref()),
                message,
            });
        }
        if !log.done {
            if stream != STANDALONE {
                self.close_later(stream, &tx);
            }
            log.live = Some(tx);
        }
        rx
    }
}

impl ClientSession {
    /// A finished stream holding one JSON-RPC error for `request`, whose stream
    /// this process does not hold; resuming it again replays nothing more.
    fn lost(
        &self,
        streams: &mut HashMap<u64, StreamLog>,
        request: &Value,
        tag: &str,
        restarted: bool,
    ) -> mpsc::Receiver<StreamItem> {
        let why = if restarted {
            "tasklift no longer holds this request: it restarted (or the request ran on another tasklift replica) while the request was in flight, so its outcome is unknown; send it again if that is safe"
        } else {
            "tasklift no longer keeps the answer to this request (its stream finished too long ago); send it again if that is safe"
        };
        tracing::info!(session = %self.id, %request, restarted, "a client resumed a request whose stream is gone; answering it with an error");
        let message = serde_json::json!({
            "jsonrpc": "2.0",
            "id": request,
            "error": {"code": tasklift_protocol::jsonrpc::INTERNAL_ERROR, "message": why},
        });
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let id = event_id(&self.incarnation, stream, 1, Some(tag));
        prune(streams);
        streams.insert(
            stream,
            StreamLog {
                events: VecDeque::from([(1, message.clone())]),
                next_seq: 2,
                live: None,
                request: Some(tag.to_string()),
                done: true,
                done_at: Some(Instant::now()),
            },
        );
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(StreamItem::Event { id, message });
        rx
    }
}

/// Forget finished streams that are old, or beyond the most recent `MAX_FINISHED`.
fn prune(streams: &mut HashMap<u64, StreamLog>) {
    streams.retain(|_, l| l.done_at.is_none_or(|t| t.elapsed() < KEEP_FINISHED));
    let mut finished: Vec<(Instant, u64)> = streams
        .iter()
        .filter_map(|(k, l)| l.done_at.map(|t| (t, *k)))
        .collect();
    if finished.len() > MAX_FINISHED {
        finished.sort();
        for (_, k) in &finished[..finished.len() - MAX_FINISHED] {
            streams.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_stream_resumes_after_the_last_event_seen() {
        let s = ClientSession::new("p".into(), "2025-11-25".into(), json!({}), json!({}));
        let (tx, rx) = mpsc::channel(8);
        let mut out = s.resumable(rx, Some(&json!(7)), |v| v);
        assert!(matches!(out.recv().await, Some(StreamItem::Prime { .. })));
        tx.send(StreamItem::Message(json!({"n": 1}))).await.unwrap();
        let first = match out.recv().await {
            Some(StreamItem::Event { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        drop(out); // the client goes away; the work goes on
        tx.send(StreamItem::Message(json!({"n": 2}))).await.unwrap();
        drop(tx);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut again = s.open_stream(Some(&first));
        match again.recv().await {
            Some(StreamItem::Prime { id, .. }) => assert_eq!(id, first, "primed where it resumed"),
            other => panic!("{other:?}"),
        }
        match again.recv().await {
            Some(StreamItem::Event { message, .. }) => assert_eq!(message, json!({"n": 2})),
            other => panic!("{other:?}"),
        }
        assert!(again.recv().await.is_none(), "the stream was done");
    }

    #[tokio::test]
    async fn a_closed_session_reuses_no_event_id() {
        // Found by the session_replay fuzz target: after `close`, a notification
        // made the standalone log again, numbered from 1, and a GET resuming from an
        // id seen before the close got another message under that id, or waited on
        // a stream nothing would end.
        let s = ClientSession::new("p".into(), "2025-06-18".into(), json!({}), json!({}));
        let mut get = s.open_stream(None);
        s.notify(json!({"n": 1})).await;
        let first = match get.recv().await {
            Some(StreamItem::Event { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        s.close();
        assert!(
            get.recv().await.is_none(),
            "the stream ends with the session"
        );
        s.notify(json!({"n": 2})).await;
        s.notify(json!({"n": 3})).await;
        for last in [None, Some(first.as_str()), Some("0_0")] {
            let mut again = s.open_stream(last);
            let next = tokio::time::timeout(std::time::Duration::from_secs(5), again.recv()).await;
            assert!(
                matches!(next, Ok(None)),
                "a stream of a closed session from {last:?}: {next:?}"
            );
        }
        let (tx, rx) = mpsc::channel(1);
        let mut call = s.resumable(rx, None, |v| v);
        let _ = tx.send(StreamItem::Message(json!({"n": 4}))).await;
        assert!(
            call.recv().await.is_none(),
            "a call stream of a closed session ends"
        );
    }

    async fn lost_answer(rx: &mut mpsc::Receiver<StreamItem>) -> Value {
        let msg = match rx.recv().await {
            Some(StreamItem::Event { message, .. }) => message,
            other => panic!("{other:?}"),
        };
        assert!(rx.recv().await.is_none(), "nothing follows the error");
        msg
    }

    #[tokio::test]
    async fn a_request_whose_stream_died_with_the_last_process_gets_an_error() {
        let before = ClientSession::new("p".into(), "2025-11-25".into(), json!({}), json!({}));
        let (_tx, rx) = mpsc::channel(8);
        let mut out = before.resumable(rx, Some(&json!("req_7")), |v| v);
        let primed = match out.recv().await {
            Some(StreamItem::Prime { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        // The same session served again by the next process.
        let after = ClientSession::restore(before.record("/mcp"), super::super::Polling::default());
        assert_eq!(after.id, before.id);
        let msg = lost_answer(&mut after.open_stream(Some(&primed))).await;
        assert_eq!(msg["id"], "req_7", "{msg}");
        assert_eq!(msg["error"]["code"], -32603, "{msg}");
        let text = msg["error"]["message"].as_str().unwrap();
        assert!(text.contains("restarted"), "{text}");
        // The process that served it still resumes it normally.
        match before.open_stream(Some(&primed)).recv().await {
            Some(StreamItem::Prime { id, .. }) => assert_eq!(id, primed),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_forgotten_stream_answers_its_request_and_ids_without_one_fall_back() {
        let s = ClientSession::new("p".into(), "2025-11-25".into(), json!({}), json!({}));
        let (_tx, rx) = mpsc::channel(8);
        let mut out = s.resumable(rx, Some(&json!(12)), |v| v);
        let primed = match out.recv().await {
            Some(StreamItem::Prime { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        s.streams.lock().unwrap().clear();
        let msg = lost_answer(&mut s.open_stream(Some(&primed))).await;
        assert_eq!(msg["id"], 12, "{msg}");
        assert!(msg["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no longer keeps"));
        // Garbage and ids of other shapes open the standalone stream, as before.
        for last in ["", "x", "1_2", "ab_1_2_!!!", "ab_0_3_MTI"] {
            let mut rx = s.open_stream(Some(last));
            assert!(rx.try_recv().is_err(), "{last:?} replays nothing");
        }
    }
}
