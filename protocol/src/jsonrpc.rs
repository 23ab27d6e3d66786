//! JSON-RPC 2.0 message shapes and the error codes tasklift answers with.
//!
//! Protocol types only: no I/O, no hyper, no tokio. Params, results and ids are
//! kept as `serde_json::Value` so that whatever tasklift does not interpret is
//! forwarded untouched.

use serde_json::{json, Map, Value};

use crate::compact;

pub use crate::envelope::{Envelope, ParamsIn};
pub use crate::params::Params;

/// Parse error: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid JSON-RPC request.
pub const INVALID_REQUEST: i64 = -32600;
/// Method not found.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params (also: unknown, expired or foreign task ids).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP: HTTP headers do not match the body, or a required header is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP: the request needs a client capability it did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// MCP: the requested protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// tasklift: the upstream could not be reached or broke mid-call.
pub const UPSTREAM_ERROR: i64 = -32010;
/// tasklift: the request body exceeds the configured limit.
pub const REQUEST_TOO_LARGE: i64 = -32011;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The numeric code (see the constants in this module).
    pub code: i64,
    /// A human-readable message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<Value>,
    /// The HTTP status the error came with when that was not a success: an
    /// upstream that answered the request with, say, `400 Bad Request` and this
    /// error as the body. Not part of the error object (`to_value` leaves it out);
    /// whoever answers the caller decides whether the caller sees that status too.
    pub http_status: Option<u16>,
}

impl RpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
            http_status: None,
        }
    }

    /// Attach structured data.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Note the HTTP status the error came with (see `http_status`).
    pub fn with_http_status(mut self, status: u16) -> Self {
        self.http_status = Some(status);
        self
    }

    /// The error as a JSON object (`{"code", "message", "data"?}`).
    pub fn to_value(&self) -> Value {
        let mut o = Map::new();
        o.insert("code".into(), json!(self.code));
        o.insert("message".into(), json!(self.message));
        if let Some(d) = &self.data {
            o.insert("data".into(), d.clone());
        }
        Value::Object(o)
    }

    /// Read an error object back; anything malformed becomes an internal error.
    pub fn from_value(v: &Value) -> Self {
        let code = v
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(INTERNAL_ERROR);
        let message = v
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("unknown error")
            .to_string();
        Self {
            code,
            message,
            data: v.get("data").cloned(),
            http_status: None,
        }
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

/// A parsed incoming message: a request (has an id) or a notification.
#[derive(Debug, Clone)]
pub struct Request {
    /// `None` for a notification.
    pub id: Option<Value>,
    /// The method name.
    pub method: String,
    /// The params object (absent params become `{}`): the client's text while
    /// nothing edits it, read as a map where a reader needs one ([`Params`]).
    pub params: Params,
}

impl Request {
    /// Validate a JSON value as a single JSON-RPC request or notification.
    pub fn from_value(v: Value) -> Result<Self, RpcError> {
        Self::from_envelope(Envelope::from_value(v))
    }

    /// Validate a message's top level (read with [`Envelope::from_slice`], or
    /// from a parsed value) as a single JSON-RPC request or notification.
    pub fn from_envelope(e: Envelope) -> Result<Self, RpcError> {
        if !e.object {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "Invalid request: the body must be a single JSON-RPC request object (batches are not supported)",
            ));
        }
        if e.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "Invalid request: \"jsonrpc\" must be \"2.0\"",
            ));
        }
        let method = match e.method {
            Some(Value::String(m)) => m,
            Some(_) => {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "Invalid request: \"method\" must be a string",
                ))
            }
            None => {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "Invalid request: no \"method\" (clients must not send JSON-RPC responses)",
                ))
            }
        };
        let id = match e.id {
            None => None,
            Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
            Some(_) => {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "Invalid request: \"id\" must be a string or a number",
                ))
            }
        };
        let params = match e.params {
            None | Some(ParamsIn::Value(Value::Null)) => Params::default(),
            Some(ParamsIn::Object(p)) => p,
            Some(ParamsIn::Value(Value::Object(p))) => p.into(),
            Some(_) => {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "Invalid request: \"params\" must be an object",
                ))
            }
        };
        Ok(Self { id, method, params })
    }

    /// The message as JSON, with the given id (tasklift may remap ids upstream).
    pub fn to_value_with_id(&self, id: Option<&Value>) -> Value {
        let mut o = Map::new();
        o.insert("jsonrpc".into(), json!("2.0"));
        if let Some(id) = id {
            o.insert("id".into(), id.clone());
        }
        o.insert("method".into(), json!(self.method));
        o.insert("params".into(), Value::Object((*self.params).clone()));
        Value::Object(o)
    }

    /// The request as JSON bytes with `id` (or none), serialized from the
    /// borrowed fields ([`compact::collect`]), its params as [`Params::write`]
    /// writes them.
    pub fn to_vec_with_id(&self, id: Option<&Value>) -> Vec<u8> {
        compact::collect(|out| self.write_with(id, out, |out, p| p.write(out)))
    }

    /// The request as JSON with `id` (or none), appended to `out`, its params
    /// written by `params`.
    pub fn write_with(
        &self,
        id: Option<&Value>,
        out: &mut Vec<u8>,
        params: impl FnOnce(&mut Vec<u8>, &Params),
    ) {
        out.extend_from_slice(br#"{"jsonrpc":"2.0","#);
        if let Some(id) = id {
            out.extend_from_slice(br#""id":"#);
            compact::write_value(out, id);
            out.push(b',');
        }
        out.extend_from_slice(br#""method":"#);
        compact::write_str(out, &self.method);
        out.extend_from_slice(br#","params":"#);
        params(out, &self.params);
        out.push(b'}');
    }

    /// A string param, if present.
    pub fn str_param(&self, key: &str) -> Option<&str> {
        self.params.str(key)
    }

    /// The `_meta` object of the params, if any (the whole map, parsed: to read
    /// one entry, [`Request::meta_value`]).
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.get("_meta").and_then(Value::as_object)
    }

    /// A `_meta` entry, if `_meta` is an object that has it.
    pub fn meta_value(&self, key: &str) -> Option<&Value> {
        self.params.meta_value(key)
    }

    /// A `_meta` entry that is a string, if `_meta` is an object that has it.
    pub fn meta_str(&self, key: &str) -> Option<&str> {
        self.params.meta_str(key)
    }
}

/// The outcome of a request: a result object or an error.
pub type Outcome = Result<Value, RpcError>;

/// Build a response message.
pub fn response(id: Option<&Value>, outcome: &Outcome) -> Value {
    response_from(id, outcome.clone())
}

/// Build a response message, taking the outcome (no copy of a large result).
///
/// An id that is not a `RequestId` (a string or a number) is left out rather than
/// sent as `null` or echoed: the request's id was unknown (a parse error, a
/// refusal before the body was read) or is itself what was wrong, and MCP's
/// `JSONRPCErrorResponse` makes `id` optional but, when present, a `RequestId`.
pub fn response_from(id: Option<&Value>, outcome: Outcome) -> Value {
    let mut o = Map::new();
    o.insert("jsonrpc".into(), json!("2.0"));
    if let Some(id @ (Value::String(_) | Value::Number(_))) = id {
        o.insert("id".into(), id.clone());
    }
    match outcome {
        Ok(r) => o.insert("result".into(), r),
        Err(e) => o.insert("error".into(), e.to_value()),
    };
    Value::Object(o)
}

/// Build a notification message.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// What kind of message a JSON value received from a peer is.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A response (result or error) to the request with this id.
    Response { id: Value, outcome: Outcome },
    /// A request from the peer (has an id and a method).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification from the peer.
    Notification { method: String, params: Value },
}

impl Incoming {
    /// Classify a message; `None` if it is not JSON-RPC at all.
    pub fn classify(v: Value) -> Option<Self> {
        let Value::Object(mut o) = v else { return None };
        let method = o.remove("method");
        let id = o.remove("id");
        match (method, id) {
            (Some(Value::String(method)), Some(id)) if !id.is_null() => Some(Incoming::Request {
                id,
                method,
                params: o.remove("params").unwrap_or(Value::Null),
            }),
            (Some(Value::String(method)), _) => Some(Incoming::Notification {
                method,
                params: o.remove("params").unwrap_or(Value::Null),
            }),
            (None, Some(id)) => {
                let outcome = if let Some(e) = o.remove("error") {
                    Err(RpcError::from_value(&e))
                } else if let Some(r) = o.remove("result") {
                    Ok(r)
                } else {
                    return None;
                };
                Some(Incoming::Response { id, outcome })
            }
            // An error to a request whose id was unknown may leave the id out (MCP's
            // JSONRPCErrorResponse), as `response_from` does: read as id null.
            (None, None) => o.remove("error").map(|e| Incoming::Response {
                id: Value::Null,
                outcome: Err(RpcError::from_value(&e)),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_serialization_matches_the_value() {
        let r = Request::from_value(
            json!({"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{"b":[1,2]}}}),
        )
        .unwrap();
        for id in [None, Some(json!(7))] {
            let bytes = r.to_vec_with_id(id.as_ref());
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v, r.to_value_with_id(id.as_ref()));
            // The bytes serde_json writes for the same members in that order.
            let mut expected = json!({"jsonrpc": "2.0"}).to_string();
            expected.pop();
            if let Some(id) = &id {
                expected += &format!(r#","id":{id}"#);
            }
            expected += &format!(
                r#","method":{},"params":{}}}"#,
                json!(r.method),
                json!(r.params)
            );
            assert_eq!(String::from_utf8(bytes).unwrap(), expected);
        }
        // The thread's buffer, used again: a short request after a long one (and
        // after one larger than the buffer keeps) is itself and no more.
        let long = |n: usize| {
            Request::from_value(json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                "params":{"name":"x","arguments":{"text": "y".repeat(n)}}}))
            .unwrap()
        };
        for r in [long(1000), r.clone(), long(100_000), r.clone()] {
            let bytes = r.to_vec_with_id(None);
            assert_eq!(bytes.len(), bytes.capacity());
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v, r.to_value_with_id(None));
        }
    }

    #[test]
    fn rejects_batches_and_responses() {
        assert_eq!(
            Request::from_value(json!([1])).unwrap_err().code,
            INVALID_REQUEST
        );
        let e = Request::from_value(json!({"jsonrpc":"2.0","id":1,"result":{}})).unwrap_err();
        assert!(e.message.contains("responses"));
    }

    #[test]
    fn classifies_messages() {
        let r =
            Incoming::classify(json!({"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"x"}}));
        assert!(matches!(
            r,
            Some(Incoming::Response {
                outcome: Err(_),
                ..
            })
        ));
        let n = Incoming::classify(json!({"jsonrpc":"2.0","method":"notifications/progress"}));
        assert!(matches!(n, Some(Incoming::Notification { .. })));
        assert_eq!(Incoming::classify(json!("nope")), None);
    }

    #[test]
    fn an_id_that_is_no_request_id_is_left_out_and_read_back_as_null() {
        let e = || Err(RpcError::new(PARSE_ERROR, "Parse error"));
        for id in [None, Some(json!(null)), Some(json!({}))] {
            let v = response_from(id.as_ref(), e());
            assert!(v.get("id").is_none(), "{v}");
            assert!(matches!(
                Incoming::classify(v),
                Some(Incoming::Response {
                    id: Value::Null,
                    outcome: Err(_)
                })
            ));
        }
        for id in [json!(7), json!("a")] {
            assert_eq!(response_from(Some(&id), Ok(json!({})))["id"], id);
        }
    }
}
