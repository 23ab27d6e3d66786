//! The admin listener (`[admin] listen`, `--admin-listen`): a second, read-only HTTP
//! listener for operators, apart from the MCP front door. It serves
//!
//! - `/`: a status page in plain server-rendered HTML (refreshing itself every 5 s):
//!   version and uptime; each upstream with its path, era, transport, readiness,
//!   calls in flight and stdio restarts; tasks by status; legacy sessions; each
//!   webhook destination's backlog and outcomes (`admin/webhooks.rs`); the 20
//!   most recent tasks (short id, tool, status, age, status message)
//!   (`admin/page.rs`);
//! - `/metrics`, `/healthz`, `/readyz`: the same answers as on the front door.
//!
//! The page never shows a task's arguments, result, error data or owner, nor an
//! upstream's headers, environment or URL credentials. Everything that comes from
//! upstreams or clients is HTML-escaped ([`escape`]), and the page is sent with a
//! Content-Security-Policy that allows no script at all. Only GET is served.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, HeaderValue, Method, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::front::State;
use crate::headers::Fields;
use crate::serving::body::{self, RespBody};
use crate::serving::Request;
use crate::webhooks::Webhooks;

mod page;
mod webhooks;

use page::page;

/// How long open admin connections may take to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Accept admin connections until `shutdown` turns true, then stop accepting and
/// let open connections finish. `started` is when tasklift started (for the uptime).
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    allowed_hosts: Arc<Vec<String>>,
    started: Instant,
    hooks: Option<Arc<Webhooks>>,
    shutdown: watch::Receiver<bool>,
) {
    let limits = crate::serving::Limits {
        grace: SHUTDOWN_GRACE,
        header_timeout: Duration::from_secs(30),
        max_body: 64 * 1024, // GET only: a body is read and ignored
    };
    crate::serving::accept_loop(listener, shutdown, limits, "admin", None, move |req, peer| {
        let (state, hosts, hooks) = (state.clone(), allowed_hosts.clone(), hooks.clone());
        async move {
            if !host_allowed(req.headers(), &hosts)
                || !crate::front::validate::origin_allowed(req.headers(), &state.cfg.allowed_origins)
            {
                tracing::warn!(client.addr = %peer, host = ?req.headers().get(header::HOST), "admin listener refused a request for another host or origin");
                return text(
                    StatusCode::FORBIDDEN,
                    "forbidden: the admin listener answers requests addressed to an IP address, localhost or admin.allowed_hosts, from an allowed Origin\n",
                );
            }
            handle(&state, (started, hooks.as_deref()), req).await
        }
    })
    .await
}

async fn handle(
    state: &State,
    (started, hooks): (Instant, Option<&Webhooks>),
    req: Request,
) -> Response<RespBody> {
    if req.method() != Method::GET {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "the admin listener is read-only: GET only\n",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    match req.uri().path() {
        "/" => page(state, started, hooks).await,
        "/metrics" => crate::health::metrics(state.health()).await,
        "/healthz" => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body::full(r#"{"status":"ok"}"#))
            .expect("valid response"),
        "/readyz" => crate::health::readyz(state.health()).await,
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: the admin listener serves /, /metrics, /healthz and /readyz\n",
        ),
    }
}

/// Whether the `Host` header names an IP address, `localhost`, or an allowed host:
/// a page read by a browser must not be reachable under a name an attacker's DNS
/// points at 127.0.0.1 (DNS rebinding).
fn host_allowed(h: &Fields, allowed: &[String]) -> bool {
    let Some(host) = h.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return true; // HTTP/1.0 without Host: not a browser
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

fn text(status: StatusCode, msg: &'static str) -> Response<RespBody> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(body::full(msg))
        .expect("valid response")
}
