//! tasklift's integration tests: one binary, a shared harness (`support`), and one
//! module per area. Each test starts the real proxy in-process on 127.0.0.1:0 in
//! front of a fixture upstream built for the case.

mod support;

mod input;
mod legacy;
mod peers;
mod stdio;
mod tasks;
mod upstreams;

mod admin;
mod auth_ownership;
mod call_cli;
mod cli;
mod crash;
mod disk;
mod front_door;
mod full_disk;
mod health;
mod low_space;
mod metrics;
mod otlp;
mod pg_space;
mod replay_store;
mod replicas;
mod schemas;
mod security;
mod session_restart;
mod slow_clients;
mod store_cli;
