//! `tasklift call URL TOOL`: call a tool on any 2026-07-28 MCP endpoint (tasklift or
//! not) from a terminal or a script.
//!
//! It declares the Tasks extension (and elicitation, when it can prompt), calls the
//! tool, follows a task handle by polling `tasks/get` at the task's `pollIntervalMs`
//! (a spinner or progress bar on stderr, driven by `statusMessage`), answers the
//! server's questions at the terminal (an `InputRequiredResult` before a handle, by
//! retrying with `inputResponses` and `requestState`; a task's `inputRequests`, with
//! `tasks/update`), cancels the task on Ctrl-C, and prints the result.
//!
//! Exit codes: 0 completed, 1 tool error (`isError`), failed task or unanswerable
//! input, 2 usage or connection error, 130 interrupted.

mod form;
mod status;

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::tools::client::{Client, ClientError};
use status::Status;

/// Completed, not `isError`.
pub const EXIT_OK: u8 = 0;
/// `isError`, a failed (or otherwise ended) task, a JSON-RPC error, input nobody can give.
pub const EXIT_FAILED: u8 = 1;
/// Bad flags, a bad URL, an unreachable or non-MCP endpoint.
pub const EXIT_USAGE: u8 = 2;
/// Interrupted with Ctrl-C (the task, if any, was cancelled).
pub const EXIT_INTERRUPTED: u8 = 130;

/// `tasklift call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// The MCP endpoint, e.g. http://127.0.0.1:8080/mcp (http or https).
    pub url: String,
    /// The tool to call.
    pub tool: String,
    /// An argument, KEY=VALUE; VALUE is JSON when it parses as JSON, else a string
    /// (repeatable; wins over --args-json).
    #[arg(long = "arg", short = 'a', value_name = "KEY=VALUE")]
    pub args: Vec<String>,
    /// All arguments as one JSON object.
    #[arg(long, value_name = "JSON")]
    pub args_json: Option<String>,
    /// An HTTP header sent with every request, "Name: value" (repeatable), e.g.
    /// "Authorization: Bearer …".
    #[arg(long = "header", short = 'H', value_name = "NAME:VALUE")]
    pub headers: Vec<String>,
    /// Print only the final result, as JSON (for scripts). Prompts only when stdin and
    /// stderr are terminals; otherwise a request for input is an error.
    #[arg(long)]
    pub json: bool,
    /// Do not declare the Tasks extension (the server answers synchronously).
    #[arg(long)]
    pub no_tasks: bool,
}

/// Run `tasklift call`; the process's exit code.
pub fn run(args: CallArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tasklift call: cannot start: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let code = match rt.block_on(call(args)) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("tasklift call: {}", f.message);
            f.code
        }
    };
    let _ = std::io::stdout().flush();
    // A prompt's reader thread may still wait on stdin: do not wait for it.
    rt.shutdown_background();
    ExitCode::from(code)
}

/// Why the call ended badly.
#[derive(Debug)]
struct Fail {
    code: u8,
    message: String,
}

fn fail(code: u8, message: impl Into<String>) -> Fail {
    Fail {
        code,
        message: message.into(),
    }
}

/// A client error: the request was wrong or the endpoint unreachable or not MCP (2),
/// or the server could not do it (1).
fn client_fail(what: &str, e: ClientError) -> Fail {
    match e {
        ClientError::Rpc(e) => fail(
            rpc_exit(e.code),
            format!(
                "{what}: the server answered with error {}: {}",
                e.code, e.message
            ),
        ),
        ClientError::Http(m) => fail(EXIT_USAGE, format!("{what}: {m}")),
    }
}

/// The exit code for a JSON-RPC error: a request the server calls malformed or
/// invalid (parse error, invalid request, no such method, invalid params such as an
/// unknown tool, header mismatch, unsupported version) is a usage error.
fn rpc_exit(code: i64) -> u8 {
    match code {
        -32700 | -32600 | -32601 | -32602 | -32020 | -32022 => EXIT_USAGE,
        _ => EXIT_FAILED,
    }
}

/// What to add to a "missing capability" error when this run cannot prompt.
fn no_prompt_hint(code: i64, interactive: bool) -> &'static str {
    if code == -32021 && !interactive {
        " (with --json and no terminal, tasklift call declares no elicitation; run it in a terminal to answer the server)"
    } else {
        ""
    }
}

/// The tool's arguments from `--args-json` and `--arg` (which wins).
pub fn parse_arguments(args: &[String], args_json: Option<&str>) -> Result<Value, String> {
    let mut out = match args_json {
        Some(j) => match serde_json::from_str::<Value>(j) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("--args-json must be a JSON object".into()),
            Err(e) => return Err(format!("--args-json is not JSON: {e}")),
        },
        None => Map::new(),
    };
    for a in args {
        let (k, v) = a
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--arg {a:?}: expected KEY=VALUE"))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.into()));
        out.insert(k.into(), value);
    }
    Ok(Value::Object(out))
}

fn parse_header(h: &str) -> Result<(http::HeaderName, http::HeaderValue), String> {
    let (k, v) = h
        .split_once(':')
        .ok_or_else(|| format!("--header {h:?}: expected \"Name: value\""))?;
    let name = k
        .trim()
        .parse::<http::HeaderName>()
        .map_err(|e| format!("--header {h:?}: {e}"))?;
    let value =
        http::HeaderValue::from_str(v.trim()).map_err(|e| format!("--header {h:?}: {e}"))?;
    Ok((name, value))
}

/// Ctrl-C, listened for from the start (so it never kills the process mid-call).
struct Interrupt {
    #[cfg(unix)]
    sig: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            sig: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            self.sig.recv().await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Prompts on stderr, answers from stdin (read by a thread started at the first
/// question, so stdin is left alone when nothing is asked).
struct Stdin {
    lines: Option<mpsc::UnboundedReceiver<String>>,
}

impl form::Terminal for Stdin {
    fn say(&mut self, text: &str) {
        eprintln!("{text}");
    }

    async fn ask(&mut self, prompt: &str) -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let rx = self.lines.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            std::thread::spawn(move || {
                let stdin = std::io::stdin();
                loop {
                    let mut line = String::new();
                    match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = line.trim_end_matches(['\n', '\r']).to_string();
                            if tx.send(line).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
            rx
        });
        let line = rx.recv().await;
        if line.is_none() {
            eprintln!();
        }
        line
    }
}

/// Everything one call needs.
struct Cx {
    client: Client,
    url: String,
    tool: String,
    json: bool,
    /// Someone can answer questions.
    interactive: bool,
    status: Status,
    interrupt: Interrupt,
    stdin: Stdin,
}

async fn call(a: CallArgs) -> Result<u8, Fail> {
    let arguments =
        parse_arguments(&a.args, a.args_json.as_deref()).map_err(|m| fail(EXIT_USAGE, m))?;
    let mut client = Client::new(&a.url).map_err(|e| fail(EXIT_USAGE, e.to_string()))?;
    for h in &a.headers {
        client
            .headers
            .push(parse_header(h).map_err(|m| fail(EXIT_USAGE, m))?);
    }
    client.tasks = !a.no_tasks;
    let stderr_tty = std::io::stderr().is_terminal();
    let interactive = !a.json || (std::io::stdin().is_terminal() && stderr_tty);
    if interactive {
        // Forms are asked at the terminal; a URL is shown for the user to open.
        client
            .capabilities
            .insert("elicitation".into(), json!({"form": {}, "url": {}}));
    }
    let interrupt =
        Interrupt::new().map_err(|e| fail(EXIT_USAGE, format!("cannot watch Ctrl-C: {e}")))?;
    let mut cx = Cx {
        client,
        url: a.url.clone(),
        tool: a.tool.clone(),
        json: a.json,
        interactive,
        status: Status::new(stderr_tty, a.json),
        interrupt,
        stdin: Stdin { lines: None },
    };
    let token = format!("tasklift-call-{}", uuid::Uuid::new_v4());
    let mut params =
        json!({"name": a.tool, "arguments": arguments, "_meta": {"progressToken": token}});
    let mut label = format!("calling {}", a.tool);
    loop {
        cx.status.set(&label, None);
        let result = {
            let status = &cx.status;
            let label = &label;
            let req = cx
                .client
                .request_streaming("tools/call", params.clone(), |n| {
                    if n["method"] == "notifications/progress" {
                        let m = crate::tasks::progress_message(&n["params"]);
                        status.set(label, m.as_deref());
                    }
                });
            tokio::select! {
                r = req => r,
                _ = cx.interrupt.recv() => {
                    cx.status.pause();
                    eprintln!("tasklift call: interrupted before the server answered; the request was abandoned (no task existed yet)");
                    return Ok(EXIT_INTERRUPTED);
                }
            }
        };
        let result = result.map_err(|e| {
            let hint = match &e {
                ClientError::Rpc(e) => no_prompt_hint(e.code, cx.interactive),
                ClientError::Http(_) => "",
            };
            let f = client_fail(&format!("tools/call {}", a.tool), e);
            fail(f.code, format!("{}{hint}", f.message))
        })?;
        match result["resultType"].as_str() {
            Some("task") => return follow_task(&mut cx, result).await,
            Some("input_required") => {
                cx.status.pause();
                let empty = Map::new();
                let requests = result["inputRequests"].as_object().unwrap_or(&empty);
                let p = params.as_object_mut().expect("object");
                p.remove("inputResponses");
                if !requests.is_empty() {
                    let answers = ask(&mut cx, requests).await?;
                    p.insert("inputResponses".into(), Value::Object(answers));
                } else {
                    // Only state to hand back (e.g. the server shedding load): retry soon.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                match result.get("requestState") {
                    Some(s) => p.insert("requestState".into(), s.clone()),
                    None => p.remove("requestState"),
                };
                label = format!("calling {} again with the answers", a.tool);
            }
            _ => {
                cx.status.pause();
                return Ok(finish(&cx, &result));
            }
        }
    }
}

/// Answer the server's requests at the terminal (Ctrl-C exits with 130).
async fn ask(cx: &mut Cx, requests: &Map<String, Value>) -> Result<Map<String, Value>, Fail> {
    if !cx.interactive {
        let methods: Vec<&str> = requests
            .values()
            .filter_map(|r| r["method"].as_str())
            .collect();
        return Err(fail(
            EXIT_FAILED,
            format!(
                "the server asks for input ({}), but with --json and no terminal nobody can answer; run without --json, or in a terminal",
                methods.join(", ")
            ),
        ));
    }
    let answered = tokio::select! {
        a = form::answer_all(requests, &cx.url, &mut cx.stdin) => a,
        _ = cx.interrupt.recv() => {
            eprintln!();
            return Err(fail(EXIT_INTERRUPTED, "interrupted while answering the server"));
        }
    };
    answered.map_err(|m| fail(EXIT_FAILED, m))
}

/// Follow a task from its handle to the end.
async fn follow_task(cx: &mut Cx, handle: Value) -> Result<u8, Fail> {
    let Some(id) = handle["taskId"].as_str().map(str::to_string) else {
        return Err(fail(
            EXIT_USAGE,
            format!("the server returned a task handle without a taskId: {handle}"),
        ));
    };
    let interval = |t: &Value| {
        Duration::from_millis(
            t["pollIntervalMs"]
                .as_u64()
                .unwrap_or(1000)
                .clamp(20, 60_000),
        )
    };
    cx.status.note(&format!(
        "task {id} ({}), polling every {} ms; Ctrl-C cancels it",
        handle["status"].as_str().unwrap_or("?"),
        interval(&handle).as_millis()
    ));
    let mut task = handle;
    let mut answered: HashSet<String> = HashSet::new();
    loop {
        let status = task["status"].as_str().unwrap_or("?").to_string();
        cx.status.set(&status, task["statusMessage"].as_str());
        match status.as_str() {
            "completed" => {
                cx.status.pause();
                cx.status.note(&format!(
                    "task {id} completed after {:.1} s",
                    cx.status.elapsed().as_secs_f64()
                ));
                return Ok(finish(cx, &task["result"]));
            }
            "failed" => {
                cx.status.pause();
                let e = &task["error"];
                return Err(fail(
                    EXIT_FAILED,
                    format!(
                        "task {id} failed: {} (error {}){}",
                        e["message"]
                            .as_str()
                            .or(task["statusMessage"].as_str())
                            .unwrap_or("no message"),
                        e["code"],
                        no_prompt_hint(e["code"].as_i64().unwrap_or(0), cx.interactive)
                    ),
                ));
            }
            "cancelled" => {
                cx.status.pause();
                let why = task["statusMessage"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                return Err(fail(
                    EXIT_FAILED,
                    format!("task {id} was cancelled (not by this command){why}"),
                ));
            }
            "input_required" => {
                let empty = Map::new();
                let pending: Map<String, Value> = task["inputRequests"]
                    .as_object()
                    .unwrap_or(&empty)
                    .iter()
                    .filter(|(k, _)| !answered.contains(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !pending.is_empty() {
                    cx.status.pause();
                    let answers = match ask(cx, &pending).await {
                        Ok(a) => a,
                        Err(f) if f.code == EXIT_INTERRUPTED => {
                            return Ok(cancel_task(cx, &id, &task).await)
                        }
                        Err(f) => {
                            let _ = cx.client.cancel_task(&id).await;
                            return Err(fail(
                                f.code,
                                format!("{}; task {id} cancelled", f.message),
                            ));
                        }
                    };
                    let sent = tokio::select! {
                        r = cx.client.update_task(&id, Value::Object(answers)) => r,
                        _ = cx.interrupt.recv() => return Ok(cancel_task(cx, &id, &task).await),
                    };
                    sent.map_err(|e| client_fail(&format!("tasks/update {id}"), e))?;
                    answered.extend(pending.keys().cloned());
                    cx.status.set("answered", None);
                }
            }
            _ => {}
        }
        let next = tokio::select! {
            r = async {
                tokio::time::sleep(interval(&task)).await;
                cx.client.get_task(&id).await
            } => r,
            _ = cx.interrupt.recv() => return Ok(cancel_task(cx, &id, &task).await),
        };
        task = next.map_err(|e| {
            let f = client_fail(&format!("tasks/get {id}"), e);
            fail(
                f.code,
                format!(
                    "{} (the task may still be running on the server)",
                    f.message
                ),
            )
        })?;
    }
}

/// Ctrl-C on a task: `tasks/cancel`, then a few seconds to see where it ended.
async fn cancel_task(cx: &mut Cx, id: &str, last: &Value) -> u8 {
    cx.status.pause();
    eprintln!("tasklift call: interrupted: cancelling task {id} (Ctrl-C again to stop waiting)");
    let ack = tokio::select! {
        r = tokio::time::timeout(Duration::from_secs(5), cx.client.cancel_task(id)) => r,
        _ = cx.interrupt.recv() => return EXIT_INTERRUPTED,
    };
    match ack {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            eprintln!("tasklift call: tasks/cancel {id}: {e}");
            return EXIT_INTERRUPTED;
        }
        Err(_) => {
            eprintln!("tasklift call: tasks/cancel {id}: no answer in 5 s");
            return EXIT_INTERRUPTED;
        }
    }
    let every = Duration::from_millis(
        last["pollIntervalMs"]
            .as_u64()
            .unwrap_or(250)
            .clamp(20, 500),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut status = last["status"].as_str().unwrap_or("?").to_string();
    while tokio::time::Instant::now() < deadline {
        let t = tokio::select! {
            t = async {
                tokio::time::sleep(every).await;
                cx.client.get_task(id).await
            } => t,
            _ = cx.interrupt.recv() => break,
        };
        match t {
            Ok(t) => {
                status = t["status"].as_str().unwrap_or("?").to_string();
                if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    match status.as_str() {
        "cancelled" => eprintln!("tasklift call: task {id} is cancelled"),
        "completed" | "failed" => eprintln!(
            "tasklift call: task {id} ended {status} before the cancellation took effect"
        ),
        s => eprintln!(
            "tasklift call: task {id} is still {s}; the server acknowledged the cancellation and may stop it later"
        ),
    }
    EXIT_INTERRUPTED
}

/// Print the result; its exit code.
fn finish(cx: &Cx, result: &Value) -> u8 {
    let is_error = result["isError"] == json!(true);
    let mut out = std::io::stdout().lock();
    if cx.json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(result).unwrap_or_default()
        );
    } else {
        let _ = write!(out, "{}", render_result(result));
    }
    let _ = out.flush();
    if is_error {
        eprintln!("tasklift call: {} reported an error (isError)", cx.tool);
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

/// A tool result for people: text as it is, other content summarised, structured
/// content as JSON when there is nothing else.
pub fn render_result(result: &Value) -> String {
    let mut out = String::new();
    let mut line = |s: &str| {
        out.push_str(s);
        if !s.ends_with('\n') {
            out.push('\n');
        }
    };
    let content = result["content"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for c in content {
        match c["type"].as_str() {
            Some("text") => line(c["text"].as_str().unwrap_or("")),
            Some(kind @ ("image" | "audio")) => line(&format!(
                "[{kind}: {}, {} bytes of base64]",
                c["mimeType"].as_str().unwrap_or("?"),
                c["data"].as_str().map_or(0, str::len)
            )),
            Some("resource_link") => line(&format!(
                "[resource link: {}{}]",
                c["uri"].as_str().unwrap_or("?"),
                c["name"]
                    .as_str()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            )),
            Some("resource") => match c["resource"]["text"].as_str() {
                Some(t) => line(t),
                None => line(&format!(
                    "[resource: {}, {}]",
                    c["resource"]["uri"].as_str().unwrap_or("?"),
                    c["resource"]["mimeType"].as_str().unwrap_or("binary")
                )),
            },
            _ => line(&c.to_string()),
        }
    }
    if content.is_empty() {
        if let Some(s) = result.get("structuredContent") {
            line(&serde_json::to_string_pretty(s).unwrap_or_default());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_json_when_they_parse() {
        let args: Vec<String> = [
            "n=3",
            "name=report.pdf",
            "flag=true",
            "o={\"a\":1}",
            "id=007",
            "e=",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let v = parse_arguments(&args, Some(r#"{"n": 1, "keep": [1]}"#)).unwrap();
        assert_eq!(
            v,
            json!({"n": 3, "name": "report.pdf", "flag": true, "o": {"a": 1}, "id": "007", "e": "", "keep": [1]})
        );
        assert!(parse_arguments(&["novalue".into()], None).is_err());
        assert!(parse_arguments(&["=x".into()], None).is_err());
        assert!(parse_arguments(&[], Some("[1]")).is_err());
        assert!(parse_arguments(&[], Some("{")).is_err());
    }

    #[test]
    fn headers_need_a_name_and_a_value() {
        let (k, v) = parse_header("Authorization: Bearer abc").unwrap();
        assert_eq!(
            (k.as_str(), v.to_str().unwrap()),
            ("authorization", "Bearer abc")
        );
        assert!(parse_header("no-colon").is_err());
        assert!(parse_header("bad name: x").is_err());
    }

    #[test]
    fn results_read_as_text() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
        ]});
        assert_eq!(
            render_result(&r),
            "hello\n[image: image/png, 4 bytes of base64]\n[resource link: file:///x (x)]\n"
        );
        let r = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(render_result(&r), "{\n  \"n\": 1\n}\n");
    }
}
