//! The configuration file as written, with every default filled in: what
//! `check-config` prints (secrets redacted).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What `check-config` prints in place of a secret.
pub(crate) const REDACTED: &str = "<redacted>";

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
    /// Traces exported over OTLP, off unless an endpoint is set.
    pub telemetry: RawTelemetry,
    /// The servers tasklift fronts, each at its own path.
    pub upstreams: Vec<RawUpstream>,
    /// Where tasklift POSTs signed events when a task ends or needs input.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<RawWebhook>,
}

/// `[telemetry]`: OpenTelemetry traces (OTLP over HTTP/protobuf).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTelemetry {
    /// Where spans are POSTed (the collector's traces URL, e.g.
    /// `http://otel-collector:4318/v1/traces`); empty: no traces are exported.
    pub otlp_endpoint: String,
    /// Headers sent with every export (a vendor's API key, say).
    pub otlp_headers: BTreeMap<String, String>,
    /// The `service.name` resource attribute of every span.
    pub service_name: String,
    /// The share of new traces (requests that arrive without a `traceparent`)
    /// recorded; a caller's own sampling decision is always followed.
    pub sample_ratio: f64,
}

impl Default for RawTelemetry {
    fn default() -> Self {
        Self {
            otlp_endpoint: String::new(),
            otlp_headers: BTreeMap::new(),
            service_name: "tasklift".into(),
            sample_ratio: 1.0,
        }
    }
}

impl RawTelemetry {
    /// The OpenTelemetry SDK environment variables, which override the file as
    /// flags do: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the traces URL as it is),
    /// else `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL, `/v1/traces` appended),
    /// `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,key2=value2`, values
    /// percent-encoded) added to the file's, and `OTEL_SERVICE_NAME`.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) {
        let var = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            self.otlp_endpoint = url.trim().to_string();
        } else if let Some(base) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            self.otlp_endpoint = format!("{}/v1/traces", base.trim().trim_end_matches('/'));
        }
        if let Some(list) = var("OTEL_EXPORTER_OTLP_HEADERS") {
            for pair in list.split(',') {
                if let Some((k, v)) = pair.split_once('=') {
                    let v = percent_encoding::percent_decode_str(v.trim()).decode_utf8_lossy();
                    self.otlp_headers
                        .insert(k.trim().to_string(), v.into_owned());
                }
            }
        }
        if let Some(name) = var("OTEL_SERVICE_NAME") {
            self.service_name = name.trim().to_string();
        }
    }
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
    /// Threads that serve the front door, each with its own event loop and its own
    /// upstream connections (thread-per-core); 0: one per CPU core.
    pub workers: usize,
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
            workers: 0,
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
    /// Below this much free space under `data_dir`, no new tasks are created (calls
    /// run synchronously; tools that run only as tasks are refused); 0: no check.
    pub min_free_bytes: u64,
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
            min_free_bytes: 64 * 1024 * 1024,
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
    /// The longest one `tasklift_wait` call blocks (its `waitSeconds` is capped to
    /// this), kept below the request timeouts of common clients.
    pub max_wait: String,
}

impl Default for RawTasks {
    fn default() -> Self {
        Self {
            threshold: "2s".into(),
            ttl: "1h".into(),
            poll_interval: "1s".into(),
            sweep_interval: "30s".into(),
            expired_grace: "5m".into(),
            max_wait: "50s".into(),
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
    /// stdio: who shares a child process: `shared` (every caller), `principal`
    /// (each principal gets children of its own) or `session` (each legacy client
    /// session does; a 2026-07-28 client, having none, gets its principal's). For
    /// servers that keep state in memory between calls.
    pub scope: String,
    /// stdio, with `scope` other than `shared`: a caller's children are stopped
    /// after this long without a call.
    pub scope_idle: String,
    /// stdio, with `scope` other than `shared`: at most this many callers have
    /// children at once; past it a new caller is refused until one goes idle.
    pub max_scopes: usize,
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
    /// Speak HTTP/2 to a `url` upstream (prior knowledge on `http://`, ALPN on
    /// `https://`): every call shares a few connections instead of holding one.
    pub http2: bool,
    /// What a client that did not declare the tasks extension gets when its call
    /// outlasts the threshold: `wait` (keep-alives until the result) or
    /// `tool_handles` (a still-running answer naming `tasklift_wait`).
    pub non_task_clients: String,
    /// What happens to a synchronous call whose client goes away after the
    /// threshold: `cancel` (cancelled upstream) or `detach` (it runs on as a task,
    /// and a retry of the identical call joins it).
    pub on_disconnect: String,
    /// With `detach`: how long after a call starts an identical one is joined to
    /// it instead of running again. Empty: the task's TTL.
    pub replay_window: String,
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
            scope: "shared".into(),
            scope_idle: "10m".into(),
            max_scopes: 32,
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
            http2: false,
            non_task_clients: "wait".into(),
            on_disconnect: "cancel".into(),
            replay_window: String::new(),
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
    /// `wait` or `tool_handles`, for this tool (default: the upstream's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_task_clients: Option<String>,
    /// `cancel` or `detach`, for this tool (default: the upstream's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_disconnect: Option<String>,
    /// Replay window for this tool (default: the upstream's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_window: Option<String>,
}

/// `[[webhooks]]`: one destination told when a task ends or needs input.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawWebhook {
    /// The destination's name in logs, metrics and `tasklift store`; empty: the
    /// URL's host and port.
    pub name: String,
    /// Where events are POSTed: `https://`, or `http://` to a loopback address
    /// (any address with `allow_http`).
    pub url: String,
    /// Allow `http://` to an address other than loopback (events and their
    /// signatures then cross the network in clear).
    pub allow_http: bool,
    /// The signing secret, Standard Webhooks format: `whsec_` + base64.
    pub secret: String,
    /// A file holding the secret (trailing whitespace ignored).
    pub secret_file: String,
    /// Which events are sent: `task.completed`, `task.failed`, `task.cancelled`,
    /// `task.input_required`.
    pub events: Vec<String>,
    /// Only tasks of these upstreams (by name); empty: every upstream.
    pub upstreams: Vec<String>,
    /// Only tasks of these tools; empty: every tool.
    pub tools: Vec<String>,
    /// Put the tool's result (or the JSON-RPC error) in `data.result`.
    pub include_result: bool,
    /// With `include_result`: a larger result is left out (`data.resultOmitted`).
    pub max_result_bytes: usize,
    /// An event not delivered within this long after it happened is given up.
    pub max_age: String,
    /// Deliveries in flight at once to this destination.
    pub concurrency: usize,
    /// Most events waiting for this destination; past it new ones are dropped
    /// (counted and logged).
    pub max_pending: usize,
    /// Time allowed to connect.
    pub connect_timeout: String,
    /// Time allowed for the whole response, from sending the request.
    pub timeout: String,
}

impl Default for RawWebhook {
    fn default() -> Self {
        Self {
            name: String::new(),
            url: String::new(),
            allow_http: false,
            secret: String::new(),
            secret_file: String::new(),
            events: vec![
                "task.completed".into(),
                "task.failed".into(),
                "task.cancelled".into(),
                "task.input_required".into(),
            ],
            upstreams: Vec::new(),
            tools: Vec::new(),
            include_result: false,
            max_result_bytes: 64 * 1024,
            max_age: "24h".into(),
            concurrency: 4,
            max_pending: 10_000,
            connect_timeout: "5s".into(),
            timeout: "10s".into(),
        }
    }
}
