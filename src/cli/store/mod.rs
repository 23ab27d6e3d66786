//! `tasklift store`: operator tools for the data directory of a stopped proxy.
//! `stats` (figures), `list` (a table without arguments or results), `show` (one
//! full record with its outcome), `purge` (deletion) and `outbox` (the webhook
//! events waiting for delivery).
//!
//! They open the sled database directly, so the proxy must be stopped: a running
//! tasklift holds sled's exclusive file lock (`flock` on `db/db`), and a command that
//! finds it taken refuses with exit code 3, naming the holder's pid when
//! `/proc/locks` tells it. A missing data directory, or one without a task store, is
//! exit code 2; nothing is ever created. Exit code 1: anything else went wrong, or
//! `purge` kept part of what was selected; 64: an invalid `--config` file.
//!
//! This module runs a command; `args` has the flags, `open` opens the store,
//! `stats`, `list`, `purge` and `outbox` are the commands and `format` their text.

use std::process::ExitCode;

use crate::store::{StoreError, TaskStore};

mod args;
mod format;
mod list;
mod open;
mod outbox;
mod purge;
mod stats;

pub use args::{FinalStatus, ListArgs, PurgeArgs, Selectors, StatusArg, StoreAt, StoreCmd};
use list::list;
use open::open;
use outbox::outbox;
use purge::purge;
use stats::stats;

/// Something went wrong, or a selection was only partly purged.
pub const EXIT_FAILED: u8 = 1;
/// No data directory, or no task store in it.
pub const EXIT_NO_STORE: u8 = 2;
/// A running tasklift holds the store.
pub const EXIT_IN_USE: u8 = 3;
/// The `--config` file is invalid (as for `serve`).
pub const EXIT_CONFIG: u8 = 64;

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
        StoreCmd::Outbox { at, json } => {
            let (store, _) = open(&at)?;
            outbox(&store, json).await
        }
    }
}
