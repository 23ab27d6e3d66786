//! The baseline upstream over stdio, as tasklift runs a `command` upstream:
//! newline-delimited JSON-RPC, requests on stdin, answers on stdout, until stdin
//! closes.
//!
//! The main thread reads stdin with blocking reads and answers what needs no wait
//! (`fast`, `server/discover`, `tools/list`…) itself, into a buffer it flushes
//! whenever no further complete line is already buffered: a burst of requests gets
//! one write. `sleep` and `hold` run as tokio tasks, so a slow call never holds up
//! a fast one; each writes and flushes its own answer, and
//! `notifications/cancelled` aborts it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Stdout, Write};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::task::AbortHandle;

use super::{answer_of, call_of, response, text_result, Call};

/// stdout, shared by the reader and the slow calls.
#[derive(Clone)]
struct Out(Arc<Mutex<BufWriter<Stdout>>>);

impl Out {
    /// Buffer one message.
    fn push(&self, msg: &Value) -> std::io::Result<()> {
        let mut w = self.0.lock().expect("stdout");
        serde_json::to_writer(&mut *w, msg)?;
        w.write_all(b"\n")
    }

    fn flush(&self) -> std::io::Result<()> {
        self.0.lock().expect("stdout").flush()
    }
}

/// Slow calls in flight, by their JSON-RPC id (as JSON text), to cancel them.
type Running = Arc<Mutex<HashMap<String, AbortHandle>>>;

/// Serve on stdin/stdout until stdin closes (or stdout does); `threads` tokio
/// workers run the slow calls.
pub fn run(threads: usize) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_time()
        .build()?;
    let out = Out(Arc::new(Mutex::new(BufWriter::with_capacity(
        64 * 1024,
        std::io::stdout(),
    ))));
    let running: Running = Arc::default();
    let mut input = BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
    let mut line = String::new();
    eprintln!("tasklift-bench upstream: serving MCP on stdin/stdout");
    let result = loop {
        // About to wait for more input: send what is buffered first.
        if !input.buffer().contains(&b'\n') {
            if let Err(e) = out.flush() {
                break Err(e);
            }
        }
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let Ok(msg) = serde_json::from_str::<Value>(text) else {
            eprintln!("tasklift-bench upstream: ignoring a line that is not JSON");
            continue;
        };
        if let Err(e) = handle(msg, &out, &running, rt.handle()) {
            break Err(e);
        }
    };
    let _ = out.flush();
    rt.shutdown_background();
    match result {
        Ok(()) => Ok(()),
        // tasklift went away: nothing to answer any more.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Answer one message, now or from a task.
fn handle(
    mut msg: Value,
    out: &Out,
    running: &Running,
    rt: &tokio::runtime::Handle,
) -> std::io::Result<()> {
    let Some(id) = msg.get_mut("id").map(Value::take) else {
        if msg["method"] == "notifications/cancelled" {
            let key = msg["params"]["requestId"].to_string();
            if let Some(h) = running.lock().expect("running").remove(&key) {
                h.abort();
            }
        }
        return Ok(());
    };
    if msg.get("method").is_none() {
        // A response: this server asks its client nothing.
        return Ok(());
    }
    let method = msg["method"].as_str().unwrap_or_default();
    if let Some(outcome) = answer_of(method) {
        return out.push(&response(&id, outcome));
    }
    let wait = match call_of(&msg["params"]) {
        Call::Now(outcome) => return out.push(&response(&id, outcome)),
        Call::Sleep(d) => (d, "slept"),
        // Nothing releases a call over stdio: it is held for its max_ms.
        Call::Hold(d) => (d, "held until max_ms"),
    };
    let key = id.to_string();
    let (out, running2, key2) = (out.clone(), running.clone(), key.clone());
    // The map's lock is held while the task is spawned and registered, so the
    // task's own removal always comes after its insertion.
    let mut map = running.lock().expect("running");
    let task = rt.spawn(async move {
        tokio::time::sleep(wait.0).await;
        running2.lock().expect("running").remove(&key2);
        let r = out.push(&response(&id, Ok(text_result(wait.1))));
        if r.and_then(|()| out.flush()).is_err() {
            // stdout is gone: so is tasklift.
            std::process::exit(0);
        }
    });
    map.insert(key, task.abort_handle());
    Ok(())
}
