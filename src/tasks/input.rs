//! Input bridging: the `requestState` tasklift hands out when a legacy upstream asks
//! for input before a task handle exists (sealed with HMAC-SHA256, bound to the
//! principal and the request, expiring), and which requests a caller may be shown.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use super::answer::Failure;
use tasklift_protocol::mcp::Declared;

/// Marks a `requestState` as tasklift's own (anything else belongs to the upstream).
pub const STATE_PREFIX: &str = "tl1.";

/// What a sealed `requestState` says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateClaims {
    /// The parked call it resumes.
    pub park: String,
    /// The principal it was issued to.
    pub owner: String,
    /// The method and name (tool, prompt or resource) it was issued for.
    pub request: String,
    /// Expiry, unix milliseconds.
    pub exp: u64,
    /// The process that parked the call (filled in when sealed).
    #[serde(default)]
    pub issuer: String,
}

/// Seals and opens `requestState` values. Parked calls live in the memory of the
/// process that parked them, so a state is good only there. With one process the
/// key is its own; replicas sharing a store share a key derived from the shared
/// hash key, so a replica can tell a state issued by another one (and say so)
/// from a forged one.
pub struct StateSealer {
    key: Vec<u8>,
    /// This process.
    issuer: String,
}

impl Default for StateSealer {
    fn default() -> Self {
        let mut key = Vec::with_capacity(32);
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self {
            key,
            issuer: uuid::Uuid::new_v4().simple().to_string(),
        }
    }
}

fn invalid(msg: &str) -> Failure {
    Failure::BadState(msg.to_string())
}

impl StateSealer {
    /// A sealer whose key every replica sharing `shared_key` derives alike.
    pub fn shared(shared_key: &[u8]) -> Self {
        let mut m = Hmac::<Sha256>::new_from_slice(shared_key).expect("any key length");
        m.update(b"tasklift requestState");
        Self {
            key: m.finalize().into_bytes().to_vec(),
            ..Self::default()
        }
    }

    fn mac(&self, payload: &str) -> Vec<u8> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        m.update(payload.as_bytes());
        m.finalize().into_bytes().to_vec()
    }

    /// Seal claims into an opaque string.
    pub fn seal(&self, c: &StateClaims) -> String {
        let c = StateClaims {
            issuer: self.issuer.clone(),
            ..c.clone()
        };
        let payload = B64.encode(serde_json::to_vec(&c).expect("claims serialize"));
        let tag = B64.encode(self.mac(&payload));
        format!("{STATE_PREFIX}{payload}.{tag}")
    }

    /// Open a state presented by `owner` on `request` at `now_ms`.
    pub fn open(
        &self,
        state: &str,
        owner: &str,
        request: &str,
        now_ms: u64,
    ) -> Result<StateClaims, Failure> {
        let body = state
            .strip_prefix(STATE_PREFIX)
            .ok_or_else(|| invalid("not issued by tasklift"))?;
        let (payload, tag) = body.split_once('.').ok_or_else(|| invalid("malformed"))?;
        let tag = B64.decode(tag).map_err(|_| invalid("malformed"))?;
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        m.update(payload.as_bytes());
        m.verify_slice(&tag).map_err(|_| {
            invalid("integrity check failed (tampered, issued before tasklift restarted, or issued by a tasklift replica that does not share this one's store); call the tool again")
        })?;
        let claims: StateClaims = B64
            .decode(payload)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| invalid("malformed"))?;
        if claims.owner != owner {
            return Err(invalid("it was issued to another caller"));
        }
        if claims.request != request {
            return Err(invalid("it was issued for another request"));
        }
        if claims.exp <= now_ms {
            return Err(invalid("it has expired; call the tool again"));
        }
        if claims.issuer != self.issuer {
            return Err(invalid(
                "the call it resumes waits on another tasklift replica (or on this one before it restarted), and only that process can resume it; send a call's retries to the replica that answered it, or call the tool again",
            ));
        }
        Ok(claims)
    }
}

/// The capability a client must declare to be shown a server-to-client request, or
/// `None` if the method is not one a client can be asked.
pub fn required_capability(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Whether `caps` (a request's clientCapabilities) allows showing `method`; the error
/// to answer the upstream with when it does not.
pub fn check_allowed(caps: Declared, method: &str) -> Result<(), Failure> {
    match required_capability(method) {
        Some(cap) if caps.has(cap) => Ok(()),
        capability => Err(Failure::NotAskable {
            method: method.to_string(),
            capability,
        }),
    }
}

/// What a `requestState` is bound to: method, tool name (or prompt name or URI), and
/// a digest of the arguments, so a state is refused on a request it was not issued for.
pub fn request_binding(method: &str, params: &serde_json::Map<String, Value>) -> String {
    use sha2::Digest;
    let name = tasklift_protocol::mcp::name_param(method)
        .and_then(|p| params.get(p))
        .and_then(Value::as_str)
        .unwrap_or("");
    // serde_json maps are ordered by key, so equal arguments serialize the same.
    let args = params
        .get("arguments")
        .map(Value::to_string)
        .unwrap_or_default();
    let digest = Sha256::digest(args.as_bytes());
    format!("{method} {name} {}", B64.encode(&digest[..12]))
}

/// `inputRequests` keys for one call or task: unique for its whole life. A request
/// the upstream named (see [`ServerRequest::keyed_by`]) keeps its name the first time.
///
/// [`ServerRequest::keyed_by`]: crate::upstream::ServerRequest::keyed_by
#[derive(Debug, Default, Clone)]
pub struct InputKeys {
    /// Keys handed out so far.
    used: std::collections::HashSet<String>,
    /// Counter for `input-N`.
    seq: u64,
}

impl InputKeys {
    /// The key for the next request.
    pub fn next(&mut self, r: &crate::upstream::ServerRequest) -> String {
        if let Some(k) = r.key.as_ref().filter(|k| !self.used.contains(*k)) {
            self.used.insert(k.clone());
            return k.clone();
        }
        loop {
            self.seq += 1;
            let k = format!("input-{}", self.seq);
            if self.used.insert(k.clone()) {
                return k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> StateClaims {
        StateClaims {
            park: "p1".into(),
            owner: "alice".into(),
            request: "tools/call deploy".into(),
            exp: 1_000,
            issuer: String::new(),
        }
    }

    #[test]
    fn sealed_state_opens_only_for_its_owner_request_and_time() {
        let s = StateSealer::default();
        let st = s.seal(&claims());
        let opened = s.open(&st, "alice", "tools/call deploy", 999).unwrap();
        assert_eq!((opened.park, opened.exp), (claims().park, claims().exp));
        assert!(s
            .open(&st, "bob", "tools/call deploy", 999)
            .unwrap_err()
            .to_string()
            .contains("another caller"));
        assert!(s
            .open(&st, "alice", "tools/call other", 999)
            .unwrap_err()
            .to_string()
            .contains("another request"));
        assert!(s
            .open(&st, "alice", "tools/call deploy", 1_000)
            .unwrap_err()
            .to_string()
            .contains("expired"));
    }

    #[test]
    fn tampered_or_foreign_state_is_rejected() {
        let s = StateSealer::default();
        let st = s.seal(&claims());
        let mut t = st.clone().into_bytes();
        let i = STATE_PREFIX.len() + 3;
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(t).unwrap();
        assert!(s
            .open(&tampered, "alice", "tools/call deploy", 1)
            .unwrap_err()
            .to_string()
            .contains("integrity"));
        let other = StateSealer::default();
        assert!(
            other.open(&st, "alice", "tools/call deploy", 1).is_err(),
            "another process's key"
        );
        // Replicas sharing a key recognise each other's states and say where they belong.
        let (a, b) = (StateSealer::shared(b"k"), StateSealer::shared(b"k"));
        let st = a.seal(&claims());
        assert!(a.open(&st, "alice", "tools/call deploy", 1).is_ok());
        let e = b.open(&st, "alice", "tools/call deploy", 1).unwrap_err();
        assert!(e.to_string().contains("another tasklift replica"), "{e}");
    }

    #[test]
    fn bindings_cover_the_arguments() {
        let p = |v: Value| v.as_object().unwrap().clone();
        let a = request_binding(
            "tools/call",
            &p(json!({"name": "rm", "arguments": {"f": "a", "g": 1}})),
        );
        let b = request_binding(
            "tools/call",
            &p(json!({"name": "rm", "arguments": {"g": 1, "f": "a"}})),
        );
        let c = request_binding(
            "tools/call",
            &p(json!({"name": "rm", "arguments": {"f": "b", "g": 1}})),
        );
        assert_eq!(a, b, "key order does not matter");
        assert_ne!(a, c, "other arguments, other binding");
    }

    #[test]
    fn capabilities_gate_requests() {
        let caps = Declared::of_value(Some(&json!({"elicitation": {}, "sampling": null})));
        assert!(check_allowed(caps, "elicitation/create").is_ok());
        let e = check_allowed(caps, "sampling/createMessage").unwrap_err();
        assert!(matches!(
            e,
            Failure::NotAskable {
                capability: Some("sampling"),
                ..
            }
        ));
    }
}
