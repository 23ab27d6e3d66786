//! How `tasklift call` ends: its exit codes, and `Fail`, why a call ended badly,
//! with the code it exits with (a JSON-RPC error's code decides between a usage
//! error and a failure).

use crate::cli::client::ClientError;

/// Completed, not `isError`.
pub const EXIT_OK: u8 = 0;
/// `isError`, a failed (or otherwise ended) task, a JSON-RPC error, input nobody can give.
pub const EXIT_FAILED: u8 = 1;
/// Bad flags, a bad URL, an unreachable or non-MCP endpoint.
pub const EXIT_USAGE: u8 = 2;
/// Interrupted with Ctrl-C (the task, if any, was cancelled).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Why the call ended badly.
#[derive(Debug)]
pub(super) struct Fail {
    pub(super) code: u8,
    pub(super) message: String,
}

pub(super) fn fail(code: u8, message: impl Into<String>) -> Fail {
    Fail {
        code,
        message: message.into(),
    }
}

/// A client error: the request was wrong or the endpoint unreachable or not MCP (2),
/// or the server could not do it (1).
pub(super) fn client_fail(what: &str, e: ClientError) -> Fail {
    match e {
        ClientError::Rpc(e) => fail(
            rpc_exit(e.code),
            format!(
                "{what}: the server answered with error {}: {}",
                e.code, e.message
            ),
        ),
        ClientError::Http(m) => fail(EXIT_USAGE, format!("{what}: {m}")),
    }
}

/// The exit code for a JSON-RPC error: a request the server calls malformed or
/// invalid (parse error, invalid request, no such method, invalid params such as an
/// unknown tool, header mismatch, unsupported version) is a usage error.
fn rpc_exit(code: i64) -> u8 {
    match code {
        -32700 | -32600 | -32601 | -32602 | -32020 | -32022 => EXIT_USAGE,
        _ => EXIT_FAILED,
    }
}

/// What to add to a "missing capability" error when this run cannot prompt.
pub(super) fn no_prompt_hint(code: i64, interactive: bool) -> &'static str {
    if code == -32021 && !interactive {
        " (with --json and no terminal, tasklift call declares no elicitation; run it in a terminal to answer the server)"
    } else {
        ""
    }
}
