//! Tool-level handles for clients that never declared the tasks extension, which
//! must never be answered with a `CreateTaskResult` (`non_task_clients =
//! "tool_handles"`): past its threshold such a call answers a normal, successful
//! `CallToolResult` saying the job still runs, with its task id; the listing
//! offers `tasklift_wait` and `tasklift_cancel`, which wait for the stored task
//! or stop it. Also what every waiter on a task shares ([`Waiter`],
//! [`Engine::wait_on`], questions asked through a session or MRTR), which
//! `detach.rs` uses for callers that keep waiting on their call's task.
//!
//! Waiting goes through [`Engine::get`], so a task is found only by the caller
//! that created it, on its upstream, exactly as `tasks/get` finds it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use super::answer::TaskError;
use super::answer::{Answer, Event, Failure};
use super::api::Caller;
use super::api::Stored;
use super::core::part;
use super::input::check_allowed;
pub(super) use super::phases::Handle;
use crate::store::{TaskOutcome, TaskRecord, TaskStatus};
use crate::upstream::{CallContext, ClientPeer, ClientRequest};
use tasklift_protocol::mcp;

/// The tool that waits for a tool-level handle's task.
pub const WAIT_TOOL: &str = "tasklift_wait";
/// The tool that cancels a tool-level handle's task.
pub const CANCEL_TOOL: &str = "tasklift_cancel";
/// `requestState` of input asked while a client waits on a task (MRTR): the task
/// id follows. Not sealed: it names a task only its owner can answer.
pub const WAIT_STATE_PREFIX: &str = "tlw1.";
/// A waiter reads the record again at least this often (a task another replica
/// runs changes without this process publishing it).
const RECHECK: Duration = Duration::from_secs(1);

/// What waiting on a task saw.
pub(super) enum Waited {
    /// It ended.
    Done(TaskRecord),
    /// It waits for answers.
    Input(TaskRecord),
    /// Still running when the wait was up.
    Running(TaskRecord),
}

/// Who waits on a task, and how to reach it for input.
#[derive(Clone)]
pub(super) struct Waiter {
    pub principal: String,
    pub upstream: String,
    /// A legacy client's session: questions become its own requests.
    pub peer: Option<Arc<ClientPeer>>,
    /// What the request's clientCapabilities declare (may it be asked with MRTR).
    pub caps: mcp::Declared,
    /// Which client program waits ([`client_key`]): how long it stays is learned.
    pub client: String,
}

impl Waiter {
    pub(super) fn new(req: &ClientRequest, ctx: &CallContext, upstream: &str) -> Self {
        Self {
            principal: ctx.principal.clone(),
            upstream: upstream.to_string(),
            peer: ctx.session.clone(),
            caps: req.declared(),
            client: client_key(req, ctx),
        }
    }

    pub(super) fn who(&self) -> Caller<'_> {
        Caller {
            principal: &self.principal,
            upstream: &self.upstream,
        }
    }
}

/// Who is calling, for learning how long it waits ([`super::patience`]): the
/// principal with the client's `clientInfo` name and version (a legacy session's
/// reaches the request's `_meta` too), or the session when there is no clientInfo.
pub(super) fn client_key(req: &ClientRequest, ctx: &CallContext) -> String {
    let info = req.meta(mcp::META_CLIENT_INFO);
    let field = |k: &str| info.and_then(|i| i.get(k)).and_then(Value::as_str);
    match (field("name"), ctx.session.as_ref()) {
        (Some(name), _) => format!(
            "{}\0{name}\0{}",
            ctx.principal,
            field("version").unwrap_or_default()
        ),
        (None, Some(s)) => format!("{}\0session\0{}", ctx.principal, s.id),
        (None, None) => format!("{}\0unnamed", ctx.principal),
    }
}

/// The tools a client without the extension is offered beside the upstream's.
pub fn listed_tools(max_wait: Duration) -> [Value; 2] {
    let secs = max_wait.as_secs().max(1);
    [
        json!({
            "name": WAIT_TOOL,
            "description": format!("Wait for a job that is still running in the background and get its result. Use it when a tool answered that its job is still running and gave a taskId: call this with that taskId instead of calling the tool again. It waits for a while (never longer than this client waits for a tool, at most {secs} seconds) and returns the job's own result once it has finished, an error if it failed, or says it is still running: then call it again with the same taskId."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "taskId": {"type": "string", "description": "The taskId the still-running answer gave."},
                    "poll": {"type": "integer", "minimum": 1, "description": "The poll number the still-running answer gave with the taskId."},
                    "waitSeconds": {"type": "number", "minimum": 0, "maximum": secs, "description": "At most how long to wait before answering that the job still runs. Leave it out: the default is as long as this client is known to wait."}
                },
                "required": ["taskId"]
            }
        }),
        json!({
            "name": CANCEL_TOOL,
            "description": "Stop a job that is still running in the background (one a tool answered is still running, with a taskId). Only when the user no longer wants its result.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "taskId": {"type": "string", "description": "The taskId of the job to stop."}
                },
                "required": ["taskId"]
            }
        }),
    ]
}

/// A tool result with this text and nothing else. `resultType` is there for
/// 2026-07-28 clients (the legacy door removes it, as from any result).
pub(super) fn text_result(text: String, error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": error, "resultType": "complete"})
}

/// The answer while a task runs: text a model can follow to `tasklift_wait`, and the
/// same in `structuredContent` (many clients show their model only that part when
/// it is there): the sentence as `message`, and the machine-readable facts (`taskId`,
/// `status`, the call to make next with its arguments). The next call's `poll` is
/// `poll`: it counts up, so that waiting again is never the same call as the last
/// (agents stop a run that repeats one call a few times, taking it for a loop).
/// `needs` says what input the client was asked for and cannot give here.
pub(super) fn still_running(rec: &TaskRecord, poll: u64, needs: Option<&str>) -> Value {
    let (tool, id) = (&rec.tool, &rec.id);
    let next = json!({"taskId": id, "poll": poll});
    let mut text = format!(
        "The job `{tool}` is still running in the background (taskId {id}); its result is not ready yet. Do not call `{tool}` again for this job. To get its result, call the tool `{WAIT_TOOL}` with {next}: it waits for the job and returns its result once it has finished, or says it is still running, with the arguments for the next call. To stop the job, call `{CANCEL_TOOL}` with {{\"taskId\":\"{id}\"}}."
    );
    if let Some(m) = rec.status_message.as_deref().filter(|m| !m.is_empty()) {
        text.push_str(&format!(" Latest status: {m}"));
    }
    if let Some(n) = needs {
        text.push_str(&format!(
            " The job is waiting for input that this client cannot be asked for here: {n}"
        ));
    }
    let mut structured = json!({
        "message": text,
        "taskId": id,
        "status": rec.status().as_str(),
        "next": {"tool": WAIT_TOOL, "arguments": next},
        "stopWith": {"tool": CANCEL_TOOL, "arguments": {"taskId": id}},
        "pollWith": WAIT_TOOL,
    });
    if let Some(m) = &rec.status_message {
        structured["statusMessage"] = json!(m);
    }
    let mut r = text_result(text, false);
    r["structuredContent"] = structured;
    r
}

/// What a finished task gives a model through `tasklift_wait`: the tool's own
/// result, or a tool error saying how it failed.
pub(super) fn finished_result(rec: &TaskRecord) -> Value {
    match (&rec.outcome, rec.status()) {
        (Some(TaskOutcome::Result(r)), TaskStatus::Completed) => {
            let mut r = r.clone();
            mcp::mark_complete(&mut r);
            r
        }
        (Some(TaskOutcome::Error(e)), _) => {
            let why = e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("an error");
            text_result(
                format!("The job `{}` (taskId {}) failed: {why}", rec.tool, rec.id),
                true,
            )
        }
        (_, TaskStatus::Cancelled) => text_result(
            format!(
                "The job `{}` (taskId {}) was cancelled: {}",
                rec.tool,
                rec.id,
                rec.status_message.as_deref().unwrap_or("no reason given")
            ),
            true,
        ),
        _ => text_result(
            format!(
                "The job `{}` (taskId {}) ended without a result.",
                rec.tool, rec.id
            ),
            true,
        ),
    }
}

/// The questions of an `input_required` task, in words.
pub(super) fn questions(rec: &TaskRecord) -> String {
    let asks: Vec<String> = rec
        .input_requests
        .values()
        .map(|r| {
            let method = r
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("a request");
            match r.pointer("/params/message").and_then(Value::as_str) {
                Some(m) => format!("{method}: {m}"),
                None => method.to_string(),
            }
        })
        .collect();
    asks.join("; ")
}

/// Wakes when a change to task `id` is published (or changes were missed).
async fn changed(changes: &mut broadcast::Receiver<TaskRecord>, id: &str) {
    use broadcast::error::RecvError;
    loop {
        match changes.recv().await {
            Ok(r) if r.id == id => return,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return,
            Err(RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

part!(
    /// Tool-level handles for clients without the tasks extension.
    Handles
);

impl Handles {
    /// Wait on a task until it ends, asks for input, or `until` passes; `seen`
    /// is its record as just read, if the caller has it.
    pub(super) async fn wait_on(
        &self,
        id: &str,
        who: Caller<'_>,
        until: Instant,
        mut seen: Option<TaskRecord>,
    ) -> Result<Waited, TaskError> {
        let mut changes = self.subscribe();
        loop {
            let rec = match seen.take() {
                Some(rec) => rec,
                None => Stored::of(self).get(id, who).await?,
            };
            match rec.status() {
                s if s.is_terminal() => return Ok(Waited::Done(rec)),
                TaskStatus::InputRequired => return Ok(Waited::Input(rec)),
                _ => {}
            }
            let now = Instant::now();
            if now >= until {
                return Ok(Waited::Running(rec));
            }
            tokio::select! {
                _ = tokio::time::sleep_until((now + RECHECK).min(until)) => {}
                _ = changed(&mut changes, id) => {}
            }
        }
    }

    /// Ask a legacy client the task's questions as its own requests on `tx`, and
    /// give the task its answers.
    pub(super) async fn ask_peer(
        &self,
        peer: &ClientPeer,
        rec: &TaskRecord,
        w: &Waiter,
        tx: &mpsc::Sender<Event>,
    ) -> Result<(), Failure> {
        let mut waiting = Vec::new();
        for (key, r) in &rec.input_requests {
            let method = r.get("method").and_then(Value::as_str).unwrap_or_default();
            let params = r.get("params").cloned().unwrap_or_else(|| json!({}));
            let (otx, orx) = oneshot::channel();
            let msg = peer.ask(
                method,
                params,
                Box::new(move |o| {
                    let _ = otx.send(o);
                }),
            );
            if tx.send(Event::Message(msg)).await.is_err() {
                return Err(Failure::ClientGone);
            }
            waiting.push((key.clone(), orx));
        }
        let mut answers = Map::new();
        for (key, orx) in waiting {
            // A client that goes away without answering stops the asking; the task
            // stays input_required for the next wait.
            let answered = tokio::select! {
                _ = tx.closed() => return Err(Failure::ClientGone),
                a = orx => a,
            };
            match answered {
                Ok(Ok(v)) => {
                    answers.insert(key, v);
                }
                Ok(Err(e)) => return Err(Failure::Relayed(e)),
                Err(_) => return Err(Failure::SessionEnded),
            }
        }
        Stored::of(self)
            .update(&rec.id, w.who(), answers)
            .await
            .map_err(Failure::Task)
    }

    /// Whether this waiter can be asked the task's questions with an MRTR
    /// `InputRequiredResult`: a caller without a session that declared what each needs.
    pub(super) fn mrtr_possible(w: &Waiter, rec: &TaskRecord) -> bool {
        w.peer.is_none()
            && !rec.input_requests.is_empty()
            && rec.input_requests.values().all(|r| {
                check_allowed(
                    w.caps,
                    r.get("method").and_then(Value::as_str).unwrap_or_default(),
                )
                .is_ok()
            })
    }

    /// The MRTR answer carrying a task's questions; the retry's `requestState`
    /// names the task ([`WAIT_STATE_PREFIX`]).
    pub(super) fn input_required(rec: &TaskRecord) -> Value {
        json!({
            "resultType": "input_required",
            "inputRequests": rec.input_requests,
            "requestState": format!("{WAIT_STATE_PREFIX}{}", rec.id),
        })
    }

    /// A retry carrying a waiter's `requestState`: give the task the answers, and
    /// return its id to wait on again.
    pub(super) async fn answer_waited(
        &self,
        req: &ClientRequest,
        who: Caller<'_>,
    ) -> Result<Option<String>, TaskError> {
        let Some(id) = req
            .request_state()
            .and_then(|s| s.strip_prefix(WAIT_STATE_PREFIX))
        else {
            return Ok(None);
        };
        Stored::of(self)
            .update(id, who, req.input_responses())
            .await?;
        Ok(Some(id.to_string()))
    }

    /// `tasklift_cancel`: stop the caller's task.
    pub async fn tool_cancel(
        &self,
        req: ClientRequest,
        ctx: &CallContext,
        upstream: &str,
    ) -> Answer {
        let w = Waiter::new(&req, ctx, upstream);
        let id = req
            .arguments()
            .and_then(|a| a.get("taskId"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let result = match Stored::of(self).get(&id, w.who()).await {
            Ok(rec) if rec.status().is_terminal() => text_result(
                format!(
                    "The job `{}` (taskId {id}) had already ended ({}); nothing to stop.",
                    rec.tool,
                    rec.status().as_str()
                ),
                false,
            ),
            Ok(rec) => match Stored::of(self).cancel(&id, w.who()).await {
                Ok(()) => text_result(
                    format!(
                        "Stopping the job `{}` (taskId {id}): it was cancelled upstream.",
                        rec.tool
                    ),
                    false,
                ),
                Err(e) => unknown(&e, Some(&id)),
            },
            Err(e) => unknown(&e, Some(&id)),
        };
        Answer::Result(result)
    }
}

/// A tool error for a task the caller cannot see (unknown, another caller's, or
/// expired) or a store that cannot be read.
pub(super) fn unknown(e: &TaskError, id: Option<&str>) -> Value {
    let id = id.unwrap_or("?");
    let text = match e {
        TaskError::NotFound => format!("Unknown taskId {id}: no such job for this caller. Use the taskId a still-running answer gave."),
        TaskError::Expired => format!("The job with taskId {id} has expired; its result is no longer kept."),
        other => format!("Could not read the job with taskId {id}: {other}"),
    };
    text_result(text, true)
}

/// Add `tasklift_wait` and `tasklift_cancel` to a `tools/list` answer, and drop the
/// `outputSchema` of tools that may answer with a still-running result (which it
/// would not match; SDK clients check results against it). `handles(name)` says
/// whether a tool may.
pub fn offer_tools(msg: &mut Value, max_wait: Duration, handles: impl Fn(&str) -> bool) {
    let Some(Value::Array(tools)) = msg.get_mut("result").and_then(|r| r.get_mut("tools")) else {
        return;
    };
    for t in tools.iter_mut() {
        let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
        if handles(name) {
            if let Value::Object(o) = t {
                o.remove("outputSchema");
            }
        }
    }
    tools.retain(|t| {
        let name = t.get("name").and_then(Value::as_str);
        name != Some(WAIT_TOOL) && name != Some(CANCEL_TOOL)
    });
    tools.extend(listed_tools(max_wait));
}
