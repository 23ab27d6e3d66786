//! Who is calling, as far as an upstream needs to know: `CallContext`, and for a
//! 2025-era client with a session of its own on tasklift, its `ClientPeer`.

use serde_json::Value;

use tasklift_protocol::jsonrpc::Outcome;

/// Who is calling, as far as an upstream needs to know.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The caller's principal (keyed hash); legacy sessions are never shared across principals.
    pub principal: String,
    /// The caller's `Authorization` header, when the upstream is configured to receive it.
    pub authorization: Option<::http::HeaderValue>,
    /// Headers from the client that are forwarded as they are (`Mcp-Param-*`, trace context).
    pub forward_headers: Vec<(::http::HeaderName, ::http::HeaderValue)>,
    /// The caller's own session on tasklift, when it is a client of an era with
    /// sessions. A legacy upstream then gets a session of its own for it, opened
    /// with the client's capabilities, and its requests to the client are relayed
    /// as requests.
    pub session: Option<std::sync::Arc<ClientPeer>>,
    /// tasklift's hop in the caller's trace (or the one it started), when there is
    /// one: a task the call becomes is recorded as its child.
    pub trace: Option<crate::observe::spans::Hop>,
}

/// Sends a request to a client on its response stream: the message to send, and
/// the way its answer is delivered.
type AskClient = Box<dyn Fn(&str, Value, Box<dyn FnOnce(Outcome) + Send>) -> Value + Send + Sync>;

/// A client with a session of its own on tasklift (a 2025-era client), as far as
/// the engine and upstreams need to know: who it said it is at `initialize`, and
/// how a request from the upstream reaches it mid-call. The front door that keeps
/// the session builds it; nothing below the front door knows that session.
pub struct ClientPeer {
    /// The session's id (callers of two sessions are two callers).
    pub id: String,
    /// The protocol version it negotiated.
    pub protocol_version: String,
    /// The capabilities it declared.
    pub capabilities: Value,
    /// Its `clientInfo`.
    pub client_info: Value,
    ask: AskClient,
}

impl ClientPeer {
    /// A client peer; `ask` turns a request into the message for its stream.
    pub fn new(
        id: String,
        protocol_version: String,
        capabilities: Value,
        client_info: Value,
        ask: impl Fn(&str, Value, Box<dyn FnOnce(Outcome) + Send>) -> Value + Send + Sync + 'static,
    ) -> Self {
        Self {
            id,
            protocol_version,
            capabilities,
            client_info,
            ask: Box::new(ask),
        }
    }

    /// Ask the client `method`: returns the request message to stream to it, and
    /// `answer` gets its response.
    pub fn ask(
        &self,
        method: &str,
        params: Value,
        answer: Box<dyn FnOnce(Outcome) + Send>,
    ) -> Value {
        (self.ask)(method, params, answer)
    }
}

impl std::fmt::Debug for ClientPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPeer")
            .field("id", &self.id)
            .field("protocol_version", &self.protocol_version)
            .finish()
    }
}
