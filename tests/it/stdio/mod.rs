//! stdio upstreams: MCP servers tasklift runs as child processes. Serving a child
//! (`basics`), a child that fails (`faults`), and who shares a child and the roots it
//! is told (`scope`). tasklift in front of a child is `support::stdio`; the real
//! server-everything over stdio is in `peers::stdio`.

mod basics;
mod faults;
mod scope;
