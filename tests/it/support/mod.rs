//! The shared harness, in one place: tasklift started in-process in front of a
//! fixture upstream (`harness`), raw HTTP (`wire`), scripted upstreams (`mock`),
//! real processes (`proc`), a fault-injecting proxy (`fault_proxy`), a counting
//! relay (`relay`), and the helpers several topics use: callers with input
//! capabilities (`input`), stdio upstreams (`stdio`), foreign peers (`node`,
//! `python`, `everything`, `registry`), a PostgreSQL database (`pg`), a small
//! filesystem (`space`) and the binary run as a command (`cli`, `call`). Test modules import from here, never from each other.

pub mod call;
pub mod cli;
pub mod everything;
pub mod fault_proxy;
pub mod harness;
pub mod input;
pub mod mock;
pub mod node;
pub mod pg;
pub mod proc;
pub mod python;
pub mod registry;
pub mod relay;
pub mod space;
pub mod stdio;
pub mod wire;
