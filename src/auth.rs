//! Principals: who owns a task. Derived per request from the configured mode and
//! stored only as a keyed hash, never as a raw credential.

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::config::AuthMode;

/// Why a request carries no usable identity (answered with HTTP 401).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    /// `--auth bearer` and no bearer token.
    #[error("this endpoint requires an Authorization: Bearer token")]
    MissingBearer,
    /// `--auth header:NAME` and the header is absent.
    #[error("this endpoint requires the {0} header (set by the authenticating proxy in front of tasklift)")]
    MissingHeader(String),
}

/// Derives principals from requests.
#[derive(Clone)]
pub struct Authenticator {
    /// The configured mode.
    mode: AuthMode,
    /// HMAC key for hashing credentials.
    key: Vec<u8>,
}

impl Authenticator {
    /// A new authenticator with the given hashing key.
    pub fn new(mode: AuthMode, key: Vec<u8>) -> Self {
        Self { mode, key }
    }

    /// The principal of a request.
    pub fn principal(&self, headers: &HeaderMap) -> Result<String, AuthError> {
        match &self.mode {
            AuthMode::None => Ok("anonymous".into()),
            AuthMode::Bearer => {
                let token = headers
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| {
                        let (scheme, rest) = v.split_once(' ')?;
                        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
                    })
                    .filter(|t| !t.is_empty())
                    .ok_or(AuthError::MissingBearer)?;
                Ok(format!("bearer:{}", self.hash(token.as_bytes())))
            }
            AuthMode::Header(name) => {
                let v = headers
                    .get(name.as_str())
                    .map(|v| v.as_bytes())
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| AuthError::MissingHeader(name.clone()))?;
                Ok(format!("header:{}", self.hash(v)))
            }
        }
    }

    fn hash(&self, data: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(data);
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Load the hashing key from `data_dir/principal.key`, creating it (32 random bytes
/// from the OS) on first start, so principals stay the same across restarts.
pub fn load_or_create_key(data_dir: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let path = data_dir.join("principal.key");
    match std::fs::read(&path) {
        Ok(k) if k.len() >= 32 => Ok(k),
        Ok(_) | Err(_) => {
            let mut key = Vec::with_capacity(32);
            key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
            key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
            std::fs::create_dir_all(data_dir)?;
            std::fs::write(&path, &key)?;
            Ok(key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_principals_are_keyed_hashes() {
        let a = Authenticator::new(AuthMode::Bearer, b"k1".to_vec());
        let mut h = HeaderMap::new();
        assert_eq!(a.principal(&h), Err(AuthError::MissingBearer));
        h.insert("authorization", "Bearer secret".parse().unwrap());
        let p = a.principal(&h).unwrap();
        assert!(!p.contains("secret"));
        let b = Authenticator::new(AuthMode::Bearer, b"k2".to_vec());
        assert_ne!(p, b.principal(&h).unwrap());
        h.insert("authorization", "Bearer other".parse().unwrap());
        assert_ne!(p, a.principal(&h).unwrap());
    }
}
