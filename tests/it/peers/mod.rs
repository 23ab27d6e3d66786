//! Foreign peers on both sides of tasklift: MCP SDKs, clients and servers written by
//! others (all but rmcp, a Rust dependency, installed by scripts/install-test-tools).
//! Node peers (`node`, `clients`, `ts_clients`), Python peers (`python`,
//! `dual_era`), the `rmcp` SDK (`rmcp`), server-everything over stdio (`stdio`),
//! and servers from the package registries, each compared with direct use
//! (`registry`). Finding and starting them is in `support` (`node`, `python`,
//! `everything`, `registry`).

mod clients;
mod dual_era;
mod node;
mod python;
mod registry;
mod rmcp;
mod stdio;
mod ts_clients;
