//! Detach and replay (`on_disconnect = "detach"`), for clients without the tasks
//! extension: past its threshold a synchronous call becomes a task its caller
//! waits on ([`Engine::join`]), so a caller that goes away leaves it running; a
//! retry of the identical call (same caller, tool and arguments, or the same
//! `_meta` idempotency key) joins it, or gets its stored result, instead of
//! running the tool again. A call whose retry could never be matched (no
//! principal, legacy session or key: [`replay_key`] is `None`) is not detached.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::answer::{Answer, Event, Failure};
use super::api::Caller;
use super::api::Stored;
use super::core::part;
use super::handles::Handles;
use super::handles::{finished_result, still_running, Waited, Waiter};
use super::phases::Handle;
use crate::observe::metrics::Replay;
use crate::store::{TaskOutcome, TaskRecord, TaskStatus};
use crate::upstream::{CallContext, ClientRequest};

/// The `_meta` key a client may set to name a call for replay: calls with the same
/// key (and caller, upstream and tool) are one call, whatever their arguments.
pub const IDEMPOTENCY_KEY: &str = "tasklift/idempotencyKey";
/// The principal of every caller when `auth.mode = "none"`.
const ANONYMOUS: &str = "anonymous";

/// What a finished task gives a synchronous caller waiting on it: what the call
/// itself would have answered.
fn finished_outcome(rec: &TaskRecord) -> Result<Value, Failure> {
    match &rec.outcome {
        Some(TaskOutcome::Result(r)) => Ok(r.clone()),
        Some(TaskOutcome::Error(e)) => Err(Failure::Stored(e.clone())),
        None => Err(Failure::Cancelled(
            rec.status_message
                .clone()
                .unwrap_or_else(|| "no reason given".into()),
        )),
    }
}

/// The digest naming a call for replay: who called which tool on which upstream,
/// with which arguments or idempotency key. `None` when the call cannot be told
/// apart from another caller's: without authentication every caller is the same
/// principal, so only a legacy session's own calls, or a client's own key, count.
pub(super) fn replay_key(ctx: &CallContext, upstream: &str, req: &ClientRequest) -> Option<String> {
    use sha2::{Digest, Sha256};
    let tool = req.tool();
    let key = req
        .meta(IDEMPOTENCY_KEY)
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty());
    let session = ctx.session.as_ref().map(|s| s.id.as_str());
    if key.is_none() && ctx.principal == ANONYMOUS && session.is_none() {
        return None;
    }
    let mut h = Sha256::new();
    for part in [ctx.principal.as_str(), upstream, tool] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    if ctx.principal == ANONYMOUS && key.is_none() {
        h.update(b"session\0");
        h.update(session.unwrap_or_default().as_bytes());
        h.update([0]);
    }
    match key {
        Some(k) => {
            h.update(b"key\0");
            h.update(k.as_bytes());
        }
        None => {
            // serde_json's maps are ordered: the same arguments give the same text.
            let args = req.arguments().map(Value::to_string);
            h.update(b"args\0");
            h.update(args.as_deref().unwrap_or("null").as_bytes());
        }
    }
    Some(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

part!(
    /// Detached calls: waiting on a task, and replaying it to a retry.
    Detach
);

impl Detach {
    /// A synchronous caller waits on task `id` (detached, or a replay joining it):
    /// keep-alives until the task ends, then what the call would have answered. Its
    /// questions go to the caller (a legacy session's own requests, or MRTR). The
    /// caller going away leaves the task running. It had waited `already` on the
    /// call before: how long it stays in all is learned ([`super::patience`]).
    pub(super) fn join(&self, id: String, w: Waiter, already: Duration) -> Answer {
        let (tx, rx) = mpsc::channel(32);
        let engine = self.clone();
        let started = Instant::now();
        tokio::spawn(async move {
            let handles = Handles::of(&engine);
            loop {
                let until = Instant::now() + engine.keepalive;
                let waited = tokio::select! {
                    _ = tx.closed() => {
                        tracing::debug!(task.id = %id, "a caller waiting on a detached call went away; the call runs on");
                        engine.patience.gave_up(&w.client, already + started.elapsed());
                        return;
                    }
                    w = handles.wait_on(&id, w.who(), until, None) => w,
                };
                let msg = match waited {
                    Ok(Waited::Running(_)) => {
                        if tx.send(Event::KeepAlive).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Ok(Waited::Done(rec)) => {
                        engine
                            .patience
                            .stayed(&w.client, already + started.elapsed());
                        finished_outcome(&rec)
                    }
                    Ok(Waited::Input(rec)) => match &w.peer {
                        Some(peer) => match handles.ask_peer(peer, &rec, &w, &tx).await {
                            Ok(()) => continue,
                            Err(e) => Err(e),
                        },
                        None if super::handles::Handles::mrtr_possible(&w, &rec) => {
                            Ok(super::handles::Handles::input_required(&rec))
                        }
                        // Never reached: the driver admits only questions this
                        // caller's capabilities allow. Keep waiting for its TTL.
                        None => {
                            if tx.send(Event::KeepAlive).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(engine.keepalive).await;
                            continue;
                        }
                    },
                    Err(e) => Err(Failure::Task(e)),
                };
                let _ = tx.send(Event::Final(msg)).await;
                return;
            }
        });
        Answer::Stream(rx)
    }

    /// A call's retry found the task of an identical earlier call (`on_disconnect =
    /// "detach"`): the task, unless it failed or was cancelled (then the tool runs
    /// again).
    pub(super) async fn replayable(&self, key: &str, who: Caller<'_>) -> Option<TaskRecord> {
        let store = self.store().replays()?;
        let id = match store.recall_call(key, self.clock().now_ms()).await {
            Ok(id) => id?,
            Err(e) => {
                tracing::warn!(error = %e, "could not look up a retried call; it runs again");
                return None;
            }
        };
        let rec = Stored::of(self).get(&id, who).await.ok()?;
        match rec.status() {
            TaskStatus::Failed | TaskStatus::Cancelled => None,
            _ => Some(rec),
        }
    }

    /// Answer a replayed call from the earlier call's task: as a tool-level handle
    /// (its result, or the still-running answer), or by joining it.
    pub(super) fn replay(&self, rec: TaskRecord, w: Waiter, handle: Handle) -> Answer {
        let done = rec.status().is_terminal();
        self.metrics()
            .replayed(if done { Replay::Stored } else { Replay::Joined });
        tracing::info!(task.id = %rec.id, tool = %rec.tool, stored = done, "an identical call was replayed instead of running again");
        match handle {
            Handle::Tool if done => Answer::Result(finished_result(&rec)),
            Handle::Tool => {
                self.metrics().tool_handle();
                Answer::Result(still_running(&rec, 1, None))
            }
            _ => self.join(rec.id, w, Duration::ZERO),
        }
    }

    /// Index a new task under its call's replay key, for the replay window.
    pub(super) async fn remember_call(&self, key: &str, rec: &TaskRecord, window: Duration) {
        let Some(store) = self.store().replays() else {
            return;
        };
        let until = rec.created_at_ms + window.as_millis() as u64;
        if let Err(e) = store.remember_call(key, &rec.id, until).await {
            tracing::warn!(task.id = %rec.id, error = %e, "could not index the call for replay; a retry will run it again");
        }
    }
}
