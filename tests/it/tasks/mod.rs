//! Tasks, for clients of the 2026-07-28 tasks extension and for those without it: the
//! core path (`basics`), how tasks end (`lifecycle`), per-tool rules and progress
//! (`rules`), limits, `subscriptions/listen` (`listen`), tool-level handles and
//! detach (`tool_handles`), shutdown, and the engine under paused time
//! (`engine_time`).

mod basics;
mod engine_time;
mod lifecycle;
mod limits;
mod listen;
mod rules;
mod shutdown;
mod tool_handles;
