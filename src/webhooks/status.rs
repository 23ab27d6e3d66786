//! What operators see of each destination (the status page, and `/metrics`
//! through [`WebhookSource`]): its backlog in the outbox, the outcomes of its
//! attempts, and the events dropped past its `max_pending`.

use std::sync::Arc;

use super::stats::WebhookStats;
use crate::observe::metrics::{WebhookFigures, WebhookSource};
use crate::store::{Outbox, TaskStore};

/// The webhook destinations as the wiring hands them to operators' views.
pub struct Webhooks {
    /// Where the outbox is.
    pub store: Arc<dyn TaskStore>,
    /// The destinations and their drops.
    pub outbox: Arc<Outbox>,
    /// Attempts' outcomes, counted by the worker.
    pub stats: Arc<WebhookStats>,
}

/// One destination's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DestinationStatus {
    /// Its name.
    pub name: String,
    /// Where it is: scheme, host, port and path (no credentials, no query).
    pub url: String,
    /// Events waiting (`None`: the outbox could not be read).
    pub pending: Option<u64>,
    /// When the oldest of them happened, unix milliseconds.
    pub oldest_ms: Option<u64>,
    /// Attempts by outcome (`delivered`, `refused`, `error`, `timeout`) and
    /// events `given_up`, since start.
    pub outcomes: Vec<(&'static str, u64)>,
    /// Events dropped past `max_pending`, since start.
    pub dropped: u64,
}

impl Webhooks {
    /// Every destination's figures, in configuration order.
    pub async fn destinations(&self) -> Vec<DestinationStatus> {
        let depth = match self.store.outbox() {
            Some(o) => o.depth().await.ok(),
            None => None,
        };
        let counts = self.stats.snapshot();
        let dropped = self.outbox.dropped();
        self.outbox
            .hooks()
            .iter()
            .map(|h| {
                let d = depth.as_ref().map(|all| {
                    all.iter()
                        .find(|d| d.destination == h.name)
                        .cloned()
                        .unwrap_or_default()
                });
                let url = h.url.authority().map_or(String::new(), |a| {
                    let host = a.as_str().rsplit('@').next().unwrap_or_default();
                    format!(
                        "{}://{host}{}",
                        h.url.scheme_str().unwrap_or("https"),
                        h.url.path()
                    )
                });
                DestinationStatus {
                    name: h.name.clone(),
                    url,
                    pending: d.as_ref().map(|d| d.pending),
                    oldest_ms: d.and_then(|d| d.oldest_ms),
                    outcomes: ["delivered", "refused", "error", "timeout", "given_up"]
                        .into_iter()
                        .map(|o| {
                            let n = counts.iter().find(|(d, k, _)| d == &h.name && *k == o);
                            (o, n.map_or(0, |c| c.2))
                        })
                        .collect(),
                    dropped: dropped
                        .iter()
                        .find(|(d, _)| d == &h.name)
                        .map_or(0, |d| d.1),
                }
            })
            .collect()
    }
}

impl WebhookSource for Webhooks {
    fn figures(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<WebhookFigures>> + Send + '_>> {
        Box::pin(async move {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            self.destinations()
                .await
                .into_iter()
                .map(|d| {
                    let mut outcomes = d.outcomes.clone();
                    outcomes.push(("dropped", d.dropped));
                    WebhookFigures {
                        destination: d.name,
                        outcomes,
                        pending: d.pending.unwrap_or(0),
                        oldest_age_seconds: d.oldest_ms.map_or(0, |t| now.saturating_sub(t) / 1000),
                    }
                })
                .collect()
        })
    }
}
