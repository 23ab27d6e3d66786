//! The protocol tasklift speaks, as plain data: no I/O, no runtime.
//!
//! - [`json`]: JSON read from bytes as `serde_json` reads them, checked as UTF-8 once.
//! - [`jsonrpc`]: JSON-RPC 2.0 messages, ids, error codes.
//! - [`compact`]: JSON values written as `serde_json` writes them, strings faster.
//! - [`params`]: a request's params, kept as the client's text until read whole.
//! - [`scan`]: a body's syntax checked, and its members placed, in one pass.
//! - [`mcp`]: MCP method names, `_meta` keys, protocol versions, header values.
//! - [`sse`]: the Server-Sent Events parser and encoder.
//! - [`traceparent`]: W3C `traceparent` parsing.
#![forbid(unsafe_code)]

pub mod compact;
pub mod envelope;
pub mod json;
pub mod jsonrpc;
pub mod mcp;
pub mod params;
pub mod scan;
pub mod sse;
pub mod traceparent;
