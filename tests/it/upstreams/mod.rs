//! Upstreams, as tasklift speaks to them: both eras, discovery, headers, TLS and
//! HTTP/2 (`basics`), the legacy sessions tasklift opens on its callers' behalf
//! (`sessions`), their change notifications (`listen`), tools a legacy upstream runs
//! only as its own task (`tasks`), the fault matrix (`faults`), and bridging bugs seen
//! with foreign peers, pinned down against scripted upstreams (`interop_bridge`).

mod basics;
mod faults;
mod interop_bridge;
mod listen;
mod sessions;
mod tasks;
