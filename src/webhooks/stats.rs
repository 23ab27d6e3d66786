//! What the delivery worker counts, per destination and outcome, for `/metrics`
//! and the status page.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Deliveries by `(destination, outcome)`: `delivered`, `refused`, `error`,
/// `timeout` (attempts) and `given_up` (events).
#[derive(Debug, Default)]
pub struct WebhookStats {
    counts: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl WebhookStats {
    /// One more of `outcome` for `destination`.
    pub fn count(&self, destination: &str, outcome: &'static str) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *c.entry((destination.to_string(), outcome)).or_insert(0) += 1;
    }

    /// Every count so far.
    pub fn snapshot(&self) -> Vec<(String, &'static str, u64)> {
        let c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.iter().map(|((d, o), n)| (d.clone(), *o, *n)).collect()
    }
}
