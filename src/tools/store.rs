//! `tasklift store`: operator tools for the data directory of a stopped proxy.
//! `stats` (figures), `list` (a table without arguments or results), `show` (one
//! full record with its outcome) and `purge` (deletion).
//!
//! They open the sled database directly, so the proxy must be stopped: a running
//! tasklift holds sled's exclusive file lock (`flock` on `db/db`), and a command that
//! finds it taken refuses with exit code 3, naming the holder's pid when
//! `/proc/locks` tells it. A missing data directory, or one without a task store, is
//! exit code 2; nothing is ever created. Exit code 1: anything else went wrong, or
//! `purge` kept part of what was selected; 64: an invalid `--config` file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::config::{RawConfig, RawStore};
use crate::store::{SledStore, StoreError, TaskRecord, TaskStatus, TaskStore};

/// Something went wrong, or a selection was only partly purged.
pub const EXIT_FAILED: u8 = 1;
/// No data directory, or no task store in it.
pub const EXIT_NO_STORE: u8 = 2;
/// A running tasklift holds the store.
pub const EXIT_IN_USE: u8 = 3;
/// The `--config` file is invalid (as for `serve`).
pub const EXIT_CONFIG: u8 = 64;

const PURGE_HELP: &str = "Delete tasks and their result files.

Give at least one selector; several select the tasks matching all of them (--id may \
be repeated). --dry-run prints what would go and deletes nothing.

Tasks still working or input_required are never deleted without --force, and the \
command then exits with status 1. With the proxy stopped nothing runs them any more: \
at its next start tasklift marks them failed (\"tasklift restarted while this task \
was running\"), so their callers learn what happened, and the sweeper deletes them \
once they expire. --force deletes them now instead, and their callers then get \
\"unknown task\".";

/// `tasklift store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Tasks by status, disk use, oldest and newest, expired but not yet swept.
    Stats {
        /// Where the store is.
        #[command(flatten)]
        at: StoreAt,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A table of tasks, newest first (never their arguments or results).
    List(ListArgs),
    /// One task's full record, with its result or error, as JSON.
    Show {
        /// Where the store is.
        #[command(flatten)]
        at: StoreAt,
        /// The task id.
        id: String,
    },
    /// Delete tasks and their result files (see --help).
    #[command(long_about = PURGE_HELP)]
    Purge(PurgeArgs),
}

/// Where the store is: `--data-dir`, else the `--config` file's `store.data_dir`,
/// else the default `./tasklift-data`.
#[derive(Debug, Args)]
pub struct StoreAt {
    /// The proxy's data directory (wins over --config) [default: ./tasklift-data].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Take the data directory from this configuration file, as `serve` would.
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// A task status, as a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// Running upstream.
    Working,
    /// Waiting for the client's input.
    #[value(name = "input_required")]
    InputRequired,
    /// Ended with a result.
    Completed,
    /// Ended with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// A final status (what `purge --status` accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FinalStatus {
    /// Ended with a result.
    Completed,
    /// Ended with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl From<StatusArg> for TaskStatus {
    fn from(s: StatusArg) -> Self {
        match s {
            StatusArg::Working => Self::Working,
            StatusArg::InputRequired => Self::InputRequired,
            StatusArg::Completed => Self::Completed,
            StatusArg::Failed => Self::Failed,
            StatusArg::Cancelled => Self::Cancelled,
        }
    }
}

impl From<FinalStatus> for TaskStatus {
    fn from(s: FinalStatus) -> Self {
        match s {
            FinalStatus::Completed => Self::Completed,
            FinalStatus::Failed => Self::Failed,
            FinalStatus::Cancelled => Self::Cancelled,
        }
    }
}

/// `tasklift store list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Where the store is.
    #[command(flatten)]
    pub at: StoreAt,
    /// Only tasks with this status.
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,
    /// Only tasks of this upstream (its `name`).
    #[arg(long, value_name = "NAME")]
    pub upstream: Option<String>,
    /// Show at most this many (0: all).
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print JSON (an array, newest first).
    #[arg(long)]
    pub json: bool,
}

/// `tasklift store purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Where the store is.
    #[command(flatten)]
    pub at: StoreAt,
    /// Which tasks.
    #[command(flatten)]
    pub select: Selectors,
    /// Also delete tasks still working or input_required.
    #[arg(long)]
    pub force: bool,
    /// Print what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// What `purge` deletes: the tasks matching every selector given.
#[derive(Debug, Args)]
#[group(required = true, multiple = true)]
pub struct Selectors {
    /// Tasks past their expiry (what the proxy's sweeper deletes).
    #[arg(long)]
    pub expired: bool,
    /// Finished tasks with this status.
    #[arg(long, value_enum)]
    pub status: Option<FinalStatus>,
    /// Tasks created at least this long ago, e.g. 12h or 7d.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: Option<Duration>,
    /// This task (repeatable).
    #[arg(long = "id", value_name = "ID")]
    pub ids: Vec<String>,
}

fn parse_age(s: &str) -> Result<Duration, String> {
    crate::config::parse_duration("--older-than", s).map_err(|e| e.to_string())
}

/// Why a command stopped: its exit code and what to tell the operator.
struct Fail {
    code: u8,
    message: String,
}

impl Fail {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Self::new(EXIT_FAILED, e.to_string())
    }
}

/// Run a `tasklift store` command; errors are printed on stderr.
pub fn run(cmd: StoreCmd) -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(dispatch(cmd)) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("tasklift: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

async fn dispatch(cmd: StoreCmd) -> Result<u8, Fail> {
    match cmd {
        StoreCmd::Stats { at, json } => {
            let (store, dir) = open(&at)?;
            stats(&store, &dir, json).await
        }
        StoreCmd::List(args) => {
            let (store, _) = open(&args.at)?;
            list(&store, &args).await
        }
        StoreCmd::Show { at, id } => {
            let (store, dir) = open(&at)?;
            match store.get(&id).await? {
                Some(rec) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&rec).expect("records serialize")
                    );
                    Ok(0)
                }
                None => Err(Fail::new(
                    EXIT_FAILED,
                    format!("no task {id} in {}", dir.display()),
                )),
            }
        }
        StoreCmd::Purge(args) => {
            let (store, dir) = open(&args.at)?;
            purge(&store, &dir, &args).await
        }
    }
}

/// The data directory and result-file threshold the flags point at.
fn resolve(at: &StoreAt) -> Result<(PathBuf, usize), Fail> {
    let raw = match &at.config {
        Some(f) => {
            RawConfig::from_file(f)
                .map_err(|e| Fail::new(EXIT_CONFIG, format!("invalid configuration: {e}")))?
                .store
        }
        None => RawStore::default(),
    };
    let dir = at
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&raw.data_dir));
    Ok((dir, raw.large_result_bytes))
}

/// Open the store without creating anything, refusing a store in use.
fn open(at: &StoreAt) -> Result<(SledStore, PathBuf), Fail> {
    let (dir, large_result_bytes) = resolve(at)?;
    let shown = dir.display();
    match std::fs::metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Fail::new(
                EXIT_NO_STORE,
                format!(
                    "there is no data directory {shown} (nothing was created); \
                     give the proxy's --data-dir DIR or --config FILE"
                ),
            ));
        }
        Err(e) => {
            return Err(Fail::new(
                EXIT_NO_STORE,
                format!("cannot read the data directory {shown}: {e}"),
            ));
        }
        Ok(m) if !m.is_dir() => {
            return Err(Fail::new(
                EXIT_NO_STORE,
                format!("{shown} is not a directory"),
            ));
        }
        Ok(_) => {}
    }
    // sled would create a fresh, empty database: only open one that exists.
    if !dir.join("db").join("db").is_file() {
        let empty = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
        let what = if empty {
            "is empty"
        } else {
            "holds no tasklift task store (no db/ inside)"
        };
        return Err(Fail::new(
            EXIT_NO_STORE,
            format!("the data directory {shown} {what}; is it the proxy's --data-dir?"),
        ));
    }
    match SledStore::open(&dir, large_result_bytes) {
        Ok(store) => Ok((store, dir)),
        Err(StoreError::InUse { .. }) => {
            let by = match lock_holder(&dir) {
                Some(pid) => format!("a running tasklift (pid {pid})"),
                None => "a running tasklift".to_string(),
            };
            Err(Fail::new(
                EXIT_IN_USE,
                format!("the data directory {shown} is in use by {by}; stop it first"),
            ))
        }
        Err(e) => Err(Fail::new(
            EXIT_FAILED,
            format!("cannot open the task store in {shown}: {e}"),
        )),
    }
}

/// The pid holding the lock on `dir/db/db`, from `/proc/locks` (Linux only).
#[cfg(target_os = "linux")]
fn lock_holder(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let file = dir.join("db").join("db");
    let meta = std::fs::metadata(&file).ok()?;
    let dev = meta.dev();
    let (major, minor) = (
        ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff),
        (dev & 0xff) | ((dev >> 12) & !0xff),
    );
    let canonical = std::fs::canonicalize(&file).ok();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF"; "->" lines are waiters.
    for line in locks.lines().filter(|l| !l.contains("->")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(pid), Some(id)) = (f.get(4), f.get(5)) else {
            continue;
        };
        let mut id = id.split(':');
        let (Some(ma), Some(mi), Some(ino)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        if ino.parse::<u64>().ok() != Some(meta.ino()) {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let same_dev = u64::from_str_radix(ma, 16).ok() == Some(major)
            && u64::from_str_radix(mi, 16).ok() == Some(minor);
        // Layered filesystems may report another device: then the holder must
        // have the file open.
        let holds_open = || {
            let Some(c) = &canonical else { return false };
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|fds| {
                    fds.flatten()
                        .any(|fd| std::fs::read_link(fd.path()).ok().as_ref() == Some(c))
                })
                .unwrap_or(false)
        };
        if pid > 0 && (same_dev || holds_open()) {
            return Some(pid);
        }
    }
    None
}

#[cfg(not(target_os = "linux"))]
fn lock_holder(_dir: &Path) -> Option<u32> {
    None
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

async fn stats(store: &SledStore, dir: &Path, json: bool) -> Result<u8, Fail> {
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

async fn list(store: &SledStore, args: &ListArgs) -> Result<u8, Fail> {
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

async fn purge(store: &SledStore, dir: &Path, args: &PurgeArgs) -> Result<u8, Fail> {
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

/// `bearer:1a2b3c4d`: the kind of principal and the start of its hash.
fn short_owner(owner: &str) -> String {
    match owner.split_once(':') {
        Some((kind, hash)) => format!("{kind}:{}", hash.chars().take(8).collect::<String>()),
        None => printable(owner, 16),
    }
}

/// `s` on one line without control characters, cut to `max` characters.
fn printable(s: &str, max: usize) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= max {
        return clean;
    }
    let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn expires(at_ms: u64, now: u64) -> String {
    if at_ms > now {
        format!("in {}", short_duration(at_ms - now))
    } else {
        format!("{} ago", short_duration(now - at_ms))
    }
}

/// `45s`, `12m`, `3h05m`, `2d04h`.
fn short_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_read_short() {
        assert_eq!(short_duration(999), "0s");
        assert_eq!(short_duration(59_000), "59s");
        assert_eq!(short_duration(61_000), "1m");
        assert_eq!(short_duration(3_900_000), "1h05m");
        assert_eq!(short_duration(7 * 86_400_000 + 3_600_000), "7d01h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn owners_and_messages_are_cut_and_cleaned() {
        assert_eq!(short_owner("anonymous"), "anonymous");
        assert_eq!(
            short_owner(&format!("bearer:{}", "ab".repeat(32))),
            "bearer:abababab"
        );
        assert_eq!(printable("a\nb\u{1b}[31m", 20), "a b [31m");
        assert_eq!(printable("abcdef", 4), "abc…");
    }
}
