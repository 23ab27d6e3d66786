//! `subscriptions/listen`: for task status, the caller names task ids, tasklift
//! acknowledges those it owns and pushes `notifications/tasks` (the full
//! DetailedTask, as `tasks/get` would return it) on every change. Other types
//! (`toolsListChanged`, `resourceSubscriptions`, …) come from the upstream: its own
//! `subscriptions/listen` (modern) or its GET stream and `resources/subscribe`
//! (legacy). One acknowledgement lists what both agreed to; keep-alives follow.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, mpsc};

use super::answer::{Answer, Event, Failure};
use super::api::Stored;
use super::core::part;
use super::detailed_task;
use crate::store::TaskRecord;
use crate::upstream::{
    notification_wanted, tag_meta, CallContext, ClientRequest, Listening, Upstream,
};

/// `_meta` key correlating notifications with their subscription.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The `notifications/tasks` notification of a task's state.
fn task_notification(rec: &TaskRecord, sub: &Value) -> Event {
    let mut t = detailed_task(rec);
    if let Value::Object(o) = &mut t {
        o.remove("resultType");
        o.insert("_meta".into(), json!({ SUBSCRIPTION_ID: sub }));
    }
    Event::Notify("notifications/tasks", t)
}

part!(
    /// `subscriptions/listen` for task status.
    Listen
);

impl Listen {
    /// Open a task-status stream for the caller's tasks among `taskIds`.
    pub async fn listen(
        &self,
        up: Arc<dyn Upstream>,
        req: &ClientRequest,
        ctx: &CallContext,
    ) -> Answer {
        let sub = req.own_id().cloned().unwrap_or(Value::Null);
        let wanted = wanted_tasks(req);
        if !wanted.is_empty() && !req.declares_tasks() {
            let what = "task status notifications".to_string();
            return Answer::Failed(Failure::NeedsExtension(what));
        }
        // Subscribe before reading current states, so no change falls in between.
        let changes = self.subscribe();
        let owned = self.owned(wanted, &ctx.principal, up.name()).await;
        let ids: HashSet<String> = owned.iter().map(|r| r.id.clone()).collect();
        let listening = upstream_listening(&*up, req, ctx).await;
        let ack = acknowledgement(&listening, &ids, &sub);
        let (tx, rx) = mpsc::channel(64);
        let feed = Feed {
            listen: self.clone(),
            tx,
            sub,
            ids,
            listening,
            changes,
        };
        tokio::spawn(feed.run(ack, owned));
        Answer::Stream(rx)
    }

    /// The records of the tasks among `wanted` that `owner` may see on `upstream`.
    async fn owned(&self, wanted: Vec<String>, owner: &str, upstream: &str) -> Vec<TaskRecord> {
        let mut owned = Vec::new();
        for id in wanted {
            let who = super::Caller {
                principal: owner,
                upstream,
            };
            if let Ok(rec) = Stored::of(self).get(&id, who).await {
                owned.push(rec);
            }
        }
        owned
    }
}

/// The task ids a listen request names.
fn wanted_tasks(req: &ClientRequest) -> Vec<String> {
    req.params()
        .get("notifications")
        .and_then(|n| n.get("taskIds"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The upstream's side of the stream: the notification types other than task
/// status, as it agreed to send them (none asked, or none available: nothing).
async fn upstream_listening(
    up: &dyn Upstream,
    req: &ClientRequest,
    ctx: &CallContext,
) -> Listening {
    let mut others: Map<String, Value> = req
        .params()
        .get("notifications")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    others.remove("taskIds");
    if others.is_empty() {
        return Listening::none();
    }
    match up.listen(&others, req.wire(), ctx).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "the upstream's change notifications are unavailable");
            Listening::none()
        }
    }
}

/// The acknowledgement: what the upstream agreed to, and the task ids followed.
fn acknowledgement(listening: &Listening, ids: &HashSet<String>, sub: &Value) -> Event {
    let mut agreed = listening.agreed.clone();
    if !ids.is_empty() {
        agreed.insert("taskIds".into(), json!(ids.iter().collect::<Vec<_>>()));
    }
    Event::Notify(
        "notifications/subscriptions/acknowledged",
        json!({"_meta": { SUBSCRIPTION_ID: sub }, "notifications": agreed}),
    )
}

/// One listen stream, fed until its client goes away or tasklift shuts down. Not
/// `Sync` (a `Listening` is not): its steps take it by `&mut`, so the stream's
/// future stays `Send`.
struct Feed {
    listen: Listen,
    tx: mpsc::Sender<Event>,
    /// The subscription id notifications carry.
    sub: Value,
    /// The tasks followed.
    ids: HashSet<String>,
    /// Owned whole: dropping its canceller would end the upstream side.
    listening: Listening,
    changes: broadcast::Receiver<TaskRecord>,
}

impl Feed {
    /// The acknowledgement, the current state of each task, then every change
    /// and the upstream's notifications, with keep-alives between.
    async fn run(mut self, ack: Event, owned: Vec<TaskRecord>) {
        if self.tx.send(ack).await.is_err() {
            return;
        }
        for rec in &owned {
            if !self.send_task(rec).await {
                return;
            }
        }
        let mut closing = self.listen.closing.subscribe();
        let mut tick = tokio::time::interval(self.listen.keepalive);
        tick.tick().await;
        loop {
            let item = tokio::select! {
                _ = self.tx.closed() => return,
                _ = closing.changed() => return self.close().await,
                _ = tick.tick() => Event::KeepAlive,
                Some(n) = self.listening.events.recv() => match self.upstream_notification(n) {
                    Some(n) => Event::Message(n),
                    None => continue,
                },
                r = self.changes.recv() => match r {
                    Ok(rec) if self.ids.contains(&rec.id) => task_notification(&rec, &self.sub),
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.resend_tasks().await;
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if self.tx.send(item).await.is_err() {
                return;
            }
        }
    }

    /// A task's state; false once the client went away.
    async fn send_task(&mut self, rec: &TaskRecord) -> bool {
        let n = task_notification(rec, &self.sub);
        self.tx.send(n).await.is_ok()
    }

    /// Missed some changes: the current state of every task.
    async fn resend_tasks(&mut self) {
        for id in &self.ids {
            if let Ok(Some(rec)) = self.listen.store().get(id).await {
                let n = task_notification(&rec, &self.sub);
                let _ = self.tx.send(n).await;
            }
        }
    }

    /// An upstream's notification the client agreed to, tagged with the
    /// subscription; `None` for any other.
    fn upstream_notification(&self, mut n: Value) -> Option<Value> {
        if !notification_wanted(&self.listening.agreed, &n) {
            return None;
        }
        tag_meta(&mut n, SUBSCRIPTION_ID, self.sub.clone());
        Some(n)
    }

    /// Graceful closure: the response to the listen request ends the stream.
    async fn close(&mut self) {
        let result = json!({"resultType": "complete", "_meta": { SUBSCRIPTION_ID: self.sub }});
        let _ = self.tx.send(Event::Final(Ok(result))).await;
    }
}
