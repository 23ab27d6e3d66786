//! Phase 2 of a call's synchronous phase, once something must be streamed: its
//! answer goes out as an SSE stream (relayed progress and logs, keep-alives, a
//! legacy client's questions, then the final message, the task's handle or the
//! caller's wait on the task); and the phase's entries, `drive` and `resume`
//! (a retry with tasklift's `requestState`). The race's steps are `Race`'s
//! (race.rs), which imports nothing of this file.

use tokio::sync::mpsc;
use tracing::Instrument;

use super::answer::{Answer, Event, Failure};
use super::input::request_binding;
use super::phases::{SyncCall, TaskSpec};
use super::race::{Race, Step};
use crate::upstream::{CallContext, ClientPeer, ClientRequest, ServerRequest};

/// Carry a started call through its synchronous phase: a JSON answer, or an SSE
/// stream once there is something to stream.
pub(super) async fn drive(race: &Race, mut sc: SyncCall, task: Option<TaskSpec>) -> Answer {
    // Phase 1 runs in the request's own future: if the client goes away, hyper
    // drops it, and dropping the call cancels it upstream.
    let first = match race.step(&mut sc, None, task.as_ref()).await {
        Step::Final(r) => return r.into(),
        Step::FinalRaw(b) => return Answer::Raw(b),
        Step::Threshold => match race
            .create_task(&mut sc, task.as_ref().expect("threshold implies task"))
            .await
        {
            Some(answer) => return answer,
            None => vec![],
        },
        Step::Input(reqs) => match sc.session.clone() {
            Some(s) => forward_input(&s, reqs),
            None => return Answer::Result(race.park(sc, task, reqs)),
        },
        Step::Relay(n) => vec![Event::Message(n)],
        Step::KeepAlive => vec![Event::KeepAlive],
    };
    // Phase 2: something must be streamed (progress or keep-alives).
    Streamed::start(race.clone(), sc, task, first)
}

/// A retry carrying tasklift's `requestState`: answer the parked upstream requests
/// and resume the race.
pub(super) async fn resume(
    race: &Race,
    req: &ClientRequest,
    state: &str,
    ctx: &CallContext,
    task: Option<TaskSpec>,
) -> Answer {
    let binding = request_binding(req.method(), req.params());
    let claims = match race
        .sealer()
        .open(state, &ctx.principal, &binding, race.clock().now_ms())
    {
        Ok(c) => c,
        Err(e) => return Answer::Failed(e),
    };
    let Some(mut p) = race
        .parked
        .remove(&claims.park)
        .map(|(_, p)| p.into_inner().expect("parked lock"))
    else {
        return Answer::Failed(Failure::BadState(
            "the call it resumes is no longer waiting (already resumed, or it expired); call the tool again".into(),
        ));
    };
    let answers = req.input_responses();
    let keys: Vec<String> = p.waiting.keys().cloned().collect();
    for k in keys {
        if let Some(v) = answers.get(&k) {
            let (_, r) = p.waiting.remove(&k).expect("listed");
            r.answer(Ok(v.clone()));
        }
    }
    p.sc.caps = req.declared();
    p.task = task;
    if !p.waiting.is_empty() {
        // Some answers are missing: ask again for the rest.
        return Answer::Result(race.park_waiting(p));
    }
    p.sc.threshold_at = p
        .task
        .as_ref()
        .map(|t| tokio::time::Instant::now() + t.policy.threshold);
    drive(race, p.sc, p.task).await
}

/// A call whose answer streams, until the final message or until the client goes
/// away (dropping the call then cancels it upstream).
pub(super) struct Streamed {
    race: Race,
    sc: SyncCall,
    task: Option<TaskSpec>,
    tx: mpsc::Sender<Event>,
    /// When the stream last sent something: keep-alives are due from it.
    last_send: tokio::time::Instant,
}

impl Streamed {
    /// Stream the call's answer from here on, `first` first.
    pub(super) fn start(
        race: Race,
        sc: SyncCall,
        task: Option<TaskSpec>,
        first: Vec<Event>,
    ) -> Answer {
        let (tx, rx) = mpsc::channel(32);
        let streamed = Self {
            race,
            sc,
            task,
            tx,
            last_send: tokio::time::Instant::now(),
        };
        tokio::spawn(streamed.run(first).in_current_span());
        Answer::Stream(rx)
    }

    /// Send `first`, then each step's items, until the stream is over.
    async fn run(mut self, first: Vec<Event>) {
        if !self.send_all(first).await {
            return;
        }
        self.last_send = tokio::time::Instant::now();
        while let Some(step) = self.next_step().await {
            let goes_on = match step {
                // A stream's status went out with its first byte.
                Step::Final(r) => self.send(Event::Final(r)).await,
                // A stream asks for parsed answers (`raw` is false here).
                Step::FinalRaw(b) => self.send(Event::Final(Ok(b.value()))).await,
                Step::Relay(n) => self.send(Event::Message(n)).await,
                Step::KeepAlive => self.send(Event::KeepAlive).await,
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
    async fn send(&mut self, item: Event) -> bool {
        let last = matches!(&item, Event::Final(_));
        if self.tx.send(item).await.is_err() {
            return false;
        }
        self.last_send = tokio::time::Instant::now();
        !last
    }

    /// Send every item; false once the client went away.
    async fn send_all(&mut self, items: Vec<Event>) -> bool {
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
            Some(Answer::Stream(mut joined)) => {
                // The caller now waits on the task: pass its stream on.
                while let Some(item) = joined.recv().await {
                    if self.tx.send(item).await.is_err() {
                        return false;
                    }
                }
                false
            }
            Some(Answer::Result(v)) => self.send(Event::Final(Ok(v))).await,
            Some(Answer::Failed(f)) => self.send(Event::Final(Err(f))).await,
            Some(Answer::Raw(b)) => self.send(Event::Final(Ok(b.value()))).await,
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
        let _ = self.tx.send(Event::Final(Ok(msg))).await;
    }
}

/// Send the upstream's requests to a legacy client on its response stream; its
/// answers come back as POSTed responses and go upstream.
pub(super) fn forward_input(s: &ClientPeer, reqs: Vec<ServerRequest>) -> Vec<Event> {
    reqs.into_iter()
        .map(|r| {
            let (method, params) = (r.method.clone(), r.params.clone());
            Event::Message(s.ask(&method, params, Box::new(move |o| r.answer(o))))
        })
        .collect()
}
