//! The hasher of the tables a request looks things up in: the mounts by path,
//! the metrics and call slots by upstream, tasks per principal, legacy sessions.
//!
//! std's default, SipHash-1-3, cost about 200 instructions per lookup of a short
//! string key, several per proxied call. foldhash (already built, for
//! hashbrown) is a few times faster and seeded at random per table, which is
//! what keeps keys a client influences (a principal, a session) from being
//! chosen to collide: nothing reveals the seed.

/// The hasher.
pub type Fast = foldhash::fast::RandomState;

/// A `HashMap` with [`Fast`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, Fast>;

/// A `DashMap` with [`Fast`].
pub type FastDashMap<K, V> = dashmap::DashMap<K, V, Fast>;
