//! The table of legacy sessions: looked up by id for their principal only,
//! bounded per principal (the least recently used idle session makes room), and
//! swept when idle.

use std::sync::Arc;

use dashmap::DashMap;

use super::ClientSession;

/// All legacy sessions, bounded per principal.
#[derive(Default)]
pub struct Sessions {
    by_id: DashMap<String, Arc<ClientSession>>,
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("this caller already has {0} open sessions, all in use")]
pub struct TooManySessions(pub usize);

impl Sessions {
    /// The session with this id, if it belongs to `principal`.
    pub fn get(&self, id: &str, principal: &str) -> Option<Arc<ClientSession>> {
        self.by_id
            .get(id)
            .map(|s| s.value().clone())
            .filter(|s| s.principal == principal)
    }

    /// The session with this id, whoever it belongs to.
    pub fn get_any(&self, id: &str) -> Option<Arc<ClientSession>> {
        self.by_id.get(id).map(|s| s.value().clone())
    }

    /// Add a session, closing the principal's least recently used idle session when
    /// it is at `max` already; returns the session it closed (its upstream session
    /// is the caller's to end).
    pub fn insert(
        &self,
        s: Arc<ClientSession>,
        max: usize,
    ) -> Result<Option<Arc<ClientSession>>, TooManySessions> {
        let evicted = self.make_room(&s.principal, max)?;
        s.touch();
        self.by_id.insert(s.id.clone(), s);
        Ok(evicted)
    }

    /// Close the least recently used idle session of `principal` if it has `max`.
    fn make_room(
        &self,
        principal: &str,
        max: usize,
    ) -> Result<Option<Arc<ClientSession>>, TooManySessions> {
        let mine: Vec<Arc<ClientSession>> = self
            .by_id
            .iter()
            .filter(|e| e.principal == principal)
            .map(|e| e.value().clone())
            .collect();
        let mut evicted = None;
        if mine.len() >= max {
            let oldest = mine
                .iter()
                .filter(|x| x.idle_ms() > 0)
                .max_by_key(|x| x.idle_ms())
                .cloned();
            match oldest {
                Some(o) => {
                    tracing::info!(session = %o.id, "session cap reached; closing the caller's least recently used session");
                    evicted = self.remove(&o.id);
                }
                None => return Err(TooManySessions(mine.len())),
            }
        }
        Ok(evicted)
    }

    /// Serve a session restored from the store, unless a request racing this one
    /// restored it first (then that one is returned). The cap applies as in
    /// [`Sessions::insert`].
    pub fn adopt(
        &self,
        s: Arc<ClientSession>,
        max: usize,
    ) -> Result<(Arc<ClientSession>, Option<Arc<ClientSession>>), TooManySessions> {
        if let Some(there) = self.by_id.get(&s.id) {
            return Ok((there.value().clone(), None));
        }
        let evicted = self.make_room(&s.principal, max)?;
        s.touch();
        let s = match self.by_id.entry(s.id.clone()) {
            dashmap::Entry::Occupied(e) => e.get().clone(),
            dashmap::Entry::Vacant(v) => v.insert(s).value().clone(),
        };
        Ok((s, evicted))
    }

    /// End and forget a session.
    pub fn remove(&self, id: &str) -> Option<Arc<ClientSession>> {
        let (_, s) = self.by_id.remove(id)?;
        s.close();
        Some(s)
    }

    /// Sessions idle for at least `idle_ms`.
    pub fn idle(&self, idle_ms: u64) -> Vec<Arc<ClientSession>> {
        self.by_id
            .iter()
            .filter(|s| s.idle_ms() >= idle_ms)
            .map(|s| s.value().clone())
            .collect()
    }

    /// Every session (for shutdown).
    pub fn all(&self) -> Vec<Arc<ClientSession>> {
        self.by_id.iter().map(|s| s.value().clone()).collect()
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_cap_closes_the_least_recently_used_idle_session() {
        let all = Sessions::default();
        let a = ClientSession::new("p".into(), "2025-06-18".into(), json!({}), json!({}));
        let b = ClientSession::new("p".into(), "2025-06-18".into(), json!({}), json!({}));
        all.insert(a.clone(), 1).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        all.insert(b.clone(), 1).unwrap();
        assert!(all.get(&a.id, "p").is_none());
        assert!(
            all.get(&b.id, "q").is_none(),
            "another principal cannot use it"
        );
        let _busy = b.busy();
        let c = ClientSession::new("p".into(), "2025-06-18".into(), json!({}), json!({}));
        assert!(all.insert(c, 1).is_err(), "a busy session is never evicted");
    }
}
