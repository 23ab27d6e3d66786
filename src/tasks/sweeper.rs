//! Expiry and recovery: every `sweep_interval` the sweeper fails tasks running past
//! their TTL and deletes expired ones (records and result files) until shutdown;
//! at start, tasks a previous process left running are failed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::answer::Failure;
use super::control::Control;
use super::core::part;
use super::phases::StopReason;
use super::Engine;

part!(
    /// Expiry of tasks, and recovery of those a previous process left.
    Sweeper
);

impl Sweeper {
    /// At start: tasks a previous process left running can never finish; fail them.
    /// With a shared store this is the lease reaper's job instead: other replicas'
    /// tasks are running, and this process's are found by their lapsed leases.
    pub async fn recover(&self) -> Result<usize, crate::store::StoreError> {
        if self.store.shared().is_some() {
            return Ok(0);
        }
        let orphans = self.store.unfinished().await?;
        let now = self.clock.now_ms();
        let mut unwritten = 0;
        for mut rec in orphans.iter().cloned() {
            if rec.settle(self.failed(Failure::Restarted)).is_err() {
                continue;
            }
            rec.input_requests.clear();
            rec.updated_at_ms = now;
            // A store that cannot take the write (a full disk) does not stop the
            // start: stored tasks are still served; the next start tries again.
            if let Err(e) = self.store.put(&rec).await {
                unwritten += 1;
                tracing::error!(task.id = %rec.id, error = %e, "could not record a task left running by a previous process as failed; it shows as working until a start that can write");
                continue;
            }
            self.metrics
                .task_finished(crate::observe::metrics::Finished::Failed);
        }
        if unwritten > 0 {
            tracing::error!(
                count = unwritten,
                "tasks left running by a previous process could not be recorded as failed"
            );
        }
        if orphans.len() > unwritten {
            tracing::warn!(
                count = orphans.len() - unwritten,
                "failed tasks left running by a previous process"
            );
        }
        Ok(orphans.len())
    }

    /// Sweep: fail running tasks past their TTL, delete expired ones. Returns how many
    /// records were deleted.
    pub async fn sweep(&self) -> Result<usize, crate::store::StoreError> {
        let mut deleted = 0;
        loop {
            let ids = self.store.expired(self.clock.now_ms(), 512).await?;
            let n = ids.len();
            let mut progressed = false;
            for id in ids {
                let sender = self.running.get(&id).map(|s| s.value().clone());
                match sender {
                    Some(s) => {
                        let _ = s.try_send(Control::Stop(StopReason::Expired));
                    }
                    None => {
                        self.store.delete(&id).await?;
                        deleted += 1;
                        progressed = true;
                    }
                }
            }
            if n < 512 || !progressed {
                break;
            }
        }
        if let Some(shared) = self.store.shared() {
            // Finished tasks of every replica, in batches, by their indexed expiry.
            loop {
                let n = shared.purge_expired(self.clock.now_ms(), 1000).await?;
                deleted += n;
                if n < 1000 {
                    break;
                }
            }
        }
        let now = self.clock.now_ms();
        if let Some(replays) = self.store.replays() {
            replays.purge_calls(now).await?;
        }
        self.upstream_tasks.forget_expired(now);
        if deleted > 0 {
            self.metrics.tasks_expired(deleted as u64);
            tracing::debug!(deleted, "swept expired tasks");
        }
        Ok(deleted)
    }
}

/// Run the sweeper until `shutdown` turns true.
pub async fn run(engine: Arc<Engine>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = engine.sweep().await {
                    tracing::error!(error = %e, "sweeping expired tasks failed; will retry");
                }
            }
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}
