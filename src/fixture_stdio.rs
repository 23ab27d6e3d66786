//! The fixture server over stdio: the same tools as the HTTP fixture, served as a
//! child process speaks (newline-delimited JSON-RPC on stdin/stdout), with knobs to
//! misbehave for tests: print garbage, ignore cancellation, exit at start, serve one
//! call at a time, and a `crash` tool that kills the process mid-call.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Semaphore};

use crate::fixture::{asker_on, Asked, FixtureServer, Tool};
use crate::jsonrpc::{self, Incoming as Msg, RpcError, INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::reply::StreamItem;

/// How the stdio fixture behaves.
#[derive(Debug, Clone, Default)]
pub struct StdioOptions {
    /// Speak 2026-07-28 (answer `server/discover`, refuse `initialize`).
    pub modern: bool,
    /// Print lines that are not JSON-RPC on stdout.
    pub garbage: bool,
    /// Ignore `notifications/cancelled`.
    pub ignore_cancel: bool,
    /// Exit with status 3 right away.
    pub exit_at_start: bool,
    /// Run one tool call at a time.
    pub serial: bool,
    /// Append one line per event (`start PID`, `call NAME`, `cancelled ID`) to this file.
    pub log: Option<std::path::PathBuf>,
}

fn log_event(opts: &StdioOptions, event: &str) {
    if let Some(p) = &opts.log {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            // One write per line: children of a pool append to the same file at once.
            let _ = f.write_all(format!("{event}\n").as_bytes());
        }
    }
}

/// The demo tools plus `echo` and `crash`.
pub fn stdio_fixture() -> FixtureServer {
    FixtureServer::demo()
        .tool(
            Tool::new("echo")
                .description("Echoes `message` back.")
                .schema(json!({"type": "object", "properties": {"message": {"type": "string"}}}))
                .reply(|a| {
                    format!(
                        "Echo: {}",
                        a.get("message").and_then(Value::as_str).unwrap_or("")
                    )
                }),
        )
        .tool(
            Tool::new("crash")
                .description("Kills the server process after `after` seconds.")
                .sleep_arg("after", 0.2),
        )
}

/// Serve `server`'s tools on stdin/stdout until stdin closes.
pub async fn serve(server: FixtureServer, opts: StdioOptions) -> std::io::Result<()> {
    log_event(&opts, &format!("start {}", std::process::id()));
    if opts.exit_at_start {
        eprintln!("fixture: exiting at start as asked");
        std::process::exit(3);
    }
    let (out_tx, mut out_rx) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            if stdout
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
                || stdout.flush().await.is_err()
            {
                return;
            }
        }
    });
    if opts.garbage {
        let _ = out_tx
            .send("fixture says hello (this line is not JSON-RPC)".into())
            .await;
    }
    eprintln!(
        "fixture: ready ({} era)",
        if opts.modern { "modern" } else { "legacy" }
    );
    let server = Arc::new(server);
    let running: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>> = Arc::default();
    let serial = Arc::new(Semaphore::new(if opts.serial { 1 } else { 1024 }));
    // Requests to the client go out on stdout like everything else.
    let asked: Asked = Arc::default();
    let (ask_tx, mut ask_rx) = mpsc::channel::<StreamItem>(64);
    let out2 = out_tx.clone();
    tokio::spawn(async move {
        while let Some(StreamItem::Message(m)) = ask_rx.recv().await {
            let _ = out2.send(m.to_string()).await;
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Some(msg) = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(Msg::classify)
        else {
            eprintln!("fixture: ignoring a line that is not JSON-RPC");
            continue;
        };
        match msg {
            Msg::Request { id, method, params } => {
                let reply =
                    |o: Result<Value, RpcError>| jsonrpc::response(Some(&id), &o).to_string();
                match method.as_str() {
                    "initialize" if !opts.modern => {
                        let v = params
                            .get("protocolVersion")
                            .and_then(Value::as_str)
                            .unwrap_or("2025-11-25");
                        let _ = out_tx
                            .send(reply(Ok(json!({
                                "protocolVersion": v,
                                "capabilities": {"tools": {"listChanged": true}},
                                "serverInfo": {"name": "tasklift-fixture-stdio", "version": env!("CARGO_PKG_VERSION")},
                            }))))
                            .await;
                    }
                    "server/discover" if opts.modern => {
                        let _ = out_tx
                            .send(reply(Ok(json!({
                                "resultType": "complete", "supportedVersions": ["2026-07-28"],
                                "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "public",
                                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "tasklift-fixture-stdio", "version": "1"}},
                            }))))
                            .await;
                    }
                    "tools/list" => {
                        let tools: Vec<Value> =
                            server.tool_list().iter().map(Tool::listing).collect();
                        let _ = out_tx.send(reply(Ok(json!({"tools": tools})))).await;
                    }
                    "tools/call" => {
                        let name = params
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string();
                        log_event(&opts, &format!("call {name}"));
                        let Some(tool) = server.find_tool(&name).cloned() else {
                            let _ = out_tx
                                .send(reply(Err(RpcError::new(
                                    INVALID_PARAMS,
                                    format!("Unknown tool: {name}"),
                                ))))
                                .await;
                            continue;
                        };
                        if name == "test_trigger_tool_change" {
                            let n = jsonrpc::notification(
                                "notifications/tools/list_changed",
                                json!({}),
                            );
                            let _ = out_tx.send(n.to_string()).await;
                        }
                        let args = params
                            .get("arguments")
                            .cloned()
                            .unwrap_or_else(|| json!({}));
                        let token = params
                            .get("_meta")
                            .and_then(|m| m.get("progressToken"))
                            .cloned();
                        let (tx, id2, garbage, serial) =
                            (out_tx.clone(), id.clone(), opts.garbage, serial.clone());
                        let asker = asker_on(ask_tx.clone(), asked.clone());
                        let task = tokio::spawn(async move {
                            let _permit = serial.acquire_owned().await;
                            let etx = tx.clone();
                            let emit = move |n: Value| {
                                let _ = etx.try_send(n.to_string());
                            };
                            let outcome = tool.run(&args, token.as_ref(), Some(asker), emit).await;
                            if name == "crash" {
                                eprintln!("fixture: crashing on purpose");
                                std::process::exit(7);
                            }
                            if garbage {
                                let _ = tx.send("garbage before the answer".into()).await;
                            }
                            let _ = tx
                                .send(jsonrpc::response(Some(&id2), &outcome).to_string())
                                .await;
                        });
                        running
                            .lock()
                            .expect("running")
                            .insert(id.to_string(), task.abort_handle());
                    }
                    "ping" => {
                        let _ = out_tx.send(reply(Ok(json!({})))).await;
                    }
                    _ => {
                        let _ = out_tx
                            .send(reply(Err(RpcError::new(
                                METHOD_NOT_FOUND,
                                format!("Method not found: {method}"),
                            ))))
                            .await;
                    }
                }
            }
            Msg::Response { id, outcome } => {
                let key = id
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| id.to_string());
                if let Some(w) = asked.lock().expect("asked").remove(&key) {
                    let _ = w.send(outcome);
                }
            }
            Msg::Notification { method, params } if method == "notifications/cancelled" => {
                let target = params
                    .get("requestId")
                    .map(Value::to_string)
                    .unwrap_or_default();
                log_event(&opts, &format!("cancelled {target}"));
                if !opts.ignore_cancel {
                    if let Some(h) = running.lock().expect("running").remove(&target) {
                        h.abort();
                    }
                }
            }
            _ => {}
        }
    }
    eprintln!("fixture: stdin closed, exiting");
    drop(out_tx);
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    Ok(())
}
