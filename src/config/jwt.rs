//! `[auth.jwt]`: the verification keys, read and parsed while the configuration is
//! validated so that a bad key file stops tasklift before it binds. `auth` checks
//! tokens against them.

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::{ConfigError, RawJwt};

/// `--auth jwt`: the keys bearer JWTs must be signed with and the claims they must
/// carry. Built (key files read and parsed) while the configuration is validated.
#[derive(Clone)]
pub struct JwtKeys(pub Arc<JwtVerifier>);

/// What a token is checked against.
pub struct JwtVerifier {
    /// The keys a signature may verify with.
    pub keys: Vec<JwtKey>,
    /// The required `aud`, if any.
    pub audience: Option<String>,
    /// Accepted `iss` values (any when empty).
    pub issuers: Vec<String>,
    /// Clock leeway, seconds.
    pub leeway: u64,
}

/// One verification key.
pub struct JwtKey {
    /// The JWKS `kid`; `None` for `hs256_secret` and `public_key_file`.
    pub kid: Option<String>,
    /// The algorithm it verifies.
    pub alg: Algorithm,
    /// The key.
    pub key: DecodingKey,
}

impl PartialEq for JwtKeys {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtKeys")
            .field("keys", &self.0.keys.len())
            .field("audience", &self.0.audience)
            .field("issuers", &self.0.issuers)
            .field("leeway", &self.0.leeway)
            .finish()
    }
}

fn config_err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: format!("auth.jwt.{key}"),
        message: message.into(),
    }
}

fn read_key_file(key: &str, path: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| config_err(key, format!("cannot read {path}: {e}")))
}

/// The smallest HS256 secret accepted (RFC 7518 3.2: at least the hash size).
const MIN_HS256_SECRET: usize = 32;

impl JwtKeys {
    /// Read and check the keys of `[auth.jwt]`; errors name the key.
    pub fn load(raw: &RawJwt, leeway: Duration) -> Result<Self, ConfigError> {
        let mut keys = Vec::new();
        keys.extend(hs256_key(raw)?);
        keys.extend(public_key(raw)?);
        keys.extend(jwks_keys(raw)?);
        if keys.is_empty() {
            return Err(ConfigError::Invalid {
                key: "auth.jwt".into(),
                message: "mode \"jwt\" needs a key: hs256_secret, hs256_secret_file, \
                          public_key_file or jwks_file"
                    .into(),
            });
        }
        Ok(Self(Arc::new(JwtVerifier {
            keys,
            audience: (!raw.audience.is_empty()).then(|| raw.audience.clone()),
            issuers: raw.issuers.clone(),
            leeway: leeway.as_secs(),
        })))
    }
}

/// The HS256 key of `hs256_secret` or `hs256_secret_file`, long enough to be safe.
fn hs256_key(raw: &RawJwt) -> Result<Option<JwtKey>, ConfigError> {
    let Some((name, secret)) = hs256_secret(raw)? else {
        return Ok(None);
    };
    if secret.len() < MIN_HS256_SECRET {
        return Err(config_err(
            name,
            format!("an HS256 secret must be at least {MIN_HS256_SECRET} bytes"),
        ));
    }
    Ok(Some(JwtKey {
        kid: None,
        alg: Algorithm::HS256,
        key: DecodingKey::from_secret(&secret),
    }))
}

/// The secret and the key it came from: inline or from a file (trailing whitespace,
/// such as the file's newline, is not part of it), never both.
fn hs256_secret(raw: &RawJwt) -> Result<Option<(&'static str, Vec<u8>)>, ConfigError> {
    match (
        raw.hs256_secret.is_empty(),
        raw.hs256_secret_file.is_empty(),
    ) {
        (true, true) => Ok(None),
        (false, true) => Ok(Some(("hs256_secret", raw.hs256_secret.as_bytes().to_vec()))),
        (true, false) => {
            let mut s = read_key_file("hs256_secret_file", &raw.hs256_secret_file)?;
            while s.last().is_some_and(|b| b.is_ascii_whitespace()) {
                s.pop();
            }
            Ok(Some(("hs256_secret_file", s)))
        }
        (false, false) => Err(config_err(
            "hs256_secret_file",
            "set hs256_secret or hs256_secret_file, not both",
        )),
    }
}

/// `public_key_file`: an RSA (RS256) or P-256 (ES256) public key in PEM.
fn public_key(raw: &RawJwt) -> Result<Option<JwtKey>, ConfigError> {
    if raw.public_key_file.is_empty() {
        return Ok(None);
    }
    let pem = read_key_file("public_key_file", &raw.public_key_file)?;
    let (alg, key) = if let Ok(k) = DecodingKey::from_rsa_pem(&pem) {
        (Algorithm::RS256, k)
    } else if let Ok(k) = DecodingKey::from_ec_pem(&pem) {
        // An uncompressed P-256 point: 0x04, x, y (32 bytes each).
        if k.as_bytes().len() != 65 {
            return Err(config_err(
                "public_key_file",
                format!(
                    "{}: an EC key must be on P-256 (ES256)",
                    raw.public_key_file
                ),
            ));
        }
        (Algorithm::ES256, k)
    } else {
        return Err(config_err(
            "public_key_file",
            format!(
                "{}: not an RSA or EC public key in PEM",
                raw.public_key_file
            ),
        ));
    };
    Ok(Some(JwtKey {
        kid: None,
        alg,
        key,
    }))
}

/// `jwks_file`: its signing keys of an algorithm tasklift verifies; a set with none
/// of them is an error rather than a file silently ignored.
fn jwks_keys(raw: &RawJwt) -> Result<Vec<JwtKey>, ConfigError> {
    if raw.jwks_file.is_empty() {
        return Ok(Vec::new());
    }
    let text = read_key_file("jwks_file", &raw.jwks_file)?;
    let set: JwkSet = serde_json::from_slice(&text)
        .map_err(|e| config_err("jwks_file", format!("{}: not a JWKS: {e}", raw.jwks_file)))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        if matches!(&jwk.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
            continue;
        }
        let Some(alg) = jwk_algorithm(jwk) else {
            continue;
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| {
            let kid = jwk.common.key_id.as_deref().unwrap_or("(no kid)");
            config_err("jwks_file", format!("{}: key {kid}: {e}", raw.jwks_file))
        })?;
        keys.push(JwtKey {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
        });
    }
    if keys.is_empty() {
        return Err(config_err(
            "jwks_file",
            format!("{}: no RS256, ES256 or HS256 signing key", raw.jwks_file),
        ));
    }
    Ok(keys)
}

/// The algorithm a JWK verifies, if tasklift supports it: its `alg` (or, without
/// one, its key type) must be RS256, ES256 on P-256, or HS256.
fn jwk_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (Some(KeyAlgorithm::RS256) | None, AlgorithmParameters::RSA(_)) => Some(Algorithm::RS256),
        (Some(KeyAlgorithm::ES256) | None, AlgorithmParameters::EllipticCurve(p))
            if p.curve == EllipticCurve::P256 =>
        {
            Some(Algorithm::ES256)
        }
        (Some(KeyAlgorithm::HS256) | None, AlgorithmParameters::OctetKey(_)) => {
            Some(Algorithm::HS256)
        }
        _ => None,
    }
}
