//! Rows and records: the columns a [`TaskRecord`] is read from, a row read into
//! one, and a record's values as they are written.

use serde_json::{Map, Value};
use tokio_postgres::Row;

use super::db;
use crate::store::{NewTask, StoreError, TaskOutcome, TaskRecord, TaskStatus};

/// Columns read into a [`TaskRecord`], in [`record`]'s order.
pub(super) const COLUMNS: &str =
    "id, owner, upstream, tool, status, status_message, created_at_ms, \
     updated_at_ms, ttl_ms, poll_interval_ms, expires_at_ms, input_requests";

pub(super) fn status_of(s: &str) -> TaskStatus {
    match s {
        "working" => TaskStatus::Working,
        "input_required" => TaskStatus::InputRequired,
        "completed" => TaskStatus::Completed,
        "cancelled" => TaskStatus::Cancelled,
        _ => TaskStatus::Failed,
    }
}

pub(super) fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(super) fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A row (in [`COLUMNS`] order, optionally followed by `outcome`) as a record.
pub(super) fn record(row: &Row, with_outcome: bool) -> Result<TaskRecord, StoreError> {
    let id: String = row.get(0);
    let input_requests = match row.get::<_, Value>(11) {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let outcome = if with_outcome {
        match row.get::<_, Option<Vec<u8>>>(12) {
            Some(bytes) => Some(serde_json::from_slice::<TaskOutcome>(&bytes).map_err(|e| {
                StoreError::Corrupt {
                    id: id.clone(),
                    message: format!("outcome: {e}"),
                }
            })?),
            None => None,
        }
    } else {
        None
    };
    let mut rec = TaskRecord::new(NewTask {
        id,
        owner: row.get(1),
        upstream: row.get(2),
        tool: row.get(3),
        created_at_ms: u(row.get(6)),
        ttl_ms: u(row.get(8)),
        poll_interval_ms: u(row.get(9)),
    })
    .restored(status_of(row.get(4)));
    rec.status_message = row.get(5);
    rec.updated_at_ms = u(row.get(7));
    rec.expires_at_ms = u(row.get(10));
    rec.input_requests = input_requests;
    rec.outcome = outcome;
    Ok(rec)
}

pub(super) fn outcome_bytes(rec: &TaskRecord) -> Result<Option<Vec<u8>>, StoreError> {
    rec.outcome
        .as_ref()
        .map(|o| serde_json::to_vec(o).map_err(db))
        .transpose()
}
