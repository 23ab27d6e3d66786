//! One `tasklift_wait` while it waits (handles.rs starts it): keep-alives on its
//! stream until the task ends, asks for input (put to a legacy client on the
//! stream, or with MRTR), or the wait is up, then the answer.

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::api::TaskError;
use super::handles::{finished_result, questions, still_running, unknown, Handles, Waited, Waiter};
use crate::reply::StreamItem;
use crate::store::TaskRecord;

/// A `tasklift_wait` in progress.
pub(super) struct ToolWait {
    pub(super) handles: Handles,
    pub(super) w: Waiter,
    pub(super) id: String,
    /// The call's poll number: the next still-running answer counts on from it.
    pub(super) poll: u64,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    pub(super) tx: mpsc::Sender<StreamItem>,
}

impl ToolWait {
    /// Wait from the record just read (`rec`) until there is something to
    /// answer: the result, the task's questions, or that it still runs.
    pub(super) async fn run(self, rec: TaskRecord) {
        let mut seen = Some(rec);
        loop {
            let Some(waited) = self.look(seen.take()).await else {
                return;
            };
            let message = match waited {
                Ok(Waited::Running(_)) if Instant::now() < self.deadline => {
                    if self.tx.send(StreamItem::KeepAlive).await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Waited::Running(rec)) => self.result(still_running(&rec, self.poll + 1, None)),
                Ok(Waited::Done(rec)) => self.result(finished_result(&rec)),
                Ok(Waited::Input(rec)) => match self.ask(&rec).await {
                    Some(m) => m,
                    None => continue,
                },
                Err(e) => self.result(unknown(&e, Some(&self.id))),
            };
            let _ = self.tx.send(StreamItem::Message(message)).await;
            return;
        }
    }

    /// Wait on the task until the next keep-alive is due; `None` once the client
    /// gave up on the wait (which teaches tasklift to answer it sooner).
    async fn look(&self, seen: Option<TaskRecord>) -> Option<Result<Waited, TaskError>> {
        let until = self.deadline.min(Instant::now() + self.handles.keepalive);
        tokio::select! {
            _ = self.tx.closed() => {
                let waited = self.started.elapsed();
                self.handles.patience.gave_up(&self.w.client, waited);
                None
            }
            w = self.handles.wait_on(&self.id, self.w.who(), until, seen) => Some(w),
        }
    }

    /// The task asks for input: a legacy client is asked on this stream, and the
    /// wait goes on (`None`); a client that can be asked with MRTR gets the
    /// questions; any other hears that the task still runs, and what it needs.
    async fn ask(&self, rec: &TaskRecord) -> Option<Value> {
        let needs = match &self.w.peer {
            Some(peer) => match self.handles.ask_peer(peer, rec, &self.w, &self.tx).await {
                Ok(()) => return None,
                Err(e) => format!(
                    "{} (asking the client failed: {})",
                    questions(rec),
                    e.message
                ),
            },
            None if Handles::mrtr_possible(&self.w, rec) => {
                return Some(Handles::input_required(&self.w, rec));
            }
            None => questions(rec),
        };
        Some(self.result(still_running(rec, self.poll + 1, Some(&needs))))
    }

    /// The call's answer with this result.
    fn result(&self, result: Value) -> Value {
        self.w.answer(Ok(result))
    }
}
