//! tasklift: a reverse proxy that gives any MCP server durable task handles.
//!
//! A `tools/call` still running after a threshold becomes a task
//! (`io.modelcontextprotocol/tasks`) for clients that declared the extension: the
//! call goes on upstream, its result is stored, and tasklift answers `tasks/get`,
//! `tasks/update` and `tasks/cancel` itself.
//!
//! The layout of the code (which module owns each step of a request, the layers
//! and what each may import, the invariants and where they hold) is described
//! once, in `docs/architecture.md`.
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
pub mod hashing;
pub mod headers;
pub mod health;
pub mod observe;
pub mod reply;
pub mod sequence;
pub mod serving;
pub mod store;
pub mod tasks;
pub mod tls;
pub mod upstream;
pub mod webhooks;
pub mod workers;
