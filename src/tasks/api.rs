//! The engine's typed API for stored tasks: what a front end asks of them, whatever
//! the wire it speaks (the 2026-07-28 extension's `tasks/*` through dispatch, the
//! 2025-11-25 tasks of legacy sessions, the status page, `/readyz` and `/metrics`).
//! Nothing here takes a JSON-RPC request or answers JSON: errors are [`TaskError`] (answer.rs),
//! which the front door's error map turns into what a client sees.
//!
//! A task is visible only to the caller that created it, on the upstream it was
//! created on ([`Caller`]); any other caller is told it does not exist.

use serde_json::{Map, Value};

use super::answer::TaskError;
use super::control::Control;
use super::core::part;
use super::phases::StopReason;
use crate::store::{Settle, StoreError, StoreStats, TaskRecord, TaskStatus};

/// The longest `tasks/update` waits for a running task's record to show the
/// answers, and `tasks/cancel` for it to show the task settled.
const ANSWER_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Who asks about a task: a principal, on one upstream.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The caller's principal (keyed hash).
    pub principal: &'a str,
    /// The upstream the request came in for.
    pub upstream: &'a str,
}

part!(
    /// The typed API for stored tasks.
    Stored
);

impl Stored {
    /// A task the caller may see.
    pub async fn get(&self, task_id: &str, who: Caller<'_>) -> Result<TaskRecord, TaskError> {
        let rec = self.store().get(task_id).await.map_err(|e| {
            tracing::error!(error = %e, "task store read failed");
            TaskError::Read(e)
        })?;
        match rec {
            Some(r) if r.owner == who.principal && r.upstream == who.upstream => {
                if r.expires_at_ms <= self.clock().now_ms() && r.status().is_terminal() {
                    Err(TaskError::Expired)
                } else {
                    Ok(r)
                }
            }
            _ => Err(TaskError::NotFound),
        }
    }

    /// [`Engine::get`] for a client polling the task: refused, with `poll_rate_limit`
    /// on, when it comes sooner than the task's `pollIntervalMs` allows.
    pub async fn poll(&self, task_id: &str, who: Caller<'_>) -> Result<TaskRecord, TaskError> {
        let rec = self.get(task_id, who).await?;
        if let Err(e) = self
            .gate()
            .poll(who.principal, &rec.id, rec.poll_interval_ms)
        {
            self.metrics().limit_hit(e.setting());
            return Err(e.into());
        }
        Ok(rec)
    }

    /// Cancel a task the caller may see. A finished task is left as it is (cancelling
    /// it is not an error); a running one is stopped upstream by its driver, or, when
    /// no driver runs it here and no other replica does, recorded `cancelled` here.
    /// For a task running here, the call returns once the stored record shows it
    /// settled: the extension lets cancellation be eventually consistent, but
    /// clients read the task right after the ack (as after `tasks/update`).
    pub async fn cancel(&self, task_id: &str, who: Caller<'_>) -> Result<(), TaskError> {
        let rec = self.get(task_id, who).await?;
        if rec.status().is_terminal() {
            return Ok(());
        }
        let sender = self.running.get(task_id).map(|s| s.value().clone());
        if let Some(s) = sender {
            let changes = self.subscribe();
            if s.send(Control::Stop(StopReason::Cancelled)).await.is_ok() {
                self.until_written(changes, task_id, |r| r.status().is_terminal())
                    .await;
            }
            return Ok(());
        }
        // Read again: the driver may have settled it meanwhile, and a terminal task
        // never changes status.
        let mut rec = match self.store().get(task_id).await {
            Ok(Some(r)) if !r.status().is_terminal() => r,
            _ => return Ok(()),
        };
        if rec
            .settle(Settle::Cancelled("cancelled by the client".into()))
            .is_err()
        {
            return Ok(());
        }
        rec.updated_at_ms = self.clock().now_ms();
        match self.store().put(&rec).await {
            Ok(()) => {
                self.metrics()
                    .task_finished(crate::observe::metrics::Finished::Cancelled);
                self.publish(&rec);
                Ok(())
            }
            // Settled meanwhile by the replica running it.
            Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(TaskError::Write(e)),
        }
    }

    /// Give a task the client's answers to its input requests, by key. Keys that are
    /// not outstanding are ignored by the driver, as the extension says; answers to a
    /// finished task are dropped. For a task running here, the call returns once the
    /// stored record shows the answers (their keys gone from `inputRequests`), so a
    /// `tasks/get` right after the ack sees them; the extension allows the ack to come
    /// first, but clients poll right after it. The same holds for a task another
    /// replica runs, once that replica's write is announced. A driver that takes
    /// longer than [`ANSWER_ACK_WAIT`] (a slow store) is not waited for.
    pub async fn update(
        &self,
        task_id: &str,
        who: Caller<'_>,
        answers: Map<String, Value>,
    ) -> Result<(), TaskError> {
        let rec = self.get(task_id, who).await?;
        let sender = self.running.get(task_id).map(|s| s.value().clone());
        if rec.status().is_terminal() || answers.is_empty() {
            return Ok(());
        }
        match (sender, self.store().shared()) {
            (Some(s), _) => {
                let (applied, seen) = tokio::sync::oneshot::channel();
                if s.send(Control::Answer(answers, Some(applied)))
                    .await
                    .is_ok()
                {
                    let _ = tokio::time::timeout(ANSWER_ACK_WAIT, seen).await;
                }
            }
            // Another replica runs the call: the answers wait for it in the
            // database, and it is woken at once. Its write of the record is
            // announced to every replica; the ack waits for it here too.
            (None, Some(shared)) => {
                let changes = self.subscribe();
                shared
                    .send_answers(task_id, &answers)
                    .await
                    .map_err(TaskError::Answers)?;
                let keys: Vec<&String> = answers
                    .keys()
                    .filter(|k| rec.input_requests.contains_key(*k))
                    .collect();
                let shows_them = |r: &TaskRecord| {
                    r.status().is_terminal()
                        || keys.iter().all(|k| !r.input_requests.contains_key(*k))
                };
                if !keys.is_empty() {
                    self.until_written(changes, task_id, shows_them).await;
                }
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Wait, at most [`ANSWER_ACK_WAIT`], until a write of task `task_id` that
    /// `shows` comes through `changes` (subscribed before the change was asked
    /// for, so it cannot pass unseen). Should `changes` lag behind, the stored
    /// record is read instead.
    async fn until_written(
        &self,
        mut changes: tokio::sync::broadcast::Receiver<TaskRecord>,
        task_id: &str,
        shows: impl Fn(&TaskRecord) -> bool,
    ) {
        use tokio::sync::broadcast::error::RecvError;
        let _ = tokio::time::timeout(ANSWER_ACK_WAIT, async {
            loop {
                match changes.recv().await {
                    Ok(r) if r.id == task_id && shows(&r) => return,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        if let Ok(Some(r)) = self.store().get(task_id).await {
                            if shows(&r) {
                                return;
                            }
                        }
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        })
        .await;
    }

    /// The caller's unexpired tasks on its upstream, oldest first; with no caller,
    /// every stored task, newest first (the read-only status page).
    pub async fn list(&self, who: Option<Caller<'_>>) -> Result<Vec<TaskRecord>, TaskError> {
        match who {
            Some(w) => self
                .store()
                .list(w.principal, w.upstream, self.clock().now_ms())
                .await
                .map_err(TaskError::Read),
            None => self.store().all().await.map_err(TaskError::Read),
        }
    }

    /// How many stored tasks are in each status.
    pub async fn counts(&self) -> Result<Vec<(TaskStatus, u64)>, StoreError> {
        self.store().counts().await
    }

    /// The store's figures, or why it cannot be read (`/readyz`).
    pub async fn health(&self) -> Result<StoreStats, StoreError> {
        self.store().stats().await
    }

    /// Write everything buffered to disk (at shutdown).
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.store().flush().await
    }
}
