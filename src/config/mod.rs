//! Configuration: the TOML file, CLI overrides, validation, and every default in one
//! place. A `RawConfig` is what the file says (with defaults filled in); `Config` is
//! the validated form the rest of tasklift uses. Invalid configuration is reported
//! with the key that is wrong, before any port is bound.
//!
//! A leaf: it imports nothing else of tasklift. [`raw`] is the file's shape,
//! [`valid`] the validated values, [`validate`] the one way from the first to the
//! second, [`jwt`] the verification keys read while validating.

mod jwt;
mod raw;
mod valid;
mod validate;

pub use jwt::{JwtKey, JwtKeys, JwtVerifier};
pub use raw::*;
pub use valid::*;

use std::path::PathBuf;
use std::time::Duration;

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (it names the key and line).
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("invalid value for `{key}`: {message}")]
    Invalid {
        /// The dotted key, e.g. `upstreams[0].url`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// Parse a human-readable duration (`500ms`, `2s`, `1h`, `0`).
pub fn parse_duration(key: &str, s: &str) -> Result<Duration, ConfigError> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s.trim()).map_err(|e| {
        invalid(
            key,
            format!("{s:?} is not a duration like 500ms, 2s or 1h ({e})"),
        )
    })
}

/// An upstream URL with the password of its userinfo (or the whole userinfo when it is
/// a bare token) replaced by `<redacted>`, for printing.
pub fn redact_url_credentials(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    let shown = match authority[..at].split_once(':') {
        Some((user, _)) => format!("{user}:{}", raw::REDACTED),
        None => raw::REDACTED.to_string(),
    };
    format!("{}{shown}{}", &url[..start], &url[start + at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_only_an_upstream() {
        let raw =
            RawConfig::from_toml("[[upstreams]]\nurl = \"http://127.0.0.1:9000/mcp\"\n").unwrap();
        let c = raw.validate().unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.upstreams[0].path, "/mcp");
        assert_eq!(c.tasks.threshold, Duration::from_secs(2));
    }

    #[test]
    fn errors_name_the_key() {
        let raw = RawConfig::from_toml(
            "[tasks]\nthreshold = \"soon\"\n[[upstreams]]\nurl = \"http://x/mcp\"\n",
        )
        .unwrap();
        let e = raw.validate().unwrap_err().to_string();
        assert!(e.contains("tasks.threshold"), "{e}");
        let e = RawConfig::from_toml("[server]\nlisten_addr = \"x\"\n").unwrap_err();
        assert!(e.contains("listen_addr"), "{e}");
    }

    #[test]
    fn printed_configuration_hides_secrets() {
        let raw = RawConfig::from_toml(
            "[auth]\nhash_key = \"s3cret-key\"\n[[upstreams]]\nurl = \"http://x/mcp\"\nheaders = { \"X-Api-Key\" = \"k-123\" }\n",
        )
        .unwrap();
        let shown = raw.to_toml();
        assert!(
            !shown.contains("s3cret-key") && !shown.contains("k-123"),
            "{shown}"
        );
        assert!(shown.contains("X-Api-Key"), "{shown}");
    }

    #[test]
    fn admin_listener_is_off_by_default_and_validated() {
        let up = "[[upstreams]]\nurl = \"http://x/mcp\"\n";
        let c = RawConfig::from_toml(up).unwrap().validate().unwrap();
        assert_eq!(c.admin.listen, None);
        let on = format!("[admin]\nlisten = \"127.0.0.1:9090\"\n{up}");
        let c = RawConfig::from_toml(&on).unwrap().validate().unwrap();
        assert_eq!(c.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
        for bad in ["localhost", "127.0.0.1:8080"] {
            let text = format!("[admin]\nlisten = \"{bad}\"\n{up}");
            let e = RawConfig::from_toml(&text).unwrap().validate().unwrap_err();
            assert!(e.to_string().contains("admin.listen"), "{bad}: {e}");
        }
    }

    #[test]
    fn tool_rules_fold_defaults() {
        let raw = RawConfig::from_toml(
            "[[upstreams]]\nurl = \"http://x/mcp\"\n[upstreams.tools.report]\nmode = \"required\"\n[upstreams.tools.quick]\nthreshold = \"500ms\"\n",
        )
        .unwrap();
        let c = raw.validate().unwrap();
        let u = &c.upstreams[0];
        assert_eq!(u.policy("report").mode, ToolMode::Required);
        assert_eq!(u.policy("report").threshold, Duration::ZERO);
        assert_eq!(u.policy("quick").threshold, Duration::from_millis(500));
        assert_eq!(u.policy("other").threshold, Duration::from_secs(2));
    }
}
