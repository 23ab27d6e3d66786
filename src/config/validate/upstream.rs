//! One `[[upstreams]]` table to an `UpstreamConfig`: its transport, mount, headers
//! and tool policies, each error naming the key under `upstreams[i]`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::*;

/// Names keys under `upstreams[i]`, so every error points into its table.
#[derive(Clone, Copy)]
struct Key(usize);

impl Key {
    fn of(self, k: &str) -> String {
        format!("upstreams[{}].{k}", self.0)
    }
}

/// Validate `upstreams[i]`; tool policies fall back on `d`, the `[tasks]` defaults.
pub(super) fn validate_upstream(
    i: usize,
    u: &RawUpstream,
    d: &TaskDefaults,
) -> Result<UpstreamConfig, ConfigError> {
    let key = Key(i);
    let transport = transport(key, u)?;
    check_mount(key, u)?;
    let era = era(key, &u.era)?;
    let headers = static_headers(key, u)?;
    let (default_policy, window) = default_policy(key, u, d)?;
    let tools = tool_policies(key, u, &default_policy, window)?;
    check_list_cache_scope(key, u)?;
    Ok(UpstreamConfig {
        name: u.name.clone(),
        path: u.path.clone(),
        transport,
        era,
        forward_authorization: u.forward_authorization,
        headers,
        connect_timeout: parse_duration(&key.of("connect_timeout"), &u.connect_timeout)?,
        session_idle: parse_duration(&key.of("session_idle"), &u.session_idle)?,
        sessions_per_caller: match u.sessions_per_caller {
            0 => return Err(invalid(key.of("sessions_per_caller"), "must be at least 1")),
            n => n,
        },
        list_ttl_ms: u.list_ttl_ms,
        list_cache_scope: u.list_cache_scope.clone(),
        ca_file: (!u.ca_file.is_empty()).then(|| PathBuf::from(&u.ca_file)),
        tools,
        default_policy,
    })
}

/// Exactly one of `url` (Streamable HTTP) and `command` (stdio).
fn transport(key: Key, u: &RawUpstream) -> Result<Transport, ConfigError> {
    match (u.url.is_empty(), u.command.is_empty()) {
        (false, true) => http_transport(key, u),
        (true, false) => stdio_transport(key, u),
        (true, true) => Err(invalid(
            key.of("url"),
            "set either url (Streamable HTTP) or command (stdio)",
        )),
        (false, false) => Err(invalid(
            key.of("command"),
            "an upstream has either a url or a command, not both",
        )),
    }
}

/// A url upstream: an http(s) URL with a host, and no stdio-only `scope`.
fn http_transport(key: Key, u: &RawUpstream) -> Result<Transport, ConfigError> {
    let url: http::Uri = u
        .url
        .parse()
        .map_err(|e| invalid(key.of("url"), format!("{:?} is not a URL ({e})", u.url)))?;
    match url.scheme_str() {
        Some("http") | Some("https") if url.host().is_some() => {}
        _ => {
            return Err(invalid(
                key.of("url"),
                format!("{:?} must be an http:// or https:// URL", u.url),
            ))
        }
    }
    if u.scope != "shared" {
        return Err(invalid(
            key.of("scope"),
            "is for stdio upstreams (command); an HTTP server keeps its callers apart itself, and tasklift opens a legacy server's sessions per caller",
        ));
    }
    Ok(Transport::Http {
        url,
        http2: u.http2,
    })
}

/// A command upstream: no `http2`, a program, at least one process, a scope.
fn stdio_transport(key: Key, u: &RawUpstream) -> Result<Transport, ConfigError> {
    if u.http2 {
        return Err(invalid(
            key.of("http2"),
            "is for url upstreams; a stdio child has no HTTP",
        ));
    }
    if u.processes == 0 {
        return Err(invalid(key.of("processes"), "must be at least 1"));
    }
    if u.command[0].is_empty() {
        return Err(invalid(key.of("command"), "the program name is empty"));
    }
    let scope = child_scope(key, &u.scope)?;
    if u.max_scopes == 0 {
        return Err(invalid(key.of("max_scopes"), "must be at least 1"));
    }
    let scope_idle = parse_duration(&key.of("scope_idle"), &u.scope_idle)?;
    if scope_idle.is_zero() {
        return Err(invalid(key.of("scope_idle"), "must be longer than zero"));
    }
    Ok(Transport::Stdio(StdioConfig {
        command: u.command.clone(),
        env: u.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        cwd: (!u.cwd.is_empty()).then(|| PathBuf::from(&u.cwd)),
        processes: u.processes,
        max_processes: u.max_processes.max(u.processes),
        isolate_input: u.isolate_input,
        scope,
        scope_idle,
        max_scopes: u.max_scopes,
        probe_timeout: parse_duration(&key.of("probe_timeout"), &u.probe_timeout)?,
        shutdown_grace: parse_duration(&key.of("shutdown_grace"), &u.shutdown_grace)?,
    }))
}

fn child_scope(key: Key, scope: &str) -> Result<ChildScope, ConfigError> {
    match scope {
        "shared" => Ok(ChildScope::Shared),
        "principal" => Ok(ChildScope::Principal),
        "session" => Ok(ChildScope::Session),
        other => Err(invalid(
            key.of("scope"),
            format!("{other:?} must be \"shared\", \"principal\" or \"session\""),
        )),
    }
}

/// Where the upstream is mounted and what it is called.
fn check_mount(key: Key, u: &RawUpstream) -> Result<(), ConfigError> {
    if !u.path.starts_with('/') {
        return Err(invalid(key.of("path"), "must start with /"));
    }
    if u.name.is_empty() {
        return Err(invalid(key.of("name"), "must not be empty"));
    }
    Ok(())
}

fn era(key: Key, era: &str) -> Result<EraSetting, ConfigError> {
    match era {
        "auto" => Ok(EraSetting::Auto),
        "modern" => Ok(EraSetting::Modern),
        "legacy" => Ok(EraSetting::Legacy),
        other => Err(invalid(
            key.of("era"),
            format!("{other:?}: expected auto, modern or legacy"),
        )),
    }
}

/// `headers`: each must be sendable as it is on every request.
fn static_headers(
    key: Key,
    u: &RawUpstream,
) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, ConfigError> {
    let mut headers = Vec::new();
    for (k, v) in &u.headers {
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| invalid(key.of(&format!("headers.{k}")), "not a valid header name"))?;
        let value = http::HeaderValue::from_str(v)
            .map_err(|_| invalid(key.of(&format!("headers.{k}")), "not a valid header value"))?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// The policy of a tool with no `[upstreams.tools.NAME]` table, and the upstream's
/// `replay_window` as set (the tools' tables fall back on it, under their own TTL).
fn default_policy(
    key: Key,
    u: &RawUpstream,
    d: &TaskDefaults,
) -> Result<(ToolPolicy, Option<Duration>), ConfigError> {
    let handles = non_task_clients(&key.of("non_task_clients"), &u.non_task_clients)?;
    let disconnect = on_disconnect(&key.of("on_disconnect"), &u.on_disconnect)?;
    let window = match u.replay_window.trim() {
        "" => None,
        w => Some(parse_duration(&key.of("replay_window"), w)?),
    };
    let policy = ToolPolicy {
        mode: ToolMode::Auto,
        threshold: d.threshold,
        ttl: d.ttl,
        poll_interval: d.poll_interval,
        non_task_clients: handles,
        on_disconnect: disconnect,
        replay_window: window.unwrap_or(d.ttl).min(d.ttl),
    };
    Ok((policy, window))
}

/// Every `[upstreams.tools.NAME]`, folded over the upstream's defaults.
fn tool_policies(
    key: Key,
    u: &RawUpstream,
    dflt: &ToolPolicy,
    window: Option<Duration>,
) -> Result<BTreeMap<String, ToolPolicy>, ConfigError> {
    let mut tools = BTreeMap::new();
    for (name, r) in &u.tools {
        let k = |f: &str| key.of(&format!("tools.{name}.{f}"));
        tools.insert(name.clone(), tool_policy(&k, r, dflt, window)?);
    }
    Ok(tools)
}

/// One tool's rule; what it leaves out comes from `dflt` (and `window`).
fn tool_policy(
    k: &dyn Fn(&str) -> String,
    r: &RawToolRule,
    dflt: &ToolPolicy,
    window: Option<Duration>,
) -> Result<ToolPolicy, ConfigError> {
    let mode = tool_mode(&k("mode"), r.mode.as_deref().unwrap_or("auto"))?;
    let dur = |f: &str, v: &Option<String>, d: Duration| match v {
        Some(s) => parse_duration(&k(f), s),
        None => Ok(d),
    };
    let mut threshold = dur("threshold", &r.threshold, dflt.threshold)?;
    if matches!(mode, ToolMode::Always | ToolMode::Required) {
        threshold = Duration::ZERO;
    }
    let ttl = dur("ttl", &r.ttl, dflt.ttl)?;
    if ttl.is_zero() {
        return Err(invalid(k("ttl"), "must be greater than zero"));
    }
    let tool_window = match &r.replay_window {
        Some(w) => Some(parse_duration(&k("replay_window"), w)?),
        None => window,
    };
    Ok(ToolPolicy {
        mode,
        threshold,
        ttl,
        poll_interval: dur("poll_interval", &r.poll_interval, dflt.poll_interval)?,
        non_task_clients: match &r.non_task_clients {
            Some(v) => non_task_clients(&k("non_task_clients"), v)?,
            None => dflt.non_task_clients,
        },
        on_disconnect: match &r.on_disconnect {
            Some(v) => on_disconnect(&k("on_disconnect"), v)?,
            None => dflt.on_disconnect,
        },
        // A task is not kept past its TTL, so neither is its replay.
        replay_window: tool_window.unwrap_or(ttl).min(ttl),
    })
}

fn tool_mode(key: &str, v: &str) -> Result<ToolMode, ConfigError> {
    match v {
        "auto" => Ok(ToolMode::Auto),
        "never" => Ok(ToolMode::Never),
        "always" => Ok(ToolMode::Always),
        "required" => Ok(ToolMode::Required),
        other => Err(invalid(
            key,
            format!("{other:?}: expected auto, never, always or required"),
        )),
    }
}

fn check_list_cache_scope(key: Key, u: &RawUpstream) -> Result<(), ConfigError> {
    if !["private", "public"].contains(&u.list_cache_scope.as_str()) {
        return Err(invalid(
            key.of("list_cache_scope"),
            "expected private or public",
        ));
    }
    Ok(())
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
