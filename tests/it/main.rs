//! tasklift's integration tests: one binary, a shared harness (`support`), and one
//! folder per topic, a module per area in it. Each test starts the real proxy
//! in-process on 127.0.0.1:0 in front of a fixture upstream built for the case.
//!
//! - `tasks`: the task path for clients with and without the tasks extension;
//! - `input`: an upstream's requests for input, relayed to the caller;
//! - `legacy`: 2025-era clients on tasklift's front door;
//! - `upstreams`: how tasklift speaks to the servers behind it, and their faults;
//! - `stdio`: servers run as child processes;
//! - `peers`: SDKs, clients and servers written by others;
//! - `store`: what the store keeps, on a full disk, through `kill -9` and restarts,
//!   across replicas;
//! - `front`: the front door, ownership, security, the messages' schemas;
//! - `ops`: the binary's commands, metrics, health, the admin listener, traces;
//! - `webhooks`: signed events sent when a task ends or needs input.

mod support;

mod front;
mod input;
mod legacy;
mod ops;
mod peers;
mod stdio;
mod store;
mod tasks;
mod upstreams;
mod webhooks;
