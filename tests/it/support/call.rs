//! `tasklift call` (the binary) run with stdin, stdout and stderr not terminals, as a
//! script runs it, under a hang guard.

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::process::Command;

/// Hang guard for anything a test waits for.
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tasklift")
}

/// `tasklift call <args>` with stdin, stdout and stderr not terminals.
pub(crate) async fn call(args: &[&str]) -> Output {
    let child = Command::new(bin())
        .arg("call")
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("tasklift runs");
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("tasklift call {args:?} still running after {LIMIT:?}"))
        .unwrap()
}
