//! Who shares a child (`scope`). With `shared`, one pool serves every caller.
//! With `principal` or `session`, each caller (a principal, or a legacy client's
//! session) gets a pool of its own: started on its first request, stopped after
//! `scope_idle` without a call in flight, at most `max_scopes` at once. A pool of
//! one caller is never handed another's call, so whatever the server keeps in
//! memory (a knowledge graph, a thought history, a browser) stays that caller's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::{Owner, Pool};
use crate::config::{ChildScope, StdioConfig, UpstreamConfig};
use crate::upstream::CallContext;
use tasklift_protocol::jsonrpc::{RpcError, UPSTREAM_ERROR};

/// The pools of one stdio upstream.
pub(super) struct Scopes {
    cfg: UpstreamConfig,
    stdio: StdioConfig,
    /// The one pool, with `scope = "shared"`.
    shared: Option<Arc<Pool>>,
    /// Each caller's pool, by scope key, with when it last had a call.
    own: Mutex<HashMap<String, Owned>>,
    /// The era a child of this upstream was found to speak (they all run the
    /// same command), kept when its pool stops.
    learned: std::sync::OnceLock<crate::upstream::Era>,
    /// Restarts of pools already stopped (for the restart counter).
    gone_restarts: AtomicU64,
    /// Stops idle pools.
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

struct Owned {
    pool: Arc<Pool>,
    used: Instant,
}

impl Scopes {
    pub(super) fn start(cfg: UpstreamConfig, stdio: StdioConfig) -> Arc<Self> {
        let shared = (stdio.scope == ChildScope::Shared)
            .then(|| Pool::start(cfg.clone(), stdio.clone(), None));
        let scopes = Arc::new(Self {
            cfg,
            stdio,
            shared,
            own: Mutex::default(),
            learned: std::sync::OnceLock::new(),
            gone_restarts: AtomicU64::new(0),
            reaper: Mutex::default(),
        });
        if scopes.shared.is_none() {
            let weak = Arc::downgrade(&scopes);
            let every = (scopes.stdio.scope_idle / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(5));
            *scopes.reaper.lock().expect("reaper") = Some(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(s) = weak.upgrade() else { return };
                    s.reap();
                }
            }));
        }
        scopes
    }

    pub(super) fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The pool that serves `ctx`, started for it if it has none: `caps` are the
    /// client capabilities of the request that starts it (they decide whether its
    /// children are told the client has roots). An error when `max_scopes` pools
    /// are all busy.
    pub(super) fn pool(
        &self,
        ctx: &CallContext,
        caps: Option<&Value>,
    ) -> Result<Arc<Pool>, RpcError> {
        if let Some(p) = &self.shared {
            return Ok(p.clone());
        }
        let key = self.key(ctx);
        let mut own = self.own.lock().expect("scopes");
        let caps = caps.or_else(|| ctx.session.as_ref().map(|s| &s.capabilities));
        let roots = caps.map(|c| c.get("roots").is_some_and(|r| !r.is_null()));
        if let Some(o) = own.get_mut(&key) {
            o.used = Instant::now();
            if let (Some(owner), Some(r)) = (&o.pool.owner, roots) {
                owner.decide(r);
            }
            return Ok(o.pool.clone());
        }
        if own.len() >= self.stdio.max_scopes {
            // Make room by stopping the caller idle longest, if any is idle.
            let idle = own
                .iter()
                .filter(|(_, o)| !o.pool.busy())
                .min_by_key(|(_, o)| o.used)
                .map(|(k, _)| k.clone());
            match idle {
                Some(k) => {
                    let o = own.remove(&k).expect("listed");
                    self.stop(o.pool, "another caller needed its place (max_scopes)");
                }
                None => {
                    tracing::warn!(upstream = %self.name(), max_scopes = self.stdio.max_scopes,
                        "a new caller was refused: every caller's children are busy");
                    return Err(RpcError::new(
                        UPSTREAM_ERROR,
                        format!(
                            "upstream {} runs children of their own for each {} and all {} it may run (max_scopes) have calls in flight; try again when one is done",
                            self.name(),
                            self.kind(),
                            self.stdio.max_scopes
                        ),
                    ));
                }
            }
        }
        let owner = Owner::new(scope_id(&key), roots);
        tracing::info!(upstream = %self.name(), scope = %owner.id, callers = own.len() + 1,
            "starting children for a new {}", self.kind());
        let pool = Pool::start(self.cfg.clone(), self.stdio.clone(), Some(owner));
        own.insert(
            key,
            Owned {
                pool: pool.clone(),
                used: Instant::now(),
            },
        );
        Ok(pool)
    }

    /// The pool of `ctx`, only if it has one already.
    pub(super) fn existing(&self, ctx: &CallContext) -> Option<Arc<Pool>> {
        match &self.shared {
            Some(p) => Some(p.clone()),
            None => self
                .own
                .lock()
                .expect("scopes")
                .get(&self.key(ctx))
                .map(|o| o.pool.clone()),
        }
    }

    /// The era a child was found to speak, if one was.
    pub(super) fn learned_era(&self) -> Option<crate::upstream::Era> {
        if let Some(e) = self.learned.get() {
            return Some(e.clone());
        }
        let found = self
            .all()
            .iter()
            .find_map(|p| p.detected.borrow().clone())?;
        Some(self.learned.get_or_init(|| found).clone())
    }

    /// Every pool running now.
    pub(super) fn all(&self) -> Vec<Arc<Pool>> {
        match &self.shared {
            Some(p) => vec![p.clone()],
            None => self
                .own
                .lock()
                .expect("scopes")
                .values()
                .map(|o| o.pool.clone())
                .collect(),
        }
    }

    /// Restarts of every pool, stopped ones included.
    pub(super) fn restarts(&self) -> u64 {
        self.gone_restarts.load(Ordering::Relaxed)
            + self.all().iter().map(|p| p.restarts()).sum::<u64>()
    }

    /// `Some(why)` when the upstream cannot take calls: its shared pool keeps
    /// crashing, or every caller's pool does (one caller's broken child is that
    /// caller's error, not the whole upstream's).
    pub(super) fn crash_looping(&self) -> Option<String> {
        let all = self.all();
        let mut why = None;
        for p in &all {
            match p.crash_looping() {
                Some(e) => {
                    why.get_or_insert(e);
                }
                None => return None,
            }
        }
        why
    }

    /// A legacy session ended: with `scope = "session"` its children stop now.
    pub(super) fn end(&self, ctx: &CallContext) {
        if self.stdio.scope != ChildScope::Session || ctx.session.is_none() {
            return;
        }
        let gone = self.own.lock().expect("scopes").remove(&self.key(ctx));
        if let Some(o) = gone {
            self.stop(o.pool, "its session ended");
        }
    }

    /// Stop every pool and wait for them.
    pub(super) async fn shutdown(&self) {
        if let Some(r) = self.reaper.lock().expect("reaper").take() {
            r.abort();
        }
        let pools: Vec<Arc<Pool>> = match &self.shared {
            Some(p) => vec![p.clone()],
            None => self
                .own
                .lock()
                .expect("scopes")
                .drain()
                .map(|(_, o)| o.pool)
                .collect(),
        };
        for p in pools {
            p.shutdown().await;
        }
    }

    /// Stop the pools that had no call for `scope_idle`.
    fn reap(&self) {
        let mut own = self.own.lock().expect("scopes");
        let now = Instant::now();
        let mut idle = Vec::new();
        for (k, o) in own.iter_mut() {
            if o.pool.busy() {
                o.used = now;
            } else if now.duration_since(o.used) >= self.stdio.scope_idle {
                idle.push(k.clone());
            }
        }
        for k in idle {
            let o = own.remove(&k).expect("listed");
            self.stop(o.pool, "idle (scope_idle)");
        }
    }

    fn stop(&self, pool: Arc<Pool>, why: &'static str) {
        tracing::info!(upstream = %self.name(), scope = pool.scope_id().unwrap_or(""), reason = why,
            "stopping a caller's children");
        self.gone_restarts
            .fetch_add(pool.restarts(), Ordering::Relaxed);
        tokio::spawn(async move { pool.shutdown().await });
    }

    /// Whose children a key names.
    fn key(&self, ctx: &CallContext) -> String {
        match (&self.stdio.scope, &ctx.session) {
            (ChildScope::Session, Some(s)) => format!("{}\n{}", ctx.principal, s.id),
            _ => ctx.principal.clone(),
        }
    }

    fn kind(&self) -> &'static str {
        match self.stdio.scope {
            ChildScope::Session => "client session",
            _ => "principal",
        }
    }
}

/// The name a caller's children know their scope by (`{scope}` in `command`,
/// `env` and `cwd`; `TASKLIFT_SCOPE`): a digest of its key, the same across
/// restarts for a principal (principals are), safe in a file name, and
/// revealing nothing of the principal.
fn scope_id(key: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(key.as_bytes());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::scope_id;

    #[test]
    fn scope_ids_are_stable_distinct_and_file_safe() {
        let a = scope_id("bearer:1234");
        assert_eq!(a, scope_id("bearer:1234"));
        assert_ne!(a, scope_id("bearer:1235"));
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
