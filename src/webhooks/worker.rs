//! The delivery worker: one loop per destination, each with at most its
//! `concurrency` attempts in flight, taking due events from the outbox, sending
//! them (`send.rs`) and recording what happened: delivered events go, refused or
//! unanswered ones come back after a backoff, and one older than `max_age` is
//! given up with one log line. A destination's loop shares nothing with the
//! proxy's requests or tasks (they only write the outbox) nor with the other
//! destinations' loops, so a slow receiver slows no one else.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::send::{backoff, send, Attempt};
use super::stats::WebhookStats;
use crate::config::WebhookConfig;
use crate::store::{Delivery, Outbox, TaskStore};
use crate::tls::Http1Client;

/// How often a destination looks for due events when nothing woke it (retries
/// coming due; with PostgreSQL, events other replicas wrote).
const POLL: Duration = Duration::from_millis(500);

/// How late the attempt scheduled at `max_age` may start and still be made.
const LAST_ATTEMPT_GRACE_MS: u64 = 10_000;

/// How much longer than an attempt's `timeout` an event stays leased to the
/// replica sending it.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// Run every destination's loop until `shutdown`; attempts still in flight then
/// are dropped, and their events sent again after the restart.
pub async fn run(
    store: Arc<dyn TaskStore>,
    outbox: Arc<Outbox>,
    stats: Arc<WebhookStats>,
    mut shutdown: watch::Receiver<bool>,
) {
    warn_of_orphans(store.as_ref(), &outbox).await;
    let mut loops = JoinSet::new();
    for hook in outbox.hooks() {
        let client = match crate::tls::http1_client_with(
            hook.url.scheme_str() == Some("https"),
            hook.connect_timeout,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(destination = %hook.name, error = %e, "webhook destination not started");
                continue;
            }
        };
        let d = Destination {
            hook: hook.clone(),
            client,
            store: store.clone(),
            stats: stats.clone(),
        };
        loops.spawn(d.run(outbox.subscribe(), shutdown.clone()));
    }
    let _ = shutdown.wait_for(|s| *s).await;
    loops.shutdown().await;
}

/// Say (once, at start) which events wait for a destination no longer
/// configured: nothing sends them, and `tasklift store outbox` lists them.
async fn warn_of_orphans(store: &dyn TaskStore, outbox: &Outbox) {
    let Some(o) = store.outbox() else {
        return;
    };
    for d in o.depth().await.unwrap_or_default() {
        if !outbox.hooks().iter().any(|h| h.name == d.destination) {
            tracing::warn!(destination = %d.destination, events = d.pending, "webhook events wait for a destination that is no longer configured: they are not sent");
        }
    }
}

/// One destination's loop and what its attempts share.
#[derive(Clone)]
struct Destination {
    hook: WebhookConfig,
    client: Http1Client,
    store: Arc<dyn TaskStore>,
    stats: Arc<WebhookStats>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Destination {
    /// How long an event is this worker's once taken: longer than an attempt
    /// lasts (its `timeout` bounds it, connecting included). With PostgreSQL,
    /// another replica takes the event once the lease of a dead one lapses.
    fn lease(&self) -> Duration {
        self.hook.timeout + LEASE_MARGIN
    }

    async fn run(self, mut written: watch::Receiver<u64>, mut shutdown: watch::Receiver<bool>) {
        let mut inflight = JoinSet::new();
        loop {
            let free = self.hook.concurrency.saturating_sub(inflight.len());
            if free > 0 {
                for d in self.take(free).await {
                    inflight.spawn(self.clone().deliver(d));
                }
            }
            tokio::select! {
                Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
                _ = written.changed() => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Up to `n` due events, leased to this worker.
    async fn take(&self, n: usize) -> Vec<Delivery> {
        let Some(outbox) = self.store.outbox() else {
            return Vec::new();
        };
        match outbox.due(&self.hook.name, now_ms(), self.lease(), n).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(destination = %self.hook.name, error = %e, "cannot read the webhook outbox");
                Vec::new()
            }
        }
    }

    /// One attempt at `d`, and what follows from it in the outbox.
    async fn deliver(self, mut d: Delivery) {
        let Some(outbox) = self.store.outbox() else {
            return;
        };
        let max_age_ms = self.hook.max_age.as_millis() as u64;
        let deadline = d.occurred_at_ms.saturating_add(max_age_ms);
        let now = now_ms();
        // Past `max_age` (tasklift was down meanwhile): given up unsent. The last
        // attempt, scheduled at `max_age`, still goes.
        let attempt = if now > deadline.saturating_add(LAST_ATTEMPT_GRACE_MS) {
            None
        } else {
            Some(send(&self.client, &self.hook, &d, now / 1000).await)
        };
        if let Some(a) = &attempt {
            self.stats.count(&self.hook.name, a.outcome());
            d.attempts += 1;
        }
        let r = match attempt {
            Some(Attempt::Delivered) => {
                tracing::debug!(destination = %self.hook.name, webhook.id = %d.id, task.id = %d.task_id, attempts = d.attempts, "webhook delivered");
                outbox.done(&d).await
            }
            // The last attempt is made at `max_age`, not a backoff before it.
            Some(a) if now_ms() < deadline => {
                tracing::debug!(destination = %self.hook.name, webhook.id = %d.id, attempts = d.attempts, outcome = ?a, "webhook attempt failed; will retry");
                let wait = backoff(d.attempts).as_millis() as u64;
                d.next_at_ms = now_ms().saturating_add(wait).min(deadline);
                outbox.retry(&d).await
            }
            last => {
                self.stats.count(&self.hook.name, "given_up");
                tracing::warn!(destination = %self.hook.name, webhook.id = %d.id, task.id = %d.task_id, event = %d.kind, attempts = d.attempts, last = ?last, max_age = ?self.hook.max_age, "webhook event given up: not delivered within max_age");
                outbox.done(&d).await
            }
        };
        if let Err(e) = r {
            tracing::warn!(destination = %self.hook.name, webhook.id = %d.id, error = %e, "cannot record a webhook attempt in the outbox; it will be sent again");
        }
    }
}
