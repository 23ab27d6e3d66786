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
//!
//! This file holds the flags and the `tools/call` loop (answering an
//! `InputRequiredResult` and retrying); the rest is in `call/`, in files that import
//! nothing of this one: `args.rs` (`--arg`, `--args-json`, `--header`), `exit.rs`
//! (exit codes, `Fail`), `terminal.rs` (the call's `Cx`, Ctrl-C, stdin, `ask`),
//! `follow.rs` (a task from its handle to the end), `output.rs` (the result
//! printed), `form.rs` (elicitation forms), `status.rs` (the spinner).

mod args;
mod exit;
mod follow;
mod form;
mod output;
mod status;
mod terminal;

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Map, Value};

use crate::cli::client::{Client, ClientError};
use args::parse_header;
use exit::{client_fail, fail, no_prompt_hint, Fail};
use follow::follow_task;
use output::finish;
use status::StatusLine;
use terminal::{ask, Cx, Interrupt, Stdin};

pub use args::parse_arguments;
pub use exit::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE};
pub use output::render_result;

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

/// Call the tool until it answers: a result, a task handle to follow, or questions
/// answered before calling again.
async fn call(a: CallArgs) -> Result<u8, Fail> {
    let arguments =
        parse_arguments(&a.args, a.args_json.as_deref()).map_err(|m| fail(EXIT_USAGE, m))?;
    let mut cx = context(&a)?;
    let token = format!("tasklift-call-{}", uuid::Uuid::new_v4());
    let mut params =
        json!({"name": a.tool, "arguments": arguments, "_meta": {"progressToken": token}});
    let mut label = format!("calling {}", a.tool);
    loop {
        let result = match send_call(&mut cx, &params, &label).await? {
            ControlFlow::Continue(result) => result,
            ControlFlow::Break(code) => return Ok(code),
        };
        match result["resultType"].as_str() {
            Some("task") => return follow_task(&mut cx, result).await,
            Some("input_required") => {
                answer_before_handle(&mut cx, &mut params, &result).await?;
                label = format!("calling {} again with the answers", a.tool);
            }
            _ => {
                cx.status.pause();
                return Ok(finish(&cx, &result));
            }
        }
    }
}

/// The call's `Cx`: the client with the flags' headers and capabilities, whether
/// someone can answer questions, the status line, and Ctrl-C watched from now on.
fn context(a: &CallArgs) -> Result<Cx, Fail> {
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
    Ok(Cx {
        client,
        url: a.url.clone(),
        tool: a.tool.clone(),
        json: a.json,
        interactive,
        status: StatusLine::new(stderr_tty, a.json),
        interrupt,
        stdin: Stdin { lines: None },
    })
}

/// One `tools/call`, its progress notifications shown on the status line; `Break`
/// with the exit code on Ctrl-C, which abandons it.
async fn send_call(
    cx: &mut Cx,
    params: &Value,
    label: &str,
) -> Result<ControlFlow<u8, Value>, Fail> {
    cx.status.set(label, None);
    let result = {
        let status = &cx.status;
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
                return Ok(ControlFlow::Break(EXIT_INTERRUPTED));
            }
        }
    };
    result.map(ControlFlow::Continue).map_err(|e| {
        let hint = match &e {
            ClientError::Rpc(e) => no_prompt_hint(e.code, cx.interactive),
            ClientError::Http(_) => "",
        };
        let f = client_fail(&format!("tools/call {}", cx.tool), e);
        fail(f.code, format!("{}{hint}", f.message))
    })
}

/// An `InputRequiredResult` before any handle: the next call's `params` carry the
/// answers asked at the terminal (or, with nothing to ask, wait a little) and the
/// server's `requestState`.
async fn answer_before_handle(cx: &mut Cx, params: &mut Value, result: &Value) -> Result<(), Fail> {
    cx.status.pause();
    let empty = Map::new();
    let requests = result["inputRequests"].as_object().unwrap_or(&empty);
    let p = params.as_object_mut().expect("object");
    p.remove("inputResponses");
    if !requests.is_empty() {
        let answers = ask(cx, requests).await?;
        p.insert("inputResponses".into(), Value::Object(answers));
    } else {
        // Only state to hand back (e.g. the server shedding load): retry soon.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match result.get("requestState") {
        Some(s) => p.insert("requestState".into(), s.clone()),
        None => p.remove("requestState"),
    };
    Ok(())
}
