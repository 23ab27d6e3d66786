//! A real `tasklift` process for tests that need one (SIGKILL, SIGSTOP, several
//! replicas): started with JSON logs, its stderr drained and kept for failure
//! messages, killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::harness::raw;

/// A running `tasklift` process.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// Its MCP endpoint (`/mcp` on the address it logged).
    pub url: String,
    /// Everything it logged so far.
    pub log: Arc<Mutex<String>>,
}

impl Proc {
    /// Start `tasklift --log-format json ARGS`; returns once it logs its address and
    /// `/readyz` answers 200. `when` names the moment in failure messages.
    pub async fn start(args: &[&str], when: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tasklift"))
            .args(["--log-format", "json"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tasklift runs");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        // Drain stderr for the whole life of the process (a full pipe would block
        // it), and hand over the address it serves on.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("tasklift is serving") {
                    let v: Value = serde_json::from_str(&line).unwrap_or_default();
                    if let Some(a) = v["fields"]["listen"].as_str().and_then(|a| a.parse().ok()) {
                        let _ = tx.send(a);
                    }
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap();
        let Ok(addr) = addr else {
            let _ = child.kill();
            let status = child.wait().unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            panic!(
                "tasklift did not start {when} ({status}); stderr:\n{}",
                log.lock().unwrap()
            );
        };
        let ready = raw("GET", &format!("http://{addr}/readyz"), &[], "").await;
        assert_eq!(ready.status, 200, "/readyz {when}: {}", ready.body);
        Self {
            child,
            url: format!("http://{addr}/mcp"),
            log,
        }
    }

    /// Send a signal.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        use nix::sys::signal::kill;
        use nix::unistd::Pid;
        kill(Pid::from_raw(self.child.id() as i32), sig).expect("signal");
    }

    /// SIGKILL the process and reap it.
    pub fn kill9(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let status = self.child.wait().unwrap();
        assert!(
            status.code().is_none(),
            "tasklift exited on its own before the kill ({status}); stderr:\n{}",
            self.log.lock().unwrap()
        );
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
