//! One call onto a child: written with a progress token of tasklift's, and sent
//! to the next child when it never reached a live one. A child killed a moment
//! ago (`kill -9`, the OOM killer) still looks alive until its exit is reaped:
//! a call written in between lands in a dead pipe and would fail, although the
//! child never saw it. Such a call, one whose child exited within
//! `UNSEEN_WINDOW` of its writing without a word about it, is written to the
//! replacement, once; a call the child answered anything for, or that ran
//! longer, fails naming the exit, as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{cancelled_notification, Conn, Pool};
use crate::upstream::{wire_message, CallEvent, Canceller, ServerRequest, UpstreamCall};
use tasklift_protocol::jsonrpc::{Request, RpcError, UPSTREAM_ERROR};
use tasklift_protocol::mcp;

/// A call whose child exited this soon after it was written, without saying
/// anything about it, never reached a live child.
const UNSEEN_WINDOW: Duration = Duration::from_millis(250);

/// A call about an upstream task, to the child that created the task.
pub(super) async fn to_home(
    pool: &Pool,
    req: &Request,
    caller: &str,
    task: Option<&str>,
    conn: Arc<Conn>,
) -> Result<UpstreamCall, crate::upstream::UpstreamError> {
    let id = conn
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let asks = mcp::may_ask(&req.method);
    let events = match write(req, caller, asks, task, &conn, id).await {
        Ok(ev) => ev,
        Err(why) => return Ok(failed(pool, &why)),
    };
    Ok(UpstreamCall {
        events: events.into(),
        canceller: canceller(Arc::new(Mutex::new((conn, id)))),
    })
}

/// A call to whichever child the pool picks, sent again to the next child if it
/// never reached a live one.
pub(super) async fn to_pool(
    pool: &Arc<Pool>,
    req: &Request,
    caller: String,
    asks: bool,
    task: Option<&str>,
) -> Result<UpstreamCall, crate::upstream::UpstreamError> {
    let mut resent = false;
    let (conn, id, events) = loop {
        let (conn, id) = match pool.pick(asks).await {
            Ok(picked) => picked,
            Err(e) => return Ok(UpstreamCall::failed(e)),
        };
        let parked = if asks { conn.take_parked() } else { Vec::new() };
        if !parked.is_empty() {
            return Ok(after_answers(pool, req, caller, task, conn, id, parked));
        }
        match write(req, &caller, asks, task, &conn, id).await {
            Ok(events) => break (conn, id, events),
            // Its stdin was closed: the child has exited.
            Err(why) if !resent => {
                tracing::info!(upstream = %pool.name(), reason = %why,
                    "a call did not reach the child (it had just exited); sending it to the next one");
                resent = true;
            }
            Err(why) => return Ok(failed(pool, &why)),
        }
    };
    let current = Arc::new(Mutex::new((conn, id)));
    let (tx, rx) = mpsc::channel(64);
    let relay = Relay {
        pool: pool.clone(),
        req: req.clone(),
        caller,
        asks,
        task: task.map(str::to_string),
        current: current.clone(),
        written: Instant::now(),
        resent,
    };
    tokio::spawn(relay.run(events, tx));
    Ok(UpstreamCall {
        events: rx.into(),
        canceller: canceller(current),
    })
}

/// A call to a child that asked its caller something before the call (its roots,
/// at start): the call carries those questions to the client first, and is
/// written once they are answered (or dropped unwritten if it ends before).
fn after_answers(
    pool: &Arc<Pool>,
    req: &Request,
    caller: String,
    task: Option<&str>,
    conn: Arc<Conn>,
    id: u64,
    parked: Vec<ServerRequest>,
) -> UpstreamCall {
    let (tx, rx) = mpsc::channel(64);
    let current = Arc::new(Mutex::new((conn.clone(), id)));
    let cancelled = Arc::new(AtomicBool::new(false));
    let relay = Relay {
        pool: pool.clone(),
        req: req.clone(),
        caller,
        asks: true,
        task: task.map(str::to_string),
        current: current.clone(),
        written: Instant::now(),
        resent: false,
    };
    tokio::spawn(relay.after_answers(parked, conn, id, cancelled.clone(), tx));
    let forget = canceller(current);
    UpstreamCall {
        events: rx.into(),
        canceller: Canceller::on_cancel(Box::new(move || {
            cancelled.store(true, Ordering::Relaxed);
            let mut forget = forget;
            forget.cancel();
        })),
    }
}

fn failed_error(pool: &Pool, why: &str) -> RpcError {
    RpcError::new(UPSTREAM_ERROR, format!("upstream {}: {why}", pool.name()))
}

fn failed(pool: &Pool, why: &str) -> UpstreamCall {
    UpstreamCall::failed(failed_error(pool, why))
}

/// Cancelling forgets the call on the child that has it now, and tells that child.
fn canceller(current: Arc<Mutex<(Arc<Conn>, u64)>>) -> Canceller {
    Canceller::on_cancel(Box::new(move || {
        let (conn, id) = current.lock().expect("current child").clone();
        if conn.forget(id) {
            let _ = conn
                .stdin
                .try_send(cancelled_notification(&json!(id)).to_string());
        }
    }))
}

/// Forwards a call's events, and writes it to the next child when its own exited
/// before it saw the call.
struct Relay {
    pool: Arc<Pool>,
    req: Request,
    caller: String,
    asks: bool,
    task: Option<String>,
    current: Arc<Mutex<(Arc<Conn>, u64)>>,
    written: Instant,
    resent: bool,
}

impl Relay {
    async fn run(mut self, mut events: mpsc::Receiver<CallEvent>, out: mpsc::Sender<CallEvent>) {
        let mut heard = false;
        while let Some(ev) = events.recv().await {
            if matches!(ev, CallEvent::Done(Err(_))) && !heard && !self.resent {
                let conn = self.current.lock().expect("current child").0.clone();
                let exited = conn.closed.load(std::sync::atomic::Ordering::Relaxed);
                if exited && self.written.elapsed() < UNSEEN_WINDOW {
                    self.resent = true;
                    if let Some(next) = self.again().await {
                        events = next;
                        continue;
                    }
                }
            }
            heard = true;
            if out.send(ev).await.is_err() {
                return;
            }
        }
    }

    /// Carry the child's `parked` questions to the client, wait for the answers,
    /// then write call `id` to `conn` and relay it; forget the call if it ends
    /// (`stop`: it was cancelled) before it is written.
    async fn after_answers(
        mut self,
        parked: Vec<ServerRequest>,
        conn: Arc<Conn>,
        id: u64,
        stop: Arc<AtomicBool>,
        tx: mpsc::Sender<CallEvent>,
    ) {
        let answered = match ask_parked(parked, &tx).await {
            Some(answered) => answered,
            None => {
                conn.forget(id);
                return;
            }
        };
        if !await_answers(answered, &tx).await || stop.load(Ordering::Relaxed) {
            conn.forget(id);
            return;
        }
        let events = match write(
            &self.req,
            &self.caller,
            true,
            self.task.as_deref(),
            &conn,
            id,
        )
        .await
        {
            Ok(events) => events,
            Err(why) => {
                let _ = tx
                    .send(CallEvent::Done(Err(failed_error(&self.pool, &why))))
                    .await;
                return;
            }
        };
        self.written = Instant::now();
        self.run(events, tx).await;
    }

    /// Write the call to the next child: its events, if it took them.
    async fn again(&mut self) -> Option<mpsc::Receiver<CallEvent>> {
        let (conn, id) = self.pool.pick(self.asks).await.ok()?;
        tracing::info!(upstream = %self.pool.name(),
            "the child exited right after a call was written to it, before it said anything about it; sending the call to the next child");
        let events = write(
            &self.req,
            &self.caller,
            self.asks,
            self.task.as_deref(),
            &conn,
            id,
        )
        .await
        .ok()?;
        *self.current.lock().expect("current child") = (conn, id);
        self.written = Instant::now();
        Some(events)
    }
}

/// Send the `parked` questions as the call's input requests: a receiver for each
/// one's answer, or `None` when the call was dropped.
async fn ask_parked(
    parked: Vec<ServerRequest>,
    tx: &mpsc::Sender<CallEvent>,
) -> Option<Vec<oneshot::Receiver<()>>> {
    let mut answered = Vec::new();
    for q in parked {
        let (done, wait) = oneshot::channel::<()>();
        answered.push(wait);
        let q = q.then(move || {
            let _ = done.send(());
        });
        if tx.send(CallEvent::Input(q)).await.is_err() {
            return None;
        }
    }
    Some(answered)
}

/// Wait for every question to be answered: `false` when the call was dropped first.
async fn await_answers(answered: Vec<oneshot::Receiver<()>>, tx: &mpsc::Sender<CallEvent>) -> bool {
    for wait in answered {
        tokio::select! {
            _ = wait => {}
            _ = tx.closed() => return false,
        }
    }
    true
}

/// Write call `id` of `caller` to `conn`: its events, or why its line did not
/// reach the child.
async fn write(
    req: &Request,
    caller: &str,
    asks: bool,
    task: Option<&str>,
    conn: &Arc<Conn>,
    id: u64,
) -> Result<mpsc::Receiver<CallEvent>, String> {
    // Until the call is written and its canceller armed, dropping this
    // future must not leave it counted on the child.
    let mut unwritten = Unwritten(Some((conn.clone(), id)));
    if let Some(t) = task {
        let last = matches!(req.method.as_str(), "tasks/result" | "tasks/cancel");
        conn.task_calls.insert(id, (t.to_string(), last));
    }
    let idv = json!(id);
    // Progress goes under a token of tasklift's, unique on this child.
    let client_token = req.meta().and_then(|m| m.get(mcp::META_PROGRESS_TOKEN));
    let (msg, token) = match client_token {
        Some(t) => {
            conn.client_tokens.insert(id, t.clone());
            let mine = json!(format!("tasklift-{id}"));
            let mut wire = req.clone();
            mcp::meta_mut(&mut wire.params).insert(mcp::META_PROGRESS_TOKEN.into(), mine.clone());
            (
                wire_message(&wire, conn.era(), Some(&idv)),
                Some(mine.to_string()),
            )
        }
        None => (wire_message(req, conn.era(), Some(&idv)), None),
    };
    let events = conn.send(msg, id, token, caller, asks).await?;
    unwritten.0 = None;
    Ok(events)
}

/// A call picked for a child but not yet written to it: forgotten if dropped.
struct Unwritten(Option<(Arc<Conn>, u64)>);

impl Drop for Unwritten {
    fn drop(&mut self) {
        if let Some((conn, id)) = self.0.take() {
            conn.forget(id);
        }
    }
}
