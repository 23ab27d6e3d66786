//! Legacy (2025-era) clients on tasklift's own front door: a session per
//! `initialize` and what is relayed on it (`front`), the life of those sessions
//! (`sessions`), and 2025-11-25 tasks (`tasks`). Sessions that outlive a restart are
//! in `store::session_restart`; the legacy sessions tasklift opens with an upstream
//! in `upstreams::sessions`.

mod front;
mod sessions;
mod tasks;
