//! Replicas sharing a PostgreSQL store: lease renewal, the reaper that fails the
//! tasks of a replica that died, and what this replica hears from the others
//! (answers and cancellations for calls it runs, changes to wake local streams).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::answer::Failure;
use super::control::Control;
use super::core::part;
use super::phases::StopReason;
use super::Engine;
use crate::store::{Change, SharedStore};

/// Run until `shutdown`: renew leases and reap lapsed ones every third of the
/// lease, and act on what other replicas announce.
pub async fn run(
    engine: Arc<Engine>,
    mut changes: mpsc::Receiver<Change>,
    mut shutdown: watch::Receiver<bool>,
) {
    let engine = Replicas::of(&*engine);
    let Some(shared) = engine.store().shared() else {
        return;
    };
    let every = (shared.lease() / 3).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => engine.maintain().await,
            c = changes.recv() => match c {
                Some(Change::Task(id)) => engine.heard(&id).await,
                Some(Change::Resync) => {
                    let ids: Vec<String> = engine.running.iter().map(|e| e.key().clone()).collect();
                    for id in ids {
                        engine.heard(&id).await;
                    }
                }
                None => return,
            },
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

part!(
    /// Work shared with other replicas.
    Replicas
);

impl Replicas {
    fn shared_store(&self) -> &dyn SharedStore {
        self.store().shared().expect("only run with a shared store")
    }

    /// One round of upkeep: renew this replica's leases, stop calls it lost, fail
    /// the tasks of replicas whose lease lapsed, and pick up answers a missed
    /// notification did not deliver.
    async fn maintain(&self) {
        let shared = self.shared_store();
        match shared.renew_leases().await {
            Ok(lost) => {
                for id in lost {
                    tracing::warn!(task.id = %id, "task was settled elsewhere or its lease lapsed; stopping its call here");
                    self.stop_here(&id).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not renew task leases; other replicas fail this replica's tasks if it lasts")
            }
        }
        let err = self.written(&Failure::LostReplica).error;
        loop {
            match shared.reap_lost(self.clock().now_ms(), &err, 500).await {
                Ok(ids) => {
                    for id in &ids {
                        self.metrics()
                            .task_finished(crate::observe::metrics::Finished::Failed);
                        tracing::warn!(task.id = %id, "failed a task whose replica was lost");
                        if self.has_listeners() {
                            if let Ok(Some(rec)) = self.store().get(id).await {
                                self.publish(&rec);
                            }
                        }
                        // Our own lapsed lease (a long pause): stop the call too.
                        self.stop_here(id).await;
                    }
                    if ids.len() < 500 {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not check for lost replicas");
                    break;
                }
            }
        }
        let ids: Vec<String> = self.running.iter().map(|e| e.key().clone()).collect();
        self.deliver_answers(&ids).await;
    }

    /// Stop a call running here without writing (another replica settled it).
    async fn stop_here(&self, id: &str) {
        let sender = self.running.get(id).map(|s| s.value().clone());
        if let Some(s) = sender {
            let _ = s.send(Control::Stop(StopReason::Superseded)).await;
        }
    }

    /// Pass answers left in the database to the calls running here.
    async fn deliver_answers(&self, ids: &[String]) {
        match self.shared_store().take_answers(ids).await {
            Ok(found) => {
                for (id, answers) in found {
                    let sender = self.running.get(&id).map(|s| s.value().clone());
                    if let Some(s) = sender {
                        let _ = s.send(Control::Answer(answers, None)).await;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read answers left for this replica's tasks")
            }
        }
    }

    /// Another replica changed task `id` (or left answers for it). The record is
    /// read again only when it matters here: the call runs here (a cancellation or
    /// a lost lease stops it), or a local stream is waiting for changes. Otherwise
    /// every status write on one replica would cost a query on every other one.
    async fn heard(&self, id: &str) {
        let runs_here = self.running.contains_key(id);
        if runs_here {
            self.deliver_answers(&[id.to_string()]).await;
        } else if !self.has_listeners() {
            return;
        }
        let Ok(Some(rec)) = self.store().get(id).await else {
            return;
        };
        if runs_here && rec.status().is_terminal() {
            self.stop_here(id).await;
        }
        self.publish(&rec);
    }
}
