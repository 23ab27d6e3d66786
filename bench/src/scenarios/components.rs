//! Starting the components under test, each a process: tasklift on a fresh store,
//! the baseline upstream, nginx, and a scratch PostgreSQL database.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;

pub(super) use crate::procs::ScratchDb;
use crate::procs::{self, Proc, TempDir};
use crate::report;
use crate::wire::{self, Conn, Endpoint};
use crate::RunArgs;

/// What a tasklift instance fronts.
pub(super) enum Via<'a> {
    /// The baseline upstream over HTTP/1.1.
    Http(&'a Endpoint),
    /// The same upstream over HTTP/2 (`http2 = true`: h2c, prior knowledge).
    Http2(&'a Endpoint),
    /// A stdio upstream: the command tasklift runs as its child.
    Stdio(Vec<String>),
    /// A 2025-11-25 upstream over HTTP/1.1 (detected as such by tasklift).
    Legacy(&'a Endpoint),
}

impl Via<'_> {
    /// The upstream's transport lines of tasklift's configuration.
    fn toml(&self) -> String {
        match self {
            Via::Http(ep) | Via::Legacy(ep) => format!("url = \"{}\"\n", ep.url()),
            Via::Http2(ep) => format!("url = \"{}\"\nhttp2 = true\n", ep.url()),
            Via::Stdio(cmd) => {
                // JSON strings are valid TOML basic strings.
                let words: Vec<String> = cmd.iter().map(|w| json!(w).to_string()).collect();
                format!(
                    "command = [{}]\nprocesses = 1\nshutdown_grace = \"1s\"\n",
                    words.join(", ")
                )
            }
        }
    }
}

/// The command of the baseline upstream as a stdio child: this binary,
/// `upstream --stdio`.
pub(super) fn stdio_upstream(args: &RunArgs) -> anyhow::Result<Via<'static>> {
    let me = std::env::current_exe()?;
    Ok(Via::Stdio(vec![
        me.display().to_string(),
        "upstream".into(),
        "--stdio".into(),
        "--threads".into(),
        args.upstream_threads.to_string(),
    ]))
}

/// The store's directory under a tasklift's scratch directory.
const DATA: &str = "data";

/// A running tasklift.
pub struct Tasklift {
    proc_: Proc,
    /// Its MCP endpoint.
    pub ep: Endpoint,
    /// Its log (stderr).
    pub log: PathBuf,
    dir: TempDir,
}

impl Tasklift {
    /// Start `tasklift serve` in front of `upstream` on a fresh store with
    /// `threshold` and per-tool rules, and wait until `/readyz` says it can take
    /// calls.
    pub(super) async fn start(
        bin: &Path,
        upstream: &Via<'_>,
        tag: &str,
        threshold: Duration,
        tools: &[(&str, Duration)],
        store_url: Option<&str>,
    ) -> anyhow::Result<Self> {
        Self::start_with(bin, upstream, tag, threshold, tools, store_url, "").await
    }

    /// [`Tasklift::start`], with `extra` TOML tables appended to its configuration.
    pub(super) async fn start_with(
        bin: &Path,
        upstream: &Via<'_>,
        tag: &str,
        threshold: Duration,
        tools: &[(&str, Duration)],
        store_url: Option<&str>,
        extra: &str,
    ) -> anyhow::Result<Self> {
        let dir = TempDir::new(tag)?;
        let listen = procs::free_port()?;
        let mut toml = format!(
            r#"[server]
listen = "{listen}"
shutdown_grace = "1s"

[store]
data_dir = "{data}"
url = "{store_url}"

[tasks]
threshold = "{threshold}ms"
poll_interval = "50ms"
ttl = "1h"

[limits]
max_concurrent_calls = 0
max_active_tasks_per_principal = 0
poll_rate_limit = false

[[upstreams]]
name = "bench"
path = "/mcp"
{transport}era = "auto"
"#,
            data = dir.path().join(DATA).display(),
            threshold = threshold.as_millis(),
            transport = upstream.toml(),
            store_url = store_url.unwrap_or(""),
        );
        for (tool, t) in tools {
            toml.push_str(&format!(
                "\n[upstreams.tools.{tool}]\nthreshold = \"{}ms\"\n",
                t.as_millis()
            ));
        }
        toml.push_str(extra);
        let config = dir.path().join("tasklift.toml");
        std::fs::write(&config, toml)?;
        let log = dir.path().join("tasklift.log");
        let args = vec![
            "serve".to_string(),
            "--config".into(),
            config.display().to_string(),
        ];
        let mut proc_ = Proc::spawn(&format!("tasklift ({tag})"), bin, &args, &log)?;
        procs::wait_http_ok(&mut proc_, listen, "/readyz", Duration::from_secs(15))
            .await
            .with_context(|| format!("tasklift log:\n{}", tail(&log)))?;
        let t = Self {
            proc_,
            ep: Endpoint::new(listen, "/mcp"),
            log,
            dir,
        };
        // The first call makes tasklift detect the upstream's era (a stdio child's
        // at its start): it must be the one the upstream speaks.
        let mut c = Conn::connect(&t.ep).await?;
        c.result(&wire::tool_call("fast", json!({}), true))
            .await
            .context("first tools/call through tasklift")?;
        let text = std::fs::read_to_string(&t.log).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .find(|l| l.contains("detected upstream era") || l.contains("child process ready"))
        {
            let era = match upstream {
                Via::Legacy(_) => "Legacy",
                _ => "Modern",
            };
            if !line.contains(era) {
                bail!("tasklift took the baseline upstream for another era than {era}: {line}");
            }
        }
        Ok(t)
    }

    pub(super) fn pid(&self) -> anyhow::Result<u32> {
        self.proc_.pid()
    }

    /// Its store's directory (`[store] data_dir`: sled, result files, the
    /// principal key); nothing is kept there with a PostgreSQL store.
    pub(super) fn data_dir(&self) -> PathBuf {
        self.dir.path().join(DATA)
    }

    /// Fail if tasklift has exited.
    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
        self.proc_.check_alive()
    }

    /// What the log holds: lines, warnings, errors, and the first few of those.
    pub(super) fn log_summary(&self, tag: &str) -> report::LogSummary {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut l = report::LogSummary {
            instance: tag.to_string(),
            bytes: text.len(),
            ..Default::default()
        };
        for line in text.lines() {
            l.lines += 1;
            let warn = line.contains(" WARN ") || line.contains("\"WARN\"");
            let error = line.contains(" ERROR ") || line.contains("\"ERROR\"");
            l.warnings += usize::from(warn);
            l.errors += usize::from(error);
            if (warn || error) && l.samples.len() < 5 {
                l.samples.push(line.chars().take(300).collect());
            }
        }
        l
    }
}

/// The last lines of a log, for error messages.
fn tail(p: &Path) -> String {
    let t = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Start the baseline upstream (this binary, `upstream` subcommand), with
/// `flags` (`--legacy`, `--sse`); `tag` names it and its log.
pub(super) async fn start_upstream(
    args: &RunArgs,
    dir: &Path,
    tag: &str,
    flags: &[&str],
) -> anyhow::Result<(Proc, Endpoint)> {
    let me = std::env::current_exe()?;
    let mut a = vec![
        "upstream".to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--threads".into(),
        args.upstream_threads.to_string(),
    ];
    a.extend(flags.iter().map(|f| f.to_string()));
    spawn_listening(
        &format!("{tag} upstream"),
        &me,
        &a,
        &dir.join(format!("{tag}.log")),
    )
    .await
}

/// Start one of this binary's servers and wait for its `listening on ADDR` line.
async fn spawn_listening(
    label: &str,
    bin: &Path,
    args: &[String],
    log: &Path,
) -> anyhow::Result<(Proc, Endpoint)> {
    let mut p = Proc::spawn(label, bin, args, log)?;
    let addr: SocketAddr = p
        .stdout_line("listening on ", Duration::from_secs(10))
        .await?
        .parse()
        .with_context(|| format!("the address of the {label}"))?;
    Ok((p, Endpoint::new(addr, "/mcp")))
}

/// Start `tasklift-bench forwarder` (this binary) in front of `upstream`.
pub(super) async fn start_forwarder(
    dir: &Path,
    upstream: &Endpoint,
) -> anyhow::Result<(Proc, Endpoint)> {
    let me = std::env::current_exe()?;
    let a = vec![
        "forwarder".to_string(),
        "--upstream".into(),
        upstream.addr.to_string(),
    ];
    spawn_listening("hyper forwarder", &me, &a, &dir.join("forwarder.log")).await
}

/// Find nginx: the option, PATH, then /usr/sbin.
pub(super) fn find_nginx(args: &RunArgs) -> Option<PathBuf> {
    if let Some(p) = &args.nginx {
        return Some(p.clone());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

/// Start nginx as a plain process (no daemon, no systemd) with a generated
/// configuration under `dir`: two workers, `proxy_pass` with upstream keep-alive.
pub(super) async fn start_nginx(
    bin: &Path,
    upstream: &Endpoint,
    dir: &Path,
) -> anyhow::Result<(Proc, Endpoint)> {
    let prefix = dir.join(format!("nginx-{}", upstream.addr.port()));
    std::fs::create_dir_all(prefix.join("logs"))?;
    let listen = procs::free_port()?;
    let root = std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .map(|l| l.split_whitespace().nth(2) == Some("0"))
            })
            .unwrap_or(false);
    let p = prefix.display();
    let conf = format!(
        r#"{user}
worker_processes 2;
daemon off;
master_process on;
pid {p}/nginx.pid;
error_log {p}/logs/error.log warn;
worker_rlimit_nofile 65535;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    keepalive_requests 1000000;
    upstream mcp_upstream {{
        server {up};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://mcp_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"#,
        user = if root { "user root;" } else { "" },
        up = upstream.addr,
    );
    let file = prefix.join("nginx.conf");
    std::fs::write(&file, conf)?;
    let args = vec![
        "-p".to_string(),
        format!("{p}/"),
        "-e".into(),
        format!("{p}/logs/error.log"),
        "-c".into(),
        file.display().to_string(),
    ];
    let mut proc_ = Proc::spawn("nginx", bin, &args, &prefix.join("logs/stderr.log"))?;
    procs::wait_http_ok(&mut proc_, listen, "/stats", Duration::from_secs(10))
        .await
        .with_context(|| {
            format!(
                "nginx error log:\n{}{}",
                tail(&prefix.join("logs/stderr.log")),
                tail(&prefix.join("logs/error.log"))
            )
        })?;
    Ok((proc_, Endpoint::new(listen, "/mcp")))
}

/// An OTLP/HTTP collector that takes every export and keeps nothing (it counts
/// the bytes): what a traced tasklift exports to, so the traced pass-through
/// figure is tasklift's cost of recording and sending spans, not a collector's.
pub(super) struct TraceSink {
    /// Its traces URL.
    pub url: String,
    /// Export bytes received.
    pub bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl TraceSink {
    pub(super) async fn start() -> anyhow::Result<Self> {
        use http_body_util::BodyExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/v1/traces", l.local_addr()?);
        let bytes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = bytes.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = l.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let counted = counted.clone();
                            async move {
                                let n = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes().len())
                                    .unwrap_or(0);
                                counted.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::new()),
                                ))
                            }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        });
        Ok(Self { url, bytes, task })
    }
}

impl Drop for TraceSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
