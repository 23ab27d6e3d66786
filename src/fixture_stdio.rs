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

use crate::fixture::{asker_on, Asked, Broadcast, FixtureServer, Outlet, Tool, ToolCx};
use crate::fixture_content::{Answer, Peer};
use tasklift_protocol::jsonrpc::{
    self, Incoming as Msg, RpcError, INVALID_PARAMS, METHOD_NOT_FOUND,
};

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

/// Sends a tool's notifications to stdout (log messages only at or above the peer's level).
fn emitter(out: &mpsc::Sender<String>, peer: &Arc<Mutex<Peer>>) -> Outlet {
    let (out, peer) = (out.clone(), peer.clone());
    Arc::new(move |n: Value| {
        peer.lock().expect("peer").wants(&n) && out.try_send(n.to_string()).is_ok()
    })
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
    let (ask_tx, mut ask_rx) = mpsc::unbounded_channel::<Value>();
    let out2 = out_tx.clone();
    tokio::spawn(async move {
        while let Some(m) = ask_rx.recv().await {
            let _ = out2.send(m.to_string()).await;
        }
    });
    let asker = || {
        let ask_tx = ask_tx.clone();
        asker_on(
            Arc::new(move |m: Value| ask_tx.send(m).is_ok()),
            asked.clone(),
        )
    };
    // The one client's log level and subscriptions.
    let peer: Arc<Mutex<Peer>> = Arc::default();
    let capabilities = if opts.modern {
        json!({"tools": {}})
    } else {
        server.capabilities()
    };
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
                                "capabilities": capabilities,
                                "serverInfo": {"name": "tasklift-fixture-stdio", "version": env!("CARGO_PKG_VERSION")},
                            }))))
                            .await;
                    }
                    "server/discover" if opts.modern => {
                        let _ = out_tx
                            .send(reply(Ok(json!({
                                "resultType": "complete", "supportedVersions": ["2026-07-28"],
                                "capabilities": capabilities, "ttlMs": 0, "cacheScope": "public",
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
                        let args = params
                            .get("arguments")
                            .cloned()
                            .unwrap_or_else(|| json!({}));
                        for b in tool.broadcasts(&args) {
                            let n = match b {
                                Broadcast::All(n) => n,
                                Broadcast::Subscribers { uri, message } => {
                                    if !peer.lock().expect("peer").subscriptions.contains(&uri) {
                                        continue;
                                    }
                                    message
                                }
                            };
                            let _ = out_tx.send(n.to_string()).await;
                        }
                        let token = params
                            .get("_meta")
                            .and_then(|m| m.get("progressToken"))
                            .cloned();
                        let (tx, id2, garbage, serial) =
                            (out_tx.clone(), id.clone(), opts.garbage, serial.clone());
                        let cx = ToolCx {
                            args,
                            token,
                            asker: Some(asker()),
                            emit: emitter(&tx, &peer),
                            close: None,
                        };
                        let task = tokio::spawn(async move {
                            let _permit = serial.acquire_owned().await;
                            let outcome = tool.run(cx).await;
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
                    m if !opts.modern && server.content().is_some() => {
                        let content = server.content().expect("checked");
                        let answer = content.answer(m, &params, &mut peer.lock().expect("peer"));
                        match answer {
                            Some(Answer::Now(outcome)) => {
                                let _ = out_tx.send(reply(outcome)).await;
                            }
                            Some(Answer::Asking(work)) => {
                                let (tx, id2, fut) = (out_tx.clone(), id.clone(), work(asker()));
                                let task = tokio::spawn(async move {
                                    let outcome = fut.await;
                                    let _ = tx
                                        .send(jsonrpc::response(Some(&id2), &outcome).to_string())
                                        .await;
                                });
                                running
                                    .lock()
                                    .expect("running")
                                    .insert(id.to_string(), task.abort_handle());
                            }
                            None => {
                                let _ = out_tx
                                    .send(reply(Err(RpcError::new(
                                        METHOD_NOT_FOUND,
                                        format!("Method not found: {method}"),
                                    ))))
                                    .await;
                            }
                        }
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
