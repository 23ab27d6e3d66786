//! `subscriptions/listen`: for task status, the caller names task ids, tasklift
//! acknowledges those it owns and pushes `notifications/tasks` (the full
//! DetailedTask, as `tasks/get` would return it) on every change. Other types
//! (`toolsListChanged`, `resourceSubscriptions`, …) come from the upstream: its own
//! `subscriptions/listen` (modern) or its GET stream and `resources/subscribe`
//! (legacy). One acknowledgement lists what both agreed to; keep-alives follow.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use super::core::{part, Parts};
use super::detailed_task;
use crate::reply::{Reply, StreamItem};
use crate::store::TaskRecord;
use crate::upstream::{notification_wanted, CallContext, Listening, Upstream};
use tasklift_protocol::jsonrpc::{self, Request};
use tasklift_protocol::mcp;

/// `_meta` key correlating notifications with their subscription.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

fn task_notification(rec: &TaskRecord, sub: &Value) -> Value {
    let mut t = detailed_task(rec);
    if let Value::Object(o) = &mut t {
        o.remove("resultType");
        o.insert("_meta".into(), json!({ SUBSCRIPTION_ID: sub }));
    }
    jsonrpc::notification("notifications/tasks", t)
}

part!(
    /// `subscriptions/listen` for task status.
    Listen
);

impl Listen {
    /// Open a task-status stream for the caller's tasks among `taskIds`.
    pub async fn listen(&self, up: Arc<dyn Upstream>, req: &Request, ctx: &CallContext) -> Reply {
        let (owner, upstream) = (ctx.principal.as_str(), up.name().to_string());
        let upstream = upstream.as_str();
        let sub = req.id.clone().unwrap_or(Value::Null);
        let wanted: Vec<String> = req
            .params
            .get("notifications")
            .and_then(|n| n.get("taskIds"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if !wanted.is_empty() && !mcp::declares_tasks(&req.params) {
            let e = mcp::missing_tasks_capability("task status notifications");
            return Reply::Json(jsonrpc::response(req.id.as_ref(), &Err(e)));
        }
        // Subscribe before reading current states, so no change falls in between.
        let mut changes = self.subscribe();
        let mut owned = Vec::new();
        for id in wanted {
            let who = super::Caller {
                principal: owner,
                upstream,
            };
            if let Ok(rec) = self.stored().get(&id, who).await {
                owned.push(rec);
            }
        }
        let ids: HashSet<String> = owned.iter().map(|r| r.id.clone()).collect();
        let mut others = req
            .params
            .get("notifications")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        others.remove("taskIds");
        let listening = if others.is_empty() {
            Listening::none()
        } else {
            match up.listen(&others, req, ctx).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "the upstream's change notifications are unavailable");
                    Listening::none()
                }
            }
        };
        let mut agreed = listening.agreed.clone();
        if !ids.is_empty() {
            agreed.insert("taskIds".into(), json!(ids.iter().collect::<Vec<_>>()));
        }
        let (tx, rx) = mpsc::channel(64);
        let ack = jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            json!({"_meta": { SUBSCRIPTION_ID: sub }, "notifications": agreed}),
        );
        let engine = self.clone();
        tokio::spawn(async move {
            // Own the whole value: dropping its canceller would end the upstream side.
            let mut listening = listening;
            if tx.send(StreamItem::Message(ack)).await.is_err() {
                return;
            }
            // The current state first, then every change.
            for rec in &owned {
                if tx
                    .send(StreamItem::Message(task_notification(rec, &sub)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            let mut closing = engine.closing.subscribe();
            let mut tick = tokio::time::interval(engine.keepalive);
            tick.tick().await;
            loop {
                let item = tokio::select! {
                    _ = tx.closed() => return,
                    _ = closing.changed() => {
                        // Graceful closure: the response to the listen request ends it.
                        let done = jsonrpc::response(Some(&sub), &Ok(json!({
                            "resultType": "complete", "_meta": { SUBSCRIPTION_ID: sub.clone() }})));
                        let _ = tx.send(StreamItem::Message(done)).await;
                        return;
                    }
                    _ = tick.tick() => StreamItem::KeepAlive,
                    Some(mut n) = listening.events.recv() => {
                        if !notification_wanted(&listening.agreed, &n) {
                            continue;
                        }
                        if let Some(Value::Object(p)) = n.get_mut("params") {
                            let meta = p.entry("_meta").or_insert_with(|| json!({}));
                            if let Value::Object(m) = meta {
                                m.insert(SUBSCRIPTION_ID.into(), sub.clone());
                            }
                        } else {
                            n["params"] = json!({"_meta": { SUBSCRIPTION_ID: sub }});
                        }
                        StreamItem::Message(n)
                    }
                    r = changes.recv() => match r {
                        Ok(rec) if ids.contains(&rec.id) => StreamItem::Message(task_notification(&rec, &sub)),
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            // Missed some changes: send the current state of every task.
                            for id in &ids {
                                if let Ok(Some(rec)) = engine.store().get(id).await {
                                    let _ = tx.send(StreamItem::Message(task_notification(&rec, &sub))).await;
                                }
                            }
                            continue;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                };
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        });
        Reply::Stream(rx)
    }
}
