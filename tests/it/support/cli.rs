//! The `tasklift` binary run as a command: `tasklift ARGS` with a time limit, its
//! output read as text.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run the binary with `args`, killing it if it runs longer than `limit`.
pub(crate) fn run(args: &[&str], limit: Duration) -> Output {
    run_env(args, &[], limit)
}

/// [`run`] with environment variables set.
pub(crate) fn run_env(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tasklift"))
        .args(args)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tasklift runs");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "tasklift {args:?} still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
