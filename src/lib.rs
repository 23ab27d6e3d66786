//! tasklift: a reverse proxy that gives any MCP server durable task handles.
//!
//! A `tools/call` still running after a threshold becomes a task
//! (`io.modelcontextprotocol/tasks`) for clients that declared the extension: the
//! call goes on upstream, its result is stored, and tasklift answers `tasks/get`,
//! `tasks/update` and `tasks/cancel` itself.
//!
//! Module map (a request flows top to bottom):
//! - [`front`]: the hyper front door: routing, validation, SSE, one error map;
//!   `front::legacy` holds all of the 2025-era client support (sessions, replay,
//!   2025-11-25 tasks).
//! - [`dispatch`]: which method goes where.
//! - [`tasks`]: the engine (threshold race, MRTR parking, background driver, input
//!   bridging, task notifications) and the sweeper.
//! - [`upstream`]: the `Upstream` trait; Streamable HTTP upstreams of both eras and
//!   stdio child processes.
//! - [`store`]: the `TaskStore` trait, its sled and PostgreSQL implementations.
//! - [`auth`]: principals. [`config`]: configuration (a leaf). [`app`]: wiring and shutdown.
//! - [`workers`]: the front door's threads (thread-per-core), a leaf.
//! - [`admin`]: the admin listener (read-only status page, metrics, health).
//! - [`observe`]: the counters behind `/metrics`, and trace context propagation.
//! - [`reply`]: what a handler answers; protocol types live in `tasklift_protocol`.
//! - [`tools`]: `tasklift call`, `tasklift store`, `tasklift demo` (the `demo`
//!   feature, with the bundled slow server of the `tasklift-fixture` crate).
#![forbid(unsafe_code)]

/// The version `tasklift --version` and the status page show: the package version
/// and the commit it was built from (`-dirty` when tracked files differed from it;
/// `unknown` without git history, see build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TASKLIFT_COMMIT"),
    ")"
);

pub mod admin;
pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
pub mod dispatch;
pub mod front;
pub mod observe;
pub mod reply;
pub mod store;
pub mod tasks;
pub mod tls;
pub mod tools;
pub mod upstream;
pub mod workers;
