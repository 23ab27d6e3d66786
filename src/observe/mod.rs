//! What an operator sees of tasklift at work: the Prometheus counters behind
//! `/metrics` ([`metrics`]) and the W3C trace context carried from a client to its
//! upstream ([`trace`]).

pub mod metrics;
pub mod trace;
