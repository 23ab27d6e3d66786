//! A task's background driver: holds the upstream call after the handle was
//! returned, records progress, bridges input requests (`input_required`, answered
//! by `tasks/update`), retries a modern upstream's `InputRequiredResult` rounds with
//! the collected answers, and settles the task.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::answer::Failure;
use super::control::{Control, ControlRx, ControlTx};
use super::core::part;
use super::phases::{admit_request, finalize_result, sleep_until_opt, RunningCall, StopReason};
use super::progress_message;
use crate::observe::spans::Span;
use crate::store::{Settle, StoreError, TaskRecord, TaskStatus};
use crate::upstream::{progress_under, CallEvent, Outcome, ServerRequest};

/// Shortest time between two progress writes of one task: a chatty upstream must
/// not turn every notification into a store write.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// A modern upstream's input round in progress.
#[derive(Default)]
struct Round {
    /// Round number (keys are prefixed with it, so they stay unique).
    n: u64,
    /// Our key -> the upstream's key, for requests not answered yet.
    waiting: HashMap<String, String>,
    /// Answers collected so far, under the upstream's keys.
    answers: Map<String, Value>,
    /// The upstream's `requestState`, echoed on the retry.
    state: Option<String>,
}

part!(
    /// Tasks' background drivers.
    Drivers
);

impl Drivers {
    /// At shutdown, after the grace period: cancel every task still running upstream
    /// and mark it failed (the proxy shut down), then wait up to `wait` for their
    /// owners to record it. Returns how many tasks were stopped.
    pub async fn stop_all(&self, wait: Duration) -> usize {
        let senders: Vec<ControlTx> = self.running.iter().map(|e| e.value().clone()).collect();
        for s in &senders {
            let _ = s.send(Control::Stop(StopReason::Shutdown)).await;
        }
        self.driver_tasks.close();
        let _ = tokio::time::timeout(wait, self.driver_tasks.wait()).await;
        senders.len()
    }

    /// Wait until no task's driver runs here, or `limit` passes; true if none runs.
    /// A driver started while this waits is waited for too.
    pub async fn settled_within(&self, limit: Duration) -> bool {
        self.driver_tasks.close();
        let settled = tokio::time::timeout(limit, self.driver_tasks.wait())
            .await
            .is_ok();
        // Drivers may still start (a call crossing its threshold meanwhile).
        self.driver_tasks.reopen();
        settled
    }

    /// Own a task until it settles, recording each change: one event at a time
    /// (progress due, the upstream's next event, a control message), each step
    /// saying whether the task goes on, then its settling.
    ///
    /// Its future lives as long as the task runs, one per running task, so it is
    /// kept small: the loop's state is built before it starts (so the record and
    /// the call are not held twice, as arguments and inside the `Driver`), and the
    /// settling, whose future is several KiB, is boxed and exists only at the end.
    pub(super) fn own(
        self,
        rec: TaskRecord,
        o: RunningCall,
        control: ControlRx,
        traced: Span,
    ) -> impl std::future::Future<Output = ()> + Send {
        Self::drive(Box::new(Driver::new(self, rec, o)), control, traced)
    }

    /// `own`'s loop. The `Driver` comes boxed: an async fn's argument is moved into
    /// its body, and the future keeps room for both.
    async fn drive(mut d: Box<Driver>, mut control: ControlRx, traced: Span) {
        loop {
            let goes_on = tokio::select! {
                _ = sleep_until_opt(d.progress_due) => d.write_progress().await,
                ev = d.o.next() => match ev {
                    Some(CallEvent::Notification(n)) => d.progress(n).await,
                    Some(CallEvent::Input(r)) => d.input_request(r).await,
                    Some(CallEvent::Done(outcome)) => d.upstream_done(outcome).await,
                    None => d.upstream_gone(),
                },
                c = control.recv() => match c {
                    Control::Answer(answers, applied) => d.answer(answers, applied).await,
                    Control::Stop(reason) => d.stop(reason),
                },
            };
            if !goes_on {
                break;
            }
        }
        // One of at most SETTLING at once (core.rs): the settling future is big.
        let drivers = d.drivers.clone();
        let _turn = drivers.settling.acquire().await;
        Box::pin(d.finish(traced)).await;
    }

    /// A task's end from the upstream's answer: its result, within the result
    /// size limit, or its error.
    fn outcome(&self, outcome: Outcome) -> Settle {
        match finalize_result(outcome) {
            Ok(r) => match self.gate().check_result(&r) {
                Ok(()) => Settle::Completed(r),
                Err(e) => {
                    self.metrics().limit_hit(e.setting());
                    self.failed(Failure::Limit(e))
                }
            },
            Err(e) => self.failed(Failure::Relayed(e)),
        }
    }

    /// The final write failed because the database is out of space or out of
    /// reach: keep the outcome and write it again, backing off up to 5 s, until
    /// the store takes it, or the task would have expired anyway.
    async fn settle_later(&self, rec: &TaskRecord, first: &StoreError) -> Result<(), StoreError> {
        tracing::warn!(error = %first, "could not record the task's final state; keeping it and retrying until the task store takes it");
        let mut wait = std::time::Duration::from_millis(250);
        loop {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(std::time::Duration::from_secs(5));
            match self.store().put(rec).await {
                Ok(()) => {
                    tracing::info!("recorded the task's final state after retrying");
                    return Ok(());
                }
                Err(e) if e.is_transient() && self.clock().now_ms() < rec.expires_at_ms => {
                    tracing::debug!(error = %e, "the task store still does not take the task's final state");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Another replica's state stands (shared store): show it to local listeners and
    /// let the task go.
    async fn settled_elsewhere(&self, id: &str, why: &str) {
        if self.has_listeners() {
            if let Ok(Some(now)) = self.store().get(id).await {
                self.publish(&now);
            }
        }
        tracing::info!("{why}");
        self.running.remove(id);
    }

    /// Store a non-terminal change and tell subscribers. False when the task is no
    /// longer this process's: another replica settled it or took it over.
    async fn record(&self, rec: &mut TaskRecord) -> bool {
        rec.updated_at_ms = self.clock().now_ms();
        match self.store().put(rec).await {
            Ok(()) => {}
            Err(StoreError::Conflict { .. }) => return false,
            Err(e) => tracing::warn!(error = %e, "could not record a task change"),
        }
        self.publish(rec);
        true
    }
}

/// One task's driver while it runs: what the events it meets change.
struct Driver {
    drivers: Drivers,
    rec: TaskRecord,
    o: RunningCall,
    /// A legacy upstream's requests waiting for the client's answers, by our key.
    legacy: HashMap<String, ServerRequest>,
    /// A modern upstream's input round, once there is one (boxed: rare, and
    /// every running task keeps a `Driver`).
    round: Option<Box<Round>>,
    /// Progress is written at most every PROGRESS_EVERY; a newer message waiting
    /// to be written is flushed when that time comes (or with the next change).
    last_progress_write: tokio::time::Instant,
    progress_due: Option<tokio::time::Instant>,
    /// Set when the task stopped being this process's to settle (shared store).
    lost: bool,
    /// How the task ends, once known (the loop then stops).
    end: Option<Settle>,
}

impl Driver {
    fn new(drivers: Drivers, rec: TaskRecord, o: RunningCall) -> Self {
        Self {
            drivers,
            rec,
            o,
            legacy: HashMap::new(),
            round: None,
            last_progress_write: tokio::time::Instant::now() - PROGRESS_EVERY,
            progress_due: None,
            lost: false,
            end: None,
        }
    }

    /// Store a non-terminal change; false (the task is lost) when it is no longer
    /// this process's.
    async fn record(&mut self) -> bool {
        if self.drivers.record(&mut self.rec).await {
            return true;
        }
        self.lost = true;
        false
    }

    /// Write the latest progress now.
    async fn write_progress(&mut self) -> bool {
        self.progress_due = None;
        self.last_progress_write = tokio::time::Instant::now();
        self.record().await
    }

    /// A notification: progress under the call's token becomes the status message,
    /// written now or when PROGRESS_EVERY has passed since the last write.
    async fn progress(&mut self, n: Value) -> bool {
        let Some(m) = progress_under(&n, &self.o.token).and_then(progress_message) else {
            return true;
        };
        self.rec.status_message = Some(m);
        let due = self.last_progress_write + PROGRESS_EVERY;
        if tokio::time::Instant::now() >= due {
            return self.write_progress().await;
        }
        self.progress_due.get_or_insert(due);
        true
    }

    /// A legacy upstream's request: the task asks the client (`input_required`).
    async fn input_request(&mut self, r: ServerRequest) -> bool {
        let mut admitted = Vec::new();
        admit_request(self.o.caps, r, &mut admitted, self.drivers.write_failure);
        for r in admitted {
            let key = self.o.input_keys.next(&r);
            self.rec
                .input_requests
                .insert(key.clone(), r.as_input_request());
            self.legacy.insert(key, r);
        }
        if self.legacy.is_empty() {
            return true;
        }
        let _ = self.rec.ask();
        self.record().await
    }

    /// The upstream answered: a modern upstream's `InputRequiredResult` opens a
    /// round; any other answer is the task's end.
    async fn upstream_done(&mut self, outcome: Outcome) -> bool {
        if let Some(c) = &mut self.o.call {
            c.canceller.disarm();
        }
        self.o.call = None;
        match outcome {
            Ok(r)
                if r.get("resultType").and_then(Value::as_str) == Some("input_required")
                    && self.o.origin.is_some() =>
            {
                self.open_round(r).await
            }
            outcome => {
                self.end = Some(self.drivers.outcome(outcome));
                false
            }
        }
    }

    /// The call's events ended without an answer.
    fn upstream_gone(&mut self) -> bool {
        self.end = Some(
            self.drivers
                .failed(Failure::Broken(self.rec.upstream.clone())),
        );
        false
    }

    /// A modern upstream's input requests, asked under keys of this round; with
    /// none to ask, the call is retried at once.
    async fn open_round(&mut self, r: Value) -> bool {
        let round = self.round.get_or_insert_with(Box::default);
        round.n += 1;
        round.state = r
            .get("requestState")
            .and_then(Value::as_str)
            .map(str::to_string);
        round.answers = Map::new();
        let reqs = r
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (k, entry) in reqs {
            let key = format!("round{}-{k}", round.n);
            self.rec.input_requests.insert(key.clone(), entry);
            round.waiting.insert(key, k);
        }
        if round.waiting.is_empty() {
            return self.retry().await;
        }
        let _ = self.rec.ask();
        self.record().await
    }

    /// `tasks/update`: answers go to the requests outstanding (the legacy
    /// upstream's, or the round's, retried once complete), then the record.
    /// `_applied` lives to the end: the caller of tasks/update hears back once
    /// the record is written.
    async fn answer(
        &mut self,
        answers: Map<String, Value>,
        _applied: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> bool {
        if !self.take_answers(answers) {
            return true;
        }
        if self
            .round
            .as_ref()
            .is_some_and(|r| r.n > 0 && r.waiting.is_empty())
            && self.o.call.is_none()
            && !self.retry().await
        {
            return false;
        }
        if self.rec.input_requests.is_empty() {
            let _ = self.rec.resume();
        }
        self.record().await
    }

    /// Give each outstanding request its answer; answers to nothing outstanding
    /// are ignored. Whether any was outstanding.
    fn take_answers(&mut self, answers: Map<String, Value>) -> bool {
        let mut changed = false;
        for (k, v) in answers {
            if let Some(r) = self.legacy.remove(&k) {
                r.answer(Ok(v));
            } else if let Some(round) = self.round.as_mut().filter(|r| r.waiting.contains_key(&k)) {
                let uk = round.waiting.remove(&k).expect("just seen");
                round.answers.insert(uk, v);
            } else {
                continue;
            }
            self.rec.input_requests.remove(&k);
            changed = true;
        }
        changed
    }

    /// Retry the original call upstream with a round's answers and `requestState`;
    /// false (the task failed) when the upstream cannot be called.
    async fn retry(&mut self) -> bool {
        let origin = self
            .o
            .origin
            .as_ref()
            .expect("rounds need the original request");
        let round = self.round.get_or_insert_with(Box::default);
        let r = origin
            .request()
            .with_answers(std::mem::take(&mut round.answers), round.state.take());
        tracing::info!(
            round = round.n,
            "retrying the call upstream with the client's answers"
        );
        match origin.upstream.call(r.wire(), &origin.ctx).await {
            Ok(call) => {
                self.o.call = Some(call);
                true
            }
            Err(e) => {
                self.end = Some(self.drivers.failed(Failure::Unreachable(e)));
                false
            }
        }
    }

    /// Stop the call (cancelled, expired, shutdown, or settled by another replica).
    fn stop(&mut self, reason: StopReason) -> bool {
        if let Some(c) = &mut self.o.call {
            c.canceller.cancel();
        }
        self.legacy.clear(); // unanswered requests get an error upstream
        match reason {
            StopReason::Cancelled => {
                self.end = Some(Settle::Cancelled("cancelled by the client".into()));
            }
            StopReason::Shutdown => {
                self.end = Some(self.drivers.failed(Failure::Shutdown));
            }
            StopReason::Superseded => self.lost = true,
            StopReason::Expired => {
                self.end = Some(self.drivers.failed(self.expired()));
                self.rec.expires_at_ms =
                    self.drivers.clock().now_ms() + self.drivers.expired_grace.as_millis() as u64;
            }
        }
        false
    }

    /// Why a task stopped at its TTL: waiting on the client is not the upstream's
    /// fault.
    fn expired(&self) -> Failure {
        Failure::Expired {
            upstream: self.rec.upstream.clone(),
            ttl_ms: self.rec.ttl_ms,
            waiting_input: self.rec.status() == TaskStatus::InputRequired,
        }
    }

    /// After the loop: let the task go if it was lost, or settle it.
    async fn finish(mut self, traced: Span) {
        self.legacy.clear();
        if self.lost {
            self.let_go(traced).await;
        } else {
            self.settle(traced).await;
        }
    }

    /// Another replica settled it (a cancellation that landed there, or the lease
    /// lapsed and it was failed): the call stops and nothing is written.
    async fn let_go(mut self, mut traced: Span) {
        if let Some(c) = &mut self.o.call {
            c.canceller.cancel();
        }
        self.release();
        traced.set("tasklift.task.status", "settled_elsewhere");
        self.drivers
            .settled_elsewhere(
                &self.rec.id,
                "task settled by another replica; its call here was stopped",
            )
            .await;
    }

    /// The task's call slot, its count against its principal's limit and its
    /// call's meter go.
    fn release(&mut self) {
        drop(self.o.meter.take());
        drop(self.o.slot.take());
        drop(self.o.active.take());
    }

    /// Settle the task with its end: counted, stored, published, traced.
    async fn settle(mut self, mut traced: Span) {
        self.rec.input_requests.clear();
        self.rec.updated_at_ms = self.drivers.clock().now_ms();
        // Kept unsettled, in case the store cannot take the outcome (see store).
        let unsettled = self.rec.clone();
        let end = self
            .end
            .take()
            .expect("the driver stops only once the task's end is known");
        if let Err(e) = self.rec.settle(end) {
            // Nothing else settles a task this driver runs; should it happen, the
            // stored state stands.
            tracing::error!(error = %e, "a task already settled was settled again");
            self.drivers.running.remove(&self.rec.id);
            return;
        }
        // Counted before the write that makes the state visible, so a client that
        // sees the task settled also sees it counted.
        self.drivers.metrics().task_finished(finished(&self.rec));
        self.release();
        if !self.store(unsettled).await {
            return;
        }
        self.drivers.publish(&self.rec);
        trace_end(&mut traced, &self.rec);
        tracing::info!(status = self.rec.status().as_str(), "task settled");
        self.drivers.running.remove(&self.rec.id);
    }

    /// Write the settled record, again while the store is out of space or out of
    /// reach. False when another replica settled the task first (its state
    /// stands); a failure in a smaller form when the outcome could not be stored.
    async fn store(&mut self, unsettled: TaskRecord) -> bool {
        let mut stored = self.drivers.store().put(&self.rec).await;
        if let Err(e) = &stored {
            if e.is_transient() {
                stored = self.drivers.settle_later(&self.rec, e).await;
            }
        }
        let Err(e) = stored else {
            return true;
        };
        if let StoreError::Conflict { .. } = e {
            self.drivers
                .settled_elsewhere(&self.rec.id, "task was settled by another replica first")
                .await;
            return false;
        }
        tracing::error!(error = %e, "could not record the task's final state");
        // Keep the outcome visible in a smaller form if the full one did not fit:
        // the settled state above was never stored.
        self.rec = unsettled;
        let _ = self
            .rec
            .settle(self.drivers.failed(Failure::Unstored(e.to_string())));
        let _ = self.drivers.store().put(&self.rec).await;
        true
    }
}

/// How a settled task is counted.
fn finished(rec: &TaskRecord) -> crate::observe::metrics::Finished {
    match rec.status() {
        TaskStatus::Completed => crate::observe::metrics::Finished::Completed,
        TaskStatus::Cancelled => crate::observe::metrics::Finished::Cancelled,
        _ => crate::observe::metrics::Finished::Failed,
    }
}

/// End the task's span with its status, and its error if it failed.
fn trace_end(traced: &mut Span, rec: &TaskRecord) {
    if !traced.is_recording() {
        return;
    }
    traced.set("tasklift.task.status", rec.status().as_str());
    match &rec.outcome {
        Some(crate::store::TaskOutcome::Error(e)) => traced.fail(
            e.get("message")
                .and_then(Value::as_str)
                .unwrap_or("failed")
                .to_string(),
        ),
        Some(crate::store::TaskOutcome::Result(r))
            if r.get("isError").and_then(Value::as_bool) == Some(true) =>
        {
            traced.set("error.type", "tool_error");
            traced.fail("the tool answered isError: true");
        }
        _ => {}
    }
}
