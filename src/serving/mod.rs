//! The HTTP plumbing tasklift's two listeners share (the front door, `front/`,
//! and the admin listener, `admin.rs`): response bodies, the accept loop, and
//! the HTTP/1.1 server connections start on.

pub mod body;
pub mod h1;
pub mod listener;
pub mod request;

pub use body::{json_bytes, json_response, RespBody};
pub use listener::{accept_loop, Limits, Peer};
pub use request::{ReqBody, Request};
