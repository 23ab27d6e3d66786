//! `tasklift_wait` (for clients given tool-level handles, handles.rs): one wait
//! while it runs: keep-alives on its
//! stream until the task ends, asks for input (put to a legacy client on the
//! stream, or with MRTR), or the wait is up, then the answer.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::answer::TaskError;
use super::answer::{Answer, Event};
use super::api::Stored;
use super::handles::{
    finished_result, questions, still_running, text_result, unknown, Handles, Waited, Waiter,
    WAIT_TOOL,
};
use crate::config::UpstreamConfig;
use crate::store::TaskRecord;
use crate::upstream::{CallContext, ClientRequest};

/// `tasklift_wait`: wait for the caller's task as long as its client is known
/// to wait ([`super::patience`]: the tool's threshold in `cfg`, what the client
/// showed; at most `waitSeconds` and `tasks.max_wait`), and answer its result,
/// a tool error saying how it failed, or the still-running answer again. A
/// client that gives up on the wait teaches tasklift to answer it sooner. The
/// wait itself is a [`ToolWait`].
pub(super) async fn tool_wait(
    handles: &Handles,
    req: ClientRequest,
    ctx: &CallContext,
    cfg: &UpstreamConfig,
) -> Answer {
    let started = Instant::now();
    let w = Waiter::new(&req, ctx, &cfg.name);
    let args = req.arguments().cloned().unwrap_or_default();
    let answered = match handles.answer_waited(&req, w.who()).await {
        Ok(id) => id,
        Err(e) => return Answer::Result(unknown(&e, None)),
    };
    let Some(id) = answered.or_else(|| {
        args.get("taskId")
            .and_then(Value::as_str)
            .map(str::to_string)
    }) else {
        return Answer::Result(text_result(
            format!("{WAIT_TOOL} needs the taskId a still-running answer gave, as {{\"taskId\": \"...\"}}."),
            true,
        ));
    };
    let requested = args
        .get("waitSeconds")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(86_400.0)));
    let poll = args
        .get("poll")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .min(1 << 32);
    // The record read here for the tool's threshold is the wait's first look.
    let rec = match Stored::of(handles).get(&id, w.who()).await {
        Ok(rec) => rec,
        Err(e) => return Answer::Result(unknown(&e, Some(&id))),
    };
    let threshold = cfg.policy(&rec.tool).threshold;
    let wait = handles
        .patience
        .wait_for(&w.client, threshold, requested, handles.max_wait);
    let (tx, rx) = mpsc::channel(32);
    let waiting = ToolWait {
        handles: handles.clone(),
        w,
        id,
        poll,
        started,
        deadline: started + wait,
        tx,
    };
    tokio::spawn(waiting.run(rec));
    Answer::Stream(rx)
}

/// A `tasklift_wait` in progress.
pub(super) struct ToolWait {
    pub(super) handles: Handles,
    pub(super) w: Waiter,
    pub(super) id: String,
    /// The call's poll number: the next still-running answer counts on from it.
    pub(super) poll: u64,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    pub(super) tx: mpsc::Sender<Event>,
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
                    if self.tx.send(Event::KeepAlive).await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Waited::Running(rec)) => still_running(&rec, self.poll + 1, None),
                Ok(Waited::Done(rec)) => finished_result(&rec),
                Ok(Waited::Input(rec)) => match self.ask(&rec).await {
                    Some(m) => m,
                    None => continue,
                },
                Err(e) => unknown(&e, Some(&self.id)),
            };
            let _ = self.tx.send(Event::Final(Ok(message))).await;
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
                Err(e) => format!("{} (asking the client failed: {e})", questions(rec)),
            },
            None if Handles::mrtr_possible(&self.w, rec) => {
                return Some(Handles::input_required(rec));
            }
            None => questions(rec),
        };
        Some(still_running(rec, self.poll + 1, Some(&needs)))
    }
}
