//! A short run of the kill -9 harness (`tasklift-bench crash`): a few rounds on
//! sled, and a few on three PostgreSQL replicas when `TASKLIFT_TEST_POSTGRES` is
//! set (as in CI; a URL, or `1` for the local server), each round killing a
//! process under load and checking every handle ever returned. The harness's
//! figures must be zero: no handle missing, no task stuck, no result lost or
//! changed. Beside it, a few cycles of the fill-and-free soak (`crash
//! --fill-and-free`, as root: it mounts a tmpfs): the disk filled to the last
//! byte under load and freed, no handle lost, no task stuck or failed, no
//! restart. The long runs and their figures are in docs/benchmarks/crash.md.
//!
//! No timing is asserted but the soak's time to tasks again after a free, with
//! twice the long run's limit: the harness's other deadlines (lease + `--grace`)
//! are hang guards, generous here.

use std::path::PathBuf;
use std::process::Command;

const DEFAULT_PG: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A binary of the same build, beside the harness (`cargo test` at the workspace
/// root builds them for their own packages' tests).
fn beside(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tasklift-bench")).with_file_name(name);
    assert!(
        bin.is_file(),
        "no {name} binary at {} (run the tests from the workspace root, or cargo build --bins first)",
        bin.display()
    );
    bin
}

/// Run `tasklift-bench crash` with `args` and the binaries of this build.
fn run_crash(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tasklift-bench"))
        .arg("crash")
        .args(args)
        .arg("--tasklift")
        .arg(beside("tasklift"))
        .arg("--fixture")
        .arg(beside("tasklift-fixture"))
        .output()
        .expect("tasklift-bench runs")
}

/// Run the harness with `args`; its stdout, after asserting it succeeded.
fn crash(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend([
        "--clients",
        "3",
        "--min-load",
        "200ms",
        "--max-load",
        "800ms",
        "--long-max",
        "2s",
        "--grace",
        "30s",
    ]);
    let run = run_crash(&all);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "tasklift-bench crash failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    stdout
}

/// The number after `prefix` on the line that starts with it.
fn figure(out: &str, prefix: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{out}"));
    line[prefix.len()..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line:?}"))
}

fn assert_zeros(out: &str, rounds: u64) {
    assert_eq!(figure(out, "rounds:"), rounds, "{out}");
    let handles = figure(out, "handles returned:");
    assert!(handles > 0, "no handles were returned:\n{out}");
    assert_eq!(figure(out, "handles found afterwards:"), handles, "{out}");
    assert!(
        out.contains(&format!("handles found afterwards: {handles} (missing 0)")),
        "{out}"
    );
    assert_eq!(figure(out, "tasks stuck past their lease:"), 0, "{out}");
    assert_eq!(figure(out, "results lost or changed:"), 0, "{out}");
    // The kills met work in flight (each round's long call runs 2 s or more), and
    // it was failed with the kill's error: the checks were not vacuous.
    assert!(
        figure(out, "in flight at a kill and failed for it:") > 0,
        "{out}"
    );
}

#[test]
fn kill_9_on_sled_loses_nothing() {
    let out = crash(&["--store", "sled", "--rounds", "4"]);
    assert_zeros(&out, 4);
    assert_eq!(figure(&out, "kills:"), 4, "{out}");
}

#[test]
fn kill_9_of_one_of_three_postgres_replicas_loses_nothing() {
    let Ok(given) = std::env::var("TASKLIFT_TEST_POSTGRES") else {
        eprintln!("SKIPPED: the PostgreSQL rounds need TASKLIFT_TEST_POSTGRES (a URL, or 1 for {DEFAULT_PG})");
        return;
    };
    let url = if given.starts_with("postgres") {
        given
    } else {
        DEFAULT_PG.to_string()
    };
    let out = crash(&[
        "--store",
        "postgres",
        "--replicas",
        "3",
        "--rounds",
        "3",
        "--lease",
        "1s",
        "--postgres",
        &url,
    ]);
    assert_zeros(&out, 3);
    // The restart of the server is opt-in, and the output says it was skipped.
    assert!(out.contains("PostgreSQL restart SKIPPED"), "{out}");
    // The round that would have restarted PostgreSQL kills a replica instead.
    assert_eq!(figure(&out, "kills:"), 3, "{out}");
}

/// The fill-and-free soak, short: 4 cycles of the disk filled to the last byte
/// under load, calls going on, and freed. It mounts a tmpfs, so it needs root:
/// CI runs as root and fails without it; elsewhere it is skipped with a message.
#[test]
fn a_disk_filled_and_freed_under_load_loses_nothing() {
    let run = run_crash(&[
        "--store",
        "sled",
        "--fill-and-free",
        "--cycles",
        "4",
        "--clients",
        "3",
        "--full-for",
        "2s",
        "--room-for",
        "1s",
        "--tasks-again-max",
        "10s",
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !run.status.success() && stderr.contains("cannot mount a tmpfs") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and must mount a tmpfs for the fill-and-free soak:\n{stderr}"
        );
        eprintln!("SKIPPED: the fill-and-free soak mounts a tmpfs, which needs root:\n{stderr}");
        return;
    }
    assert!(
        run.status.success(),
        "tasklift-bench crash --fill-and-free failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    let out = &stdout;
    assert_eq!(figure(out, "cycles:"), 4, "{out}");
    let handles = figure(out, "handles given:");
    assert!(handles > 0, "no handles were given:\n{out}");
    assert_eq!(
        figure(out, "completed with the whole, correct result:"),
        handles,
        "{out}"
    );
    assert_eq!(figure(out, "failed:"), 0, "{out}");
    assert_eq!(figure(out, "handles lost:"), 0, "{out}");
    assert_eq!(figure(out, "tasks stuck:"), 0, "{out}");
    assert_eq!(figure(out, "tasklift restarts:"), 0, "{out}");
    assert!(
        out.contains("got an error or no answer)")
            && out.contains(", 0 got an error or no answer)"),
        "{out}"
    );
    // Not vacuous: calls were made on the full disk, and outcomes met it.
    assert!(
        figure(out, "calls made while the disk was full:") > 0,
        "{out}"
    );
    assert!(
        figure(
            out,
            "outcomes that met the full disk (kept and retried, from tasklift's log):"
        ) > 0,
        "{out}"
    );
}
