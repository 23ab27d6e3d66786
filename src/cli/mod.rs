//! The command line: its definitions (`args.rs`, clap only, and how flags
//! override the config file) and the commands beside the proxy, what an
//! operator or a user runs by hand.
//!
//! - [`call`]: `tasklift call`, a terminal client for any 2026-07-28 endpoint.
//! - [`client`]: the small modern MCP client `call` and `demo` are built on.
//! - [`store`]: `tasklift store stats|list|show|purge` over a stopped proxy's store.
//! - [`health`]: `tasklift health`, a probe of a running tasklift's `/healthz`.
//! - [`demo`]: `tasklift demo` (the `demo` feature), the task lifecycle against the
//!   bundled slow server.

mod args;
pub mod call;
pub mod client;
#[cfg(feature = "demo")]
pub mod demo;
pub mod health;
pub mod store;

pub use args::{Cli, Command, LogFormat, Overrides, ServeArgs};
