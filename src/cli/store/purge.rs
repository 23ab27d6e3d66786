//! `tasklift store purge`: delete the selected tasks and their result files;
//! tasks still running only with `--force`.

use std::path::Path;

use crate::store::{SledStore, TaskRecord, TaskStatus, TaskStore};

use super::format::{now_ms, printable, short_duration};
use super::{Fail, PurgeArgs, EXIT_FAILED};

pub(super) async fn purge(store: &SledStore, dir: &Path, args: &PurgeArgs) -> Result<u8, Fail> {
    let sel = &args.select;
    let now = now_ms();
    let all = store.all().await?;
    let status = sel.status.map(TaskStatus::from);
    let older = sel.older_than.map(|d| d.as_millis() as u64);
    let selected: Vec<&TaskRecord> = all
        .iter()
        .filter(|r| !sel.expired || r.expires_at_ms <= now)
        .filter(|r| status.is_none_or(|s| r.status() == s))
        .filter(|r| older.is_none_or(|o| now.saturating_sub(r.created_at_ms) >= o))
        .filter(|r| sel.ids.is_empty() || sel.ids.contains(&r.id))
        .collect();
    let missing: Vec<&String> = sel
        .ids
        .iter()
        .filter(|id| !all.iter().any(|r| &r.id == *id))
        .collect();
    let (go, kept): (Vec<&TaskRecord>, Vec<&TaskRecord>) = selected
        .into_iter()
        .partition(|r| args.force || r.status().is_terminal());
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    let mut files = 0usize;
    for r in &go {
        if crate::store::result_file(&dir.join("results"), &r.id).exists() {
            files += 1;
        }
        if !args.dry_run {
            store.delete(&r.id).await?;
        }
        println!(
            "{verb} {}  {}/{}  {}  created {} ago",
            r.id,
            printable(&r.upstream, 24),
            printable(&r.tool, 32),
            r.status().as_str(),
            short_duration(now.saturating_sub(r.created_at_ms))
        );
    }
    if !args.dry_run && !go.is_empty() {
        store.flush().await?;
    }
    let n = go.len();
    let tasks = if n == 1 { "task" } else { "tasks" };
    let with_files = match files {
        0 => String::new(),
        1 => " and 1 result file".into(),
        f => format!(" and {f} result files"),
    };
    if args.dry_run {
        println!("dry run: would delete {n} {tasks}{with_files}; nothing was deleted");
    } else {
        println!("deleted {n} {tasks}{with_files}");
    }
    for r in &kept {
        eprintln!(
            "tasklift: kept {} ({}): unfinished tasks go only with --force",
            r.id,
            r.status().as_str()
        );
    }
    if !kept.is_empty() {
        eprintln!(
            "tasklift: kept {} unfinished task{}; the proxy fails them at its next start \
             anyway (see `tasklift store purge --help`)",
            kept.len(),
            if kept.len() == 1 { "" } else { "s" }
        );
    }
    for id in &missing {
        eprintln!("tasklift: no task {id} in {}", dir.display());
    }
    Ok(if kept.is_empty() && missing.is_empty() {
        0
    } else {
        EXIT_FAILED
    })
}
