//! A task from its handle to the end: `follow_task` polls `tasks/get` at the task's
//! `pollIntervalMs`, answers its `inputRequests` with `tasks/update`, and on Ctrl-C
//! `cancel_task` sends `tasks/cancel` and waits a little to see where it ended.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Map, Value};

use super::exit::{
    client_fail, fail, no_prompt_hint, Fail, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE,
};
use super::output::finish;
use super::terminal::{ask, Cx};

/// Follow a task from its handle to the end.
pub(super) async fn follow_task(cx: &mut Cx, handle: Value) -> Result<u8, Fail> {
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
