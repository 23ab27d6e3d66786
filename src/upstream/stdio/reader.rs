//! A child's stdout: one JSON-RPC message a line, each delivered where the
//! router says (responses by id, progress by tasklift's token, requests to the
//! client only to the call they are proven to belong to).

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::Conn;
use crate::upstream::router::{self, Channel, Route};
use crate::upstream::CallEvent;
use tasklift_protocol::jsonrpc::{self, Outcome};

pub(super) async fn read_lines(stdout: tokio::process::ChildStdout, conn: Arc<Conn>, name: &str) {
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(upstream = %name, error = %e, "reading the child's stdout failed");
                return;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let Some(msg) = router::parse(&line) else {
            tracing::warn!(upstream = %name, line = %truncate(&line), "skipping a stdout line that is not JSON-RPC");
            continue;
        };
        match router::route(&*conn, msg, name) {
            Route::Call(tx, ev) => {
                let _ = tx.send(ev).await;
            }
            Route::Unrelated(message) => {
                let method = message["method"].as_str().unwrap_or_default();
                tracing::debug!(upstream = %name, %method, "notification not related to a call in flight");
                let _ = conn.changes.send(message);
            }
            Route::Ping(id) => {
                // Liveness, not a question for any client.
                let _ = conn
                    .stdin
                    .send(jsonrpc::response(Some(&id), &Ok(json!({}))).to_string())
                    .await;
            }
            Route::Parked => {
                tracing::debug!(upstream = %name, "the child asked for its caller's roots with no call in flight; kept for that caller's next call");
            }
            Route::Stray | Route::Refused | Route::Forbidden(_) => {}
        }
    }
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A child's stdout, for the router: it names no call, but every call has a
/// progress token of tasklift's own there (`tasklift-ID`), unique on the child.
impl Channel for Conn {
    type Call = u64;

    fn events(&self, id: u64) -> Option<mpsc::Sender<CallEvent>> {
        self.pending.get(&id).map(|e| e.value().0.clone())
    }

    /// A response ends its call; a `CreateTaskResult` makes this child the task's
    /// home for the caller, and the answer to `tasks/result` or `tasks/cancel` ends that.
    fn answered(&self, id: &Value, outcome: &Outcome) -> Option<mpsc::Sender<CallEvent>> {
        let id = id.as_u64()?;
        let owner = self.owners.remove(&id).map(|(_, o)| o);
        self.askers.remove(&id);
        self.client_tokens.remove(&id);
        if let Some((_, (task, last))) = self.task_calls.remove(&id) {
            if last {
                self.tasks.remove(&task);
            }
        }
        if let (Ok(r), Some(owner)) = (outcome, owner) {
            if let Some(t) = r.pointer("/task/taskId").and_then(Value::as_str) {
                self.tasks.insert(t.to_string(), owner);
            }
        }
        let (_, (tx, token)) = self.pending.remove(&id)?;
        if let Some(t) = token {
            self.tokens.remove(&t);
        }
        Some(tx)
    }

    fn by_token(&self, token: &Value) -> Option<u64> {
        self.tokens.get(&token.to_string()).map(|e| *e.value())
    }

    fn client_token(&self, id: &u64) -> Option<Value> {
        self.client_tokens.get(id).map(|t| t.value().clone())
    }

    /// The most recent call in flight, but only when every call in flight is the
    /// same caller's (otherwise it could be another caller's log, and it is not relayed).
    fn for_log(&self) -> Option<u64> {
        let mut owners = self.owners.iter().map(|e| e.value().clone());
        let first = owners.next();
        if first.is_some() && owners.all(|o| Some(&o) == first.as_ref()) {
            self.pending.iter().map(|e| *e.key()).max()
        } else {
            None
        }
    }

    fn askers(&self) -> Vec<(u64, Option<String>)> {
        self.askers
            .iter()
            .map(|e| (*e.key(), self.task_calls.get(e.key()).map(|t| t.0.clone())))
            .collect()
    }

    fn park(
        &self,
        req: crate::upstream::ServerRequest,
    ) -> Result<(), crate::upstream::ServerRequest> {
        Conn::park(self, req)
    }

    fn responder(&self, id: &Value) -> Option<Box<dyn FnOnce(Outcome) + Send>> {
        let stdin = self.stdin.clone();
        let reply_id = id.clone();
        Some(Box::new(move |outcome| {
            let _ = stdin.try_send(jsonrpc::response(Some(&reply_id), &outcome).to_string());
        }))
    }
}
