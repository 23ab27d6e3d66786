//! `RawConfig` to `Config`: every check, each naming the key that is wrong. One
//! `[[upstreams]]` table is checked in [`upstream`], one `[[webhooks]]` table in
//! [`webhook`].

mod upstream;
mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use upstream::validate_upstream;
use webhook::validate_webhook;

/// The most front-door threads `server.workers` may ask for.
const MAX_WORKERS: usize = 256;

impl RawConfig {
    /// Read a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parse TOML text.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The effective configuration as TOML (for `check-config`), with secrets (the
    /// hashing key, static header values, child environment values, webhook
    /// secrets) redacted.
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        if !shown.auth.hash_key.is_empty() {
            shown.auth.hash_key = REDACTED.into();
        }
        if !shown.auth.jwt.hs256_secret.is_empty() {
            shown.auth.jwt.hs256_secret = REDACTED.into();
        }
        shown.store.url = redact_url_credentials(&shown.store.url);
        shown.telemetry.otlp_endpoint = redact_url_credentials(&shown.telemetry.otlp_endpoint);
        shown
            .telemetry
            .otlp_headers
            .values_mut()
            .for_each(|v| *v = REDACTED.into());
        for u in &mut shown.upstreams {
            u.url = redact_url_credentials(&u.url);
            u.headers.values_mut().for_each(|v| *v = REDACTED.into());
            u.env.values_mut().for_each(|v| *v = REDACTED.into());
        }
        for w in &mut shown.webhooks {
            w.url = redact_url_credentials(&w.url);
            if !w.secret.is_empty() {
                w.secret = REDACTED.into();
            }
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
    }

    /// Validate `[store]`.
    fn store_config(&self) -> Result<StoreConfig, ConfigError> {
        let st = &self.store;
        let url = Some(st.url.trim().to_string()).filter(|u| !u.is_empty());
        if let Some(u) = &url {
            if !(u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                return Err(invalid(
                    "store.url",
                    format!(
                        "{} is not a PostgreSQL URL (postgres://user@host:5432/db)",
                        redact_url_credentials(u)
                    ),
                ));
            }
        }
        let lease = parse_duration("store.lease", &st.lease)?;
        if lease < Duration::from_millis(500) {
            return Err(invalid("store.lease", "must be at least 500ms"));
        }
        if st.pool_size == 0 {
            return Err(invalid("store.pool_size", "must be at least 1"));
        }
        Ok(StoreConfig {
            data_dir: PathBuf::from(&st.data_dir),
            large_result_bytes: st.large_result_bytes,
            min_free_bytes: st.min_free_bytes,
            url,
            pool_size: st.pool_size,
            ca_file: Some(st.ca_file.trim())
                .filter(|f| !f.is_empty())
                .map(PathBuf::from),
            lease,
        })
    }

    /// Validate everything; the first problem names its key.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let listen = self.listen_address()?;
        self.check_max_body_bytes()?;
        let keepalive_interval = self.keepalive_interval()?;
        self.check_header_read_timeout()?;
        let tasks = self.task_defaults()?;
        let legacy = self.legacy_config()?;
        let admin = self.validate_admin(listen)?;
        let telemetry = self.validate_telemetry()?;
        let auth = self.auth_config()?;
        let upstreams = self.validate_upstreams(&tasks)?;
        let webhooks = self.validate_webhooks(&upstreams)?;
        Ok(Config {
            server: self.server_config(listen, keepalive_interval)?,
            store: self.store_config()?,
            tasks,
            auth,
            legacy,
            limits: self.limits()?,
            admin,
            telemetry,
            upstreams,
            webhooks,
        })
    }

    /// Every `[[webhooks]]` table, no two with the same name.
    fn validate_webhooks(
        &self,
        upstreams: &[UpstreamConfig],
    ) -> Result<Vec<WebhookConfig>, ConfigError> {
        let mut out: Vec<WebhookConfig> = Vec::new();
        for (i, w) in self.webhooks.iter().enumerate() {
            let hook = validate_webhook(i, w, upstreams)?;
            if out.iter().any(|o| o.name == hook.name) {
                return Err(invalid(
                    format!("webhooks[{i}].name"),
                    format!(
                        "{:?} is used twice: give each destination its own name",
                        hook.name
                    ),
                ));
            }
            out.push(hook);
        }
        Ok(out)
    }

    fn listen_address(&self) -> Result<SocketAddr, ConfigError> {
        let s = &self.server;
        s.listen.parse().map_err(|_| {
            invalid(
                "server.listen",
                format!("{:?} is not an address like 127.0.0.1:8080", s.listen),
            )
        })
    }

    fn check_max_body_bytes(&self) -> Result<(), ConfigError> {
        if self.server.max_body_bytes < 1024 {
            return Err(invalid("server.max_body_bytes", "must be at least 1024"));
        }
        Ok(())
    }

    fn keepalive_interval(&self) -> Result<Duration, ConfigError> {
        let interval =
            parse_duration("server.keepalive_interval", &self.server.keepalive_interval)?;
        if interval.is_zero() {
            return Err(invalid(
                "server.keepalive_interval",
                "must be greater than zero",
            ));
        }
        Ok(interval)
    }

    /// Only zero is refused here; a malformed value is reported with the rest of
    /// `[server]` in `server_config`.
    fn check_header_read_timeout(&self) -> Result<(), ConfigError> {
        let text = self.server.header_read_timeout.trim();
        if humantime::parse_duration(text).is_ok_and(|d| d.is_zero()) || text == "0" {
            return Err(invalid(
                "server.header_read_timeout",
                "must be greater than zero",
            ));
        }
        Ok(())
    }

    /// `[tasks]`: the defaults every tool policy starts from.
    fn task_defaults(&self) -> Result<TaskDefaults, ConfigError> {
        let t = &self.tasks;
        let tasks = TaskDefaults {
            threshold: parse_duration("tasks.threshold", &t.threshold)?,
            ttl: parse_duration("tasks.ttl", &t.ttl)?,
            poll_interval: parse_duration("tasks.poll_interval", &t.poll_interval)?,
            sweep_interval: parse_duration("tasks.sweep_interval", &t.sweep_interval)?,
            expired_grace: parse_duration("tasks.expired_grace", &t.expired_grace)?,
            max_wait: parse_duration("tasks.max_wait", &t.max_wait)?,
        };
        if tasks.max_wait.is_zero() {
            return Err(invalid("tasks.max_wait", "must be greater than zero"));
        }
        if tasks.ttl.is_zero() {
            return Err(invalid("tasks.ttl", "must be greater than zero"));
        }
        if tasks.sweep_interval.is_zero() {
            return Err(invalid("tasks.sweep_interval", "must be greater than zero"));
        }
        Ok(tasks)
    }

    fn legacy_config(&self) -> Result<LegacyConfig, ConfigError> {
        let l = &self.legacy;
        let legacy = LegacyConfig {
            enabled: l.enabled,
            session_idle: parse_duration("legacy.session_idle", &l.session_idle)?,
            max_sessions_per_principal: l.max_sessions_per_principal,
            sse_retry: parse_duration("legacy.sse_retry", &l.sse_retry)?,
            stream_max: parse_duration("legacy.stream_max", &l.stream_max)?,
        };
        if legacy.session_idle.is_zero() {
            return Err(invalid("legacy.session_idle", "must be greater than zero"));
        }
        if legacy.max_sessions_per_principal == 0 {
            return Err(invalid(
                "legacy.max_sessions_per_principal",
                "must be at least 1",
            ));
        }
        Ok(legacy)
    }

    fn auth_config(&self) -> Result<AuthConfig, ConfigError> {
        Ok(AuthConfig {
            mode: parse_auth_mode(&self.auth.mode, &self.auth.jwt)?,
            hash_key: (!self.auth.hash_key.is_empty()).then(|| self.auth.hash_key.clone()),
        })
    }

    /// At least one upstream, and no two sharing a path or a name.
    fn validate_upstreams(&self, tasks: &TaskDefaults) -> Result<Vec<UpstreamConfig>, ConfigError> {
        if self.upstreams.is_empty() {
            return Err(invalid(
                "upstreams",
                "no upstream configured: pass --upstream URL or add an [[upstreams]] table",
            ));
        }
        let mut upstreams = Vec::new();
        for (i, u) in self.upstreams.iter().enumerate() {
            let up = validate_upstream(i, u, tasks)?;
            if upstreams.iter().any(|o: &UpstreamConfig| o.path == up.path) {
                return Err(invalid(
                    format!("upstreams[{i}].path"),
                    format!("{} is mounted twice", up.path),
                ));
            }
            if upstreams.iter().any(|o: &UpstreamConfig| o.name == up.name) {
                return Err(invalid(
                    format!("upstreams[{i}].name"),
                    format!("{:?} is used twice", up.name),
                ));
            }
            upstreams.push(up);
        }
        Ok(upstreams)
    }

    /// `[server]` from the values checked first and the rest of its keys.
    fn server_config(
        &self,
        listen: SocketAddr,
        keepalive_interval: Duration,
    ) -> Result<ServerConfig, ConfigError> {
        let s = &self.server;
        Ok(ServerConfig {
            listen,
            allowed_origins: s.allowed_origins.clone(),
            max_body_bytes: s.max_body_bytes,
            keepalive_interval,
            metrics: s.metrics,
            shutdown_grace: parse_duration("server.shutdown_grace", &s.shutdown_grace)?,
            header_read_timeout: parse_duration(
                "server.header_read_timeout",
                &s.header_read_timeout,
            )?,
            lenient_task_name_header: s.lenient_task_name_header,
            workers: worker_count(s.workers)?,
        })
    }

    fn limits(&self) -> Result<Limits, ConfigError> {
        let l = &self.limits;
        Ok(Limits {
            max_result_bytes: l.max_result_bytes,
            max_concurrent_calls: l.max_concurrent_calls,
            queue_timeout: parse_duration("limits.queue_timeout", &l.queue_timeout)?,
            max_active_tasks_per_principal: l.max_active_tasks_per_principal,
            poll_rate_limit: l.poll_rate_limit,
        })
    }

    /// `[telemetry]`: an http(s) URL or empty, headers that can be sent, a ratio.
    fn validate_telemetry(&self) -> Result<TelemetryConfig, ConfigError> {
        let t = &self.telemetry;
        let text = t.otlp_endpoint.trim();
        let endpoint = match text {
            "" => None,
            _ => {
                let uri: http::Uri = text.parse().map_err(|e| {
                    invalid(
                        "telemetry.otlp_endpoint",
                        format!("{text:?} is not a URL: {e}"),
                    )
                })?;
                if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                    return Err(invalid(
                        "telemetry.otlp_endpoint",
                        format!("{text:?}: give an http:// or https:// URL, e.g. http://otel-collector:4318/v1/traces"),
                    ));
                }
                Some(uri)
            }
        };
        let mut headers = Vec::new();
        for (k, v) in &t.otlp_headers {
            let key = format!("telemetry.otlp_headers.{k}");
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| invalid(key.clone(), "not a valid HTTP header name"))?;
            let mut value = http::HeaderValue::from_str(v)
                .map_err(|_| invalid(key, "not a valid HTTP header value"))?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        if !(0.0..=1.0).contains(&t.sample_ratio) {
            return Err(invalid(
                "telemetry.sample_ratio",
                "must be between 0.0 (no new traces) and 1.0 (all)",
            ));
        }
        if t.service_name.trim().is_empty() {
            return Err(invalid("telemetry.service_name", "must not be empty"));
        }
        Ok(TelemetryConfig {
            endpoint,
            headers,
            service_name: t.service_name.trim().to_string(),
            sample_ratio: t.sample_ratio,
        })
    }

    /// `[admin]`: an address, or empty for none; not the front door's own.
    fn validate_admin(&self, front: SocketAddr) -> Result<AdminConfig, ConfigError> {
        let text = self.admin.listen.trim();
        if text.is_empty() {
            return Ok(AdminConfig::default());
        }
        let addr: SocketAddr = text.parse().map_err(|_| {
            invalid(
                "admin.listen",
                format!("{text:?} is not an address like 127.0.0.1:9090"),
            )
        })?;
        if addr == front && addr.port() != 0 {
            return Err(invalid(
                "admin.listen",
                format!("{addr} is server.listen too: give the admin listener its own port"),
            ));
        }
        Ok(AdminConfig {
            listen: Some(addr),
            allowed_hosts: self.admin.allowed_hosts.clone(),
        })
    }
}

fn parse_auth_mode(s: &str, jwt: &RawJwt) -> Result<AuthMode, ConfigError> {
    match s {
        "none" => Ok(AuthMode::None),
        "bearer" => Ok(AuthMode::Bearer),
        "jwt" => {
            let leeway = parse_duration("auth.jwt.leeway", &jwt.leeway)?;
            Ok(AuthMode::Jwt(JwtKeys::load(jwt, leeway)?))
        }
        _ => match s.strip_prefix("header:") {
            Some(name) if http::HeaderName::from_bytes(name.as_bytes()).is_ok() => {
                Ok(AuthMode::Header(name.to_ascii_lowercase()))
            }
            _ => Err(invalid(
                "auth.mode",
                format!("{s:?}: expected none, bearer, header:NAME or jwt"),
            )),
        },
    }
}

/// `server.workers`: 0 is one thread per CPU core.
fn worker_count(n: usize) -> Result<usize, ConfigError> {
    match n {
        0 => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
        n if n > MAX_WORKERS => Err(invalid(
            "server.workers",
            format!("must be at most {MAX_WORKERS} (0: one per CPU core)"),
        )),
        n => Ok(n),
    }
}
