//! How reaching an upstream fails (`UpstreamError`), and the error of a call whose
//! upstream stream ended without an answer (`broken`, `broken_by`).

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
    /// The connection was made and the request sent, but it closed (or was reset)
    /// before any response: the request may have reached the upstream.
    #[error("upstream {name} dropped the connection before answering (the request may have reached it): {message}")]
    Dropped {
        /// Upstream name.
        name: String,
        /// Cause.
        message: String,
    },
    /// What came back is not HTTP.
    #[error("upstream {name} answered with something that is not HTTP: {message}")]
    NotHttp {
        /// Upstream name.
        name: String,
        /// What the HTTP parser said.
        message: String,
    },
    /// The response started, then its body broke off.
    #[error("upstream {name}'s response broke off before the answer: {message}")]
    BrokeOff {
        /// Upstream name.
        name: String,
        /// Cause.
        message: String,
    },
    /// No answer came in time.
    #[error("upstream {name} did not answer {what} within {within:?}")]
    NoAnswer {
        /// Upstream name.
        name: String,
        /// What was asked.
        what: &'static str,
        /// How long tasklift waited.
        within: std::time::Duration,
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

/// The error for a call whose upstream response stream broke (`cause`: why,
/// e.g. a reset connection) before it carried the response.
pub fn broken_by(upstream: &str, cause: &str) -> RpcError {
    RpcError::new(
        UPSTREAM_ERROR,
        format!("upstream {upstream}'s response stream broke before the answer: {cause}"),
    )
}

pub use crate::observe::error_chain as chain;
