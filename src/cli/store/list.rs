//! `tasklift store list`: a table of tasks, or JSON, never their arguments or
//! results.

use serde_json::{json, Value};

use crate::store::{SledStore, TaskRecord, TaskStatus, TaskStore};

use super::format::{expires, now_ms, printable, rfc3339, short_duration, short_owner};
use super::{Fail, ListArgs};

pub(super) async fn list(store: &SledStore, args: &ListArgs) -> Result<u8, Fail> {
    let now = now_ms();
    let status = args.status.map(TaskStatus::from);
    let matching: Vec<TaskRecord> = store
        .all()
        .await?
        .into_iter()
        .filter(|r| status.is_none_or(|s| r.status() == s))
        .filter(|r| args.upstream.as_ref().is_none_or(|u| &r.upstream == u))
        .collect();
    let total = matching.len();
    let limit = if args.limit == 0 { total } else { args.limit };
    let shown = &matching[..total.min(limit)];
    if args.json {
        let out: Vec<Value> = shown.iter().map(|r| summary(r, now)).collect();
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return Ok(0);
    }
    let mut rows = vec![[
        "ID", "UPSTREAM", "TOOL", "STATUS", "AGE", "TTL", "EXPIRES", "OWNER", "MESSAGE",
    ]
    .map(String::from)];
    for r in shown {
        rows.push([
            r.id.clone(),
            printable(&r.upstream, 24),
            printable(&r.tool, 32),
            r.status().as_str().to_string(),
            short_duration(now.saturating_sub(r.created_at_ms)),
            short_duration(r.ttl_ms),
            expires(r.expires_at_ms, now),
            short_owner(&r.owner),
            printable(r.status_message.as_deref().unwrap_or(""), 48),
        ]);
    }
    let mut widths = [0usize; 9];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", line.trim_end());
    }
    if shown.len() < total {
        println!("({} of {total} shown; --limit 0 shows all)", shown.len());
    } else if total == 0 {
        println!("(no tasks)");
    }
    Ok(0)
}

/// What `list --json` tells of a task: no arguments, results or input requests.
fn summary(r: &TaskRecord, now: u64) -> Value {
    json!({
        "id": r.id,
        "upstream": r.upstream,
        "tool": r.tool,
        "status": r.status().as_str(),
        "status_message": r.status_message,
        "owner": short_owner(&r.owner),
        "created_at": rfc3339(r.created_at_ms),
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
        "ttl_ms": r.ttl_ms,
        "expires_at_ms": r.expires_at_ms,
        "expired": r.expires_at_ms <= now,
        "pending_inputs": r.input_requests.len(),
    })
}
