//! Command-line definitions (clap only) and how flags override the config file.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{ConfigError, RawConfig, RawUpstream};

/// tasklift: durable MCP task handles for slow tool calls, in front of any MCP server.
#[derive(Debug, Parser)]
#[command(name = "tasklift", version = crate::VERSION, about, long_about = None)]
pub struct Cli {
    /// Log output format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy.
    Serve(ServeArgs),
    /// Validate a configuration file and print the effective configuration.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
        /// Flags that would override the file.
        #[command(flatten)]
        overrides: Overrides,
    },
    /// Walk through the task lifecycle against a bundled slow MCP server (needs nothing else).
    #[cfg(feature = "demo")]
    Demo {
        /// Keep the demo's data directory instead of deleting it.
        #[arg(long)]
        keep_data: bool,
    },
    /// Inspect or clean a stopped proxy's task store (stats, list, show, purge).
    Store {
        /// What to do with it.
        #[command(subcommand)]
        cmd: crate::cli::store::StoreCmd,
    },
    /// Call a tool on any 2026-07-28 MCP endpoint, following a task to its result.
    Call(crate::cli::call::CallArgs),
    /// Check that a running tasklift answers /healthz (exit 0) or not (exit 1): a
    /// container's health check.
    Health(crate::cli::health::HealthArgs),
    /// Run the bundled slow MCP server (legacy 2025-11-25 Streamable HTTP, or stdio) for trying tasklift.
    #[cfg(feature = "demo")]
    DemoServer(tasklift_fixture::ServeArgs),
}

/// `tasklift serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A TOML configuration file (see config.example.toml).
    #[arg(long, short, env = "TASKLIFT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Flags that override the file.
    #[command(flatten)]
    pub overrides: Overrides,
}

/// Flags that override the configuration file.
#[derive(Debug, Args, Default)]
pub struct Overrides {
    /// Upstream MCP endpoint (Streamable HTTP), e.g. http://127.0.0.1:9000/mcp.
    #[arg(long, env = "TASKLIFT_UPSTREAM", hide_env_values = true)]
    pub upstream: Option<String>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "TASKLIFT_LISTEN")]
    pub listen: Option<String>,
    /// Path the upstream is served at [default: /mcp].
    #[arg(long, env = "TASKLIFT_PATH")]
    pub path: Option<String>,
    /// Time before a tools/call becomes a task, e.g. 500ms, 2s [default: 2s].
    #[arg(long, env = "TASKLIFT_THRESHOLD")]
    pub threshold: Option<String>,
    /// Task time-to-live, e.g. 1h [default: 1h].
    #[arg(long, env = "TASKLIFT_TTL")]
    pub ttl: Option<String>,
    /// Suggested polling interval [default: 1s].
    #[arg(long, env = "TASKLIFT_POLL_INTERVAL")]
    pub poll_interval: Option<String>,
    /// Directory for the task store [default: ./tasklift-data].
    #[arg(long, env = "TASKLIFT_DATA_DIR")]
    pub data_dir: Option<String>,
    /// Share tasks with other replicas through PostgreSQL, e.g.
    /// postgres://tasklift@db:5432/tasklift [default: the embedded store in --data-dir].
    #[arg(
        long = "store",
        value_name = "URL",
        env = "TASKLIFT_STORE_URL",
        hide_env_values = true
    )]
    pub store_url: Option<String>,
    /// Principal mode: none, bearer, header:NAME, or jwt ([auth.jwt] keys) [default: none].
    #[arg(long, env = "TASKLIFT_AUTH")]
    pub auth: Option<String>,
    /// An allowed Origin besides localhost ones (repeatable; "*" allows any; in
    /// the environment, comma-separated).
    #[arg(
        long = "allow-origin",
        env = "TASKLIFT_ALLOW_ORIGINS",
        value_delimiter = ','
    )]
    pub allow_origins: Vec<String>,
    /// Largest request body in bytes [default: 4194304].
    #[arg(long, env = "TASKLIFT_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Forward the caller's Authorization header to the upstream.
    #[arg(long, env = "TASKLIFT_FORWARD_AUTHORIZATION")]
    pub forward_authorization: bool,
    /// Serve the read-only status page, /metrics, /healthz and /readyz on this
    /// address too, e.g. 127.0.0.1:9090 [default: off].
    #[arg(long, env = "TASKLIFT_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,
    /// Threads serving the front door, each with its own event loop and upstream
    /// connections; 0: one per CPU core [default: 0].
    #[arg(long, env = "TASKLIFT_WORKERS")]
    pub workers: Option<usize>,
    /// A stdio upstream: the command to run, after `--` (e.g. `-- npx -y some-mcp-server`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl Overrides {
    /// Apply the flags over a file's configuration.
    pub fn apply(&self, raw: &mut RawConfig) -> Result<(), ConfigError> {
        if let Some(v) = &self.listen {
            raw.server.listen = v.clone();
        }
        if let Some(v) = &self.threshold {
            raw.tasks.threshold = v.clone();
        }
        if let Some(v) = &self.ttl {
            raw.tasks.ttl = v.clone();
        }
        if let Some(v) = &self.poll_interval {
            raw.tasks.poll_interval = v.clone();
        }
        if let Some(v) = &self.data_dir {
            raw.store.data_dir = v.clone();
        }
        if let Some(v) = &self.store_url {
            raw.store.url = v.clone();
        }
        if let Some(v) = &self.auth {
            raw.auth.mode = v.clone();
        }
        if !self.allow_origins.is_empty() {
            raw.server.allowed_origins = self.allow_origins.clone();
        }
        if let Some(v) = self.max_body_bytes {
            raw.server.max_body_bytes = v;
        }
        if let Some(v) = &self.admin_listen {
            raw.admin.listen = v.clone();
        }
        if let Some(v) = self.workers {
            raw.server.workers = v;
        }
        if !self.command.is_empty() && self.upstream.is_some() {
            return Err(ConfigError::Invalid {
                key: "--upstream".into(),
                message: "give either --upstream URL or a command after --, not both".into(),
            });
        }
        let path = self.path.clone().unwrap_or_else(|| "/mcp".into());
        if !self.command.is_empty() {
            let u = upstream_at(raw, &path);
            u.command = self.command.clone();
            u.url.clear();
        } else if let Some(url) = &self.upstream {
            let u = upstream_at(raw, &path);
            u.url = url.clone();
            u.command.clear();
        } else if let Some(p) = &self.path {
            if let [only] = raw.upstreams.as_mut_slice() {
                only.path = p.clone();
            }
        }
        if self.forward_authorization {
            for u in &mut raw.upstreams {
                u.forward_authorization = true;
            }
        }
        Ok(())
    }
}

/// The upstream mounted at `path`, created if absent (the first is named "default").
fn upstream_at<'a>(raw: &'a mut RawConfig, path: &str) -> &'a mut RawUpstream {
    let i = match raw.upstreams.iter().position(|u| u.path == path) {
        Some(i) => i,
        None => {
            let name = if raw.upstreams.is_empty() {
                "default".into()
            } else {
                format!("upstream{}", raw.upstreams.len())
            };
            raw.upstreams.push(RawUpstream {
                path: path.to_string(),
                name,
                ..RawUpstream::default()
            });
            raw.upstreams.len() - 1
        }
    };
    &mut raw.upstreams[i]
}
