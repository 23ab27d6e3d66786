//! A call's state as it passes from one phase to the next: what the threshold race
//! holds ([`SyncCall`]), a call parked for the client's answers ([`Parked`]), what
//! the background driver takes over ([`RunningCall`]), the messages that reach a
//! running task ([`Control`]), and the rules every phase applies to the upstream's
//! messages. The phases (race.rs, driver.rs) import this; it imports none of them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::answer::WriteFailure;
use super::input::{check_allowed, InputKeys};
use crate::config::ToolPolicy;
use crate::store::{StoreError, TaskRecord, TaskStore};
use crate::upstream::{
    CallContext, CallEvent, ClientRequest, Outcome, ServerRequest, Upstream, UpstreamCall,
};
use tasklift_protocol::mcp;
use tasklift_protocol::mcp::Declared;

/// Why a running task is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    /// `tasks/cancel`.
    Cancelled,
    /// It ran past its TTL.
    Expired,
    /// tasklift is shutting down and the grace period is over.
    Shutdown,
    /// Another replica settled the task (shared store): stop the call, write nothing.
    Superseded,
}

/// What a caller is answered when its call becomes a task. A client that did
/// not declare the extension never gets a `CreateTaskResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Handle {
    /// The client declared the extension: a `CreateTaskResult`.
    Extension,
    /// A still-running `CallToolResult` naming `tasklift_wait` (tool-level handle).
    Tool,
    /// The caller keeps waiting, on the task (detach): it may go away.
    Join,
}

/// How a call may become a task.
pub(super) struct TaskSpec {
    /// Tool name.
    pub tool: String,
    /// The tool's rules.
    pub policy: ToolPolicy,
    /// What the caller is answered when the task is created.
    pub handle: Handle,
    /// The call's replay key (`on_disconnect = "detach"`): the task is indexed under it.
    pub replay: Option<String>,
}

/// A request in its synchronous phase.
pub(super) struct SyncCall {
    /// The upstream's call slot, when calls are limited (held until the call ends).
    pub slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Counts the upstream call in flight and times it (for `/metrics`).
    pub meter: Option<crate::observe::metrics::CallMeter>,
    /// The upstream call.
    pub call: UpstreamCall,
    /// Whether the client asked for progress (it is then relayed).
    pub relay_progress: bool,
    /// The token progress arrives under (the client's or tasklift's own; null if none).
    pub token: Value,
    /// `ttlMs` and `cacheScope` to add to a cacheable result that lacks them.
    pub cache_hint: Option<(u64, String)>,
    /// When the threshold passes, if a task may be created.
    pub threshold_at: Option<tokio::time::Instant>,
    /// The task's record, being written ahead of the threshold (see [`Ahead`]).
    pub ahead: Option<Ahead>,
    /// Latest progress, for the task's first statusMessage.
    pub last_progress: Option<String>,
    /// Upstream name (for errors).
    pub upstream: String,
    /// What the request's clientCapabilities declare (which input requests it may be shown).
    pub caps: Declared,
    /// The request's `_meta` logLevel: log messages are relayed only when set.
    pub log_level: Option<String>,
    /// The caller's principal.
    pub owner: String,
    /// Input request keys handed out so far (keys stay unique for the call's life).
    pub input_keys: InputKeys,
    /// Events read ahead while collecting input requests.
    pub backlog: VecDeque<CallEvent>,
    /// A legacy client's session: the upstream's requests go to the client as
    /// requests on the response stream (instead of an MRTR `InputRequiredResult`).
    pub session: Option<Arc<crate::upstream::ClientPeer>>,
    /// The request and where it went, so a task can retry it with MRTR answers.
    pub origin: Option<(Arc<dyn Upstream>, ClientRequest, CallContext)>,
}

/// How long before the threshold a call's task record is written: the durable
/// create (a sled flush, or a PostgreSQL commit) is then done by the time the
/// threshold passes, and the handle leaves without waiting on the store. Calls
/// that end within this window pay a create and a delete, off their path.
pub(super) const WRITE_AHEAD: std::time::Duration = std::time::Duration::from_millis(10);

/// A task record written durably ahead of the threshold, before anyone holds its
/// id. At the threshold it becomes the task ([`Ahead::written`]); dropped unused
/// (the call ended first, parked for input, or its client left), it is deleted.
/// A crash in between leaves a record no client knows, which the restart fails
/// and expiry removes.
pub(super) struct Ahead {
    rec: TaskRecord,
    write: Option<tokio::task::JoinHandle<Result<(), StoreError>>>,
    store: Arc<dyn TaskStore>,
}

impl Ahead {
    /// Start writing `rec`.
    pub(super) fn start(store: &Arc<dyn TaskStore>, rec: TaskRecord) -> Self {
        let (s, r) = (store.clone(), rec.clone());
        let write = tokio::spawn(async move { s.create(&r).await });
        Self {
            rec,
            write: Some(write),
            store: store.clone(),
        }
    }

    /// The record once it is durable; `None` if the store refused it (the caller
    /// then creates the task the usual way, and reports that failure).
    pub(super) async fn written(mut self) -> Option<TaskRecord> {
        let write = self.write.take()?;
        match write.await {
            Ok(Ok(())) => Some(self.rec.clone()),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not write a task record ahead of the threshold");
                None
            }
            Err(_) => None,
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        let Some(write) = self.write.take() else {
            return;
        };
        // Not on a runtime any more (tasklift is exiting): the restart fails it.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, id) = (self.store.clone(), self.rec.id.clone());
        rt.spawn(async move {
            if let Ok(Ok(())) = write.await {
                if let Err(e) = store.delete(&id).await {
                    tracing::warn!(task.id = %id, error = %e, "could not delete an unused task record");
                }
            }
        });
    }
}

/// A call waiting for the client's retry with answers.
pub(super) struct Parked {
    /// The call, still running upstream.
    pub sc: SyncCall,
    /// How it may become a task.
    pub task: Option<TaskSpec>,
    /// Outstanding requests by key, with their `inputRequests` entry.
    pub waiting: HashMap<String, (Value, ServerRequest)>,
}

/// What the background driver takes over from the threshold race.
pub(super) struct RunningCall {
    /// The running upstream call (`None` between MRTR rounds).
    pub call: Option<UpstreamCall>,
    /// Events already read from it.
    pub backlog: VecDeque<CallEvent>,
    /// Progress token of the call.
    pub token: Value,
    /// What the client's capabilities declared at creation (which requests it may be shown).
    pub caps: Declared,
    /// The upstream's call slot, when calls are limited.
    pub slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Counts the task against its principal's limit until it settles.
    pub active: Option<super::limits::ActiveTask>,
    /// Counts the upstream call in flight until the task settles.
    pub meter: Option<crate::observe::metrics::CallMeter>,
    /// Input keys handed out so far.
    pub input_keys: super::input::InputKeys,
    /// The original request, for retrying a modern upstream with answers.
    pub origin: Option<Origin>,
}

/// A running task's original request and where it went, kept to retry it upstream
/// with MRTR answers. The request is kept as its JSON text: parsed, every object
/// in it (params, arguments, `_meta`, clientInfo, capabilities, ...) is a map of
/// its own, about ten times the text's size, held for the task's whole life.
pub(super) struct Origin {
    /// The upstream the call went to.
    pub upstream: Arc<dyn Upstream>,
    /// The request, serialized (without its id).
    request: Box<[u8]>,
    /// Who called, and what goes upstream with the call.
    pub ctx: CallContext,
}

impl Origin {
    pub(super) fn new(upstream: Arc<dyn Upstream>, req: &ClientRequest, ctx: CallContext) -> Self {
        Self {
            upstream,
            request: req.to_bytes(),
            ctx,
        }
    }

    /// The request again.
    pub(super) fn request(&self) -> ClientRequest {
        ClientRequest::from_bytes(&self.request)
    }
}

impl RunningCall {
    pub(super) async fn next(&mut self) -> Option<CallEvent> {
        if let Some(ev) = self.backlog.pop_front() {
            return Some(ev);
        }
        match &mut self.call {
            Some(c) => c.events.recv().await,
            None => std::future::pending().await,
        }
    }
}

/// Results relayed to modern clients carry `resultType`; a 2025-11-25 server's
/// `related-task` metadata does not belong on them.
pub(super) fn finalize_result(outcome: Outcome) -> Outcome {
    outcome.map(|mut r| {
        mcp::mark_complete(&mut r);
        if let Some(Value::Object(meta)) = r.get_mut("_meta") {
            meta.remove("io.modelcontextprotocol/related-task");
        }
        r
    })
}

/// Keep a request the caller may be shown; answer the others upstream with an
/// error, as `write` writes it.
pub(super) fn admit_request(
    caps: Declared,
    r: ServerRequest,
    out: &mut Vec<ServerRequest>,
    write: WriteFailure,
) {
    if r.method == "ping" {
        r.answer(Ok(json!({})));
        return;
    }
    match check_allowed(caps, &r.method) {
        Ok(()) => out.push(r),
        Err(e) => {
            tracing::info!(method = %r.method, "the caller cannot be asked this; answering the upstream with an error");
            r.refuse(&write(&e).error);
        }
    }
}

pub(super) async fn sleep_until_opt(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// How long before a threshold its precise timer takes over.
const PRECISE_LAST: std::time::Duration = std::time::Duration::from_millis(3);

/// Sleep until `t` (forever for `None`), on time. tokio's timer fires on a 1 ms
/// wheel, a deadline rounded up to the next tick and measured from a truncated
/// now, so it fires 0-2 ms late (the median threshold fired 1.4 ms late in
/// tasklift-bench). The last few milliseconds are waited on a timerfd beside it,
/// whichever fires first: on time in real use, and tokio's own under a paused
/// test clock.
pub(super) async fn sleep_until_precisely(t: Option<tokio::time::Instant>) {
    let Some(t) = t else {
        return std::future::pending().await;
    };
    if let Some(early) = t.checked_sub(PRECISE_LAST) {
        tokio::time::sleep_until(early).await;
    }
    let coarse = tokio::time::sleep_until(t);
    match precise(t.saturating_duration_since(tokio::time::Instant::now())) {
        Some(fine) => {
            tokio::select! {
                _ = coarse => {}
                _ = fine => {}
            }
        }
        None => coarse.await,
    }
}

/// A timer that fires `left` from now, to the microsecond; `None` if there is
/// nothing to wait for or the system will not give one (tokio's then fires).
#[cfg(target_os = "linux")]
fn precise(left: std::time::Duration) -> Option<impl std::future::Future<Output = ()>> {
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    if left.is_zero() {
        return None;
    }
    let fd = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )
    .ok()?;
    fd.set(Expiration::OneShot(left.into()), TimerSetTimeFlags::empty())
        .ok()?;
    // tokio deprecates its safe constructors because a mere `AsRawFd` may close
    // its descriptor while registered; an `OwnedFd` moved into the `AsyncFd` is
    // closed only when it is dropped, after being deregistered, which is the
    // condition its `unsafe fn register` states.
    #[allow(deprecated)]
    let fd = tokio::io::unix::AsyncFd::new(std::os::fd::OwnedFd::from(fd)).ok()?;
    Some(async move {
        let _ = fd.readable().await;
    })
}

#[cfg(not(target_os = "linux"))]
fn precise(_: std::time::Duration) -> Option<std::future::Pending<()>> {
    None
}

impl UpstreamCall {
    /// A placeholder for a call whose ownership moved elsewhere.
    pub(super) fn finished() -> Self {
        let (_tx, rx) = mpsc::channel(1);
        UpstreamCall {
            events: rx.into(),
            canceller: crate::upstream::Canceller::none(),
        }
    }
}
