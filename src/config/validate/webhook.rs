//! One `[[webhooks]]` table to a `WebhookConfig`: its URL (https, or http only
//! to loopback unless allowed), its Standard Webhooks secret, its events and
//! filters, and the limits that keep one destination from hurting the rest, each
//! error naming the key under `webhooks[i]`.

use std::net::IpAddr;
use std::time::Duration;

use base64::Engine as _;

use crate::config::*;

/// Names keys under `webhooks[i]`.
#[derive(Clone, Copy)]
struct Key(usize);

impl Key {
    fn of(self, k: &str) -> String {
        format!("webhooks[{}].{k}", self.0)
    }
}

/// The shortest signing key accepted, in bytes (the Standard Webhooks
/// specification asks for 24 to 64).
const MIN_SECRET: usize = 24;
/// The longest, likewise.
const MAX_SECRET: usize = 64;

/// Validate `webhooks[i]`; `upstreams` are the configured upstream names, which
/// its `upstreams` filter must name.
pub(super) fn validate_webhook(
    i: usize,
    w: &RawWebhook,
    upstreams: &[UpstreamConfig],
) -> Result<WebhookConfig, ConfigError> {
    let key = Key(i);
    let url = webhook_url(key, w)?;
    let name = match w.name.trim() {
        "" => url.authority().map(|a| a.to_string()).unwrap_or_default(),
        n => n.to_string(),
    };
    for u in &w.upstreams {
        if !upstreams.iter().any(|o| &o.name == u) {
            return Err(invalid(
                key.of("upstreams"),
                format!("{u:?} is not the name of a configured upstream"),
            ));
        }
    }
    Ok(WebhookConfig {
        name,
        url,
        secret: secret(key, w)?,
        events: events(key, &w.events)?,
        upstreams: w.upstreams.clone(),
        tools: w.tools.clone(),
        include_result: w.include_result,
        max_result_bytes: w.max_result_bytes,
        max_age: positive(key, "max_age", &w.max_age)?,
        concurrency: at_least_one(key, "concurrency", w.concurrency)?,
        max_pending: at_least_one(key, "max_pending", w.max_pending)?,
        connect_timeout: positive(key, "connect_timeout", &w.connect_timeout)?,
        timeout: positive(key, "timeout", &w.timeout)?,
    })
}

/// `https://`, or `http://` to a loopback address (any with `allow_http`).
fn webhook_url(key: Key, w: &RawWebhook) -> Result<http::Uri, ConfigError> {
    let text = w.url.trim();
    if text.is_empty() {
        return Err(invalid(
            key.of("url"),
            "is required: where events are POSTed",
        ));
    }
    let url: http::Uri = text
        .parse()
        .map_err(|e| invalid(key.of("url"), format!("{text:?} is not a URL ({e})")))?;
    let Some(host) = url.host() else {
        return Err(invalid(key.of("url"), format!("{text:?} has no host")));
    };
    match url.scheme_str() {
        Some("https") => Ok(url),
        Some("http") if w.allow_http || is_loopback(host) => Ok(url),
        Some("http") => Err(invalid(
            key.of("url"),
            format!("{text:?}: http:// is allowed only to a loopback address; use https://, or set allow_http = true to send events unencrypted"),
        )),
        _ => Err(invalid(
            key.of("url"),
            format!("{text:?} must be an https:// URL (or http:// to a loopback address)"),
        )),
    }
}

/// `localhost`, `127.0.0.0/8` or `::1`.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The signing key of `secret` or `secret_file`: `whsec_` + base64 of 24 to 64 bytes.
fn secret(key: Key, w: &RawWebhook) -> Result<WebhookSecret, ConfigError> {
    let (name, text) = match (w.secret.is_empty(), w.secret_file.is_empty()) {
        (false, true) => ("secret", w.secret.trim().to_string()),
        (true, false) => {
            let path = &w.secret_file;
            let text = std::fs::read_to_string(path).map_err(|e| {
                invalid(key.of("secret_file"), format!("cannot read {path}: {e}"))
            })?;
            ("secret_file", text.trim().to_string())
        }
        (true, true) => {
            return Err(invalid(
                key.of("secret"),
                "is required (or secret_file): the Standard Webhooks signing secret, whsec_ followed by base64",
            ))
        }
        (false, false) => {
            return Err(invalid(
                key.of("secret_file"),
                "set secret or secret_file, not both",
            ))
        }
    };
    let hint = "a Standard Webhooks secret is whsec_ followed by the base64 of 24 to 64 random bytes (e.g. echo whsec_$(openssl rand -base64 32))";
    let Some(b64) = text.strip_prefix("whsec_") else {
        return Err(invalid(
            key.of(name),
            format!("does not start with whsec_: {hint}"),
        ));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| {
            invalid(
                key.of(name),
                format!("is not valid base64 after whsec_: {hint}"),
            )
        })?;
    if !(MIN_SECRET..=MAX_SECRET).contains(&bytes.len()) {
        return Err(invalid(
            key.of(name),
            format!("decodes to {} bytes: {hint}", bytes.len()),
        ));
    }
    Ok(WebhookSecret(bytes))
}

/// At least one known event, none twice.
fn events(key: Key, names: &[String]) -> Result<Vec<WebhookEvent>, ConfigError> {
    if names.is_empty() {
        return Err(invalid(key.of("events"), "names no event"));
    }
    let mut out = Vec::new();
    for n in names {
        let Some(e) = WebhookEvent::ALL.into_iter().find(|e| e.as_str() == n) else {
            let known: Vec<&str> = WebhookEvent::ALL.iter().map(|e| e.as_str()).collect();
            return Err(invalid(
                key.of("events"),
                format!("{n:?} is not an event; expected {}", known.join(", ")),
            ));
        };
        if !out.contains(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

fn positive(key: Key, name: &str, text: &str) -> Result<Duration, ConfigError> {
    let d = parse_duration(&key.of(name), text)?;
    if d.is_zero() {
        return Err(invalid(key.of(name), "must be greater than zero"));
    }
    Ok(d)
}

fn at_least_one(key: Key, name: &str, n: usize) -> Result<usize, ConfigError> {
    match n {
        0 => Err(invalid(key.of(name), "must be at least 1")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::RawConfig;

    const UP: &str = "[[upstreams]]\nurl = \"http://127.0.0.1:9/mcp\"\n";
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn check(table: &str) -> Result<crate::config::Config, String> {
        let text = format!("{UP}[[webhooks]]\n{table}\n");
        RawConfig::from_toml(&text)?
            .validate()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_destination_needs_only_a_url_and_a_secret() {
        let c = check(&format!(
            "url = \"https://hooks.example.com/t\"\nsecret = \"{SECRET}\""
        ))
        .unwrap();
        let w = &c.webhooks[0];
        assert_eq!(w.name, "hooks.example.com");
        assert_eq!(w.events.len(), 4);
        assert_eq!(w.secret.0.len(), 24);
        assert_eq!(w.max_age, std::time::Duration::from_secs(24 * 3600));
        assert!(
            !format!("{w:?}").contains("MfKQ"),
            "the secret is never printed"
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let s = format!("secret = \"{SECRET}\"");
        for (table, key) in [
            (format!("url = \"ftp://x/\"\n{s}"), "webhooks[0].url"),
            (
                format!("url = \"http://hooks.example.com/\"\n{s}"),
                "webhooks[0].url",
            ),
            (format!("url = \"not a url\"\n{s}"), "webhooks[0].url"),
            (
                "url = \"https://x/\"\nsecret = \"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"".into(),
                "webhooks[0].secret",
            ),
            (
                "url = \"https://x/\"\nsecret = \"whsec_%%%\"".into(),
                "webhooks[0].secret",
            ),
            (
                "url = \"https://x/\"\nsecret = \"whsec_c2hvcnQ=\"".into(),
                "webhooks[0].secret",
            ),
            ("url = \"https://x/\"".into(), "webhooks[0].secret"),
            (
                format!("url = \"https://x/\"\n{s}\nevents = [\"task.done\"]"),
                "webhooks[0].events",
            ),
            (
                format!("url = \"https://x/\"\n{s}\nupstreams = [\"nope\"]"),
                "webhooks[0].upstreams",
            ),
            (
                format!("url = \"https://x/\"\n{s}\nmax_age = \"0\""),
                "webhooks[0].max_age",
            ),
            (
                format!("url = \"https://x/\"\n{s}\nconcurrency = 0"),
                "webhooks[0].concurrency",
            ),
            (
                format!("url = \"https://x/\"\n{s}\ntimeout = \"soon\""),
                "webhooks[0].timeout",
            ),
        ] {
            let e = check(&table).unwrap_err();
            assert!(e.contains(key), "{table}: {e}");
        }
    }

    #[test]
    fn plain_http_is_for_loopback_unless_allowed() {
        let s = format!("secret = \"{SECRET}\"");
        for url in [
            "http://127.0.0.1:9000/h",
            "http://localhost/h",
            "http://[::1]:80/h",
        ] {
            check(&format!("url = \"{url}\"\n{s}")).unwrap();
        }
        check(&format!(
            "url = \"http://hooks.lan/h\"\nallow_http = true\n{s}"
        ))
        .unwrap();
    }

    #[test]
    fn names_are_unique_and_secrets_are_not_printed() {
        let one = format!("url = \"https://x/a\"\nsecret = \"{SECRET}\"");
        let text = format!("{UP}[[webhooks]]\n{one}\n[[webhooks]]\n{one}\n");
        let raw = RawConfig::from_toml(&text).unwrap();
        let e = raw.validate().unwrap_err().to_string();
        assert!(e.contains("webhooks[1].name"), "{e}");
        assert!(!raw.to_toml().contains("MfKQ"), "{}", raw.to_toml());
    }
}
