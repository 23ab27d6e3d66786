//! `RawConfig` to `Config`: every check, each naming the key that is wrong.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

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
    /// hashing key, static header values, child environment values) redacted.
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
        let s = &self.server;
        let listen = s.listen.parse().map_err(|_| {
            invalid(
                "server.listen",
                format!("{:?} is not an address like 127.0.0.1:8080", s.listen),
            )
        })?;
        if s.max_body_bytes < 1024 {
            return Err(invalid("server.max_body_bytes", "must be at least 1024"));
        }
        let keepalive_interval =
            parse_duration("server.keepalive_interval", &s.keepalive_interval)?;
        if keepalive_interval.is_zero() {
            return Err(invalid(
                "server.keepalive_interval",
                "must be greater than zero",
            ));
        }
        if humantime::parse_duration(s.header_read_timeout.trim()).is_ok_and(|d| d.is_zero())
            || s.header_read_timeout.trim() == "0"
        {
            return Err(invalid(
                "server.header_read_timeout",
                "must be greater than zero",
            ));
        }
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
        let admin = self.validate_admin(listen)?;
        let telemetry = self.validate_telemetry()?;
        let auth = AuthConfig {
            mode: parse_auth_mode(&self.auth.mode, &self.auth.jwt)?,
            hash_key: (!self.auth.hash_key.is_empty()).then(|| self.auth.hash_key.clone()),
        };
        if self.upstreams.is_empty() {
            return Err(invalid(
                "upstreams",
                "no upstream configured: pass --upstream URL or add an [[upstreams]] table",
            ));
        }
        let mut upstreams = Vec::new();
        for (i, u) in self.upstreams.iter().enumerate() {
            let up = validate_upstream(i, u, &tasks)?;
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
        Ok(Config {
            server: ServerConfig {
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
                workers: match s.workers {
                    0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                    n if n > MAX_WORKERS => {
                        return Err(invalid(
                            "server.workers",
                            format!("must be at most {MAX_WORKERS} (0: one per CPU core)"),
                        ))
                    }
                    n => n,
                },
            },
            store: self.store_config()?,
            tasks,
            auth,
            legacy,
            limits: Limits {
                max_result_bytes: self.limits.max_result_bytes,
                max_concurrent_calls: self.limits.max_concurrent_calls,
                queue_timeout: parse_duration("limits.queue_timeout", &self.limits.queue_timeout)?,
                max_active_tasks_per_principal: self.limits.max_active_tasks_per_principal,
                poll_rate_limit: self.limits.poll_rate_limit,
            },
            admin,
            telemetry,
            upstreams,
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

fn validate_upstream(
    i: usize,
    u: &RawUpstream,
    d: &TaskDefaults,
) -> Result<UpstreamConfig, ConfigError> {
    let key = |k: &str| format!("upstreams[{i}].{k}");
    let transport = match (u.url.is_empty(), u.command.is_empty()) {
        (false, true) => {
            let url: http::Uri = u
                .url
                .parse()
                .map_err(|e| invalid(key("url"), format!("{:?} is not a URL ({e})", u.url)))?;
            match url.scheme_str() {
                Some("http") | Some("https") if url.host().is_some() => {}
                _ => {
                    return Err(invalid(
                        key("url"),
                        format!("{:?} must be an http:// or https:// URL", u.url),
                    ))
                }
            }
            if u.scope != "shared" {
                return Err(invalid(
                    key("scope"),
                    "is for stdio upstreams (command); an HTTP server keeps its callers apart itself, and tasklift opens a legacy server's sessions per caller",
                ));
            }
            Transport::Http {
                url,
                http2: u.http2,
            }
        }
        (true, false) => {
            if u.http2 {
                return Err(invalid(
                    key("http2"),
                    "is for url upstreams; a stdio child has no HTTP",
                ));
            }
            if u.processes == 0 {
                return Err(invalid(key("processes"), "must be at least 1"));
            }
            if u.command[0].is_empty() {
                return Err(invalid(key("command"), "the program name is empty"));
            }
            let scope = match u.scope.as_str() {
                "shared" => ChildScope::Shared,
                "principal" => ChildScope::Principal,
                "session" => ChildScope::Session,
                other => {
                    return Err(invalid(
                        key("scope"),
                        format!("{other:?} must be \"shared\", \"principal\" or \"session\""),
                    ))
                }
            };
            if u.max_scopes == 0 {
                return Err(invalid(key("max_scopes"), "must be at least 1"));
            }
            let scope_idle = parse_duration(&key("scope_idle"), &u.scope_idle)?;
            if scope_idle.is_zero() {
                return Err(invalid(key("scope_idle"), "must be longer than zero"));
            }
            Transport::Stdio(StdioConfig {
                command: u.command.clone(),
                env: u.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                cwd: (!u.cwd.is_empty()).then(|| PathBuf::from(&u.cwd)),
                processes: u.processes,
                max_processes: u.max_processes.max(u.processes),
                isolate_input: u.isolate_input,
                scope,
                scope_idle,
                max_scopes: u.max_scopes,
                probe_timeout: parse_duration(&key("probe_timeout"), &u.probe_timeout)?,
                shutdown_grace: parse_duration(&key("shutdown_grace"), &u.shutdown_grace)?,
            })
        }
        (true, true) => {
            return Err(invalid(
                key("url"),
                "set either url (Streamable HTTP) or command (stdio)",
            ))
        }
        (false, false) => {
            return Err(invalid(
                key("command"),
                "an upstream has either a url or a command, not both",
            ))
        }
    };
    if !u.path.starts_with('/') {
        return Err(invalid(key("path"), "must start with /"));
    }
    if u.name.is_empty() {
        return Err(invalid(key("name"), "must not be empty"));
    }
    let era = match u.era.as_str() {
        "auto" => EraSetting::Auto,
        "modern" => EraSetting::Modern,
        "legacy" => EraSetting::Legacy,
        other => {
            return Err(invalid(
                key("era"),
                format!("{other:?}: expected auto, modern or legacy"),
            ))
        }
    };
    let mut headers = Vec::new();
    for (k, v) in &u.headers {
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| invalid(key(&format!("headers.{k}")), "not a valid header name"))?;
        let value = http::HeaderValue::from_str(v)
            .map_err(|_| invalid(key(&format!("headers.{k}")), "not a valid header value"))?;
        headers.push((name, value));
    }
    let handles = non_task_clients(&key("non_task_clients"), &u.non_task_clients)?;
    let disconnect = on_disconnect(&key("on_disconnect"), &u.on_disconnect)?;
    let window = match u.replay_window.trim() {
        "" => None,
        w => Some(parse_duration(&key("replay_window"), w)?),
    };
    let default_policy = ToolPolicy {
        mode: ToolMode::Auto,
        threshold: d.threshold,
        ttl: d.ttl,
        poll_interval: d.poll_interval,
        non_task_clients: handles,
        on_disconnect: disconnect,
        replay_window: window.unwrap_or(d.ttl).min(d.ttl),
    };
    let mut tools = BTreeMap::new();
    for (name, r) in &u.tools {
        let k = |f: &str| key(&format!("tools.{name}.{f}"));
        let mode = match r.mode.as_deref().unwrap_or("auto") {
            "auto" => ToolMode::Auto,
            "never" => ToolMode::Never,
            "always" => ToolMode::Always,
            "required" => ToolMode::Required,
            other => {
                return Err(invalid(
                    k("mode"),
                    format!("{other:?}: expected auto, never, always or required"),
                ))
            }
        };
        let dur = |f: &str, v: &Option<String>, dflt: Duration| match v {
            Some(s) => parse_duration(&k(f), s),
            None => Ok(dflt),
        };
        let mut threshold = dur("threshold", &r.threshold, d.threshold)?;
        if matches!(mode, ToolMode::Always | ToolMode::Required) {
            threshold = Duration::ZERO;
        }
        let ttl = dur("ttl", &r.ttl, d.ttl)?;
        if ttl.is_zero() {
            return Err(invalid(k("ttl"), "must be greater than zero"));
        }
        let tool_window = match &r.replay_window {
            Some(w) => Some(parse_duration(&k("replay_window"), w)?),
            None => window,
        };
        tools.insert(
            name.clone(),
            ToolPolicy {
                mode,
                threshold,
                ttl,
                poll_interval: dur("poll_interval", &r.poll_interval, d.poll_interval)?,
                non_task_clients: match &r.non_task_clients {
                    Some(v) => non_task_clients(&k("non_task_clients"), v)?,
                    None => handles,
                },
                on_disconnect: match &r.on_disconnect {
                    Some(v) => on_disconnect(&k("on_disconnect"), v)?,
                    None => disconnect,
                },
                // A task is not kept past its TTL, so neither is its replay.
                replay_window: tool_window.unwrap_or(ttl).min(ttl),
            },
        );
    }
    if !["private", "public"].contains(&u.list_cache_scope.as_str()) {
        return Err(invalid(
            key("list_cache_scope"),
            "expected private or public",
        ));
    }
    Ok(UpstreamConfig {
        name: u.name.clone(),
        path: u.path.clone(),
        transport,
        era,
        forward_authorization: u.forward_authorization,
        headers,
        connect_timeout: parse_duration(&key("connect_timeout"), &u.connect_timeout)?,
        session_idle: parse_duration(&key("session_idle"), &u.session_idle)?,
        sessions_per_caller: match u.sessions_per_caller {
            0 => return Err(invalid(key("sessions_per_caller"), "must be at least 1")),
            n => n,
        },
        list_ttl_ms: u.list_ttl_ms,
        list_cache_scope: u.list_cache_scope.clone(),
        ca_file: (!u.ca_file.is_empty()).then(|| PathBuf::from(&u.ca_file)),
        tools,
        default_policy,
    })
}

fn non_task_clients(key: &str, v: &str) -> Result<NonTaskClients, ConfigError> {
    match v {
        "wait" => Ok(NonTaskClients::Wait),
        "tool_handles" => Ok(NonTaskClients::ToolHandles),
        other => Err(invalid(
            key,
            format!("{other:?}: expected wait or tool_handles"),
        )),
    }
}

fn on_disconnect(key: &str, v: &str) -> Result<OnDisconnect, ConfigError> {
    match v {
        "cancel" => Ok(OnDisconnect::Cancel),
        "detach" => Ok(OnDisconnect::Detach),
        other => Err(invalid(
            key,
            format!("{other:?}: expected cancel or detach"),
        )),
    }
}
