//! The baseline upstream: a minimal 2026-07-28 MCP server, over plain HTTP/1.1
//! (`http`) or over stdin/stdout as a stdio child of tasklift (`stdio`).
//!
//! Both answer `server/discover`, `ping`, `tools/list` and `tools/call` for three
//! tools: `fast` (a small fixed result at once), `sleep` (`{"ms": N}`, answers after
//! N ms) and `hold` (answers when released, or after `{"max_ms": N}`, default 10
//! minutes; only the HTTP server can be released early, with `POST /release`).
//! This file has what the two transports share: the tools and the answers.

use std::time::Duration;

use serde_json::{json, Value};

mod http;
mod stdio;

pub use http::run;
pub use stdio::run as run_stdio;

/// How the HTTP upstream speaks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mode {
    /// A 2025-11-25 server with sessions instead of a 2026-07-28 one.
    pub legacy: bool,
    /// `tools/call` answered as an SSE stream instead of one JSON body.
    pub sse: bool,
}

/// JSON-RPC "Method not found".
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "Invalid params" (an unknown tool).
const INVALID_PARAMS: i64 = -32602;

/// What a `tools/call` does.
enum Call {
    /// Answer now.
    Now(Result<Value, (i64, String)>),
    /// Answer "slept" after this long.
    Sleep(Duration),
    /// Hold the call until released, or at most this long.
    Hold(Duration),
}

/// The call `params` asks for.
fn call_of(params: &Value) -> Call {
    let args = &params["arguments"];
    match params["name"].as_str().unwrap_or_default() {
        "fast" => Call::Now(Ok(text_result("ok"))),
        "sleep" => Call::Sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))),
        "hold" => Call::Hold(Duration::from_millis(
            args["max_ms"].as_u64().unwrap_or(600_000),
        )),
        other => Call::Now(Err((INVALID_PARAMS, format!("Unknown tool: {other}")))),
    }
}

/// The answer to a method other than `tools/call`; `None` for `tools/call`.
fn answer_of(method: &str) -> Option<Result<Value, (i64, String)>> {
    Some(match method {
        "server/discover" => Ok(discover_result()),
        "ping" => Ok(json!({"resultType": "complete"})),
        "tools/list" => Ok(tools_list()),
        "tools/call" => return None,
        _ => Err((METHOD_NOT_FOUND, format!("Method not found: {method}"))),
    })
}

/// The answer of a 2025-11-25 server to a method other than `tools/call`
/// (`initialize` is the HTTP server's: it opens a session).
fn legacy_answer_of(method: &str) -> Option<Result<Value, (i64, String)>> {
    Some(match method {
        "ping" => Ok(json!({})),
        "tools/list" => {
            let mut tools = tools_list();
            for k in ["resultType", "ttlMs", "cacheScope"] {
                tools.as_object_mut().expect("an object").remove(k);
            }
            Ok(tools)
        }
        "tools/call" => return None,
        _ => Err((METHOD_NOT_FOUND, format!("Method not found: {method}"))),
    })
}

/// A JSON-RPC response.
fn response(id: &Value, outcome: Result<Value, (i64, String)>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    }
}

fn text_result(text: &str) -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": false})
}

fn discover_result() -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}},
        "ttlMs": 0,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "tasklift-bench-upstream", "version": env!("CARGO_PKG_VERSION")}},
    })
}

fn tools_list() -> Value {
    let obj = |props: Value| json!({"type": "object", "properties": props});
    json!({
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "public",
        "tools": [
            {"name": "fast", "description": "A small fixed result at once", "inputSchema": obj(json!({}))},
            {"name": "sleep", "description": "Answers after `ms` milliseconds", "inputSchema": obj(json!({"ms": {"type": "integer"}}))},
            {"name": "hold", "description": "Answers when the harness releases it", "inputSchema": obj(json!({"max_ms": {"type": "integer"}}))},
        ]
    })
}
