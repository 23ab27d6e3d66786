//! A task's background driver: holds the upstream call after the handle was
//! returned, records progress, bridges input requests (`input_required`, answered
//! by `tasks/update`), retries a modern upstream's `InputRequiredResult` rounds with
//! the collected answers, and settles the task.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::core::part;
use super::phases::{
    admit_request, finalize_result, is_progress_for, sleep_until_opt, Control, RunningCall,
    StopReason,
};
use super::{failed, progress_message};
use crate::observe::spans::Span;
use crate::store::{Settle, StoreError, TaskRecord, TaskStatus};
use crate::upstream::{broken, CallEvent, ServerRequest};
use tasklift_protocol::jsonrpc::{RpcError, INTERNAL_ERROR, UPSTREAM_ERROR};

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
        let senders: Vec<mpsc::Sender<Control>> =
            self.running.iter().map(|e| e.value().clone()).collect();
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

    /// Own a task until it settles, recording each change.
    pub(super) async fn own(
        self,
        mut rec: TaskRecord,
        mut o: RunningCall,
        mut control: mpsc::Receiver<Control>,
        mut traced: Span,
    ) {
        let upstream = rec.upstream.clone();
        let mut legacy: HashMap<String, ServerRequest> = HashMap::new();
        let mut round = Round::default();
        // Progress is written at most every PROGRESS_EVERY; a newer message waiting
        // to be written is flushed when that time comes (or with the next change).
        let mut last_progress_write = tokio::time::Instant::now() - PROGRESS_EVERY;
        let mut progress_due: Option<tokio::time::Instant> = None;
        // Set when the task stopped being this process's to settle (shared store).
        let mut lost = false;
        // How the task ends, once known (the loop then stops).
        let mut end: Option<Settle> = None;
        loop {
            tokio::select! {
                _ = sleep_until_opt(progress_due) => {
                    progress_due = None;
                    last_progress_write = tokio::time::Instant::now();
                    if !self.record(&mut rec).await { lost = true; break; }
                }
                ev = o.next() => match ev {
                    Some(CallEvent::Notification(n)) => {
                        if is_progress_for(&n, &o.token) {
                            if let Some(m) = n.get("params").and_then(progress_message) {
                                rec.status_message = Some(m);
                                let due = last_progress_write + PROGRESS_EVERY;
                                if tokio::time::Instant::now() >= due {
                                    progress_due = None;
                                    last_progress_write = tokio::time::Instant::now();
                                    if !self.record(&mut rec).await { lost = true; break; }
                                } else {
                                    progress_due.get_or_insert(due);
                                }
                            }
                        }
                    }
                    Some(CallEvent::Input(r)) => {
                        let mut admitted = Vec::new();
                        admit_request(&o.caps, r, &mut admitted);
                        for r in admitted {
                            let key = o.input_keys.next(&r);
                            rec.input_requests.insert(key.clone(), r.as_input_request());
                            legacy.insert(key, r);
                        }
                        if !legacy.is_empty() {
                            let _ = rec.ask();
                            if !self.record(&mut rec).await { lost = true; break; }
                        }
                    }
                    Some(CallEvent::Done(outcome)) => {
                        if let Some(c) = &mut o.call {
                            c.canceller.disarm();
                        }
                        o.call = None;
                        match outcome {
                            Ok(r) if r.get("resultType").and_then(Value::as_str) == Some("input_required") && o.origin.is_some() => {
                                round.n += 1;
                                round.state = r.get("requestState").and_then(Value::as_str).map(str::to_string);
                                round.answers = Map::new();
                                let reqs = r.get("inputRequests").and_then(Value::as_object).cloned().unwrap_or_default();
                                for (k, entry) in reqs {
                                    let key = format!("round{}-{k}", round.n);
                                    rec.input_requests.insert(key.clone(), entry);
                                    round.waiting.insert(key, k);
                                }
                                if round.waiting.is_empty() {
                                    if let Err(e) = self.retry(&mut o, &mut round).await {
                                        end = Some(failed(e));
                                        break;
                                    }
                                } else {
                                    let _ = rec.ask();
                                    if !self.record(&mut rec).await { lost = true; break; }
                                }
                            }
                            outcome => {
                                end = Some(match finalize_result(outcome) {
                                    Ok(r) => match self.gate().check_result(&r) {
                                        Ok(()) => Settle::Completed(r),
                                        Err(e) => {
                                            self.metrics().limit_hit(e.setting());
                                            failed(e.into())
                                        }
                                    },
                                    Err(e) => failed(e),
                                });
                                break;
                            }
                        }
                    }
                    None => {
                        end = Some(failed(broken(&upstream)));
                        break;
                    }
                },
                Some(c) = control.recv() => match c {
                    Control::Answer(answers, _applied) => {
                        // `_applied` lives to the end of this arm: the caller of
                        // tasks/update hears back once the record is written.
                        let mut changed = false;
                        for (k, v) in answers {
                            if let Some(r) = legacy.remove(&k) {
                                r.answer(Ok(v));
                            } else if let Some(uk) = round.waiting.remove(&k) {
                                round.answers.insert(uk, v);
                            } else {
                                continue; // not outstanding: ignored
                            }
                            rec.input_requests.remove(&k);
                            changed = true;
                        }
                        if !changed {
                            continue;
                        }
                        if round.n > 0 && round.waiting.is_empty() && o.call.is_none() {
                            if let Err(e) = self.retry(&mut o, &mut round).await {
                                end = Some(failed(e));
                                break;
                            }
                        }
                        if rec.input_requests.is_empty() {
                            let _ = rec.resume();
                        }
                        if !self.record(&mut rec).await { lost = true; break; }
                    }
                    Control::Stop(reason) => {
                        if let Some(c) = &mut o.call {
                            c.canceller.cancel();
                        }
                        legacy.clear(); // unanswered requests get an error upstream
                        match reason {
                            StopReason::Cancelled => {
                                end = Some(Settle::Cancelled("cancelled by the client".into()));
                            }
                            StopReason::Shutdown => {
                                let msg = "tasklift shut down while this task was running; the call was cancelled upstream";
                                end = Some(failed(RpcError::new(INTERNAL_ERROR, msg)));
                            }
                            StopReason::Superseded => {
                                lost = true;
                                break;
                            }
                            StopReason::Expired => {
                                // Waiting on the client is not the upstream's fault.
                                let err = match rec.status() {
                                    TaskStatus::InputRequired => RpcError::new(INTERNAL_ERROR, format!(
                                        "the task was still waiting for input at its TTL of {} ms; the call to upstream {upstream} was cancelled",
                                        rec.ttl_ms)),
                                    _ => RpcError::new(UPSTREAM_ERROR, format!(
                                        "upstream {upstream} did not answer within the task's TTL of {} ms; the call was cancelled upstream",
                                        rec.ttl_ms)),
                                };
                                end = Some(failed(err));
                                rec.expires_at_ms = self.clock().now_ms() + self.expired_grace.as_millis() as u64;
                            }
                        }
                        break;
                    }
                },
            }
        }
        drop(legacy);
        if lost {
            // Another replica settled it (a cancellation that landed there, or the
            // lease lapsed and it was failed): the call stops and nothing is written.
            if let Some(c) = &mut o.call {
                c.canceller.cancel();
            }
            drop(o.meter.take());
            drop(o.slot.take());
            drop(o.active.take());
            traced.set("tasklift.task.status", "settled_elsewhere");
            self.settled_elsewhere(
                &rec.id,
                "task settled by another replica; its call here was stopped",
            )
            .await;
            return;
        }
        rec.input_requests.clear();
        rec.updated_at_ms = self.clock().now_ms();
        // Kept unsettled, in case the store cannot take the outcome (see below).
        let unsettled = rec.clone();
        let end = end.expect("the driver stops only once the task's end is known");
        if let Err(e) = rec.settle(end) {
            // Nothing else settles a task this driver runs; should it happen, the
            // stored state stands.
            tracing::error!(error = %e, "a task already settled was settled again");
            self.running.remove(&rec.id);
            return;
        }
        // Counted before the write that makes the state visible, so a client that
        // sees the task settled also sees it counted.
        let how = match rec.status() {
            TaskStatus::Completed => crate::observe::metrics::Finished::Completed,
            TaskStatus::Cancelled => crate::observe::metrics::Finished::Cancelled,
            _ => crate::observe::metrics::Finished::Failed,
        };
        self.metrics().task_finished(how);
        drop(o.meter.take());
        drop(o.slot.take());
        drop(o.active.take());
        let mut stored = self.store().put(&rec).await;
        if let Err(e) = &stored {
            if e.is_transient() {
                stored = self.settle_later(&rec, e).await;
            }
        }
        if let Err(e) = stored {
            if let StoreError::Conflict { .. } = e {
                self.settled_elsewhere(&rec.id, "task was settled by another replica first")
                    .await;
                return;
            }
            tracing::error!(error = %e, "could not record the task's final state");
            // Keep the outcome visible in a smaller form if the full one did not fit:
            // the settled state above was never stored.
            rec = unsettled;
            let _ = rec.settle(failed(RpcError::new(
                INTERNAL_ERROR,
                format!("tasklift could not store this task's outcome: {e}"),
            )));
            let _ = self.store().put(&rec).await;
        }
        self.publish(&rec);
        if traced.is_recording() {
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
        tracing::info!(status = rec.status().as_str(), "task settled");
        self.running.remove(&rec.id);
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

    /// Retry the original call upstream with a round's answers and `requestState`.
    async fn retry(&self, o: &mut RunningCall, round: &mut Round) -> Result<(), RpcError> {
        let origin = o.origin.as_ref().expect("rounds need the original request");
        let mut r = origin.request();
        r.params.insert(
            "inputResponses".into(),
            Value::Object(std::mem::take(&mut round.answers)),
        );
        match round.state.take() {
            Some(s) => r.params.insert("requestState".into(), json!(s)),
            None => r.params.remove("requestState"),
        };
        tracing::info!(
            round = round.n,
            "retrying the call upstream with the client's answers"
        );
        o.call = Some(
            origin
                .upstream
                .call(&r, &origin.ctx)
                .await
                .map_err(|e| e.to_rpc())?,
        );
        Ok(())
    }
}
