//! The one map from an error to what a client sees: its HTTP status and its
//! JSON-RPC error.
//!
//! Every error tasklift answers with on its own account is a [`Rejected`], tagged
//! with where it came from ([`Source`], as pingora tags its errors): the front
//! door's checks of path, method, headers and body; the caller's credentials; a
//! legacy session; the task engine ([`TaskError`]); a limit ([`LimitError`]).
//! [`Rejected::status`] and [`Rejected::rpc`] match every variant, so a new error
//! cannot be added without deciding both.
//!
//! Answers that carry a JSON-RPC error from further in (an upstream's, or one the
//! engine put in a `tools/call` answer) get their HTTP status from the error's code
//! ([`status_of`]), as the 2026-07-28 transport asks: a protocol-level rejection is
//! a 4xx, anything else (a tool error, an unknown task) a 200. An upstream's error
//! that came with an HTTP error status of its own keeps that status where the code
//! sets none ([`upstream_status_of`]; in a legacy session, only when it is what the
//! server gives a 2025 client, [`legacy_upstream_status_of`]).
//!
//! The engine answers in typed failures ([`Failure`]); [`failure_rpc`] gives each
//! its JSON-RPC error, and [`written`] is how the engine writes one into a task's
//! record, so every code is chosen here.

use http::{header, HeaderValue, Method, Response, StatusCode};
use serde_json::{json, Value};

use crate::serving::body::RespBody;
use crate::tasks::limits::LimitError;
use crate::tasks::{Failure, TaskError, Written};
use tasklift_protocol::jsonrpc::{
    self, RpcError, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY, PARSE_ERROR, REQUEST_TOO_LARGE,
    UNSUPPORTED_PROTOCOL_VERSION, UPSTREAM_ERROR,
};
use tasklift_protocol::mcp::{self, SUPPORTED_VERSIONS};

/// JSON-RPC code of a refusal because a limit is reached (implementation-defined
/// server error range).
pub const LIMIT_REACHED: i64 = -32003;

/// JSON-RPC code for an unknown or expired legacy session (as the reference SDKs use).
pub const SESSION_NOT_FOUND: i64 = -32001;

/// Where an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The front door's checks of the HTTP request and its JSON-RPC message.
    Front,
    /// The caller's credentials.
    Auth,
    /// A legacy client's session on tasklift.
    Session,
    /// The task engine.
    Tasks,
    /// A limit (`limits.*`, `server.max_body_bytes`).
    Limit,
}

/// An error tasklift answers a client with on its own account.
#[derive(Debug)]
pub enum Rejected {
    /// No upstream is mounted at the path.
    NoEndpoint(String),
    /// A method the endpoint does not serve (modern: POST only).
    MethodNotAllowed(Method),
    /// The request's Origin is not allowed (DNS rebinding).
    ForbiddenOrigin,
    /// The body is not declared as JSON.
    NotJson,
    /// The body is over `server.max_body_bytes`.
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body could not be read.
    Unreadable(String),
    /// The body is not JSON.
    Parse(String),
    /// The JSON is not a JSON-RPC message tasklift can take.
    Malformed(RpcError),
    /// A header disagrees with the body, is missing, or cannot be read.
    HeaderMismatch(String),
    /// A required field of the request is missing or has the wrong type.
    InvalidParams(String),
    /// A protocol version tasklift does not speak.
    UnsupportedVersion {
        /// What the client asked for.
        requested: String,
    },
    /// No valid credentials.
    Unauthorized(String),
    /// A legacy session id that is unknown, expired, or another caller's.
    SessionNotFound {
        /// The longer explanation (for requests in a session) or the short one (DELETE).
        hint: bool,
    },
    /// The caller already has `legacy.max_sessions_per_principal` sessions.
    TooManySessions(String),
    /// A kept legacy session could not be read from the store (it may be there).
    StoreUnavailable(String),
    /// A legacy GET that does not accept `text/event-stream`.
    NotAcceptable,
    /// A legacy request the session cannot take (a batch, a second initialize, …).
    BadSessionRequest(String),
    /// The task engine refused a task method.
    Task(TaskError),
    /// A limit refused the request.
    Limit(LimitError),
}

impl Rejected {
    /// Where it came from.
    pub fn source(&self) -> Source {
        match self {
            Self::NoEndpoint(_)
            | Self::MethodNotAllowed(_)
            | Self::ForbiddenOrigin
            | Self::NotJson
            | Self::Unreadable(_)
            | Self::Parse(_)
            | Self::Malformed(_)
            | Self::HeaderMismatch(_)
            | Self::InvalidParams(_)
            | Self::UnsupportedVersion { .. } => Source::Front,
            Self::Unauthorized(_) => Source::Auth,
            Self::SessionNotFound { .. }
            | Self::TooManySessions(_)
            | Self::StoreUnavailable(_)
            | Self::NotAcceptable
            | Self::BadSessionRequest(_) => Source::Session,
            Self::Task(_) => Source::Tasks,
            Self::TooLarge { .. } | Self::Limit(_) => Source::Limit,
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoEndpoint(_) | Self::SessionNotFound { .. } => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::ForbiddenOrigin => StatusCode::FORBIDDEN,
            Self::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unreadable(_)
            | Self::Parse(_)
            | Self::Malformed(_)
            | Self::HeaderMismatch(_)
            | Self::InvalidParams(_)
            | Self::UnsupportedVersion { .. }
            | Self::BadSessionRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::TooManySessions(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            // In-band: the request was understood, and the answer is an error.
            Self::Task(_) | Self::Limit(_) => StatusCode::OK,
        }
    }

    /// The JSON-RPC error it is answered with.
    pub fn rpc(&self) -> RpcError {
        match self {
            Self::NoEndpoint(path) => {
                RpcError::new(INVALID_REQUEST, format!("no MCP endpoint at {path}"))
            }
            Self::MethodNotAllowed(m) => RpcError::new(
                INVALID_REQUEST,
                format!("{m} is not supported: this endpoint speaks MCP 2026-07-28 Streamable HTTP, which uses POST only"),
            ),
            Self::ForbiddenOrigin => RpcError::new(
                INVALID_REQUEST,
                "Forbidden: this Origin is not allowed (see server.allowed_origins)",
            ),
            Self::NotJson => RpcError::new(INVALID_REQUEST, "Content-Type must be application/json"),
            Self::TooLarge { limit } => RpcError::new(
                REQUEST_TOO_LARGE,
                format!("Request body too large: the limit is {limit} bytes (server.max_body_bytes)"),
            ),
            Self::Unreadable(e) => RpcError::new(
                INVALID_REQUEST,
                format!("could not read the request body: {e}"),
            ),
            Self::Parse(e) => RpcError::new(PARSE_ERROR, format!("Parse error: {e}")),
            Self::Malformed(e) => e.clone(),
            Self::HeaderMismatch(m) => {
                RpcError::new(HEADER_MISMATCH, format!("Header mismatch: {m}"))
            }
            Self::InvalidParams(m) => RpcError::new(INVALID_PARAMS, m.clone()),
            Self::UnsupportedVersion { requested } => {
                RpcError::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
                    .with_data(json!({"supported": SUPPORTED_VERSIONS, "requested": requested}))
            }
            Self::Unauthorized(e) => RpcError::new(INVALID_REQUEST, format!("Unauthorized: {e}")),
            Self::SessionNotFound { hint: true } => RpcError::new(
                SESSION_NOT_FOUND,
                "Session not found: it expired, was closed, or belongs to another caller; send initialize to open a new one",
            ),
            Self::SessionNotFound { hint: false } => {
                RpcError::new(SESSION_NOT_FOUND, "Session not found")
            }
            Self::TooManySessions(e) => RpcError::new(
                INVALID_REQUEST,
                format!("Too many sessions: {e} (legacy.max_sessions_per_principal); close one with DELETE"),
            ),
            Self::StoreUnavailable(m) => RpcError::new(
                tasklift_protocol::jsonrpc::INTERNAL_ERROR,
                format!("Session unavailable: {m}"),
            ),
            Self::NotAcceptable => RpcError::new(
                INVALID_REQUEST,
                "Not Acceptable: the GET stream is text/event-stream",
            ),
            Self::BadSessionRequest(m) => RpcError::new(INVALID_REQUEST, m.clone()),
            Self::Task(e) => task_rpc(e),
            Self::Limit(e) => limit_rpc(e),
        }
    }

    /// The HTTP response: status, the JSON-RPC error for `id`, and the headers the
    /// status calls for (`Allow`, `WWW-Authenticate`).
    pub fn response(&self, id: Option<&Value>) -> Response<RespBody> {
        let mut r = super::json_response(self.status(), &jsonrpc::response(id, &Err(self.rpc())));
        match self {
            Self::MethodNotAllowed(_) => {
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            Self::Unauthorized(_) => {
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::StoreUnavailable(_) => {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        r
    }
}

impl From<TaskError> for Rejected {
    fn from(e: TaskError) -> Self {
        Self::Task(e)
    }
}

fn task_rpc(e: &TaskError) -> RpcError {
    let code = match e {
        TaskError::NotFound | TaskError::Expired => INVALID_PARAMS,
        TaskError::Read(_) | TaskError::Write(_) | TaskError::Answers(_) => INTERNAL_ERROR,
        TaskError::Limit(l) => return limit_rpc(l),
    };
    RpcError::new(code, e.to_string())
}

fn limit_rpc(e: &LimitError) -> RpcError {
    RpcError::new(LIMIT_REACHED, e.to_string())
}

impl From<TaskError> for RpcError {
    fn from(e: TaskError) -> Self {
        task_rpc(&e)
    }
}

/// The JSON-RPC error a failure of the engine is answered with.
pub fn failure_rpc(f: &Failure) -> RpcError {
    let internal = |f: &Failure| RpcError::new(INTERNAL_ERROR, f.to_string());
    match f {
        Failure::Relayed(e) => e.clone(),
        Failure::Unreachable(e) => e.to_rpc(),
        Failure::Broken(_) => RpcError::new(UPSTREAM_ERROR, f.to_string()),
        Failure::Limit(e) => limit_rpc(e),
        Failure::Task(e) => task_rpc(e),
        Failure::NeedsExtension(what) => mcp::missing_tasks_capability(what),
        Failure::BadState(_) => RpcError::new(INVALID_PARAMS, f.to_string()),
        Failure::NotAskable {
            method,
            capability: Some(cap),
        } => RpcError::new(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            format!("Missing required client capability: the client did not declare {cap}, so {method} cannot be asked"),
        )
        .with_data(json!({"requiredCapabilities": {*cap: {}}})),
        Failure::NotAskable { method, .. } => RpcError::new(
            METHOD_NOT_FOUND,
            format!("tasklift does not relay {method} to clients"),
        ),
        Failure::Expired {
            upstream,
            ttl_ms,
            waiting_input: true,
        } => RpcError::new(INTERNAL_ERROR, format!(
            "the task was still waiting for input at its TTL of {ttl_ms} ms; the call to upstream {upstream} was cancelled")),
        Failure::Expired { upstream, ttl_ms, .. } => RpcError::new(UPSTREAM_ERROR, format!(
            "upstream {upstream} did not answer within the task's TTL of {ttl_ms} ms; the call was cancelled upstream")),
        Failure::Stored(e) => RpcError::from_value(e),
        Failure::ClientGone
        | Failure::SessionEnded
        | Failure::Cancelled(_)
        | Failure::Shutdown
        | Failure::Unstored(_)
        | Failure::Restarted
        | Failure::LostReplica => internal(f),
    }
}

/// How the engine writes a failure into a task's record (`EngineSettings`).
pub fn written(f: &Failure) -> Written {
    let e = failure_rpc(f);
    Written {
        error: e.to_value(),
        message: e.message,
    }
}

/// The HTTP status for a JSON-RPC answer on the modern endpoint, from its error code.
pub fn status_of(msg: &Value) -> StatusCode {
    match msg
        .get("error")
        .and_then(|e| e.get("code"))
        .and_then(Value::as_i64)
    {
        Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(HEADER_MISMATCH)
        | Some(MISSING_REQUIRED_CLIENT_CAPABILITY)
        | Some(UNSUPPORTED_PROTOCOL_VERSION) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// The HTTP status for an upstream's JSON-RPC error that came with HTTP `upstream`
/// (not a success), on the modern endpoint: where 2026-07-28 sets the status for
/// the code ([`status_of`]), that one; otherwise the upstream's own, so the caller
/// sees what the server said (an SDK server answers `-32602` with 400).
pub fn upstream_status_of(upstream: u16, msg: &Value) -> StatusCode {
    match status_of(msg) {
        StatusCode::OK => passable(upstream).unwrap_or(StatusCode::OK),
        set => set,
    }
}

/// An upstream's error status a caller may be shown: not a success, and not an
/// authentication challenge (401, 407), which is about tasklift's credentials with
/// the upstream, not the caller's with tasklift.
fn passable(upstream: u16) -> Option<StatusCode> {
    StatusCode::from_u16(upstream).ok().filter(|s| {
        (s.is_client_error() || s.is_server_error())
            && !matches!(
                *s,
                StatusCode::UNAUTHORIZED | StatusCode::PROXY_AUTHENTICATION_REQUIRED
            )
    })
}

/// The HTTP status for a JSON-RPC answer in a legacy session: errors travel in-band
/// (a 404 would tell the client its session is gone), except a request the session
/// could not take at all.
pub fn legacy_status_of(outcome: &jsonrpc::Outcome) -> StatusCode {
    match outcome {
        Err(e) if e.code == INVALID_REQUEST => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// The HTTP status for an upstream's JSON-RPC error that came with HTTP `upstream`,
/// in a legacy session. `as_legacy`: tasklift asked the upstream as a 2025 client
/// (on an upstream session of that client's), so that status is what the server
/// gives a 2025 client, and it is passed on, except 404 (the client would take its
/// session on tasklift for gone). Otherwise it answered a 2026-07-28 request to a
/// server that serves no 2025 client, and the error stays in-band, with 200.
pub fn legacy_upstream_status_of(upstream: u16, as_legacy: bool) -> StatusCode {
    match passable(upstream) {
        Some(s) if as_legacy && s != StatusCode::NOT_FOUND => s,
        _ => StatusCode::OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_rejections_are_4xx_and_in_band_errors_200() {
        assert_eq!(
            status_of(&json!({"error": {"code": METHOD_NOT_FOUND}})),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status_of(&json!({"error": {"code": INVALID_PARAMS}})),
            StatusCode::OK
        );
        assert_eq!(status_of(&json!({"result": {}})), StatusCode::OK);
        let e = Rejected::Task(TaskError::NotFound);
        assert_eq!(
            (e.status(), e.rpc().code, e.source()),
            (StatusCode::OK, INVALID_PARAMS, Source::Tasks)
        );
        let e = Rejected::MethodNotAllowed(Method::GET);
        let r = e.response(None);
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], "POST");
        assert!(Rejected::Unauthorized("no token".into())
            .response(None)
            .headers()
            .contains_key(header::WWW_AUTHENTICATE));
    }

    #[test]
    fn an_upstreams_error_status_passes_where_the_code_sets_none() {
        let params = json!({"error": {"code": INVALID_PARAMS}});
        let unknown = json!({"error": {"code": METHOD_NOT_FOUND}});
        assert_eq!(upstream_status_of(400, &params), StatusCode::BAD_REQUEST);
        assert_eq!(
            upstream_status_of(503, &params),
            StatusCode::SERVICE_UNAVAILABLE
        );
        // 2026-07-28 sets 404 for -32601, whatever the upstream said.
        assert_eq!(upstream_status_of(400, &unknown), StatusCode::NOT_FOUND);
        // Authentication challenges concern tasklift's credentials upstream.
        assert_eq!(upstream_status_of(401, &params), StatusCode::OK);
        assert_eq!(upstream_status_of(407, &params), StatusCode::OK);
        assert_eq!(upstream_status_of(200, &params), StatusCode::OK);
        // A legacy session: only what a legacy upstream said, and never a 404.
        assert_eq!(
            legacy_upstream_status_of(400, true),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(legacy_upstream_status_of(400, false), StatusCode::OK);
        assert_eq!(legacy_upstream_status_of(404, true), StatusCode::OK);
        assert_eq!(legacy_upstream_status_of(401, true), StatusCode::OK);
    }
}
