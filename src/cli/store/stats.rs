//! `tasklift store stats`: tasks by status, disk use, oldest and newest, expired
//! but not yet swept.

use std::path::Path;

use serde_json::{json, Value};

use crate::store::{SledStore, TaskStatus, TaskStore};

use super::format::{bytes, now_ms, rfc3339, short_duration};
use super::Fail;

pub(super) async fn stats(store: &SledStore, dir: &Path, json: bool) -> Result<u8, Fail> {
    let all = store.all().await?; // newest first
    let now = now_ms();
    let count = |s: TaskStatus| all.iter().filter(|r| r.status() == s).count();
    let expired = all.iter().filter(|r| r.expires_at_ms <= now).count();
    let database = crate::store::dir_size(&dir.join("db"));
    let (mut result_bytes, mut result_files) = (0u64, 0usize);
    if let Ok(rd) = std::fs::read_dir(dir.join("results")) {
        for e in rd.flatten() {
            if e.path().extension().is_some_and(|x| x == "json") {
                result_files += 1;
                result_bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    let total = crate::store::dir_size(dir);
    let newest = all.first().map(|r| r.created_at_ms);
    let oldest = all.last().map(|r| r.created_at_ms);
    if json {
        let by_status: serde_json::Map<String, Value> = TaskStatus::ALL
            .iter()
            .map(|s| (s.as_str().to_string(), json!(count(*s))))
            .collect();
        let out = json!({
            "data_dir": dir.display().to_string(),
            "tasks": all.len(),
            "by_status": by_status,
            "expired_not_swept": expired,
            "oldest_created_at_ms": oldest,
            "oldest_created_at": oldest.map(rfc3339),
            "newest_created_at_ms": newest,
            "newest_created_at": newest.map(rfc3339),
            "disk_bytes": {"total": total, "database": database, "result_files": result_bytes},
            "result_files": result_files,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return Ok(0);
    }
    println!("{:<24}{}", "data directory", dir.display());
    println!("{:<24}{}", "tasks", all.len());
    for s in TaskStatus::ALL {
        println!("  {:<22}{}", s.as_str(), count(s));
    }
    println!("{:<24}{expired}", "expired, not yet swept");
    let when = |ms: Option<u64>| match ms {
        Some(ms) => format!(
            "{} ({} ago)",
            rfc3339(ms),
            short_duration(now.saturating_sub(ms))
        ),
        None => "-".into(),
    };
    println!("{:<24}{}", "oldest", when(oldest));
    println!("{:<24}{}", "newest", when(newest));
    println!(
        "{:<24}{} (database {}, {} in {} result file{})",
        "disk",
        bytes(total),
        bytes(database),
        bytes(result_bytes),
        result_files,
        if result_files == 1 { "" } else { "s" }
    );
    Ok(0)
}
