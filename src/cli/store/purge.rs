//! `tasklift store purge`: delete the selected tasks and their result files;
//! tasks still running only with `--force`.

use std::path::Path;

use crate::store::{SledStore, TaskRecord, TaskStatus, TaskStore};

use super::format::{now_ms, printable, short_duration};
use super::{Fail, PurgeArgs, Selectors, EXIT_FAILED};

/// Delete the selected tasks, print each and the total, and tell what was kept or not
/// found (exit code 1 then).
pub(super) async fn purge(store: &SledStore, dir: &Path, args: &PurgeArgs) -> Result<u8, Fail> {
    let now = now_ms();
    let all = store.all().await?;
    let (go, kept): (Vec<&TaskRecord>, Vec<&TaskRecord>) = selected(&all, &args.select, now)
        .into_iter()
        .partition(|r| args.force || r.status().is_terminal());
    let missing = missing_ids(&all, &args.select.ids);
    let files = delete(store, dir, &go, args.dry_run, now).await?;
    print_total(go.len(), files, args.dry_run);
    report_kept(&kept);
    for id in &missing {
        eprintln!("tasklift: no task {id} in {}", dir.display());
    }
    Ok(if kept.is_empty() && missing.is_empty() {
        0
    } else {
        EXIT_FAILED
    })
}

/// The tasks matching every selector given.
fn selected<'a>(all: &'a [TaskRecord], sel: &Selectors, now: u64) -> Vec<&'a TaskRecord> {
    let status = sel.status.map(TaskStatus::from);
    let older = sel.older_than.map(|d| d.as_millis() as u64);
    all.iter()
        .filter(|r| !sel.expired || r.expires_at_ms <= now)
        .filter(|r| status.is_none_or(|s| r.status() == s))
        .filter(|r| older.is_none_or(|o| now.saturating_sub(r.created_at_ms) >= o))
        .filter(|r| sel.ids.is_empty() || sel.ids.contains(&r.id))
        .collect()
}

/// The `--id`s that name no task in the store.
fn missing_ids<'a>(all: &[TaskRecord], ids: &'a [String]) -> Vec<&'a String> {
    ids.iter()
        .filter(|id| !all.iter().any(|r| &r.id == *id))
        .collect()
}

/// Delete the tasks (unless a dry run), printing each; how many had a result file.
async fn delete(
    store: &SledStore,
    dir: &Path,
    go: &[&TaskRecord],
    dry_run: bool,
    now: u64,
) -> Result<usize, Fail> {
    let verb = if dry_run { "would delete" } else { "deleted" };
    let mut files = 0usize;
    for r in go {
        if crate::store::result_file(&dir.join("results"), &r.id).exists() {
            files += 1;
        }
        if !dry_run {
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
    if !dry_run && !go.is_empty() {
        store.flush().await?;
    }
    Ok(files)
}

/// The line that counts the tasks and result files deleted (or that would be).
fn print_total(n: usize, files: usize, dry_run: bool) {
    let tasks = if n == 1 { "task" } else { "tasks" };
    let with_files = match files {
        0 => String::new(),
        1 => " and 1 result file".into(),
        f => format!(" and {f} result files"),
    };
    if dry_run {
        println!("dry run: would delete {n} {tasks}{with_files}; nothing was deleted");
    } else {
        println!("deleted {n} {tasks}{with_files}");
    }
}

/// Each unfinished task kept (no `--force`), then why that is no harm.
fn report_kept(kept: &[&TaskRecord]) {
    for r in kept {
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
}
