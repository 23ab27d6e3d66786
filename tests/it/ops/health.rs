//! `tasklift health` (the binary): the probe the container image's HEALTHCHECK runs.
//! Exit 0 when `/healthz` answers 200; 1, naming why, when nothing listens, the
//! answer is not 200 or does not come in time. Without `--url` it finds the address
//! the way `tasklift serve` would: `--listen`/`TASKLIFT_LISTEN`, else the file of
//! `TASKLIFT_CONFIG`, an unspecified address probed on loopback.

use std::process::{Output, Stdio};
use std::time::Duration;

use tasklift_fixture::{FixtureServer, Tool};
use tokio::process::Command;

use crate::support::harness::*;

async fn health(args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_tasklift"))
        .arg("health")
        .args(args)
        .env_remove("TASKLIFT_LISTEN")
        .env_remove("TASKLIFT_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("tasklift runs");
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("tasklift health {args:?} still running after 30 s"))
        .unwrap()
}

fn says(out: &Output, code: i32, stream: &str, what: &str) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(code), "{stdout}{stderr}");
    let text = if stream == "stdout" { &stdout } else { &stderr };
    assert!(text.contains(what), "{what:?} not in {stream}: {text}");
}

#[tokio::test]
async fn health_exits_0_when_healthz_answers_and_1_naming_why_otherwise() {
    let h = Harness::start(FixtureServer::new().tool(Tool::new("quick")), |_| {}).await;
    let addr = h.proxy.as_ref().unwrap().addr;
    let healthz = format!("http://{addr}/healthz");

    says(
        &health(&["--url", &healthz], &[]).await,
        0,
        "stdout",
        "HTTP 200",
    );
    // The listen address, from the flag or the variable; 0.0.0.0 on loopback.
    let any = format!("0.0.0.0:{}", addr.port());
    for (args, env) in [
        (vec!["--listen", any.as_str()], vec![]),
        (vec![], vec![("TASKLIFT_LISTEN", any.as_str())]),
    ] {
        says(&health(&args, &env).await, 0, "stdout", &healthz);
    }
    // The file named by TASKLIFT_CONFIG, and the variable over the file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tasklift.toml");
    std::fs::write(&file, format!("[server]\nlisten = \"{addr}\"\n")).unwrap();
    let file = file.to_str().unwrap();
    says(
        &health(&[], &[("TASKLIFT_CONFIG", file)]).await,
        0,
        "stdout",
        &healthz,
    );
    let closed = closed_port_url().replace("/mcp", "");
    let closed_addr = closed.trim_start_matches("http://");
    let out = health(
        &[],
        &[("TASKLIFT_CONFIG", file), ("TASKLIFT_LISTEN", closed_addr)],
    )
    .await;
    says(&out, 1, "stderr", "cannot connect");
    says(&out, 1, "stderr", &format!("{closed}/healthz"));

    // Not 200: named with its status.
    let out = health(&["--url", &format!("http://{addr}/nowhere")], &[]).await;
    says(&out, 1, "stderr", "HTTP 404");

    // A listener that never answers: given up on after --timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/healthz", silent.local_addr().unwrap());
    let out = health(&["--url", &url, "--timeout", "300ms"], &[]).await;
    says(&out, 1, "stderr", "no answer within 300ms");

    // Not an address: exit 1 too, never 2 (reserved by container runtimes).
    let out = health(&["--listen", "localhost"], &[]).await;
    says(&out, 1, "stderr", "not an address");
    h.stop().await;
}
