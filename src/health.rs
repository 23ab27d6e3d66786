//! What tasklift says of its own health, the same on both listeners (the front
//! door and the admin listener): `/readyz` (ready, degraded for low disk space, or
//! unready with the reason) and the figures `/metrics` reads at scrape time.
//! Below `front/` and `admin.rs`: it takes the parts it reads, never their state.

use crate::hashing::FastMap;

use http::{header, Response, StatusCode};
use serde_json::{json, Value};

use crate::dispatch::Mount;
use crate::observe::metrics::Metrics;
use crate::serving::body::{self, RespBody};
use crate::serving::json_response;
use crate::tasks::Engine;

/// What the health answers read: the engine, the upstreams, the counters, and
/// how many legacy client sessions are open.
#[derive(Clone, Copy)]
pub struct Readings<'a> {
    pub engine: &'a Engine,
    pub mounts: &'a FastMap<String, Mount>,
    pub metrics: &'a Metrics,
    pub legacy_sessions: usize,
}

/// What `/metrics` reads from the rest of tasklift at scrape time.
pub async fn snapshot(state: Readings<'_>) -> crate::observe::metrics::Snapshot {
    check_upstreams(state.mounts).await;
    let mut snap = crate::observe::metrics::Snapshot::default();
    if let Ok(counts) = state.engine.counts().await {
        for (status, n) in counts {
            *snap.tasks_by_status.entry(status.as_str()).or_default() += n;
        }
    }
    snap.store_disk_bytes = state
        .engine
        .health()
        .await
        .map(|s| s.disk_bytes)
        .unwrap_or(0);
    snap.legacy_sessions = state.legacy_sessions as u64;
    if let Some(d) = state.engine.disk() {
        snap.store_free_bytes = d.free_bytes();
        snap.store_low_space = Some(d.is_low());
    }
    let mut ups: Vec<_> = state
        .mounts
        .values()
        .map(|m| {
            (
                m.cfg.name.clone(),
                m.upstream.health().is_ok(),
                m.upstream.restarts(),
            )
        })
        .collect();
    ups.sort();
    snap.upstreams = ups;
    snap.webhooks = state.metrics.webhook_figures().await;
    snap
}

/// `/metrics`: Prometheus text format.
pub async fn metrics(state: Readings<'_>) -> Response<RespBody> {
    let text = state.metrics.render(&snapshot(state).await);
    Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )
        .body(body::full(text))
        .expect("valid response")
}

/// Check every upstream's reachability now (concurrently).
pub async fn check_upstreams(mounts: &FastMap<String, Mount>) {
    let mut checks = tokio::task::JoinSet::new();
    for m in mounts.values() {
        let up = m.upstream.clone();
        checks.spawn(async move { up.check_health().await });
    }
    while checks.join_next().await.is_some() {}
}

/// `/readyz`: 200 when the store is open and every upstream can take calls, else 503.
pub async fn readyz(state: Readings<'_>) -> Response<RespBody> {
    check_upstreams(state.mounts).await;
    // Upstreams that cannot take calls now (e.g. a stdio child that keeps crashing).
    let upstreams: serde_json::Map<String, Value> = state
        .mounts
        .values()
        .filter_map(|m| {
            m.upstream
                .health()
                .err()
                .map(|e| (m.cfg.name.clone(), json!(e)))
        })
        .collect();
    // Low on disk space: still ready (stored tasks are read, calls run), but
    // degraded: no new tasks until space is freed.
    let low = state.engine.disk().is_some_and(|d| d.is_low());
    let disk = state
        .engine
        .disk()
        .map(|d| json!({"free_bytes": d.free_bytes(), "min_free_bytes": d.min_free(), "low": low, "store_refused_write": d.store_refused()}));
    match state.engine.health().await {
        Ok(s) if upstreams.is_empty() => {
            let mut ready = json!({
                "status": if low { "degraded" } else { "ready" },
                "tasks": s.tasks,
                "running": state.engine.running_count(),
                "legacy_sessions": state.legacy_sessions,
            });
            if let Some(d) = disk {
                ready["disk"] = d;
            }
            if let Some(d) = state.engine.disk().filter(|_| low) {
                ready["degraded"] = json!(format!(
                    "{}: no new tasks are created until space is freed",
                    d.why_low()
                ));
            }
            json_response(StatusCode::OK, &ready)
        }
        Ok(_) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "unready", "upstreams": upstreams}),
        ),
        Err(e) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "unready", "store": e.to_string(), "upstreams": upstreams}),
        ),
    }
}
