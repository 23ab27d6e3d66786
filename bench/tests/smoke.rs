//! A smoke run of the benchmark harness (`tasklift-bench --quick`): it starts the
//! baseline upstream and tasklift as processes (one with the upstream as its stdio
//! child), drives every scenario but nginx and the store churn briefly (the scale
//! scenario to 1,000 running tasks), and writes its report. No timing is asserted,
//! only that each scenario ran, answered and failed nothing.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// tasklift's binary from the same build: `cargo test` at the workspace root builds
/// it beside the harness (tasklift's own integration tests need it).
fn tasklift_binary() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tasklift-bench")).with_file_name("tasklift");
    assert!(
        bin.is_file(),
        "no tasklift binary at {} (run the tests from the workspace root, or cargo build --bin tasklift first)",
        bin.display()
    );
    bin
}

#[test]
fn the_benchmark_harness_runs_every_scenario_without_errors() {
    let out = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let run = Command::new(env!("CARGO_BIN_EXE_tasklift-bench"))
        .args([
            "--quick",
            "--skip",
            "nginx,churn",
            "--tasks",
            "300",
            "--out",
        ])
        .arg(out.path())
        .arg("--tasklift")
        .arg(tasklift_binary())
        .output()
        .expect("tasklift-bench runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "tasklift-bench failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    assert!(started.elapsed() < Duration::from_secs(60), "{stderr}");

    let md = std::fs::read_to_string(out.path().join("results.md")).expect("results.md");
    // Each load run: a row with a non-zero request rate and no errors.
    for label in [
        "direct",
        "tasklift",
        "tasklift (stdio upstream)",
        "tasks/get",
        "direct @500/s",
        "tasklift @500/s",
    ] {
        let row = md
            .split("## Pass-through and tasks/get")
            .nth(1)
            .expect("the pass-through section")
            .lines()
            .find(|l| l.starts_with(&format!("| {label} | ")))
            .unwrap_or_else(|| panic!("no row for {label} in:\n{md}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let rps: f64 = cells[2]
            .parse()
            .unwrap_or_else(|_| panic!("req/s of {row}"));
        assert!(rps > 0.0, "{row}");
        let errors = cells[cells.len() - 2];
        assert_eq!(errors, "0", "{row}");
    }
    for section in [
        "## Pass-through and tasks/get",
        "## Task creation",
        "## Memory per running task",
        "## Running tasks at scale",
    ] {
        assert!(md.contains(section), "{section} missing:\n{md}");
    }
    assert!(
        md.contains("- completed: 300, errors: 0"),
        "memory scenario:\n{md}"
    );
    // The scale scenario ramps one instance to 100 and 1,000 running tasks in a
    // quick run, and every task completes.
    for row in ["| 100 | ", "| 1,000 | "] {
        assert!(
            md.lines().any(|l| l.starts_with(row)),
            "scale level {row}:\n{md}"
        );
    }
    assert!(
        md.contains("- completed: 1000 of 1000, errors: 0"),
        "scale scenario:\n{md}"
    );
    // The summary weighs the run against every target that applies to it.
    for row in [
        "| pass-through, stdio upstream ÷ HTTP upstream |",
        "| tasks/get ÷ direct tools/call throughput |",
        "| RSS per running task, 300 running, HTTP/2 upstream |",
        "| RSS per running task, 300 running, HTTP/1.1 upstream |",
        "| 300 concurrent slow calls complete, HTTP/2 upstream |",
        "| 1,000 concurrent slow calls become tasks and complete, HTTP/2 upstream (scale) |",
        "| tasks/get p99 with 1,000 running tasks (scale) |",
        "| idle RSS of tasklift (memory scenario, before the load) |",
        "| tasklift binary size |",
    ] {
        assert!(md.contains(row), "no summary row {row}:\n{md}");
    }
    let creation = md
        .lines()
        .find(|l| l.starts_with("| request → handle |"))
        .expect("task creation row");
    let tasks: u64 = creation.split('|').nth(2).unwrap().trim().parse().unwrap();
    assert!(tasks > 0, "{creation}");
    assert!(md.contains("Errors: 0."), "task creation errors:\n{md}");

    for chart in ["throughput.svg", "latency.svg", "scale.svg"] {
        let svg = std::fs::read_to_string(out.path().join(chart)).expect(chart);
        assert!(svg.starts_with("<svg"), "{chart}: {svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{chart}");
        assert_eq!(
            svg.matches("<svg").count(),
            svg.matches("</svg>").count(),
            "{chart}"
        );
    }
    // The table went to stdout too.
    assert!(stdout.contains("tasks/get"), "{stdout}");
}
