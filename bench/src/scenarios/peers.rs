//! Peers: what users would pick instead of tasklift, in front of the same
//! 2025-11-25 upstream (the legacy JSON one of `legacy.rs`) beside nginx and
//! tasklift. Today that is `mcp-proxy` 0.6.0 from crates.io (a tower-mcp gateway),
//! in two builds `scripts/bench` installs under `target/tools/`: the plain one
//! (2025-11-25 only) and the one with `--features protocol-2026-07-28`. Both speak
//! 2025-11-25 to their backends, on one session of their own.
//!
//! mcp-proxy is configured by a TOML file: one `http` backend named `legacy`
//! pointing at the upstream's `/mcp`. It serves MCP on `/` and `/readyz` for
//! readiness, keeps its own sessions for 2025-11-25 clients, and names each
//! backend tool `<backend>/<tool>`: the upstream's `fast` is `legacy/fast`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;

use super::legacy::Target;
use super::measure::Cpu;
use crate::loadgen::Workload;
use crate::plan::{PEER_MCP_PROXY, PEER_MCP_PROXY_2026, PEER_MCP_PROXY_2026_LEGACY};
use crate::procs::{self, Mem, Proc, TempDir};
use crate::wire::{self, Conn, Endpoint, Prepared};
use crate::RunArgs;

/// The backend's name in mcp-proxy's configuration, its tools' namespace.
const BACKEND: &str = "legacy";
/// The upstream's `fast` tool as mcp-proxy lists it (separator `/`, its default).
const TOOL: &str = "legacy/fast";
/// A good answer contains this.
const EXPECT: &[u8] = b"\"text\":\"ok\"";

/// The two builds of mcp-proxy 0.6.0.
#[derive(Clone, Copy)]
enum Build {
    /// `--no-default-features`: a 2025-11-25 server.
    Plain,
    /// `--features protocol-2026-07-28`: also serves 2026-07-28 clients.
    Protocol2026,
}

impl Build {
    fn name(self) -> &'static str {
        match self {
            Build::Plain => "mcp-proxy",
            Build::Protocol2026 => "mcp-proxy-2026",
        }
    }

    /// The binary: the option, else where `scripts/bench` installs it. `None`
    /// (said on stderr) when there is none.
    fn binary(self, args: &RunArgs) -> anyhow::Result<Option<PathBuf>> {
        let (given, option) = match self {
            Build::Plain => (&args.mcp_proxy, "--mcp-proxy"),
            Build::Protocol2026 => (&args.mcp_proxy_2026, "--mcp-proxy-2026"),
        };
        if let Some(p) = given {
            if !p.is_file() {
                bail!("{option}: no binary at {}", p.display());
            }
            return Ok(Some(p.clone()));
        }
        let default = args
            .repo
            .join("target/tools")
            .join(self.name())
            .join("bin/mcp-proxy");
        if default.is_file() {
            return Ok(Some(default));
        }
        eprintln!(
            "peers: {} not measured: no binary at {} (scripts/bench installs it; or pass {option})",
            self.name(),
            default.display()
        );
        Ok(None)
    }
}

/// One running mcp-proxy and how it is loaded.
struct Peer {
    label: &'static str,
    proc_: Proc,
    ep: Endpoint,
    work: Arc<Workload>,
    _dir: TempDir,
}

/// The mcp-proxy builds that run, in front of the legacy JSON upstream.
pub(super) struct Peers {
    peers: Vec<Peer>,
}

fn workload(request: Prepared) -> Arc<Workload> {
    Arc::new(Workload {
        requests: vec![request],
        expect: EXPECT,
    })
}

/// One `tools/call` of `fast` through mcp-proxy on a connection of the
/// request's era; an error says why it did not answer `ok`.
async fn probe(ep: &Endpoint, p: &Prepared) -> anyhow::Result<()> {
    let mut c = match p.legacy {
        true => Conn::connect_legacy(ep).await?,
        false => Conn::connect(ep).await?,
    };
    let a = c.send(p).await?;
    a.check(EXPECT).map_err(anyhow::Error::msg)
}

impl Peer {
    async fn start(build: Build, bin: &Path, upstream: &Endpoint) -> anyhow::Result<Self> {
        let dir = TempDir::new(build.name())?;
        let listen = procs::free_port()?;
        // Defaults otherwise: no auth, audit log, cache or resilience layers. The
        // log level is its documented default, `info`, set here: without an
        // `[observability]` table 0.6.0 leaves it empty, which logs every level
        // (two DEBUG lines per call).
        let toml = format!(
            r#"[proxy]
name = "tasklift-bench-peer"

[observability]
log_level = "info"

[proxy.listen]
host = "{host}"
port = {port}

[[backends]]
name = "{BACKEND}"
transport = "http"
url = "{url}"
"#,
            host = listen.ip(),
            port = listen.port(),
            url = upstream.url(),
        );
        let config = dir.path().join("proxy.toml");
        std::fs::write(&config, toml)?;
        let log = dir.path().join("mcp-proxy.log");
        let args = vec!["--config".to_string(), config.display().to_string()];
        let mut proc_ = Proc::spawn(build.name(), bin, &args, &log)?;
        procs::wait_http_ok(&mut proc_, listen, "/readyz", Duration::from_secs(15))
            .await
            .with_context(|| format!("{} log:\n{}", build.name(), tail(&log)))?;
        let ep = Endpoint::new(listen, "/");
        let legacy = wire::legacy_tool_call(TOOL, json!({}));
        let (label, work) = match build {
            Build::Plain => (PEER_MCP_PROXY, workload(legacy)),
            Build::Protocol2026 => {
                // The same request as tasklift's 2026-07-28 client, if it takes it.
                let modern = wire::tool_call(TOOL, json!({}), true);
                match probe(&ep, &modern).await {
                    Ok(()) => (PEER_MCP_PROXY_2026, workload(modern)),
                    Err(e) => {
                        eprintln!(
                            "peers: {} refused a 2026-07-28 client ({e:#}); loaded by 2025-11-25 clients",
                            build.name()
                        );
                        (PEER_MCP_PROXY_2026_LEGACY, workload(legacy))
                    }
                }
            }
        };
        probe(&ep, &work.requests[0])
            .await
            .with_context(|| format!("tools/call {TOOL} through {}", build.name()))
            .with_context(|| format!("{} log:\n{}", build.name(), tail(&log)))?;
        eprintln!(
            "{} in front of the legacy upstream on {}",
            build.name(),
            ep.url()
        );
        Ok(Self {
            label,
            proc_,
            ep,
            work,
            _dir: dir,
        })
    }
}

impl Peers {
    /// Start each build that is installed in front of `upstream`, and check a
    /// call goes through.
    pub(super) async fn start(args: &RunArgs, upstream: &Endpoint) -> anyhow::Result<Self> {
        let mut peers = Vec::new();
        for build in [Build::Plain, Build::Protocol2026] {
            if let Some(bin) = build.binary(args)? {
                peers.push(Peer::start(build, &bin, upstream).await?);
            }
        }
        Ok(Self { peers })
    }

    /// This repetition's closed-loop targets; the upstream's CPU is `upstream`'s.
    pub(super) fn targets(
        &mut self,
        (upstream_ep, upstream): (&Endpoint, u32),
    ) -> anyhow::Result<Vec<Target<'_>>> {
        let mut t = Vec::new();
        for p in &mut self.peers {
            p.proc_.check_alive()?;
            let cpu = Cpu {
                proxy: vec![p.proc_.pid()?],
                upstream: vec![upstream],
                accepted_at: Some(upstream_ep.clone()),
            };
            t.push((p.label, &p.ep, cpu, p.work.clone()));
        }
        Ok(t)
    }

    /// What each holds in memory now, by label.
    pub(super) fn mem(&self) -> anyhow::Result<Vec<(&'static str, Mem)>> {
        self.peers
            .iter()
            .map(|p| Ok((p.label, procs::mem(p.proc_.pid()?)?)))
            .collect()
    }
}

/// The last lines of a log, for error messages.
fn tail(p: &Path) -> String {
    let t = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
