//! tasklift's integration tests: one binary, a shared harness (`support`), and one
//! module per area. Each test starts the real proxy in-process on 127.0.0.1:0 in
//! front of a fixture upstream built for the case.

mod support;

mod front;
mod input;
mod legacy;
mod peers;
mod stdio;
mod store;
mod tasks;
mod upstreams;

mod admin;
mod call_cli;
mod cli;
mod health;
mod metrics;
mod otlp;
