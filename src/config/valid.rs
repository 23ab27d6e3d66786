//! The validated configuration the rest of tasklift runs on: plain values only.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    pub limits: Limits,
    /// The admin listener.
    pub admin: AdminConfig,
    /// Trace export.
    pub telemetry: TelemetryConfig,
    /// Upstreams, each with a distinct path.
    pub upstreams: Vec<UpstreamConfig>,
    /// Webhook destinations, each with a distinct name.
    pub webhooks: Vec<WebhookConfig>,
}

impl Config {
    /// What a valid configuration may still do that its operator should know:
    /// said by `check-config` and logged by `serve` at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let detaching: Vec<&str> = self
            .upstreams
            .iter()
            .filter(|u| {
                std::iter::once(&u.default_policy)
                    .chain(u.tools.values())
                    .any(|p| p.on_disconnect == OnDisconnect::Detach)
            })
            .map(|u| u.name.as_str())
            .collect();
        if !detaching.is_empty() && self.auth.mode == AuthMode::None {
            out.push(format!(
                "on_disconnect = \"detach\" ({}) with auth.mode = \"none\": every caller is the same principal, so a retried call is matched only within the same legacy (2025) session, or by the tasklift/idempotencyKey _meta key. A call that has neither (a 2026-07-28 client without a key) is not detached: it is cancelled when its client leaves, as with \"cancel\", because its retry would run the tool a second time. Set an auth mode to detach every caller's calls.",
                detaching.join(", ")
            ));
        }
        if !self.server.listen.ip().is_loopback() && self.auth.mode == AuthMode::None {
            out.push(format!("auth.mode = \"none\" on an address other than loopback ({}): whoever reaches it can call every tool and read any task whose id they hold; keep it behind something that authenticates callers, or set an auth mode", self.server.listen));
        }
        let shared: Vec<&str> = self
            .upstreams
            .iter()
            .filter(
                |u| matches!(&u.transport, Transport::Stdio(s) if s.scope == ChildScope::Shared),
            )
            .map(|u| u.name.as_str())
            .collect();
        if !shared.is_empty() && self.auth.mode != AuthMode::None {
            out.push(format!(
                "stdio upstream {} runs with scope = \"shared\" under auth.mode = \"{}\": every principal's calls go to the same child process, so whatever the server keeps in memory between calls (a knowledge graph, a browser, a working directory, a thought history) is shared between them. Set scope = \"principal\" (or \"session\") for a server that keeps state; keep \"shared\" for one that does not.",
                shared.join(", "),
                self.auth.mode.name()
            ));
        }
        out
    }
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
    /// Front-door threads (at least 1; `server.workers = 0` resolved to the cores).
    pub workers: usize,
}

/// Validated `[telemetry]`.
#[derive(Debug, Clone, Default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP traces URL; `None`: traces are not exported.
    pub endpoint: Option<http::Uri>,
    /// Headers sent with every export.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// `service.name`.
    pub service_name: String,
    /// Share of new traces recorded (0.0 to 1.0).
    pub sample_ratio: f64,
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
    /// Free space under `data_dir` below which no new tasks are created (0: none).
    pub min_free_bytes: u64,
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
    /// The longest one `tasklift_wait` blocks.
    pub max_wait: Duration,
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
    Jwt(super::JwtKeys),
}

impl AuthMode {
    /// The mode as `auth.mode` names it.
    pub fn name(&self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Bearer => "bearer",
            AuthMode::Header(_) => "header",
            AuthMode::Jwt(_) => "jwt",
        }
    }
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
    /// What a client without the tasks extension gets past the threshold.
    pub non_task_clients: NonTaskClients,
    /// What a synchronous caller's leaving after the threshold does.
    pub on_disconnect: OnDisconnect,
    /// With [`OnDisconnect::Detach`]: how long an identical call is joined to this
    /// one (at most the task's TTL).
    pub replay_window: Duration,
}

impl ToolPolicy {
    /// `mode = "auto"` with these times and every other rule at its default.
    pub fn auto(threshold: Duration, ttl: Duration, poll_interval: Duration) -> Self {
        Self {
            mode: ToolMode::Auto,
            threshold,
            ttl,
            poll_interval,
            non_task_clients: NonTaskClients::Wait,
            on_disconnect: OnDisconnect::Cancel,
            replay_window: ttl,
        }
    }
}

/// What a client that did not declare the tasks extension gets once its call
/// outlasts the threshold. It never gets a `CreateTaskResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonTaskClients {
    /// It keeps waiting (SSE keep-alives) for the result.
    Wait,
    /// A successful `CallToolResult` saying the job still runs, with its task id and
    /// `tasklift_wait` to wait for it (tools the listing then offers).
    ToolHandles,
}

/// What a synchronous call does when its client goes away after the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDisconnect {
    /// It is cancelled upstream.
    Cancel,
    /// It runs on as a task, and an identical retry joins it (replay).
    Detach,
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
        /// HTTP/2 only (`http2 = true`).
        http2: bool,
    },
    /// Child processes spoken to over stdin/stdout.
    Stdio(StdioConfig),
}

/// Who shares a stdio upstream's child processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildScope {
    /// Every caller.
    Shared,
    /// Callers of one principal.
    Principal,
    /// One legacy client session (a 2026-07-28 client: its principal).
    Session,
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
    /// Who shares a child.
    pub scope: ChildScope,
    /// A caller's children stop after this long without a call (not `Shared`).
    pub scope_idle: Duration,
    /// Most callers with children of their own at once (not `Shared`).
    pub max_scopes: usize,
    /// `server/discover` probe timeout.
    pub probe_timeout: Duration,
    /// Grace period at shutdown (stdin closed → SIGTERM → SIGKILL).
    pub shutdown_grace: Duration,
}

impl UpstreamConfig {
    /// The HTTP URL, for HTTP upstreams.
    pub fn url(&self) -> Option<&http::Uri> {
        match &self.transport {
            Transport::Http { url, .. } => Some(url),
            Transport::Stdio(_) => None,
        }
    }

    /// Where the upstream is, for logs.
    pub fn location(&self) -> String {
        match &self.transport {
            Transport::Http { url, .. } => url.to_string(),
            Transport::Stdio(s) => format!("stdio: {}", s.command.join(" ")),
        }
    }

    /// The rules for a tool.
    pub fn policy(&self, tool: &str) -> &ToolPolicy {
        self.tools.get(tool).unwrap_or(&self.default_policy)
    }
}

/// The configured limits (0 means no limit).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest result a task may store, in bytes (serialized JSON).
    pub max_result_bytes: usize,
    /// Calls running at once per upstream; more wait in a queue.
    pub max_concurrent_calls: usize,
    /// How long a call may wait for its turn.
    pub queue_timeout: Duration,
    /// Tasks running at once per principal.
    pub max_active_tasks_per_principal: usize,
    /// Refuse `tasks/get` polls of one task faster than half its `pollIntervalMs`.
    pub poll_rate_limit: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_result_bytes: 16 * 1024 * 1024,
            max_concurrent_calls: 0,
            queue_timeout: Duration::from_secs(30),
            max_active_tasks_per_principal: 0,
            poll_rate_limit: false,
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

/// What a webhook is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookEvent {
    /// A task completed (`completed`).
    Completed,
    /// A task failed (`failed`).
    Failed,
    /// A task was cancelled (`cancelled`).
    Cancelled,
    /// A task waits for its client's input (`input_required`).
    InputRequired,
}

impl WebhookEvent {
    /// Every event.
    pub const ALL: [WebhookEvent; 4] = [
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::InputRequired,
    ];

    /// The event's `type`, as configured and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "task.completed",
            Self::Failed => "task.failed",
            Self::Cancelled => "task.cancelled",
            Self::InputRequired => "task.input_required",
        }
    }

    /// The event a task status reports (`None`: `working` reports none).
    pub fn of_status(status: &str) -> Option<Self> {
        match status {
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            "cancelled" => Some(Self::Cancelled),
            "input_required" => Some(Self::InputRequired),
            _ => None,
        }
    }
}

/// A webhook's signing key (the secret's base64 decoded); never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(pub Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// Validated `[[webhooks]]`: one destination.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Its name (unique), in logs, metrics and the outbox.
    pub name: String,
    /// Where events are POSTed.
    pub url: http::Uri,
    /// The signing key.
    pub secret: WebhookSecret,
    /// The events it is sent.
    pub events: Vec<WebhookEvent>,
    /// Only tasks of these upstreams (empty: all).
    pub upstreams: Vec<String>,
    /// Only tasks of these tools (empty: all).
    pub tools: Vec<String>,
    /// Whether `data.result` carries the outcome.
    pub include_result: bool,
    /// The largest outcome carried in `data.result`.
    pub max_result_bytes: usize,
    /// An event older than this is given up.
    pub max_age: Duration,
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// Most events waiting; later ones are dropped and counted.
    pub max_pending: usize,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Response timeout (from sending the request to its last byte read).
    pub timeout: Duration,
}

impl WebhookConfig {
    /// Whether a task of this upstream and tool moving to `event` is sent here.
    pub fn wants(&self, event: WebhookEvent, upstream: &str, tool: &str) -> bool {
        self.events.contains(&event)
            && (self.upstreams.is_empty() || self.upstreams.iter().any(|u| u == upstream))
            && (self.tools.is_empty() || self.tools.iter().any(|t| t == tool))
    }
}
