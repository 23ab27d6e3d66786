//! What the harness runs, shared by the scenarios and the report: the thresholds
//! of the tasklift instances, the labels, and which targets a run includes.

use std::time::Duration;

use crate::RunArgs;

/// Thresholds of the tasklift instances.
pub const MAIN_THRESHOLD: Duration = Duration::from_secs(2);
/// The `sleep` tool's threshold on the main instance (tasks for tasks/get).
pub const GET_THRESHOLD: Duration = Duration::from_millis(20);
/// The creation scenario's threshold.
pub const CREATION_THRESHOLD: Duration = Duration::from_millis(50);
/// The creation scenario's upstream sleep.
pub const CREATION_SLEEP: Duration = Duration::from_millis(200);
/// The memory scenario's threshold (the scale scenario's too).
pub const MEMORY_THRESHOLD: Duration = Duration::from_millis(10);
/// The scale scenario: `tasks/get`s timed at each level (a smoke run: fewer),
pub const SCALE_GETS: usize = 5000;
/// over this many connections, each sending its next when the last is answered.
pub const SCALE_GET_CONNECTIONS: usize = 8;
/// How long the upstream holds a call at most: past the longest ramp and drain.
pub const SCALE_HOLD: Duration = Duration::from_secs(1800);
/// The scale scenario's targets (issue 32, item 4): RSS at most this with ...
pub const SCALE_RSS_MAX_KIB: u64 = 1024 * 1024;
/// ... `tasks/get` p99 at most this (µs) ...
pub const SCALE_GET_P99_MAX_US: u32 = 5000;
/// ... with this many tasks running.
pub const SCALE_AT: usize = 100_000;

/// The label of `tasks/get` with the PostgreSQL store.
pub const PG_GET: &str = "tasks/get (PostgreSQL)";
/// The label of pass-through with every request traced and its span exported
/// over OTLP (`[telemetry] otlp_endpoint` set, to a collector that keeps nothing).
pub const TRACED: &str = "tasklift (traced)";
/// The label of pass-through through `tasklift-bench forwarder`, hyper passing
/// bytes through: what a proxy on hyper reaches before doing any work of its own.
pub const FORWARDER: &str = "hyper forwarder";
/// The label of pass-through with the upstream as tasklift's stdio child.
pub const STDIO: &str = "tasklift (stdio upstream)";

/// In front of a 2025-11-25 server with sessions, JSON answers (`scenarios/legacy.rs`):
/// the 2025-11-25 client straight to it,
pub const LEGACY_DIRECT: &str = "legacy upstream, direct (2025 client)";
/// through nginx,
pub const LEGACY_NGINX: &str = "nginx, legacy upstream (2025 client)";
/// through tasklift with a 2026-07-28 client,
pub const LEGACY_TL: &str = "tasklift, legacy upstream";
/// and with 2025-11-25 clients, a session per connection.
pub const LEGACY_TL_2025: &str = "tasklift, legacy upstream (2025 client)";
/// The same with SSE answers: through nginx,
pub const LEGACY_NGINX_SSE: &str = "nginx, legacy SSE upstream (2025 client)";
/// and through tasklift with a 2026-07-28 client.
pub const LEGACY_TL_SSE: &str = "tasklift, legacy SSE upstream";

/// Peers in front of the same legacy JSON upstream (`scenarios/peers.rs`):
/// `mcp-proxy` 0.6.0, the plain build, with 2025-11-25 clients,
pub const PEER_MCP_PROXY: &str = "mcp-proxy, legacy upstream (2025 client)";
/// its `protocol-2026-07-28` build with a 2026-07-28 client,
pub const PEER_MCP_PROXY_2026: &str = "mcp-proxy-2026, legacy upstream";
/// or, if that build refused one, with 2025-11-25 clients.
pub const PEER_MCP_PROXY_2026_LEGACY: &str = "mcp-proxy-2026, legacy upstream (2025 client)";

/// Whether `--skip` names this scenario.
pub fn skip(args: &RunArgs, what: &str) -> bool {
    args.skip.iter().any(|s| s.trim() == what)
}

/// Labels in report order, with what they measured.
pub fn order(args: &RunArgs) -> Vec<String> {
    let mut v = vec!["direct".to_string()];
    if !skip(args, "nginx") {
        v.push("nginx".into());
    }
    if !skip(args, "forwarder") {
        v.push(FORWARDER.into());
    }
    v.push("tasklift".into());
    if !skip(args, "traced") {
        v.push(TRACED.into());
    }
    if !skip(args, "stdio") {
        v.push(STDIO.into());
    }
    if !skip(args, "legacy") {
        v.push(LEGACY_DIRECT.into());
        if !skip(args, "nginx") {
            v.push(LEGACY_NGINX.into());
        }
        v.extend([LEGACY_TL.into(), LEGACY_TL_2025.into()]);
        if !skip(args, "nginx") {
            v.push(LEGACY_NGINX_SSE.into());
        }
        v.push(LEGACY_TL_SSE.into());
        if !skip(args, "peers") {
            v.extend([
                PEER_MCP_PROXY.into(),
                PEER_MCP_PROXY_2026.into(),
                PEER_MCP_PROXY_2026_LEGACY.into(),
            ]);
        }
    }
    if !skip(args, "tasks-get") {
        v.push("tasks/get".into());
    }
    if args.postgres.is_some() {
        v.push(PG_GET.into());
    }
    if !skip(args, "open") {
        v.push(format!("direct @{:.0}/s", args.rate));
        if !skip(args, "nginx") {
            v.push(format!("nginx @{:.0}/s", args.rate));
        }
        v.push(format!("tasklift @{:.0}/s", args.rate));
    }
    v
}
