//! The task store and what it keeps across trouble: disk use under churn (`disk`),
//! low space and a full disk (`low_space`, `full_disk`, and `pg_space` for
//! PostgreSQL), `kill -9` under load (`crash`), legacy sessions across a restart
//! (`session_restart`), several replicas on one PostgreSQL store (`replicas`,
//! `replay_store`), and `tasklift store` (`cli`). Their shared helpers are
//! `support::space` and `support::pg`.

mod cli;
mod crash;
mod disk;
mod full_disk;
mod low_space;
mod pg_space;
mod replay_store;
mod replicas;
mod session_restart;
