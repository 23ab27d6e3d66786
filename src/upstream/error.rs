//! How reaching an upstream fails (`UpstreamError`), and the error of a call whose
//! upstream stream ended without an answer (`broken`).

use tasklift_protocol::jsonrpc::{RpcError, UPSTREAM_ERROR};

/// Failures reaching an upstream. They become JSON-RPC errors naming the upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Connecting or sending failed.
    #[error("upstream {name} is unreachable: {message}")]
    Unreachable {
        /// Upstream name.
        name: String,
        /// Cause.
        message: String,
    },
    /// The upstream answered with something that is not MCP.
    #[error("upstream {name} answered HTTP {status}: {message}")]
    BadResponse {
        /// Upstream name.
        name: String,
        /// HTTP status.
        status: u16,
        /// What was wrong.
        message: String,
    },
    /// The legacy handshake failed.
    #[error("upstream {name}: initialize failed: {message}")]
    Handshake {
        /// Upstream name.
        name: String,
        /// Cause.
        message: String,
    },
}

impl UpstreamError {
    /// The JSON-RPC error a client sees.
    pub fn to_rpc(&self) -> RpcError {
        RpcError::new(UPSTREAM_ERROR, self.to_string())
    }
}

/// The error for a call whose upstream stream ended without a response.
pub fn broken(upstream: &str) -> RpcError {
    RpcError::new(
        UPSTREAM_ERROR,
        format!("upstream {upstream} closed the connection before answering"),
    )
}
