//! tasklift as an operator runs it: the `tasklift` binary's configuration checks and
//! errors (`cli`), `tasklift health` (`health`), `tasklift call` (`call_cli`),
//! `/metrics` and `/readyz` (`metrics`), the admin listener and its status page
//! (`admin`), and OpenTelemetry traces (`otlp`). `tasklift store` is in
//! `store::cli`.

mod admin;
mod call_cli;
mod cli;
mod health;
mod metrics;
mod otlp;
