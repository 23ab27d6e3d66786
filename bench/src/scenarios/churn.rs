//! The store churn scenario: `examples/store_churn`, run and its output kept.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use crate::report;
use crate::RunArgs;

/// Run `examples/store_churn` (the release build when it is there, else through
/// cargo) and keep its output.
pub(super) async fn churn(args: &RunArgs) -> anyhow::Result<report::Churn> {
    let churn_args: Vec<String> = args
        .churn_args
        .split_whitespace()
        .map(String::from)
        .collect();
    let built = args.repo.join("target/release/examples/store_churn");
    let (program, mut full): (PathBuf, Vec<String>) = if built.is_file() {
        (built.clone(), Vec::new())
    } else {
        (
            PathBuf::from("cargo"),
            [
                "run",
                "-q",
                "--release",
                "-p",
                "tasklift-bench",
                "--example",
                "store_churn",
                "--",
            ]
            .map(String::from)
            .to_vec(),
        )
    };
    full.extend(churn_args);
    let command = format!("{} {}", program.display(), full.join(" "));
    eprintln!("store churn: {command}");
    let t0 = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(&program)
            .args(&full)
            .current_dir(&args.repo)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("store_churn took over 5 minutes")?
    .with_context(|| format!("running {command}"))?;
    if !out.status.success() {
        bail!(
            "{command} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(report::Churn {
        command,
        output: String::from_utf8_lossy(&out.stdout).into_owned(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}
