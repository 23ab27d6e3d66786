//! Configuration: the TOML file, CLI overrides, validation, and every default in one
//! place. A `RawConfig` is what the file says (with defaults filled in); `Config` is
//! the validated form the rest of tasklift uses. Invalid configuration is reported
//! with the key that is wrong, before any port is bound.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// What `check-config` prints in place of a secret.
const REDACTED: &str = "<redacted>";

/// The file as written, with defaults filled in. Printed by `check-config`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    /// The front door.
    pub server: RawServer,
    /// Where tasks are kept.
    pub store: RawStore,
    /// Task defaults.
    pub tasks: RawTasks,
    /// How callers are identified.
    pub auth: RawAuth,
    /// Legacy clients (2025-03-26 … 2025-11-25) and their sessions.
    pub legacy: RawLegacy,
    /// Limits on results, concurrent calls and running tasks.
    pub limits: RawLimits,
    /// The admin listener (status page, metrics, health), off unless set.
    pub admin: RawAdmin,
    /// The servers tasklift fronts, each at its own path.
    pub upstreams: Vec<RawUpstream>,
}

/// `[admin]`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawAdmin {
    /// Address of the admin listener (`/`, `/metrics`, `/healthz`, `/readyz`);
    /// empty: no admin listener.
    pub listen: String,
    /// Host names the admin listener answers to besides IP addresses and `localhost`
    /// (requests addressed to any other name get 403: DNS rebinding protection).
    pub allowed_hosts: Vec<String>,
}

/// `[limits]` (0: no limit).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLimits {
    /// Largest result a task may store, in bytes; a larger one fails the task.
    pub max_result_bytes: usize,
    /// Calls running at once per upstream; more wait in a queue.
    pub max_concurrent_calls: usize,
    /// How long a call may wait in that queue before it is refused.
    pub queue_timeout: String,
    /// Tasks running at once per principal; a call that could become one more is refused.
    pub max_active_tasks_per_principal: usize,
    /// Refuse `tasks/get` polls of a task faster than half its `pollIntervalMs`.
    pub poll_rate_limit: bool,
}

impl Default for RawLimits {
    fn default() -> Self {
        Self {
            max_result_bytes: 16 * 1024 * 1024,
            max_concurrent_calls: 0,
            queue_timeout: "30s".into(),
            max_active_tasks_per_principal: 0,
            poll_rate_limit: false,
        }
    }
}

/// `[legacy]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLegacy {
    /// Serve legacy clients (`initialize`, sessions, the GET stream) beside modern ones.
    pub enabled: bool,
    /// A session unused for this long is closed (and its upstream session with it).
    pub session_idle: String,
    /// Most open sessions per principal; the least recently used idle one makes room.
    pub max_sessions_per_principal: usize,
    /// The `retry` delay tasklift's SSE streams suggest to 2025-11-25 clients.
    pub sse_retry: String,
    /// How long one HTTP response may carry a 2025-11-25 client's stream before
    /// tasklift closes it and the client resumes with `Last-Event-ID` (SSE polling,
    /// so no response outlives a proxy's timeout); `"0"` keeps streams open.
    pub stream_max: String,
}

impl Default for RawLegacy {
    fn default() -> Self {
        Self {
            enabled: true,
            session_idle: "30m".into(),
            max_sessions_per_principal: 64,
            sse_retry: "1s".into(),
            stream_max: "0".into(),
        }
    }
}

/// Validated `[legacy]`.
#[derive(Debug, Clone)]
pub struct LegacyConfig {
    /// Serve legacy clients.
    pub enabled: bool,
    /// Idle time after which a session closes.
    pub session_idle: Duration,
    /// Session cap per principal.
    pub max_sessions_per_principal: usize,
    /// SSE `retry` for 2025-11-25 clients.
    pub sse_retry: Duration,
    /// Longest time one response carries a 2025-11-25 client's stream (zero: no limit).
    pub stream_max: Duration,
}

/// `[server]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawServer {
    /// Address to listen on.
    pub listen: String,
    /// Origins allowed besides localhost ones; `"*"` allows any.
    pub allowed_origins: Vec<String>,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Interval between SSE keep-alive comments while a synchronous call waits.
    pub keepalive_interval: String,
    /// Serve Prometheus metrics at `/metrics` on this listener.
    pub metrics: bool,
    /// At shutdown, how long calls in progress and running tasks may take to finish
    /// before they are cancelled upstream.
    pub shutdown_grace: String,
    /// A connection that has not sent a request's headers within this time is closed.
    pub header_read_timeout: String,
    /// Accept a `tasks/*` request that lacks the `Mcp-Name` header (and only that
    /// header, only on `tasks/*`), taking the task id from the body. Off by default:
    /// 2026-07-28 requires the header. fastmcp-tasks 4.1 omits it; each client that
    /// relies on this is logged once.
    pub lenient_task_name_header: bool,
}

impl Default for RawServer {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            keepalive_interval: "15s".into(),
            metrics: true,
            shutdown_grace: "10s".into(),
            header_read_timeout: "30s".into(),
            lenient_task_name_header: false,
        }
    }
}

/// `[store]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawStore {
    /// Directory for the embedded store.
    pub data_dir: String,
    /// Results larger than this are kept as separate files so that deleting them frees disk.
    pub large_result_bytes: usize,
    /// A PostgreSQL URL (`postgres://user@host/db`) to share tasks between replicas;
    /// empty: the embedded store in `data_dir`.
    pub url: String,
    /// Connections to PostgreSQL per replica.
    pub pool_size: usize,
    /// Extra root certificates (PEM) for PostgreSQL over TLS (`?sslmode=require`).
    pub ca_file: String,
    /// How long a replica's claim on its running tasks lasts without renewal (it is
    /// renewed every third of this); when it lapses, the other replicas fail them.
    pub lease: String,
}

impl Default for RawStore {
    fn default() -> Self {
        Self {
            data_dir: "./tasklift-data".into(),
            large_result_bytes: 64 * 1024,
            url: String::new(),
            pool_size: 16,
            ca_file: String::new(),
            lease: "15s".into(),
        }
    }
}

/// `[tasks]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTasks {
    /// How long a `tools/call` may run before it becomes a task.
    pub threshold: String,
    /// How long a task is kept after creation.
    pub ttl: String,
    /// Suggested polling interval given to clients.
    pub poll_interval: String,
    /// How often expired tasks are swept.
    pub sweep_interval: String,
    /// How long a task failed for running past its TTL stays readable before deletion.
    pub expired_grace: String,
}

impl Default for RawTasks {
    fn default() -> Self {
        Self {
            threshold: "2s".into(),
            ttl: "1h".into(),
            poll_interval: "1s".into(),
            sweep_interval: "30s".into(),
            expired_grace: "5m".into(),
        }
    }
}

/// `[auth]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAuth {
    /// `none`, `bearer`, `header:NAME`, or `jwt`.
    pub mode: String,
    /// Key for hashing credentials into principals; generated into the data dir if empty.
    pub hash_key: String,
    /// Keys and checks for `mode = "jwt"`.
    pub jwt: RawJwt,
}

impl Default for RawAuth {
    fn default() -> Self {
        Self {
            mode: "none".into(),
            hash_key: String::new(),
            jwt: RawJwt::default(),
        }
    }
}

/// `[auth.jwt]`: a bearer JWT's verified `iss` + `sub` is the principal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawJwt {
    /// HS256 shared secret (at least 32 bytes).
    pub hs256_secret: String,
    /// A file holding the HS256 secret (trailing whitespace ignored).
    pub hs256_secret_file: String,
    /// A PEM public key, RSA (RS256) or EC P-256 (ES256).
    pub public_key_file: String,
    /// A local JWKS file; keys are picked by the token's `kid` and `alg`.
    pub jwks_file: String,
    /// Required `aud` (one of the token's audiences); empty: not checked.
    pub audience: String,
    /// Accepted `iss` values; empty: any.
    pub issuers: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: String,
}

impl Default for RawJwt {
    fn default() -> Self {
        Self {
            hs256_secret: String::new(),
            hs256_secret_file: String::new(),
            public_key_file: String::new(),
            jwks_file: String::new(),
            audience: String::new(),
            issuers: Vec::new(),
            leeway: "60s".into(),
        }
    }
}

/// `[[upstreams]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawUpstream {
    /// Name used in logs and task records.
    pub name: String,
    /// Path tasklift serves this upstream at.
    pub path: String,
    /// The upstream's Streamable HTTP endpoint (or use `command`).
    pub url: String,
    /// A stdio upstream: the command and its arguments (instead of `url`).
    pub command: Vec<String>,
    /// stdio: extra environment variables for the child.
    pub env: BTreeMap<String, String>,
    /// stdio: working directory of the child (default: tasklift's).
    pub cwd: String,
    /// stdio: how many child processes to run; calls are spread across them.
    pub processes: usize,
    /// stdio: the pool may grow to this many child processes (0: `processes`), so
    /// that with `isolate_input` calls still run side by side.
    pub max_processes: usize,
    /// stdio: at most one call that may ask the client for input (a `tools/call`,
    /// `prompts/get`, …) per child process at a time. A child's requests to the client
    /// carry no link to the call that caused them; with one such call per child they
    /// are attributed exactly, otherwise tasklift refuses them (the client is never
    /// asked on another caller's behalf). Turn on for servers that elicit or sample.
    pub isolate_input: bool,
    /// stdio: how long to wait for an answer to the `server/discover` probe before
    /// treating the child as a legacy server.
    pub probe_timeout: String,
    /// stdio: at shutdown, how long a child gets after its stdin closes before SIGTERM
    /// (and as long again before SIGKILL).
    pub shutdown_grace: String,
    /// `auto` (detect), `modern` or `legacy`.
    pub era: String,
    /// Forward the caller's `Authorization` header upstream.
    pub forward_authorization: bool,
    /// Static headers added to every upstream request.
    pub headers: BTreeMap<String, String>,
    /// Timeout for connecting to the upstream.
    pub connect_timeout: String,
    /// Idle legacy sessions are closed (DELETE) after this long.
    pub session_idle: String,
    /// Legacy HTTP upstream: how many sessions tasklift may open for one caller, so
    /// that each concurrent call that may ask the client for input has a session of
    /// its own (a request on a session's GET stream names no call).
    pub sessions_per_caller: usize,
    /// `ttlMs` added to list results relayed from legacy upstreams.
    pub list_ttl_ms: u64,
    /// `cacheScope` added to list results relayed from legacy upstreams.
    pub list_cache_scope: String,
    /// Extra CA certificates (PEM) trusted for an `https://` upstream, besides the system's.
    pub ca_file: String,
    /// Per-tool rules, by tool name.
    pub tools: BTreeMap<String, RawToolRule>,
}

impl Default for RawUpstream {
    fn default() -> Self {
        Self {
            name: "default".into(),
            path: "/mcp".into(),
            url: String::new(),
            command: Vec::new(),
            env: BTreeMap::new(),
            cwd: String::new(),
            processes: 1,
            max_processes: 0,
            isolate_input: false,
            probe_timeout: "3s".into(),
            shutdown_grace: "3s".into(),
            era: "auto".into(),
            forward_authorization: false,
            headers: BTreeMap::new(),
            connect_timeout: "5s".into(),
            session_idle: "5m".into(),
            sessions_per_caller: 8,
            list_ttl_ms: 0,
            list_cache_scope: "private".into(),
            ca_file: String::new(),
            tools: BTreeMap::new(),
        }
    }
}

/// `[upstreams.tools.NAME]`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawToolRule {
    /// `auto` (threshold), `never`, `always` or `required`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Threshold for this tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<String>,
    /// TTL for this tool's tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// Poll interval for this tool's tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<String>,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Front door settings.
    pub server: ServerConfig,
    /// Store settings.
    pub store: StoreConfig,
    /// Task defaults.
    pub tasks: TaskDefaults,
    /// Principal extraction.
    pub auth: AuthConfig,
    /// Legacy clients and their sessions.
    pub legacy: LegacyConfig,
    /// Limits.
    pub limits: crate::tasks::limits::Limits,
    /// The admin listener.
    pub admin: AdminConfig,
    /// Upstreams, each with a distinct path.
    pub upstreams: Vec<UpstreamConfig>,
}

/// Validated `[server]`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Extra allowed origins (`*` = any).
    pub allowed_origins: Vec<String>,
    /// Body limit in bytes.
    pub max_body_bytes: usize,
    /// SSE keep-alive interval.
    pub keepalive_interval: Duration,
    /// Serve `/metrics` beside the MCP endpoints.
    pub metrics: bool,
    /// Grace period at shutdown.
    pub shutdown_grace: Duration,
    /// Time allowed to send a request's headers.
    pub header_read_timeout: Duration,
    /// Accept `tasks/*` without `Mcp-Name`.
    pub lenient_task_name_header: bool,
}

/// Validated `[admin]`.
#[derive(Debug, Clone, Default)]
pub struct AdminConfig {
    /// Where the admin listener listens; `None`: not started.
    pub listen: Option<SocketAddr>,
    /// Extra host names it answers to.
    pub allowed_hosts: Vec<String>,
}

/// Validated `[store]`.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory.
    pub data_dir: PathBuf,
    /// Results above this size go to their own file.
    pub large_result_bytes: usize,
    /// The shared PostgreSQL store, if any.
    pub url: Option<String>,
    /// PostgreSQL connections per replica.
    pub pool_size: usize,
    /// Extra roots for PostgreSQL over TLS.
    pub ca_file: Option<PathBuf>,
    /// Lease on running tasks (shared store).
    pub lease: Duration,
}

/// Validated `[tasks]`.
#[derive(Debug, Clone)]
pub struct TaskDefaults {
    /// Default threshold.
    pub threshold: Duration,
    /// Default TTL.
    pub ttl: Duration,
    /// Default poll interval.
    pub poll_interval: Duration,
    /// Sweeper period.
    pub sweep_interval: Duration,
    /// Readable time of a task failed at its TTL.
    pub expired_grace: Duration,
}

/// How callers are identified.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthMode {
    /// Single tenant: every caller is the same principal; task ids are the secret.
    None,
    /// A keyed hash of the `Authorization: Bearer` token.
    Bearer,
    /// A trusted header set by an authenticating proxy.
    Header(String),
    /// The verified `iss` + `sub` of a bearer JWT.
    Jwt(crate::auth::JwtKeys),
}

/// Validated `[auth]`.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// The mode.
    pub mode: AuthMode,
    /// Explicit hashing key (otherwise one is kept in the data dir).
    pub hash_key: Option<String>,
}

/// Whether an upstream is modern, legacy, or to be detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraSetting {
    /// Detect as the spec's backward-compatibility section says.
    Auto,
    /// 2026-07-28 or later.
    Modern,
    /// 2025-03-26 .. 2025-11-25.
    Legacy,
}

/// What tasklift does with a given tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolMode {
    /// A task once the threshold passes (if the client supports tasks).
    Auto,
    /// Never a task.
    Never,
    /// Always a task when the client supports it (threshold 0).
    Always,
    /// Must be a task: clients without the extension get `-32021`.
    Required,
}

/// Effective rules for one tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    /// Mode.
    pub mode: ToolMode,
    /// Threshold.
    pub threshold: Duration,
    /// Task TTL.
    pub ttl: Duration,
    /// Poll interval.
    pub poll_interval: Duration,
}

/// Validated upstream.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Name.
    pub name: String,
    /// Mount path.
    pub path: String,
    /// How tasklift reaches it.
    pub transport: Transport,
    /// Era setting.
    pub era: EraSetting,
    /// Forward `Authorization`.
    pub forward_authorization: bool,
    /// Static headers.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Legacy session idle time.
    pub session_idle: Duration,
    /// Legacy HTTP: upstream sessions per caller.
    pub sessions_per_caller: usize,
    /// `ttlMs` for list results from legacy upstreams.
    pub list_ttl_ms: u64,
    /// `cacheScope` for list results from legacy upstreams.
    pub list_cache_scope: String,
    /// Extra trusted CA file.
    pub ca_file: Option<PathBuf>,
    /// Tool rules (defaults folded in).
    pub tools: BTreeMap<String, ToolPolicy>,
    /// Policy for tools without a rule.
    pub default_policy: ToolPolicy,
}

/// How an upstream is reached.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Streamable HTTP at this URL.
    Http {
        /// Endpoint URL.
        url: http::Uri,
    },
    /// Child processes spoken to over stdin/stdout.
    Stdio(StdioConfig),
}

/// A stdio upstream's process settings.
#[derive(Debug, Clone)]
pub struct StdioConfig {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Pool size at start.
    pub processes: usize,
    /// Largest pool size (at least `processes`).
    pub max_processes: usize,
    /// At most one call that may ask for input per child.
    pub isolate_input: bool,
    /// `server/discover` probe timeout.
    pub probe_timeout: Duration,
    /// Grace period at shutdown (stdin closed → SIGTERM → SIGKILL).
    pub shutdown_grace: Duration,
}

impl UpstreamConfig {
    /// The HTTP URL, for HTTP upstreams.
    pub fn url(&self) -> Option<&http::Uri> {
        match &self.transport {
            Transport::Http { url } => Some(url),
            Transport::Stdio(_) => None,
        }
    }

    /// Where the upstream is, for logs.
    pub fn location(&self) -> String {
        match &self.transport {
            Transport::Http { url } => url.to_string(),
            Transport::Stdio(s) => format!("stdio: {}", s.command.join(" ")),
        }
    }

    /// The rules for a tool.
    pub fn policy(&self, tool: &str) -> &ToolPolicy {
        self.tools.get(tool).unwrap_or(&self.default_policy)
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
        };
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
            },
            store: self.store_config()?,
            tasks,
            auth,
            legacy,
            limits: crate::tasks::limits::Limits {
                max_result_bytes: self.limits.max_result_bytes,
                max_concurrent_calls: self.limits.max_concurrent_calls,
                queue_timeout: parse_duration("limits.queue_timeout", &self.limits.queue_timeout)?,
                max_active_tasks_per_principal: self.limits.max_active_tasks_per_principal,
                poll_rate_limit: self.limits.poll_rate_limit,
            },
            admin,
            upstreams,
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
            Ok(AuthMode::Jwt(crate::auth::JwtKeys::load(jwt, leeway)?))
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
            Transport::Http { url }
        }
        (true, false) => {
            if u.processes == 0 {
                return Err(invalid(key("processes"), "must be at least 1"));
            }
            if u.command[0].is_empty() {
                return Err(invalid(key("command"), "the program name is empty"));
            }
            Transport::Stdio(StdioConfig {
                command: u.command.clone(),
                env: u.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                cwd: (!u.cwd.is_empty()).then(|| PathBuf::from(&u.cwd)),
                processes: u.processes,
                max_processes: u.max_processes.max(u.processes),
                isolate_input: u.isolate_input,
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
    let default_policy = ToolPolicy {
        mode: ToolMode::Auto,
        threshold: d.threshold,
        ttl: d.ttl,
        poll_interval: d.poll_interval,
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
        tools.insert(
            name.clone(),
            ToolPolicy {
                mode,
                threshold,
                ttl,
                poll_interval: dur("poll_interval", &r.poll_interval, d.poll_interval)?,
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
        Some((user, _)) => format!("{user}:{REDACTED}"),
        None => REDACTED.to_string(),
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
