//! Webhooks: signed events POSTed when a task ends or needs input, from the
//! store's durable outbox, to a receiver that verifies them with the PyPI
//! `standardwebhooks` library (`receiver.rs`).
//!
//! - `config`: `[[webhooks]]` values refused by `check-config` and `serve`,
//!   secrets redacted;
//! - `delivery`: each event type, retries under one `webhook-id`, a hanging
//!   receiver, an event given up at `max_age`;
//! - `restart`: events written while the receiver is down survive a `kill -9`;
//! - `replicas`: three PostgreSQL replicas, one killed while it delivers;
//! - `operators`: `tasklift store outbox`, the status page.

mod config;
mod delivery;
mod operators;
mod receiver;
mod replicas;
mod restart;
