//! What the memory and scale scenarios share: calls held at the upstream (its
//! `/stats`) and the clients that started them, polled until their tasks complete.

use std::time::Duration;

use anyhow::bail;
use serde_json::Value;
use tokio::time::Instant;

use crate::wire::{self, Conn, Endpoint};

/// Upstream `/stats`.
pub(super) async fn upstream_stats(up: &Endpoint) -> anyhow::Result<Value> {
    let mut c = Conn::connect(up).await?;
    let (s, b) = c.plain("GET", "/stats").await?;
    if !s.is_success() {
        bail!("upstream /stats: HTTP {s}");
    }
    Ok(serde_json::from_slice(&b)?)
}

/// A client connection and the tasks it started.
pub(super) struct Client {
    pub(super) conn: Conn,
    pub(super) ids: Vec<String>,
}

/// Poll a client's tasks through `tasks/get` until each reads `completed`; how many
/// did, how many ended otherwise or not within `limit`, and the first of those.
pub(super) async fn drain(client: Client, limit: Duration) -> (usize, usize, Option<String>) {
    let Client { mut conn, ids } = client;
    let mut pending = ids;
    let (mut completed, mut errors) = (0usize, 0usize);
    let mut first_error = None;
    let deadline = Instant::now() + limit;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for id in pending {
            match conn.result(&wire::tasks_get(&id)).await {
                Ok(t) => match t["status"].as_str() {
                    Some("completed") => completed += 1,
                    Some("working") => still.push(id),
                    _ => {
                        errors += 1;
                        first_error.get_or_insert_with(|| format!("task ended {t}"));
                    }
                },
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| format!("{e:#}"));
                }
            }
        }
        pending = still;
        if Instant::now() > deadline {
            errors += pending.len();
            first_error
                .get_or_insert_with(|| format!("tasks not completed within {}s", limit.as_secs()));
            break;
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    (completed, errors, first_error)
}
