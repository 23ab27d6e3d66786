//! What the engine answers, typed: a result, a failure, an upstream's result as
//! bytes, or a stream of events. Nothing here is JSON-RPC: the front door renders
//! an [`Answer`] for the caller's era with the request's id (`front/render.rs`),
//! and its error map (`front/errors.rs`) owns every error code and HTTP status,
//! including those of failures written into a task's record ([`WriteFailure`]).

use serde_json::Value;
use tokio::sync::mpsc;

use super::limits::LimitError;
use crate::store::StoreError;
use crate::upstream::{RawResult, RpcError, UpstreamError};

/// The engine's answer to one request.
#[derive(Debug)]
pub enum Answer {
    /// The request's result.
    Result(Value),
    /// The request failed.
    Failed(Failure),
    /// An upstream's plain result, as the bytes it came in (the front door writes
    /// the response around it).
    Raw(RawResult),
    /// The answer streams: events, the last of them [`Event::Final`]. Dropping the
    /// receiver (the client went away) cancels the work behind it, or, for a call
    /// that became a task, leaves the task running.
    Stream(mpsc::Receiver<Event>),
}

impl From<Result<Value, Failure>> for Answer {
    fn from(r: Result<Value, Failure>) -> Self {
        match r {
            Ok(v) => Answer::Result(v),
            Err(f) => Answer::Failed(f),
        }
    }
}

/// One event of a streamed answer.
#[derive(Debug)]
pub enum Event {
    /// A message an upstream or a client's session wrote (a notification, or a
    /// request to the client), passed on as it is.
    Message(Value),
    /// A notification of tasklift's own: its method and params.
    Notify(&'static str, Value),
    /// Nothing yet: a keep-alive.
    KeepAlive,
    /// The request's answer; the stream's last event.
    Final(Result<Value, Failure>),
}

/// Why a task method could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Unknown, or another caller's: the two are indistinguishable on purpose.
    #[error("Failed to retrieve task: Task not found")]
    NotFound,
    /// Finished, and past its TTL (the sweeper has not deleted it yet).
    #[error("Failed to retrieve task: Task has expired")]
    Expired,
    /// The store could not be read.
    #[error("tasklift could not read its task store: {0}")]
    Read(StoreError),
    /// The store refused a write.
    #[error("{0}")]
    Write(StoreError),
    /// Answers for a task another replica runs could not be handed on.
    #[error("tasklift could not pass the answers on: {0}")]
    Answers(StoreError),
    /// A limit refused it (polling faster than the task asks).
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// Why the engine could not answer with a result: every failure the engine
/// reports, typed. The front door's error map gives each its code and status.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// An error answer from a peer (the upstream, or a client asked on a task's
    /// behalf), passed on as it came, with the HTTP status it came with.
    #[error("{}", .0.message)]
    Relayed(RpcError),
    /// The upstream could not be reached.
    #[error(transparent)]
    Unreachable(UpstreamError),
    /// The upstream's stream ended without an answer.
    #[error("upstream {0} closed the connection before answering")]
    Broken(String),
    /// A limit refused the call.
    #[error(transparent)]
    Limit(LimitError),
    /// A stored task could not be read or changed.
    #[error(transparent)]
    Task(TaskError),
    /// What was asked needs the tasks extension, which the caller did not declare:
    /// the thing asked for (`tool "x"`, a method).
    #[error("the caller did not declare the tasks extension, which {0} needs")]
    NeedsExtension(String),
    /// A `requestState` tasklift cannot resume from: why.
    #[error("Invalid requestState: {0}")]
    BadState(String),
    /// An upstream's request the caller may not be shown: the capability it would
    /// need (`None`: no client is asked this).
    #[error("{method} cannot be asked of this client")]
    NotAskable {
        /// The request's method.
        method: String,
        /// The client capability it needs.
        capability: Option<&'static str>,
    },
    /// The client went away while it was asked for input.
    #[error("the client went away")]
    ClientGone,
    /// The client's session ended before it answered.
    #[error("the client's session ended before it answered")]
    SessionEnded,
    /// The call's task was cancelled: why.
    #[error("the call was cancelled: {0}")]
    Cancelled(String),
    /// tasklift shut down while the task ran.
    #[error("tasklift shut down while this task was running; the call was cancelled upstream")]
    Shutdown,
    /// The task reached its TTL.
    #[error("the task reached its TTL of {ttl_ms} ms")]
    Expired {
        /// The upstream it called.
        upstream: String,
        /// Its TTL.
        ttl_ms: u64,
        /// It was waiting for the client's input, not for the upstream.
        waiting_input: bool,
    },
    /// The task's outcome could not be stored: why.
    #[error("tasklift could not store this task's outcome: {0}")]
    Unstored(String),
    /// tasklift restarted while the task ran.
    #[error("tasklift restarted while this task was running; the upstream outcome is unknown")]
    Restarted,
    /// The replica running the task was lost.
    #[error("the tasklift replica running this task was lost (its lease expired); the upstream outcome is unknown")]
    LostReplica,
    /// A task's error, as its record stores it.
    #[error("the task failed")]
    Stored(Value),
}

/// A failure as a task's record (or an upstream's request answered with it)
/// keeps it: the message that becomes the status message, and the error object.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The error's message.
    pub message: String,
    /// The error object, as `tasks/get` shows it.
    pub error: Value,
}

/// How a failure is written where it outlives the request: the front door's
/// error map (`front::errors::written`), given to the engine when it is built,
/// so codes are chosen in one place.
pub type WriteFailure = fn(&Failure) -> Written;
