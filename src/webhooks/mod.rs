//! Webhooks: signed events POSTed to the `[[webhooks]]` destinations when a task
//! ends or needs input, sent at least once from the store's durable outbox
//! (`store/outbox.rs` derives each event from the status change it reports and
//! the store writes both together).
//!
//! - `sign.rs`: the Standard Webhooks signature;
//! - `send.rs`: one attempt (the signed POST, its answer, the backoff after it);
//! - `worker.rs`: one loop per destination, bounded, retrying until `max_age`;
//! - `stats.rs`: the outcomes counted for operators;
//! - `status.rs`: each destination's figures, for the status page.

mod send;
mod sign;
mod stats;
mod status;
mod worker;

pub use send::{backoff, Attempt, READ_MAX};
pub use sign::signature;
pub use stats::WebhookStats;
pub use status::{DestinationStatus, Webhooks};
pub use worker::run;
