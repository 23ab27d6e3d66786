//! A client's request as the engine reads it: the MCP fields it acts on (the
//! tool, its arguments, the `_meta` the client sent, a retry's `requestState` and
//! answers), each read where it is asked, and the request kept whole, as the
//! client sent it, for forwarding upstream. The engine never sees the JSON-RPC
//! envelope: the front door reads it, and writes the answer's.

use serde_json::{json, Map, Value};

use tasklift_protocol::jsonrpc::Request;
use tasklift_protocol::mcp;

/// One request of a client, on its way upstream.
#[derive(Debug, Clone)]
pub struct ClientRequest(Request);

impl From<Request> for ClientRequest {
    fn from(r: Request) -> Self {
        Self(r)
    }
}

impl ClientRequest {
    /// The request as it goes upstream.
    pub fn wire(&self) -> &Request {
        &self.0
    }

    /// The request's own id (a listen stream's subscription is named by it).
    pub fn own_id(&self) -> Option<&Value> {
        self.0.id.as_ref()
    }

    /// The method.
    pub fn method(&self) -> &str {
        &self.0.method
    }

    /// The params.
    pub fn params(&self) -> &Map<String, Value> {
        &self.0.params
    }

    /// A string param.
    pub fn str_param(&self, key: &str) -> Option<&str> {
        self.0.str_param(key)
    }

    /// The tool a `tools/call` names (empty if none).
    pub fn tool(&self) -> &str {
        self.str_param("name").unwrap_or_default()
    }

    /// A tool call's arguments.
    pub fn arguments(&self) -> Option<&Value> {
        self.0.params.get("arguments")
    }

    /// A `_meta` entry the client sent.
    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.0.meta_value(key)
    }

    /// What the request's clientCapabilities declare (read once).
    pub fn declared(&self) -> mcp::Declared {
        mcp::declared(&self.0.params)
    }

    /// Whether the client declared the tasks extension.
    pub fn declares_tasks(&self) -> bool {
        mcp::declares_tasks(&self.0.params)
    }

    /// A retry's `requestState`.
    pub fn request_state(&self) -> Option<&str> {
        self.str_param("requestState")
    }

    /// A retry's `inputResponses` (none: empty).
    pub fn input_responses(&self) -> Map<String, Value> {
        self.0
            .params
            .get("inputResponses")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    /// Name the progress token the upstream reports under.
    pub fn set_progress_token(&mut self, token: Value) {
        self.0.params.insert_meta(mcp::META_PROGRESS_TOKEN, token);
    }

    /// The request again with a round's answers and the upstream's
    /// `requestState` (a modern upstream's MRTR retry).
    pub fn with_answers(mut self, answers: Map<String, Value>, state: Option<String>) -> Self {
        let p = &mut self.0.params;
        p.insert("inputResponses".into(), Value::Object(answers));
        match state {
            Some(s) => p.insert("requestState".into(), json!(s)),
            None => p.remove("requestState"),
        };
        self
    }

    /// The request as bytes without its id: kept for a task's whole life, a
    /// tenth of the parsed request's size.
    pub fn to_bytes(&self) -> Box<[u8]> {
        self.0.to_vec_with_id(None).into_boxed_slice()
    }

    /// A request kept with [`ClientRequest::to_bytes`], again.
    pub fn from_bytes(b: &[u8]) -> Self {
        let parsed = serde_json::from_slice(b)
            .ok()
            .and_then(|v| Request::from_value(v).ok());
        Self(parsed.expect("a request tasklift serialized parses back"))
    }
}
