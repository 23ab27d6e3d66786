//! How long one `tasklift_wait` may block: long enough to save a model turns, never
//! longer than its client waits. A client's tool timeout is not on the wire, so it is
//! learned from what the client shows:
//!
//! - every client that was handed a tool-level handle had already stayed on its call
//!   for the tool's threshold (the one rule an operator keeps: a client's tool
//!   timeout is at least the threshold), so a wait that long is safe;
//! - a client that stayed on a longer call to its answer showed it waits that long;
//! - a client that cancelled or hung up on a wait after `t` showed it gives up
//!   then: later waits for it end well before `t`.
//!
//! A client is its principal with its `clientInfo` name and version (a legacy
//! session's, or a modern request's `_meta`): the same program under the same
//! identity runs with the same timeout. `tasks.max_wait` caps every wait, and a
//! `waitSeconds` the model asks for is honoured only below what is known to be safe.

use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

/// The shortest wait offered (a threshold of zero, `mode = "always"`, would
/// otherwise answer at once, and the model would spin).
const FLOOR: Duration = Duration::from_secs(1);
/// A wait ends this share of a learned give-up time early, so jitter in the
/// client's clock and the network cannot make it late.
const MARGIN: f64 = 0.75;
/// Clients remembered at most; past this the oldest half is forgotten.
const MAX_CLIENTS: usize = 10_000;

/// What tasklift has seen of one client's patience.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The longest it stayed on a call to its answer.
    stayed: Duration,
    /// The shortest time after which it gave up on one (cancelled or hung up).
    gave_up: Option<Duration>,
    /// When this was last updated (for forgetting).
    at: Instant,
}

/// Every client's patience, learned while tasklift runs (not stored: a restart
/// starts again from the thresholds, which are safe).
#[derive(Default)]
pub struct Patience {
    clients: DashMap<String, Seen>,
}

impl Patience {
    /// How long a `tasklift_wait` of `client` blocks: what it is known to accept
    /// (at least `threshold`, floored at a second), less than any give-up seen,
    /// at most `requested` and `max`.
    pub fn wait_for(
        &self,
        client: &str,
        threshold: Duration,
        requested: Option<Duration>,
        max: Duration,
    ) -> Duration {
        let seen = self.clients.get(client).map(|s| *s);
        let mut safe = threshold.max(FLOOR);
        if let Some(s) = seen {
            safe = safe.max(s.stayed);
            if let Some(g) = s.gave_up {
                safe = safe.min(g.mul_f64(MARGIN));
            }
        }
        let mut wait = safe.min(max);
        if let Some(r) = requested {
            wait = wait.min(r);
        }
        wait
    }

    /// `client` stayed on a call for `d` and got its answer.
    pub fn stayed(&self, client: &str, d: Duration) {
        self.update(client, |s| s.stayed = s.stayed.max(d));
    }

    /// `client` gave up on a call after `d` (cancelled it, or hung up).
    pub fn gave_up(&self, client: &str, d: Duration) {
        self.update(client, |s| {
            s.gave_up = Some(s.gave_up.map_or(d, |g| g.min(d)));
        });
        tracing::info!(
            client,
            after_ms = d.as_millis() as u64,
            "a client gave up waiting; its later tasklift_wait calls answer sooner"
        );
    }

    fn update(&self, client: &str, f: impl FnOnce(&mut Seen)) {
        if self.clients.len() >= MAX_CLIENTS && !self.clients.contains_key(client) {
            self.forget_oldest();
        }
        let now = Instant::now();
        let mut e = self.clients.entry(client.to_string()).or_insert(Seen {
            stayed: Duration::ZERO,
            gave_up: None,
            at: now,
        });
        f(&mut e);
        e.at = now;
    }

    /// Forget the older half of the clients.
    fn forget_oldest(&self) {
        let mut ats: Vec<Instant> = self.clients.iter().map(|e| e.at).collect();
        ats.sort_unstable();
        let cut = ats[ats.len() / 2];
        self.clients.retain(|_, s| s.at > cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_new_client_waits_the_threshold() {
        let p = Patience::default();
        assert_eq!(p.wait_for("c", S(2), None, S(50)), S(2));
        // Never below a second, never above max_wait.
        assert_eq!(p.wait_for("c", Duration::ZERO, None, S(50)), S(1));
        assert_eq!(p.wait_for("c", S(90), None, S(50)), S(50));
    }

    #[test]
    fn a_requested_wait_is_honoured_only_below_what_is_safe() {
        let p = Patience::default();
        assert_eq!(p.wait_for("c", S(2), Some(S(1)), S(50)), S(1));
        assert_eq!(p.wait_for("c", S(2), Some(S(30)), S(50)), S(2));
        p.stayed("c", S(40));
        assert_eq!(p.wait_for("c", S(2), Some(S(30)), S(50)), S(30));
        assert_eq!(p.wait_for("c", S(2), None, S(50)), S(40));
    }

    #[test]
    fn a_give_up_shortens_later_waits_for_that_client_only() {
        let p = Patience::default();
        p.stayed("c", S(40));
        p.gave_up("c", S(8));
        assert_eq!(p.wait_for("c", S(2), None, S(50)), S(6));
        assert_eq!(p.wait_for("c", S(2), Some(S(30)), S(50)), S(6));
        // Even below the threshold: the client showed it does not keep the rule.
        p.gave_up("c", S(1));
        assert_eq!(
            p.wait_for("c", S(2), None, S(50)),
            Duration::from_millis(750)
        );
        assert_eq!(p.wait_for("other", S(2), None, S(50)), S(2));
    }

    #[test]
    fn the_table_stays_bounded() {
        let p = Patience::default();
        for i in 0..MAX_CLIENTS + 10 {
            p.stayed(&format!("c{i}"), S(3));
        }
        assert!(p.clients.len() <= MAX_CLIENTS);
        assert!(p.clients.contains_key(&format!("c{}", MAX_CLIENTS + 9)));
    }
}
