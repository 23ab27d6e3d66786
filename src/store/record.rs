//! One task as stored, and the only code that writes its status.
//!
//! `status` is private to this file, so the compiler holds the lifecycle: a record
//! starts `working` ([`TaskRecord::new`]), moves between `working` and
//! `input_required` ([`TaskRecord::ask`], [`TaskRecord::resume`]), and settles once
//! ([`TaskRecord::settle`]): every transition out of a terminal status is refused.
//! A store rebuilding a record from its own columns names the status it stored
//! ([`TaskRecord::restored`]). The task engine decides when a task moves; this
//! file decides which moves exist.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The upstream call is running.
    Working,
    /// The upstream call waits for client input.
    InputRequired,
    /// The call returned a result (possibly `isError: true`).
    Completed,
    /// The call ended in a JSON-RPC error.
    Failed,
    /// The call was cancelled.
    Cancelled,
}

impl TaskStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// Whether the status is final.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    /// The tool result (status `completed`).
    Result(Value),
    /// The JSON-RPC error object (status `failed`).
    Error(Value),
}

/// One task, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Unguessable id (UUID v4, 122 random bits).
    pub id: String,
    /// Keyed hash of the owning principal; never a raw credential.
    pub owner: String,
    /// Upstream the call went to.
    pub upstream: String,
    /// Tool name.
    pub tool: String,
    /// Current status: written only by the transitions below.
    status: TaskStatus,
    /// Human-readable state (progress, failure reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Creation time, unix milliseconds.
    pub created_at_ms: u64,
    /// Last change, unix milliseconds.
    pub updated_at_ms: u64,
    /// TTL from creation.
    pub ttl_ms: u64,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
    /// When the sweeper deletes it (creation + TTL, later if failed at its TTL).
    pub expires_at_ms: u64,
    /// Outstanding input requests, keyed uniquely for the task's lifetime.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_requests: Map<String, Value>,
    /// The final result or error, once terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<TaskOutcome>,
}

/// What a new task starts with; everything else follows from it.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Unguessable id (UUID v4).
    pub id: String,
    /// Keyed hash of the owning principal.
    pub owner: String,
    /// Upstream the call went to.
    pub upstream: String,
    /// Tool name.
    pub tool: String,
    /// Creation time, unix milliseconds.
    pub created_at_ms: u64,
    /// TTL from creation.
    pub ttl_ms: u64,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
}

/// How a task ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Settle {
    /// The tool's result (possibly `isError: true`); the status message stays.
    Completed(Value),
    /// A JSON-RPC error: its message becomes the status message.
    Failed {
        /// The error's message.
        message: String,
        /// The JSON-RPC error object.
        error: Value,
    },
    /// Cancelled, with why.
    Cancelled(String),
}

/// A transition refused because the task already ended: a terminal task never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the task is already {0}")]
pub struct Settled(pub &'static str);

impl TaskRecord {
    /// A new `working` task, expiring at creation plus its TTL.
    pub fn new(t: NewTask) -> Self {
        Self {
            id: t.id,
            owner: t.owner,
            upstream: t.upstream,
            tool: t.tool,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: t.created_at_ms,
            updated_at_ms: t.created_at_ms,
            ttl_ms: t.ttl_ms,
            poll_interval_ms: t.poll_interval_ms,
            expires_at_ms: t.created_at_ms + t.ttl_ms,
            input_requests: Map::new(),
            outcome: None,
        }
    }

    /// The record a store kept, with the status it kept (stores only).
    pub fn restored(mut self, status: TaskStatus) -> Self {
        self.status = status;
        self
    }

    /// Its status.
    pub fn status(&self) -> TaskStatus {
        self.status
    }

    fn unsettled(&self) -> Result<(), Settled> {
        if self.status.is_terminal() {
            return Err(Settled(self.status.as_str()));
        }
        Ok(())
    }

    /// The call waits for the client's answers (its `input_requests`).
    pub fn ask(&mut self) -> Result<(), Settled> {
        self.unsettled()?;
        self.status = TaskStatus::InputRequired;
        Ok(())
    }

    /// Every input request was answered: the call runs again.
    pub fn resume(&mut self) -> Result<(), Settled> {
        self.unsettled()?;
        self.status = TaskStatus::Working;
        Ok(())
    }

    /// End the task, once.
    pub fn settle(&mut self, how: Settle) -> Result<(), Settled> {
        self.unsettled()?;
        match how {
            Settle::Completed(result) => {
                self.status = TaskStatus::Completed;
                self.outcome = Some(TaskOutcome::Result(result));
            }
            Settle::Failed { message, error } => {
                self.status = TaskStatus::Failed;
                self.status_message = Some(message);
                self.outcome = Some(TaskOutcome::Error(error));
            }
            Settle::Cancelled(why) => {
                self.status = TaskStatus::Cancelled;
                self.status_message = Some(why);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> TaskRecord {
        TaskRecord::new(NewTask {
            id: "t".into(),
            owner: "o".into(),
            upstream: "u".into(),
            tool: "slow".into(),
            created_at_ms: 1000,
            ttl_ms: 500,
            poll_interval_ms: 100,
        })
    }

    #[test]
    fn a_task_moves_between_working_and_input_required_then_settles_once() {
        let mut t = task();
        assert_eq!((t.status(), t.expires_at_ms), (TaskStatus::Working, 1500));
        t.ask().unwrap();
        assert_eq!(t.status(), TaskStatus::InputRequired);
        t.resume().unwrap();
        t.settle(Settle::Completed(serde_json::json!({"content": []})))
            .unwrap();
        assert_eq!(t.status(), TaskStatus::Completed);
        let before = t.clone();
        assert_eq!(
            t.settle(Settle::Cancelled("late".into())),
            Err(Settled("completed"))
        );
        assert_eq!(t.ask(), Err(Settled("completed")));
        assert_eq!(t.resume(), Err(Settled("completed")));
        assert_eq!(t, before, "a refused transition changes nothing");
    }

    #[test]
    fn failing_keeps_the_error_and_its_message() {
        let mut t = task();
        t.settle(Settle::Failed {
            message: "boom".into(),
            error: serde_json::json!({"code": -32603, "message": "boom"}),
        })
        .unwrap();
        assert_eq!(t.status_message.as_deref(), Some("boom"));
        assert!(matches!(t.outcome, Some(TaskOutcome::Error(_))));
        assert!(t.settle(Settle::Completed(Value::Null)).is_err());
    }
}
