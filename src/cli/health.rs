//! `tasklift health`: GET a running tasklift's `/healthz` and exit 0 when it answers
//! 200, 1 otherwise, naming why. The container image's `HEALTHCHECK` runs it: a slim
//! image has no curl, and the binary is already there.
//!
//! Without `--url` it probes the address `tasklift serve` would listen on with the
//! same settings: `--listen` or `TASKLIFT_LISTEN`, else the `[server] listen` of the
//! file named by `--config` or `TASKLIFT_CONFIG`, else `127.0.0.1:8080`; an
//! unspecified address (`0.0.0.0`, `[::]`) is probed on loopback. So a container
//! whose listener is moved by a variable or a mounted file is still probed right.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use http_body_util::Full;

use crate::config::{parse_duration, RawConfig};

/// `tasklift health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// The URL to GET, e.g. http://127.0.0.1:9090/healthz [default: /healthz on the
    /// listen address].
    #[arg(long)]
    pub url: Option<String>,
    /// The configuration file whose `[server] listen` is probed.
    #[arg(long, short, env = "TASKLIFT_CONFIG")]
    pub config: Option<PathBuf>,
    /// The address `tasklift serve` listens on (wins over the file's).
    #[arg(long, env = "TASKLIFT_LISTEN")]
    pub listen: Option<String>,
    /// Give up after this long, e.g. 2s.
    #[arg(long, default_value = "5s")]
    pub timeout: String,
}

/// Run `tasklift health`: 0 when the URL answered 200, 1 otherwise (a container
/// runtime reads any other code as unhealthy too, but reserves 2).
pub fn run(a: HealthArgs) -> ExitCode {
    let target = target(&a).and_then(|url| {
        let timeout = parse_duration("--timeout", &a.timeout).map_err(|e| e.to_string())?;
        Ok((url, timeout))
    });
    let (url, timeout) = match target {
        Ok(t) => t,
        Err(m) => {
            eprintln!("tasklift health: {m}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tasklift health: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(probe(&url, timeout)) {
        Ok(()) => {
            println!("{url}: HTTP 200");
            ExitCode::SUCCESS
        }
        Err(m) => {
            eprintln!("tasklift health: {url}: {m}");
            ExitCode::FAILURE
        }
    }
}

/// The URL to probe.
fn target(a: &HealthArgs) -> Result<String, String> {
    if let Some(url) = &a.url {
        return Ok(url.clone());
    }
    let listen = match (&a.listen, &a.config) {
        (Some(l), _) => l.clone(),
        (None, Some(file)) => {
            RawConfig::from_file(file)
                .map_err(|e| e.to_string())?
                .server
                .listen
        }
        (None, None) => RawConfig::default().server.listen,
    };
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| format!("{listen:?} is not an address like 127.0.0.1:8080"))?;
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Ok(format!(
        "http://{}/healthz",
        SocketAddr::new(ip, addr.port())
    ))
}

/// GET `url`; `Err` says why it is not healthy.
async fn probe(url: &str, timeout: Duration) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL ({e})"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("not an http:// or https:// URL".into()),
    };
    let client = crate::tls::http1_client(https)?;
    let req = http::Request::get(uri)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(timeout, client.request(req))
        .await
        .map_err(|_| format!("no answer within {}", humantime::format_duration(timeout)))?
        .map_err(|e| format!("cannot connect: {}", crate::observe::error_chain(&e)))?;
    match resp.status() {
        http::StatusCode::OK => Ok(()),
        s => Err(format!("HTTP {s}")),
    }
}
