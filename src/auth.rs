//! Principals: who owns a task. Derived per request from the configured mode and
//! stored only as a keyed hash, never as a raw credential.

use crate::headers::Fields;
use hmac::{Hmac, Mac};
use jsonwebtoken::{errors::ErrorKind, Algorithm, Validation};
use sha2::Sha256;

use crate::config::{AuthMode, JwtKey, JwtKeys, JwtVerifier};

/// Why a request carries no usable identity (answered with HTTP 401).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    /// `--auth bearer` and no bearer token.
    #[error("this endpoint requires an Authorization: Bearer token")]
    MissingBearer,
    /// `--auth header:NAME` and the header is absent.
    #[error("this endpoint requires the {0} header (set by the authenticating proxy in front of tasklift)")]
    MissingHeader(String),
    /// `--auth jwt` and the bearer token is not an acceptable JWT (never echoes it).
    #[error("the bearer JWT was refused: {0}")]
    Jwt(String),
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
    pub fn principal(&self, headers: &Fields) -> Result<String, AuthError> {
        match &self.mode {
            AuthMode::None => Ok("anonymous".into()),
            AuthMode::Bearer => {
                let token = bearer_token(headers)?;
                Ok(format!("bearer:{}", self.hash(token.as_bytes())))
            }
            AuthMode::Jwt(keys) => {
                let (iss, sub) = verify(keys, bearer_token(headers)?)?;
                let mut id = iss.into_bytes();
                id.push(0);
                id.extend_from_slice(sub.as_bytes());
                Ok(format!("jwt:{}", self.hash(&id)))
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

/// The token of an `Authorization: Bearer` header.
fn bearer_token(headers: &Fields) -> Result<&str, AuthError> {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .filter(|t| !t.is_empty())
        .ok_or(AuthError::MissingBearer)
}

/// Verify a token against `keys`; its `iss` (empty if absent) and `sub`.
fn verify(keys: &JwtKeys, token: &str) -> Result<(String, String), AuthError> {
    let v = &keys.0;
    let refuse = |m: &str| AuthError::Jwt(m.into());
    let header = jsonwebtoken::decode_header(token).map_err(|_| {
        // `none` and algorithms outside the enum fail to parse: name them.
        match header_alg(token) {
            Some(alg) => AuthError::Jwt(format!(
                "algorithm {alg:?} is not accepted (HS256, RS256 or ES256)"
            )),
            None => refuse("malformed token"),
        }
    })?;
    let alg = header.alg;
    if !matches!(alg, Algorithm::HS256 | Algorithm::RS256 | Algorithm::ES256) {
        return Err(AuthError::Jwt(format!(
            "algorithm {alg:?} is not accepted (HS256, RS256 or ES256)"
        )));
    }
    let of_alg = || v.keys.iter().filter(move |k| k.alg == alg);
    let candidates: Vec<&JwtKey> = match &header.kid {
        Some(kid) => {
            let by_kid: Vec<_> = of_alg().filter(|k| k.kid.as_ref() == Some(kid)).collect();
            if by_kid.is_empty() {
                of_alg().filter(|k| k.kid.is_none()).collect()
            } else {
                by_kid
            }
        }
        None => of_alg().collect(),
    };
    if candidates.is_empty() {
        return Err(match header.kid {
            Some(_) if v.keys.iter().any(|k| k.kid.is_some()) => {
                refuse("unknown kid: no configured key has the token's kid and alg")
            }
            _ => AuthError::Jwt(format!("no key is configured for algorithm {alg:?}")),
        });
    }
    let mut validation = Validation::new(alg);
    validation.leeway = v.leeway;
    validation.validate_nbf = true;
    let mut required = vec!["exp", "sub"];
    match &v.audience {
        Some(aud) => {
            validation.set_audience(&[aud]);
            required.push("aud");
        }
        None => validation.validate_aud = false,
    }
    if !v.issuers.is_empty() {
        validation.set_issuer(&v.issuers);
        required.push("iss");
    }
    validation.set_required_spec_claims(&required);

    #[derive(serde::Deserialize)]
    struct Claims {
        #[serde(default)]
        iss: Option<String>,
        #[serde(default)]
        sub: Option<String>,
    }
    for k in candidates {
        match jsonwebtoken::decode::<Claims>(token, &k.key, &validation) {
            Ok(d) => {
                let sub = d.claims.sub.filter(|s| !s.is_empty());
                let sub = sub.ok_or_else(|| refuse("missing sub claim"))?;
                return Ok((d.claims.iss.unwrap_or_default(), sub));
            }
            Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => continue,
            Err(e) => return Err(describe(e.kind(), v)),
        }
    }
    Err(refuse("bad signature"))
}

/// The `alg` of a token's header, when the header is JSON at all.
fn header_alg(token: &str) -> Option<String> {
    use base64::Engine;
    let head = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head)
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let alg = v.get("alg")?.as_str()?;
    Some(alg.chars().take(16).collect())
}

/// What failed, in words (never the token).
fn describe(kind: &ErrorKind, v: &JwtVerifier) -> AuthError {
    AuthError::Jwt(match kind {
        ErrorKind::ExpiredSignature => "token expired (exp)".into(),
        ErrorKind::ImmatureSignature => "token not yet valid (nbf)".into(),
        ErrorKind::InvalidAudience => format!(
            "wrong audience (aud): expected {:?}",
            v.audience.as_deref().unwrap_or_default()
        ),
        ErrorKind::InvalidIssuer => "issuer (iss) not accepted".into(),
        ErrorKind::InvalidSignature => "bad signature".into(),
        ErrorKind::InvalidAlgorithm => "algorithm does not match the key".into(),
        ErrorKind::MissingRequiredClaim(c) => format!("missing {c} claim"),
        ErrorKind::InvalidClaimFormat(c) => format!("malformed {c} claim"),
        _ => "malformed token".into(),
    })
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
            // Written whole or not at all: a crash mid-write must not leave a short
            // key that the next start would replace, changing every principal.
            let tmp = data_dir.join("principal.key.tmp");
            {
                use std::io::Write;
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(&key)?;
                f.sync_all()?;
            }
            std::fs::rename(&tmp, &path)?;
            if let Ok(d) = std::fs::File::open(data_dir) {
                let _ = d.sync_all();
            }
            Ok(key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigError, RawJwt};
    use std::time::Duration;

    #[test]
    fn bearer_principals_are_keyed_hashes() {
        let a = Authenticator::new(AuthMode::Bearer, b"k1".to_vec());
        let mut h = Fields::new();
        assert_eq!(a.principal(&h), Err(AuthError::MissingBearer));
        h.insert(
            http::header::AUTHORIZATION,
            "Bearer secret".parse().unwrap(),
        );
        let p = a.principal(&h).unwrap();
        assert!(!p.contains("secret"));
        let b = Authenticator::new(AuthMode::Bearer, b"k2".to_vec());
        assert_ne!(p, b.principal(&h).unwrap());
        h.insert(http::header::AUTHORIZATION, "Bearer other".parse().unwrap());
        assert_ne!(p, a.principal(&h).unwrap());
    }

    mod jwt {
        use super::*;
        use jsonwebtoken::{encode, EncodingKey, Header};
        use serde_json::json;

        const SECRET: &str = "an-hs256-test-secret-of-32-bytes!!";

        fn data(name: &str) -> String {
            format!("{}/tests/data/jwt/{name}", env!("CARGO_MANIFEST_DIR"))
        }

        fn now() -> u64 {
            jsonwebtoken::get_current_timestamp()
        }

        fn claims(sub: &str) -> serde_json::Value {
            json!({ "iss": "https://idp.example", "sub": sub, "aud": "tasklift", "exp": now() + 300, "iat": now() })
        }

        fn hs(claims: &serde_json::Value) -> String {
            encode(
                &Header::new(Algorithm::HS256),
                claims,
                &EncodingKey::from_secret(SECRET.as_bytes()),
            )
            .unwrap()
        }

        fn rs(kid: Option<&str>, claims: &serde_json::Value) -> String {
            let mut h = Header::new(Algorithm::RS256);
            h.kid = kid.map(Into::into);
            let pem = std::fs::read(data("rsa-private.pem")).unwrap();
            encode(&h, claims, &EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap()
        }

        fn es(kid: Option<&str>, claims: &serde_json::Value) -> String {
            let mut h = Header::new(Algorithm::ES256);
            h.kid = kid.map(Into::into);
            let pem = std::fs::read(data("ec-private.pem")).unwrap();
            encode(&h, claims, &EncodingKey::from_ec_pem(&pem).unwrap()).unwrap()
        }

        fn auth(raw: RawJwt) -> Authenticator {
            let keys = JwtKeys::load(&raw, Duration::from_secs(60)).unwrap();
            Authenticator::new(AuthMode::Jwt(keys), b"k".to_vec())
        }

        fn hs_auth() -> Authenticator {
            auth(RawJwt {
                hs256_secret: SECRET.into(),
                audience: "tasklift".into(),
                issuers: vec!["https://idp.example".into()],
                ..RawJwt::default()
            })
        }

        fn call(a: &Authenticator, token: &str) -> Result<String, AuthError> {
            let mut h = Fields::new();
            h.insert(
                http::header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
            a.principal(&h)
        }

        fn refused(a: &Authenticator, token: &str, what: &str) {
            match call(a, token) {
                Err(AuthError::Jwt(m)) => {
                    assert!(m.contains(what), "{m:?} does not say {what:?}");
                    assert!(!m.contains(token), "the token is echoed: {m}");
                }
                other => panic!("expected a refusal naming {what:?}, got {other:?}"),
            }
        }

        #[test]
        fn hs256_principal_is_iss_and_sub_and_survives_refresh() {
            let a = hs_auth();
            let p = call(&a, &hs(&claims("alice"))).unwrap();
            assert!(p.starts_with("jwt:") && !p.contains("alice"), "{p}");
            let mut refreshed = claims("alice");
            refreshed["exp"] = json!(now() + 3600);
            refreshed["iat"] = json!(now() + 1);
            refreshed["jti"] = json!("another");
            assert_eq!(call(&a, &hs(&refreshed)).unwrap(), p);
            assert_ne!(call(&a, &hs(&claims("bob"))).unwrap(), p);
            assert_eq!(a.principal(&Fields::new()), Err(AuthError::MissingBearer));
        }

        #[test]
        fn rs256_and_es256_from_pem_files() {
            let a = auth(RawJwt {
                public_key_file: data("rsa-public.pem"),
                ..RawJwt::default()
            });
            let p = call(&a, &rs(None, &claims("alice"))).unwrap();
            assert!(p.starts_with("jwt:"));
            refused(
                &a,
                &es(None, &claims("alice")),
                "no key is configured for algorithm ES256",
            );
            let e = auth(RawJwt {
                public_key_file: data("ec-public.pem"),
                ..RawJwt::default()
            });
            assert_eq!(
                call(&e, &es(None, &claims("alice"))).unwrap(),
                p,
                "same iss+sub, same key"
            );
        }

        #[test]
        fn jwks_picks_the_key_by_kid_and_alg() {
            let a = auth(RawJwt {
                jwks_file: data("jwks.json"),
                ..RawJwt::default()
            });
            call(&a, &rs(Some("rsa-1"), &claims("alice"))).unwrap();
            call(&a, &es(Some("ec-1"), &claims("alice"))).unwrap();
            call(&a, &rs(None, &claims("alice"))).unwrap();
            refused(&a, &rs(Some("rsa-2"), &claims("alice")), "unknown kid");
            refused(&a, &rs(Some("ec-1"), &claims("alice")), "unknown kid");
        }

        #[test]
        fn refusals_name_what_failed() {
            let a = hs_auth();
            let mut c = claims("alice");
            c["exp"] = json!(now() - 120);
            refused(&a, &hs(&c), "expired");
            let mut c = claims("alice");
            c["exp"] = json!(now() - 30);
            call(&a, &hs(&c)).expect("within the leeway");
            let mut c = claims("alice");
            c["nbf"] = json!(now() + 600);
            refused(&a, &hs(&c), "not yet valid");
            let mut c = claims("alice");
            c["aud"] = json!("someone-else");
            refused(&a, &hs(&c), "wrong audience");
            let mut c = claims("alice");
            c["aud"] = json!(["someone-else", "tasklift"]);
            call(&a, &hs(&c)).expect("one of several audiences");
            let mut c = claims("alice");
            c.as_object_mut().unwrap().remove("aud");
            refused(&a, &hs(&c), "missing aud");
            let mut c = claims("alice");
            c["iss"] = json!("https://evil.example");
            refused(&a, &hs(&c), "issuer");
            let mut c = claims("alice");
            c.as_object_mut().unwrap().remove("sub");
            refused(&a, &hs(&c), "missing sub");
            let mut c = claims("alice");
            c.as_object_mut().unwrap().remove("exp");
            refused(&a, &hs(&c), "missing exp");
            let forged = encode(
                &Header::new(Algorithm::HS256),
                &claims("alice"),
                &EncodingKey::from_secret(b"another-secret-that-is-32-bytes-long"),
            )
            .unwrap();
            refused(&a, &forged, "bad signature");
            let good = hs(&claims("alice"));
            let (head, _) = good.rsplit_once('.').unwrap();
            refused(&a, &format!("{head}.AAAA"), "bad signature");
            refused(&a, "not-a-jwt", "malformed");
        }

        #[test]
        fn alg_none_and_algorithm_confusion_are_refused() {
            use base64::Engine;
            let b64 = |v: serde_json::Value| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
            };
            let a = auth(RawJwt {
                public_key_file: data("rsa-public.pem"),
                jwks_file: data("jwks.json"),
                ..RawJwt::default()
            });
            let none = format!(
                "{}.{}.",
                b64(json!({"alg": "none", "typ": "JWT"})),
                b64(claims("alice"))
            );
            refused(&a, &none, "\"none\" is not accepted");
            // HS256 signed with the RSA public key (file bytes or DER) as the secret.
            let pem = std::fs::read(data("rsa-public.pem")).unwrap();
            let confused = encode(
                &Header::new(Algorithm::HS256),
                &claims("alice"),
                &EncodingKey::from_secret(&pem),
            )
            .unwrap();
            refused(&a, &confused, "no key is configured for algorithm HS256");
            let mut h = Header::new(Algorithm::HS256);
            h.kid = Some("rsa-1".into());
            let confused = encode(&h, &claims("alice"), &EncodingKey::from_secret(&pem)).unwrap();
            refused(&a, &confused, "unknown kid");
            let rs384 = {
                let der = std::fs::read(data("rsa-private.pem")).unwrap();
                encode(
                    &Header::new(Algorithm::RS384),
                    &claims("alice"),
                    &EncodingKey::from_rsa_pem(&der).unwrap(),
                )
                .unwrap()
            };
            refused(&a, &rs384, "not accepted");
        }

        #[test]
        fn configuration_errors_name_the_key() {
            let err = |raw: RawJwt| match JwtKeys::load(&raw, Duration::from_secs(60)) {
                Err(ConfigError::Invalid { key, message }) => format!("{key}: {message}"),
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("accepted"),
            };
            assert!(err(RawJwt::default()).starts_with("auth.jwt: "));
            let missing = err(RawJwt {
                public_key_file: "/nonexistent/key.pem".into(),
                ..RawJwt::default()
            });
            assert!(
                missing.starts_with("auth.jwt.public_key_file: cannot read"),
                "{missing}"
            );
            let bad = err(RawJwt {
                public_key_file: data("jwks.json"),
                ..RawJwt::default()
            });
            assert!(bad.contains("not an RSA or EC public key in PEM"), "{bad}");
            let jwks = err(RawJwt {
                jwks_file: data("rsa-public.pem"),
                ..RawJwt::default()
            });
            assert!(jwks.starts_with("auth.jwt.jwks_file: "), "{jwks}");
            let short = err(RawJwt {
                hs256_secret: "short".into(),
                ..RawJwt::default()
            });
            assert!(short.starts_with("auth.jwt.hs256_secret: "), "{short}");
            assert!(err(RawJwt {
                hs256_secret_file: "/nonexistent/secret".into(),
                ..RawJwt::default()
            })
            .starts_with("auth.jwt.hs256_secret_file: cannot read"));
        }
    }
}
