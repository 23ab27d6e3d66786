//! The flags of `tasklift store` and its subcommands (clap), and the statuses
//! they filter by.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::store::TaskStatus;

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
    /// The webhook events waiting for delivery, by destination (never their bodies).
    Outbox {
        /// Where the store is.
        #[command(flatten)]
        at: StoreAt,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
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
