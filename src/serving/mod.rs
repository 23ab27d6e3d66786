//! The HTTP plumbing tasklift's two listeners share (the front door, `front/`,
//! and the admin listener, `admin.rs`): response bodies and the accept loop.

pub mod body;
pub mod listener;

pub use body::{json_bytes, json_response, RespBody};
pub use listener::{accept_loop, Peer};
