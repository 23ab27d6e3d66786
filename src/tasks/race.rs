//! The synchronous phase of a request: the race between the upstream and the
//! threshold, keep-alives and relayed progress, parking a call whose legacy upstream
//! asked for input (answered with an MRTR `InputRequiredResult`), resuming it on the
//! client's retry, and handing a slow call to a background driver as a task. Once
//! the answer streams, `streamed.rs` carries it.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::answer::{Answer, Failure, WriteFailure};
use super::control::{mailbox, ControlRx};
use super::core::part;
use super::detach::Detach;
use super::driver::Drivers;
use super::handles::{still_running, Handle, Waiter};
use super::input::{request_binding, StateClaims};
use super::phases::{
    admit_request, finalize_result, sleep_until_precisely, Ahead, Origin, Parked, RunningCall,
    SyncCall, TaskSpec, WRITE_AHEAD,
};
use super::{create_task_result, progress_message};
use crate::observe::spans::Span;
use crate::store::{NewTask, TaskRecord};
use crate::upstream::{
    log_level, progress_under, CallEvent, Next, Outcome, RawResult, ServerRequest, UpstreamCall,
};

/// How long a call parked for input waits for the client's retry.
pub const PARK_TTL: Duration = Duration::from_secs(600);

/// How long to wait, after an input request, for more requests asked together with
/// it (they belong in the same `InputRequiredResult`).
const INPUT_GATHER: Duration = Duration::from_millis(50);

/// What the synchronous phase saw next.
pub(super) enum Step {
    /// The final answer (an upstream's error keeps the HTTP status it came with).
    Final(Result<Value, Failure>),
    /// The final answer, a plain result passed on as bytes.
    FinalRaw(RawResult),
    /// A notification to relay to the client.
    Relay(Value),
    /// Time to send a keep-alive.
    KeepAlive,
    /// The threshold passed and a task may be created.
    Threshold,
    /// The upstream asked for input the client may give.
    Input(Vec<ServerRequest>),
}

part!(
    /// The synchronous phase of a request: the race to the threshold.
    Race
);

impl Race {
    /// The next event: from the read-ahead backlog first, then the upstream (a
    /// plain final result as bytes when `raw`).
    async fn next_event(sc: &mut SyncCall, raw: bool) -> Option<Next> {
        match sc.backlog.pop_front() {
            Some(ev) => Some(Next::Event(ev)),
            None => sc.call.events.next(raw).await,
        }
    }

    /// Wait for the next thing the synchronous phase must act on. `last_send` is set
    /// once a stream is open (keep-alives are due `keepalive` after the last send);
    /// before that, keep-alives start `keepalive` after the threshold, or right away
    /// for a caller that can never get a task.
    pub(super) async fn step(
        &self,
        sc: &mut SyncCall,
        last_send: Option<tokio::time::Instant>,
        task: Option<&TaskSpec>,
    ) -> Step {
        loop {
            // A threshold already due wins over whatever the upstream sent meanwhile:
            // for `always`/`required` tools the handle comes first, and input the
            // upstream asks for then moves the task to input_required.
            if sc
                .threshold_at
                .is_some_and(|t| t <= tokio::time::Instant::now())
            {
                return Step::Threshold;
            }
            let keepalive_at = self.keepalive_at(sc, last_send);
            let threshold_at = sc.threshold_at;
            // A plain result goes to a modern caller's JSON answer as the bytes it
            // came in; a stream's last message, a legacy session's answer (rewritten
            // for its era) and a result given cache hints are parsed.
            let raw = last_send.is_none() && sc.session.is_none() && sc.cache_hint.is_none();
            // One timer, for whichever is due first: writing the task's record
            // WRITE_AHEAD before the threshold, the threshold itself (on time),
            // or a keep-alive. On a tie the threshold's comes first.
            let write_at = write_ahead_at(sc, task);
            let due = match (write_at, threshold_at) {
                (Some((w, spec, t)), _) if w <= keepalive_at => Due::WriteAhead(w, spec, t),
                (None, Some(t)) if t <= keepalive_at => Due::Threshold(t),
                _ => Due::KeepAlive(keepalive_at),
            };
            let timer = async {
                match due {
                    Due::Threshold(t) => sleep_until_precisely(Some(t)).await,
                    Due::WriteAhead(at, ..) | Due::KeepAlive(at) => {
                        tokio::time::sleep_until(at).await
                    }
                }
            };
            tokio::select! {
                biased;
                ev = Self::next_event(sc, raw) => {
                    if let Some(step) = self.event(sc, ev).await {
                        return step;
                    }
                }
                _ = timer => match due {
                    Due::WriteAhead(_, spec, t) => {
                        let rec = self.new_record(sc, spec, t);
                        sc.ahead = Some(Ahead::start(self.store(), rec));
                    }
                    Due::Threshold(_) => return Step::Threshold,
                    Due::KeepAlive(_) => return Step::KeepAlive,
                },
            }
        }
    }

    /// When the next keep-alive is due (see [`Race::step`]).
    fn keepalive_at(
        &self,
        sc: &SyncCall,
        last_send: Option<tokio::time::Instant>,
    ) -> tokio::time::Instant {
        match (last_send, sc.threshold_at) {
            (Some(t), _) => t + self.keepalive,
            (None, Some(t)) => t + self.keepalive,
            (None, None) => tokio::time::Instant::now() + self.keepalive,
        }
    }

    /// What an upstream event means for the synchronous phase: a step to act on,
    /// or `None` (nothing for the caller: wait on).
    async fn event(&self, sc: &mut SyncCall, ev: Option<Next>) -> Option<Step> {
        match ev {
            Some(Next::Raw(r)) => {
                sc.call.canceller.disarm();
                Some(Step::FinalRaw(r))
            }
            Some(Next::Event(CallEvent::Done(outcome))) => Some(self.final_answer(sc, outcome)),
            Some(Next::Event(CallEvent::Notification(n))) => relayed(sc, n).map(Step::Relay),
            Some(Next::Event(CallEvent::Input(r))) => {
                let reqs = gather_input(sc, r, self.write_failure).await;
                (!reqs.is_empty()).then_some(Step::Input(reqs))
            }
            None => {
                sc.call.canceller.disarm();
                Some(Step::Final(Err(Failure::Broken(sc.upstream.clone()))))
            }
        }
    }

    /// The upstream's answer, as the caller gets it: an upstream's own task id is
    /// noted, a cacheable result gets its hints, an error keeps its HTTP status.
    fn final_answer(&self, sc: &mut SyncCall, outcome: Outcome) -> Step {
        sc.call.canceller.disarm();
        if let Ok(r) = &outcome {
            self.upstream_tasks
                .note(r, &sc.upstream, &sc.owner, self.clock.now_ms());
        }
        let mut outcome = finalize_result(outcome);
        if let (Ok(Value::Object(r)), Some((ttl, scope))) = (&mut outcome, &sc.cache_hint) {
            r.entry("ttlMs").or_insert_with(|| json!(ttl));
            r.entry("cacheScope").or_insert_with(|| json!(scope));
        }
        Step::Final(outcome.map_err(Failure::Relayed))
    }

    /// Park a call whose upstream asked for input: the `InputRequiredResult`
    /// whose `requestState` resumes it.
    pub(super) fn park(
        &self,
        mut sc: SyncCall,
        task: Option<TaskSpec>,
        reqs: Vec<ServerRequest>,
    ) -> Value {
        // A parked call becomes a task only after the client's retry, with a record
        // of its own then: the one written ahead goes.
        sc.ahead = None;
        let mut waiting = HashMap::new();
        for r in reqs {
            let key = sc.input_keys.next(&r);
            waiting.insert(key, (r.as_input_request(), r));
        }
        self.park_waiting(Parked { sc, task, waiting })
    }

    /// Keep a call parked until the client's retry answers it, or `PARK_TTL`
    /// passes: the `InputRequiredResult` asking for what it waits on.
    pub(super) fn park_waiting(&self, p: Parked) -> Value {
        let park = uuid::Uuid::new_v4().to_string();
        let exp = self.clock().now_ms() + PARK_TTL.as_millis() as u64;
        let state = self.sealer().seal(&StateClaims {
            park: park.clone(),
            owner: p.sc.owner.clone(),
            request: p
                .sc
                .origin
                .as_ref()
                .map(|(_, r, _)| request_binding(r.method(), r.params()))
                .unwrap_or_default(),
            exp,
            issuer: String::new(),
        });
        let requests: Map<String, Value> = p
            .waiting
            .iter()
            .map(|(k, (entry, _))| (k.clone(), entry.clone()))
            .collect();
        tracing::info!(park = %park, requests = requests.len(), "upstream asked for input; waiting for the client's retry");
        self.parked.insert(park.clone(), std::sync::Mutex::new(p));
        let engine = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PARK_TTL).await;
            if engine.parked.remove(&park).is_some() {
                tracing::info!(%park, "nobody answered the input request in time; cancelled upstream");
            }
        });
        json!({"resultType": "input_required", "inputRequests": requests, "requestState": state})
    }

    /// The threshold passed: persist a task, hand the call to a background driver,
    /// and answer the caller: the `CreateTaskResult` (a client that declared the
    /// extension), the still-running tool result (a tool-level handle), or the
    /// caller's wait on the task (detach). `None` if the task could not be stored:
    /// the caller then keeps waiting synchronously, so nothing is lost.
    pub(super) async fn create_task(&self, sc: &mut SyncCall, spec: &TaskSpec) -> Option<Answer> {
        sc.threshold_at = None;
        if self.low_on_space(sc) {
            return None;
        }
        let rec = self.stored_record(sc, spec).await?;
        let control = self.register(&rec, spec).await;
        let answer = self.handle_result(&rec, spec.handle);
        let waiter = waiter(sc, spec.handle);
        tracing::info!(task.id = %rec.id, tool = %spec.tool, upstream = %sc.upstream, handle = ?spec.handle, "call became a task");
        let owner = self.hand_over(sc, &rec);
        let traced = self.task_span(&owner, &rec, spec, &sc.upstream);
        let id = rec.id.clone();
        self.spawn_driver(rec, owner, control, traced, &spec.tool);
        Some(match answer {
            Some(a) => Answer::Result(a),
            None => Detach::of(self).join(id, waiter, spec.policy.threshold),
        })
    }

    /// No handle once the disk is below the watermark, measured now (a statvfs):
    /// a disk can fill faster than the once-a-second watch sees. The record
    /// written ahead goes with it.
    fn low_on_space(&self, sc: &mut SyncCall) -> bool {
        if !self.disk().is_some_and(|d| d.low_now()) {
            return false;
        }
        drop(sc.ahead.take());
        tracing::warn!(
            "the task store is low on space at the threshold; the call stays synchronous"
        );
        true
    }

    /// The task's record, durable: the one written ahead (with the progress that
    /// came meanwhile), or one created now. `None` if the store refused it.
    async fn stored_record(&self, sc: &mut SyncCall, spec: &TaskSpec) -> Option<TaskRecord> {
        let ahead = match sc.ahead.take() {
            Some(a) => a.written().await,
            None => None,
        };
        if let Some(mut rec) = ahead {
            // Progress that came while the record was written ahead.
            if rec.status_message != sc.last_progress {
                rec.status_message = sc.last_progress.clone();
                if let Err(e) = self.store().put(&rec).await {
                    tracing::warn!(task.id = %rec.id, error = %e, "could not store the task's latest progress");
                }
            }
            return Some(rec);
        }
        let rec = self.new_record(sc, spec, tokio::time::Instant::now());
        if let Err(e) = self.store().create(&rec).await {
            tracing::error!(error = %e, "cannot store a new task; the call stays synchronous");
            return None;
        }
        Some(rec)
    }

    /// The task runs here from now on: it is reachable for control messages,
    /// counted, published, and remembered for a detached call's retry.
    async fn register(&self, rec: &TaskRecord, spec: &TaskSpec) -> ControlRx {
        let (control_tx, control_rx) = mailbox();
        self.running.insert(rec.id.clone(), control_tx);
        self.metrics().task_created();
        self.publish(rec);
        if let Some(key) = &spec.replay {
            Detach::of(self)
                .remember_call(key, rec, spec.policy.replay_window)
                .await;
        }
        control_rx
    }

    /// The result the caller is answered with; `None` for a caller that waits on
    /// the task (detach).
    fn handle_result(&self, rec: &TaskRecord, handle: Handle) -> Option<Value> {
        match handle {
            Handle::Extension => Some(create_task_result(rec)),
            Handle::Tool => {
                self.metrics().tool_handle();
                Some(still_running(rec, 1, None))
            }
            Handle::Join => {
                self.metrics().detached();
                None
            }
        }
    }

    /// What the background driver takes over from the call.
    fn hand_over(&self, sc: &mut SyncCall, rec: &TaskRecord) -> RunningCall {
        RunningCall {
            slot: sc.slot.take(),
            active: Some(self.gate().task_started(&rec.owner)),
            meter: sc.meter.take(),
            call: Some(std::mem::replace(&mut sc.call, UpstreamCall::finished())),
            backlog: std::mem::take(&mut sc.backlog),
            token: sc.token.clone(),
            caps: sc.caps,
            input_keys: std::mem::take(&mut sc.input_keys),
            origin: sc
                .origin
                .take()
                .map(|(up, req, ctx)| Origin::new(up, &req, ctx)),
        }
    }

    /// The task's own span, a child of the request that became it (its trace is
    /// the caller's, and a `tasks/get` with the same traceparent lands beside it).
    fn task_span(
        &self,
        owner: &RunningCall,
        rec: &TaskRecord,
        spec: &TaskSpec,
        upstream: &str,
    ) -> Span {
        let tool = &spec.tool;
        let hop = owner.origin.as_ref().and_then(|o| o.ctx.trace.as_ref());
        let mut traced = self.tracer().task_span(hop, || format!("task {tool}"));
        if traced.is_recording() {
            traced.set("tasklift.task.id", rec.id.clone());
            traced.set("gen_ai.tool.name", tool.to_string());
            traced.set("tasklift.upstream", upstream.to_string());
            traced.set("tasklift.handle", handle_name(spec.handle));
        }
        traced
    }

    /// Start the task's background driver, in the `task` span of its logs
    /// ([`TaskLogged`]).
    fn spawn_driver(
        &self,
        rec: TaskRecord,
        owner: RunningCall,
        control: ControlRx,
        traced: Span,
        tool: &str,
    ) {
        let drivers = Drivers::of(self);
        let (id, tool) = (rec.id.as_str().into(), tool.into());
        self.driver_tasks.spawn(TaskLogged {
            id,
            tool,
            driver: drivers.own(rec, owner, control, traced),
        });
    }
}

/// Who waits on the task, should the caller keep waiting: only a caller that
/// keeps waiting (detach) is learned from.
fn waiter(sc: &SyncCall, handle: Handle) -> Waiter {
    Waiter {
        principal: sc.owner.clone(),
        upstream: sc.upstream.clone(),
        peer: sc.session.clone(),
        caps: sc.caps,
        client: match (&sc.origin, handle) {
            (Some((_, req, ctx)), Handle::Join) => super::handles::client_key(req, ctx),
            _ => String::new(),
        },
    }
}

/// How a task's caller holds it (the `tasklift.handle` span attribute).
fn handle_name(h: Handle) -> &'static str {
    match h {
        Handle::Extension => "task",
        Handle::Tool => "tasklift_wait",
        Handle::Join => "detached",
    }
}

impl Race {
    /// The record of the task `sc` becomes at `at` (its threshold, or now).
    fn new_record(&self, sc: &SyncCall, spec: &TaskSpec, at: tokio::time::Instant) -> TaskRecord {
        let until = at.saturating_duration_since(tokio::time::Instant::now());
        let mut rec = TaskRecord::new(NewTask {
            id: uuid::Uuid::new_v4().to_string(),
            owner: sc.owner.clone(),
            upstream: sc.upstream.clone(),
            tool: spec.tool.clone(),
            created_at_ms: self.clock().now_ms() + until.as_millis() as u64,
            ttl_ms: spec.policy.ttl.as_millis() as u64,
            poll_interval_ms: spec.policy.poll_interval.as_millis() as u64,
        });
        rec.status_message = sc.last_progress.clone();
        rec
    }
}

/// What [`Race::step`]'s one timer is set for.
#[derive(Clone, Copy)]
enum Due<'a> {
    /// Writing the task's record (at, spec, threshold).
    WriteAhead(tokio::time::Instant, &'a TaskSpec, tokio::time::Instant),
    Threshold(tokio::time::Instant),
    KeepAlive(tokio::time::Instant),
}

/// When to write the task's record ahead of the threshold, with the spec it is
/// written from and the threshold; `None` once written, or with no threshold.
fn write_ahead_at<'a>(
    sc: &SyncCall,
    task: Option<&'a TaskSpec>,
) -> Option<(tokio::time::Instant, &'a TaskSpec, tokio::time::Instant)> {
    match (sc.threshold_at, task) {
        (Some(t), Some(spec)) if sc.ahead.is_none() => {
            Some((t.checked_sub(WRITE_AHEAD).unwrap_or(t), spec, t))
        }
        _ => None,
    }
}

/// A notification the caller is shown, if any: progress (remembered for the
/// task's first statusMessage) when the client asked for it, and log messages at
/// or above the level the request set.
fn relayed(sc: &mut SyncCall, n: Value) -> Option<Value> {
    if let Some(m) = progress_under(&n, &sc.token).map(progress_message) {
        sc.last_progress = m.or(sc.last_progress.take());
        return sc.relay_progress.then_some(n);
    }
    // Logs only for requests that set a level, and at or above it.
    let level = log_level(&n)?;
    let shown = sc
        .log_level
        .as_deref()
        .is_some_and(|min| level_rank(level) >= level_rank(Some(min)));
    shown.then_some(n)
}

/// The upstream's input request, with those that follow closely: a server asking
/// several at once sends them one after another, and they belong in the same
/// `InputRequiredResult`. Only those the caller may be shown are kept.
async fn gather_input(
    sc: &mut SyncCall,
    first: ServerRequest,
    write: WriteFailure,
) -> Vec<ServerRequest> {
    let mut reqs = Vec::new();
    admit_request(sc.caps, first, &mut reqs, write);
    while let Ok(Some(ev)) = tokio::time::timeout(INPUT_GATHER, sc.call.events.recv()).await {
        match ev {
            CallEvent::Input(r) => admit_request(sc.caps, r, &mut reqs, write),
            other => {
                sc.backlog.push_back(other);
                break;
            }
        }
    }
    reqs
}

/// Severity order of MCP log levels (RFC 5424); unknown levels rank lowest.
fn level_rank(level: Option<&str>) -> u8 {
    match level {
        Some("debug") => 1,
        Some("info") => 2,
        Some("notice") => 3,
        Some("warning") => 4,
        Some("error") => 5,
        Some("critical") => 6,
        Some("alert") => 7,
        Some("emergency") => 8,
        _ => 0,
    }
}

pin_project_lite::pin_project! {
    /// A task's driver, each poll of it in a `task` span (`task.id`, `tool`) for
    /// what it logs. The span is made per poll rather than held: a span held for
    /// the task's life cost about 500 bytes per running task (the subscriber's
    /// slot, its extensions, the formatted fields), while a running task's
    /// driver is polled a few times in its life (events, answers, the end).
    struct TaskLogged<F> {
        id: Box<str>,
        tool: Box<str>,
        #[pin]
        driver: F,
    }
}

impl<F: std::future::Future> std::future::Future for TaskLogged<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        let span = tracing::info_span!("task", task.id = %this.id, tool = %this.tool);
        let _in = span.enter();
        this.driver.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::TaskLogged;
    use crate::observe::CapturedLog as Lines;

    #[tokio::test]
    async fn what_a_driver_logs_names_its_task_on_every_poll() {
        let lines = Lines::default();
        let out = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || out.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let driver = TaskLogged {
            id: "t-1".into(),
            tool: "report".into(),
            driver: async move {
                tracing::info!("first poll");
                let _ = rx.await;
                tracing::info!("after a wait");
            },
        };
        let run = tokio::spawn(driver);
        tokio::task::yield_now().await;
        tracing::info!("outside");
        tx.send(()).unwrap();
        run.await.unwrap();
        let text = lines.text();
        let of = |m: &str| {
            text.lines()
                .find(|l| l.contains(m))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            of("first poll").contains("task{task.id=t-1 tool=report}"),
            "{text}"
        );
        assert!(
            of("after a wait").contains("task{task.id=t-1 tool=report}"),
            "{text}"
        );
        assert!(!of("outside").contains("task{"), "{text}");
    }
}
