//! Webhooks: signed events POSTed when a task ends or needs input, from the
//! store's durable outbox.
//!
//! - `config`: `[[webhooks]]` values refused by `check-config` and `serve`,
//!   secrets redacted.

mod config;
