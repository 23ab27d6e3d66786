//! A task from its handle to the end: `follow_task` polls `tasks/get` at the task's
//! `pollIntervalMs`, answers its `inputRequests` with `tasks/update`, and on Ctrl-C
//! `cancel_task` sends `tasks/cancel` and waits a little to see where it ended.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::time::Duration;

use serde_json::{Map, Value};

use super::exit::{
    client_fail, fail, no_prompt_hint, Fail, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE,
};
use super::output::finish;
use super::terminal::{ask, Cx};

/// Follow a task from its handle to the end.
pub(super) async fn follow_task(cx: &mut Cx, handle: Value) -> Result<u8, Fail> {
    let id = task_id(&handle)?;
    cx.status.note(&format!(
        "task {id} ({}), polling every {} ms; Ctrl-C cancels it",
        handle["status"].as_str().unwrap_or("?"),
        poll_interval(&handle).as_millis()
    ));
    let mut task = handle;
    let mut answered: HashSet<String> = HashSet::new();
    loop {
        let status = task["status"].as_str().unwrap_or("?").to_string();
        cx.status.set(&status, task["statusMessage"].as_str());
        match status.as_str() {
            "completed" => return Ok(completed(cx, &id, &task)),
            "failed" => return Err(failed(cx, &id, &task)),
            "cancelled" => return Err(cancelled_elsewhere(cx, &id, &task)),
            "input_required" => {
                if let ControlFlow::Break(code) =
                    answer_inputs(cx, &id, &task, &mut answered).await?
                {
                    return Ok(code);
                }
            }
            _ => {}
        }
        task = match poll_again(cx, &id, &task).await? {
            ControlFlow::Continue(next) => next,
            ControlFlow::Break(code) => return Ok(code),
        };
    }
}

/// The handle's `taskId`: without it there is nothing to follow.
fn task_id(handle: &Value) -> Result<String, Fail> {
    handle["taskId"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| {
            fail(
                EXIT_USAGE,
                format!("the server returned a task handle without a taskId: {handle}"),
            )
        })
}

/// The task's `pollIntervalMs`, kept between 20 ms and a minute.
fn poll_interval(task: &Value) -> Duration {
    Duration::from_millis(
        task["pollIntervalMs"]
            .as_u64()
            .unwrap_or(1000)
            .clamp(20, 60_000),
    )
}

/// A completed task: how long it took, then its result printed.
fn completed(cx: &Cx, id: &str, task: &Value) -> u8 {
    cx.status.pause();
    cx.status.note(&format!(
        "task {id} completed after {:.1} s",
        cx.status.elapsed().as_secs_f64()
    ));
    finish(cx, &task["result"])
}

/// A failed task: its error's message and code.
fn failed(cx: &Cx, id: &str, task: &Value) -> Fail {
    cx.status.pause();
    let e = &task["error"];
    fail(
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
    )
}

/// A task cancelled by someone else than this command.
fn cancelled_elsewhere(cx: &Cx, id: &str, task: &Value) -> Fail {
    cx.status.pause();
    let why = task["statusMessage"]
        .as_str()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    fail(
        EXIT_FAILED,
        format!("task {id} was cancelled (not by this command){why}"),
    )
}

/// Answer the task's `inputRequests` not answered yet, with `tasks/update`; `Break`
/// with the exit code when Ctrl-C cancelled the task instead.
async fn answer_inputs(
    cx: &mut Cx,
    id: &str,
    task: &Value,
    answered: &mut HashSet<String>,
) -> Result<ControlFlow<u8>, Fail> {
    let pending = unanswered(task, answered);
    if pending.is_empty() {
        return Ok(ControlFlow::Continue(()));
    }
    cx.status.pause();
    let answers = match ask(cx, &pending).await {
        Ok(a) => a,
        Err(f) if f.code == EXIT_INTERRUPTED => {
            return Ok(ControlFlow::Break(cancel_task(cx, id, task).await))
        }
        Err(f) => {
            let _ = cx.client.cancel_task(id).await;
            return Err(fail(f.code, format!("{}; task {id} cancelled", f.message)));
        }
    };
    let sent = tokio::select! {
        r = cx.client.update_task(id, Value::Object(answers)) => r,
        _ = cx.interrupt.recv() => return Ok(ControlFlow::Break(cancel_task(cx, id, task).await)),
    };
    sent.map_err(|e| client_fail(&format!("tasks/update {id}"), e))?;
    answered.extend(pending.keys().cloned());
    cx.status.set("answered", None);
    Ok(ControlFlow::Continue(()))
}

/// The task's `inputRequests` this command has not answered yet.
fn unanswered(task: &Value, answered: &HashSet<String>) -> Map<String, Value> {
    let empty = Map::new();
    task["inputRequests"]
        .as_object()
        .unwrap_or(&empty)
        .iter()
        .filter(|(k, _)| !answered.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Wait the task's poll interval, then `tasks/get`; `Break` with the exit code when
/// Ctrl-C cancelled the task instead.
async fn poll_again(cx: &mut Cx, id: &str, task: &Value) -> Result<ControlFlow<u8, Value>, Fail> {
    let next = tokio::select! {
        r = async {
            tokio::time::sleep(poll_interval(task)).await;
            cx.client.get_task(id).await
        } => r,
        _ = cx.interrupt.recv() => return Ok(ControlFlow::Break(cancel_task(cx, id, task).await)),
    };
    next.map(ControlFlow::Continue).map_err(|e| {
        let f = client_fail(&format!("tasks/get {id}"), e);
        fail(
            f.code,
            format!(
                "{} (the task may still be running on the server)",
                f.message
            ),
        )
    })
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
