//! tasklift's integration tests: one binary, a shared harness (`support`), and one
//! module per area. Each test starts the real proxy in-process on 127.0.0.1:0 in
//! front of a fixture upstream built for the case.

mod support;

mod input;
mod legacy;
mod stdio;
mod tasks;
mod upstreams;

mod admin;
mod auth_ownership;
mod call_cli;
mod cli;
mod crash;
mod disk;
mod dual_era;
mod front_door;
mod full_disk;
mod health;
mod low_space;
mod metrics;
mod otlp;
mod peers_clients;
mod peers_node;
mod peers_python;
mod pg_space;
mod registry;
mod replay_store;
mod replicas;
mod rmcp_peer;
mod schemas;
mod security;
mod session_restart;
mod slow_clients;
mod stdio_peer;
mod store_cli;
mod ts_clients;
