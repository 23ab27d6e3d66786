//! The sweeper: every `sweep_interval`, fail tasks running past their TTL and delete
//! expired ones (records and result files), until shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Engine;

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
