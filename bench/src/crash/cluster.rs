//! What the crash harness runs: the fixture upstream, `tasklift serve` instances
//! (one on sled, or replicas on a scratch PostgreSQL database), and the
//! PostgreSQL server's restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

pub use crate::procs::ScratchDb;
use crate::procs::{self, Proc};
use crate::wire::Endpoint;

/// The fixture upstream (`tasklift-fixture`, the demo's slow tools over 2025-11-25
/// Streamable HTTP) as a process.
pub struct Fixture {
    _proc: Proc,
    /// Its MCP URL.
    pub url: String,
}

impl Fixture {
    pub async fn start(bin: &Path, dir: &Path) -> anyhow::Result<Self> {
        let addr = procs::free_port()?;
        let args = vec!["--listen".to_string(), addr.to_string()];
        let mut p = Proc::spawn("fixture", bin, &args, &dir.join("fixture.log"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            p.check_alive()?;
            if tokio::time::Instant::now() > deadline {
                bail!("the fixture did not listen on {addr} within 15 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            _proc: p,
            url: format!("http://{addr}/mcp"),
        })
    }
}

/// The store the instances share: a sled directory each, or one database.
#[derive(Clone)]
pub enum Store {
    Sled,
    /// sled in `data_dir` (a volume of its own, for the fill-and-free soak), with
    /// `store.min_free_bytes` and the tasks' TTL.
    SledOn {
        data_dir: PathBuf,
        min_free_bytes: u64,
        ttl: Duration,
    },
    Postgres {
        url: String,
        lease: Duration,
    },
}

/// One `tasklift serve` process; `gen` numbers every process the run started.
pub struct Instance {
    proc_: Proc,
    pub ep: Endpoint,
    pub gen: usize,
    pub log: PathBuf,
}

impl Instance {
    /// Start replica `slot` (its data directory is `dir/slot-N`, kept across its
    /// restarts) and wait until `/readyz` answers 200.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        slot: usize,
        gen: usize,
        store: &Store,
        upstream: &str,
    ) -> anyhow::Result<Self> {
        let listen = procs::free_port()?;
        let mut data = dir.join(format!("slot-{slot}"));
        let mut ttl = Duration::from_secs(12 * 3600);
        let store_lines = match store {
            Store::Sled => String::new(),
            Store::SledOn {
                data_dir,
                min_free_bytes,
                ttl: t,
            } => {
                data = data_dir.clone();
                ttl = *t;
                format!("min_free_bytes = {min_free_bytes}\n")
            }
            Store::Postgres { url, lease } => format!(
                "url = \"{url}\"\nlease = \"{}ms\"\npool_size = 4\n",
                lease.as_millis()
            ),
        };
        let toml = format!(
            r#"[server]
listen = "{listen}"
shutdown_grace = "1s"

[store]
data_dir = "{data}"
{store_lines}
[tasks]
threshold = "100ms"
poll_interval = "50ms"
sweep_interval = "1s"
ttl = "{ttl}ms"

[limits]
max_concurrent_calls = 0
max_active_tasks_per_principal = 0
poll_rate_limit = false

[[upstreams]]
name = "fixture"
path = "/mcp"
url = "{upstream}"
"#,
            data = data.display(),
            ttl = ttl.as_millis(),
        );
        let config = dir.join(format!("slot-{slot}.toml"));
        std::fs::write(&config, toml)?;
        let log = dir.join(format!("tasklift-slot{slot}-gen{gen}.log"));
        let args = vec![
            "serve".to_string(),
            "--config".into(),
            config.display().to_string(),
        ];
        let name = format!("tasklift (replica {slot}, process {gen})");
        let mut proc_ = Proc::spawn(&name, bin, &args, &log)?;
        procs::wait_http_ok(&mut proc_, listen, "/readyz", Duration::from_secs(60))
            .await
            .with_context(|| format!("{name}; its log:\n{}", tail(&log)))?;
        Ok(Self {
            proc_,
            ep: Endpoint::new(listen, "/mcp"),
            gen,
            log,
        })
    }

    /// `kill -9` it.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        self.proc_.kill9().await
    }

    /// Its process id.
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.proc_.pid()
    }

    /// Fail if it exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.proc_
            .check_alive()
            .with_context(|| format!("its log:\n{}", tail(&self.log)))
    }
}

/// The last lines of a log.
pub fn tail(p: &Path) -> String {
    let t = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The Debian cluster to restart: `--pg-cluster "VERSION NAME"`, else the one
/// version under /etc/postgresql and `main`.
pub fn pg_cluster(given: Option<&str>) -> anyhow::Result<(String, String)> {
    if let Some(g) = given {
        let mut w = g.split_whitespace();
        if let (Some(v), Some(n), None) = (w.next(), w.next(), w.next()) {
            return Ok((v.to_string(), n.to_string()));
        }
        bail!("--pg-cluster wants \"VERSION NAME\", e.g. \"15 main\"");
    }
    let mut versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
        .context("listing /etc/postgresql (give --pg-cluster)")?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    versions.sort();
    match versions.as_slice() {
        [v] => Ok((v.clone(), "main".into())),
        _ => bail!("/etc/postgresql holds {versions:?}: give --pg-cluster \"VERSION NAME\""),
    }
}

/// `pg_ctlcluster VERSION NAME restart`; how long it took.
pub async fn restart_postgres(cluster: &(String, String)) -> anyhow::Result<Duration> {
    let t0 = std::time::Instant::now();
    let out = tokio::process::Command::new("pg_ctlcluster")
        .args([cluster.0.as_str(), cluster.1.as_str(), "restart"])
        .output()
        .await
        .context("running pg_ctlcluster")?;
    if !out.status.success() {
        bail!(
            "pg_ctlcluster {} {} restart: {}: {}",
            cluster.0,
            cluster.1,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(t0.elapsed())
}
