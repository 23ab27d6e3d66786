//! `tasklift store outbox`: the webhook events still waiting for delivery (their
//! destination, type, task, attempts and next attempt), never their bodies.

use serde_json::{json, Value};

use crate::store::{Delivery, OutboxStore, SledStore};

use super::format::{now_ms, rfc3339, short_duration};
use super::Fail;

pub(super) async fn outbox(store: &SledStore, json: bool) -> Result<u8, Fail> {
    let now = now_ms();
    let pending = store.pending(usize::MAX).await?;
    let depth = store.depth().await?;
    if json {
        let out = json!({
            "destinations": depth.iter().map(|d| json!({
                "destination": d.destination,
                "pending": d.pending,
                "oldest_at": d.oldest_ms.map(rfc3339),
            })).collect::<Vec<Value>>(),
            "pending": pending.iter().map(summary).collect::<Vec<Value>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return Ok(0);
    }
    if pending.is_empty() {
        println!("(no webhook events waiting)");
        return Ok(0);
    }
    for d in &depth {
        let age = d.oldest_ms.map_or(String::new(), |o| {
            format!(", oldest {} ago", short_duration(now.saturating_sub(o)))
        });
        println!("{}: {} waiting{age}", d.destination, d.pending);
    }
    let mut rows = vec![[
        "DESTINATION",
        "EVENT",
        "TASK",
        "AGE",
        "ATTEMPTS",
        "NEXT",
        "WEBHOOK-ID",
    ]
    .map(String::from)];
    for d in &pending {
        let next = match d.next_at_ms.checked_sub(now) {
            Some(ms) if ms > 0 => format!("in {}", short_duration(ms)),
            _ => "due".into(),
        };
        rows.push([
            d.destination.clone(),
            d.kind.clone(),
            d.task_id.clone(),
            short_duration(now.saturating_sub(d.occurred_at_ms)),
            d.attempts.to_string(),
            next,
            d.id.clone(),
        ]);
    }
    let mut widths = [0usize; 7];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    Ok(0)
}

/// What `outbox --json` tells of one event: everything but its body.
fn summary(d: &Delivery) -> Value {
    json!({
        "webhook_id": d.id,
        "destination": d.destination,
        "type": d.kind,
        "task_id": d.task_id,
        "occurred_at": rfc3339(d.occurred_at_ms),
        "attempts": d.attempts,
        "next_attempt_at": rfc3339(d.next_at_ms),
    })
}
