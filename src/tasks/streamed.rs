//! Phase 2 of a call's synchronous phase, once something must be streamed: its
//! answer goes out as an SSE stream (relayed progress and logs, keep-alives, a
//! legacy client's questions, then the final message, the task's handle or the
//! caller's wait on the task). The race itself is `Race::step` (race.rs).

use tokio::sync::mpsc;
use tracing::Instrument;

use super::phases::{SyncCall, TaskSpec};
use super::race::{Race, Step};
use crate::reply::{Reply, StreamItem};
use crate::upstream::{ClientPeer, ServerRequest};

/// A call whose answer streams, until the final message or until the client goes
/// away (dropping the call then cancels it upstream).
pub(super) struct Streamed {
    race: Race,
    sc: SyncCall,
    task: Option<TaskSpec>,
    tx: mpsc::Sender<StreamItem>,
    /// When the stream last sent something: keep-alives are due from it.
    last_send: tokio::time::Instant,
}

impl Streamed {
    /// Stream the call's answer from here on, `first` first.
    pub(super) fn start(
        race: Race,
        sc: SyncCall,
        task: Option<TaskSpec>,
        first: Vec<StreamItem>,
    ) -> Reply {
        let (tx, rx) = mpsc::channel(32);
        let streamed = Self {
            race,
            sc,
            task,
            tx,
            last_send: tokio::time::Instant::now(),
        };
        tokio::spawn(streamed.run(first).in_current_span());
        Reply::Stream(rx)
    }

    /// Send `first`, then each step's items, until the stream is over.
    async fn run(mut self, first: Vec<StreamItem>) {
        if !self.send_all(first).await {
            return;
        }
        self.last_send = tokio::time::Instant::now();
        while let Some(step) = self.next_step().await {
            let goes_on = match step {
                // A stream's status went out with its first byte.
                Step::Final(v, _) => self.send(StreamItem::Message(v)).await,
                // A stream asks for parsed answers (`raw` is false here).
                Step::FinalRaw(b) => {
                    let m = crate::reply::raw_message(&b);
                    self.send(StreamItem::Message(m)).await
                }
                Step::Relay(n) => self.send(StreamItem::Message(n)).await,
                Step::KeepAlive => self.send(StreamItem::KeepAlive).await,
                Step::Threshold => self.threshold().await,
                Step::Input(reqs) => match self.sc.session.clone() {
                    Some(s) => self.ask_client(&s, reqs).await,
                    None => return self.park(reqs).await,
                },
            };
            if !goes_on {
                return;
            }
        }
    }

    /// The race's next step; `None` once the client went away (dropping the call
    /// then cancels it upstream).
    async fn next_step(&mut self) -> Option<Step> {
        tokio::select! {
            _ = self.tx.closed() => {
                tracing::debug!("client went away; cancelling the upstream call");
                None
            }
            step = self.race.step(&mut self.sc, Some(self.last_send), self.task.as_ref()) => Some(step),
        }
    }

    /// Send one item; false when the stream is over: the client went away, or
    /// that was the final response.
    async fn send(&mut self, item: StreamItem) -> bool {
        let last = matches!(&item, StreamItem::Message(m) if m.get("method").is_none());
        if self.tx.send(item).await.is_err() {
            return false;
        }
        self.last_send = tokio::time::Instant::now();
        !last
    }

    /// Send every item; false once the client went away.
    async fn send_all(&mut self, items: Vec<StreamItem>) -> bool {
        for item in items {
            if self.tx.send(item).await.is_err() {
                return false;
            }
        }
        true
    }

    /// The threshold passed: the caller is answered with the task's handle, or
    /// waits on the task (its stream is passed on). Goes on only when no task
    /// could be stored: the call stays synchronous.
    async fn threshold(&mut self) -> bool {
        let spec = self.task.as_ref().expect("threshold implies task");
        match self.race.create_task(&mut self.sc, spec).await {
            Some(Reply::Stream(mut joined)) => {
                // The caller now waits on the task: pass its stream on.
                while let Some(item) = joined.recv().await {
                    if self.tx.send(item).await.is_err() {
                        return false;
                    }
                }
                false
            }
            Some(reply) => match reply.parsed() {
                Reply::Json(v) => self.send(StreamItem::Message(v)).await,
                _ => false,
            },
            None => true,
        }
    }

    /// A legacy client is asked the upstream's questions on this stream.
    async fn ask_client(&mut self, s: &ClientPeer, reqs: Vec<ServerRequest>) -> bool {
        if !self.send_all(forward_input(s, reqs)).await {
            return false;
        }
        self.last_send = tokio::time::Instant::now();
        true
    }

    /// Any other client: the call is parked, and the stream ends with its
    /// `InputRequiredResult`.
    async fn park(self, reqs: Vec<ServerRequest>) {
        let msg = self.race.park(self.sc, self.task, reqs);
        let _ = self.tx.send(StreamItem::Message(msg)).await;
    }
}

/// Send the upstream's requests to a legacy client on its response stream; its
/// answers come back as POSTed responses and go upstream.
pub(super) fn forward_input(s: &ClientPeer, reqs: Vec<ServerRequest>) -> Vec<StreamItem> {
    reqs.into_iter()
        .map(|r| {
            let (method, params) = (r.method.clone(), r.params.clone());
            StreamItem::Message(s.ask(&method, params, Box::new(move |o| r.answer(o))))
        })
        .collect()
}
