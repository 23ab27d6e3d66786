//! The webhook receiver (tests/peers/python/webhook_receiver.py, run from the
//! `py-webhooks` environment), which verifies every delivery with the PyPI
//! `standardwebhooks` library; and configurations that send tasklift's events
//! to it.

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tasklift::config::{RawConfig, RawWebhook};
use tokio::io::AsyncBufReadExt;

use crate::support::harness::guarded;
use crate::support::python::{peers_dir, python};

/// The secret every test signs with.
pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A running receiver, killed when dropped; each request it got, as JSON.
pub(crate) struct Receiver {
    _child: tokio::process::Child,
    lines: Arc<Mutex<Vec<Value>>>,
    /// Where tasklift POSTs.
    pub(crate) url: String,
}

impl Receiver {
    /// Start one with `args` (`--refuse-first N`, `--hang`, `--port P`); `None`
    /// (the test is skipped) without the environment, outside CI.
    pub(crate) async fn start(args: &[&str]) -> Option<Self> {
        let python = python("webhooks")?;
        let mut child = tokio::process::Command::new(python)
            .arg(peers_dir().join("webhook_receiver.py"))
            .args(["--secret", SECRET])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the webhook receiver starts");
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = guarded("the receiver's port", out.next_line())
            .await
            .unwrap()
            .expect("the receiver prints its port");
        let port = first.strip_prefix("LISTENING ").expect("LISTENING <port>");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            while let Ok(Some(l)) = out.next_line().await {
                let v: Value = serde_json::from_str(&l).expect("the receiver prints JSON");
                sink.lock().unwrap().push(v);
            }
        });
        Some(Self {
            _child: child,
            lines,
            url: format!("http://127.0.0.1:{port}/hooks"),
        })
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// The requests about one task.
    pub(crate) fn about(&self, task_id: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["payload"]["data"]["taskId"] == task_id)
            .collect()
    }
}

/// `tweak` for a harness: one destination at `url`, with `hook` adjusting it.
pub(crate) fn webhook_to(
    url: &str,
    hook: impl FnOnce(&mut RawWebhook),
) -> impl FnOnce(&mut RawConfig) {
    let mut w = RawWebhook {
        name: "receiver".into(),
        url: url.to_string(),
        secret: SECRET.into(),
        ..RawWebhook::default()
    };
    hook(&mut w);
    move |c: &mut RawConfig| c.webhooks.push(w)
}
