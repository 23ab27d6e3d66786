//! What every part of the engine shares ([`Core`]): the store, the limits, the
//! clock, the counters, the tracer, and the tables of calls and tasks in flight
//! here. The parts ([`part!`]) are cheap handles on it, each a type of its own in
//! the file that owns its behaviour, reached as `Drivers::of(self)`; `Engine`
//! (engine.rs) is the façade over them. This file imports none of them.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::broadcast;

use super::answer::{Failure, WriteFailure, Written};
use super::control::ControlTx;
use super::input::StateSealer;
use super::phases::Parked;
use super::upstream_tasks::UpstreamTasks;
use super::Clock;
use crate::store::{Settle, TaskRecord, TaskStore};

/// Tasks settling at once, at most. Settling (the final write, its
/// announcements) takes a future of about 5 KB, which exists only then; when a
/// hundred thousand calls are answered together (a batch job's), unbounded it
/// took 0.5 GB more at that moment, kept by the allocator after. The store
/// writes one batch at a time anyway, so more at once would not end them sooner.
pub(super) const SETTLING: usize = 4096;

/// The engine's shared state.
pub(super) struct Core {
    /// Durable records.
    pub(super) store: Arc<dyn TaskStore>,
    /// Tasks whose upstream call is still running here, with the way to reach their owner.
    pub(super) running: DashMap<String, ControlTx>,
    /// Every background driver this engine spawned, so shutdown waits for them.
    pub(super) driver_tasks: tokio_util::task::TaskTracker,
    /// Turns to settle: at most [`SETTLING`] tasks write their end at once.
    pub(super) settling: tokio::sync::Semaphore,
    /// Calls parked until the client retries with answers (MRTR), by park id.
    pub(super) parked: DashMap<String, std::sync::Mutex<Parked>>,
    /// Seals the `requestState` of parked calls.
    pub(super) sealer: StateSealer,
    /// Every task change, for `subscriptions/listen` streams.
    pub(super) changes: broadcast::Sender<TaskRecord>,
    /// Turns true at shutdown: listen streams end gracefully.
    pub(super) closing: tokio::sync::watch::Sender<bool>,
    /// Task ids created by an upstream itself (passed through untouched).
    pub(super) upstream_tasks: UpstreamTasks,
    /// Time source.
    pub(super) clock: Clock,
    /// How long a task failed at its TTL stays readable.
    pub(super) expired_grace: Duration,
    /// Interval between SSE keep-alives.
    pub(super) keepalive: Duration,
    /// Counters for `/metrics`.
    pub(super) metrics: Arc<crate::observe::metrics::Metrics>,
    /// tasklift's spans (off unless traces are exported).
    pub(super) tracer: crate::observe::spans::Tracer,
    /// Limits on calls, tasks and results.
    pub(super) gate: super::limits::Gate,
    /// Free space for the embedded store, when it is watched.
    pub(super) disk: Option<Arc<crate::store::space::DiskSpace>>,
    /// The longest one `tasklift_wait` blocks.
    pub(super) max_wait: Duration,
    /// How long each client waits, learned from its waits.
    pub(super) patience: super::patience::Patience,
    /// How a failure is written into a task's record (the front door's error map).
    pub(super) write_failure: WriteFailure,
}

impl Core {
    /// Seals `requestState`.
    pub(super) fn sealer(&self) -> &StateSealer {
        &self.sealer
    }

    /// The limits and their counts.
    pub(super) fn gate(&self) -> &super::limits::Gate {
        &self.gate
    }

    /// The counters behind `/metrics`.
    pub(super) fn metrics(&self) -> &Arc<crate::observe::metrics::Metrics> {
        &self.metrics
    }

    /// tasklift's spans.
    pub(super) fn tracer(&self) -> &crate::observe::spans::Tracer {
        &self.tracer
    }

    /// The store.
    pub(super) fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// The clock.
    pub(super) fn clock(&self) -> Clock {
        self.clock
    }

    /// A failure as a record keeps it (the front door's error map writes it).
    pub(super) fn written(&self, f: &Failure) -> Written {
        (self.write_failure)(f)
    }

    /// A task's end in a failure: its message becomes the status message.
    pub(super) fn failed(&self, f: Failure) -> Settle {
        let w = self.written(&f);
        Settle::Failed {
            message: w.message,
            error: w.error,
        }
    }

    /// Tell `subscriptions/listen` streams about a change.
    pub(super) fn publish(&self, rec: &TaskRecord) {
        let _ = self.changes.send(rec.clone());
    }

    /// Subscribe to task changes (every record the engine writes, as written).
    pub(super) fn subscribe(&self) -> broadcast::Receiver<TaskRecord> {
        self.changes.subscribe()
    }

    /// Free space for the embedded store, when it is watched.
    pub(super) fn disk(&self) -> Option<&crate::store::space::DiskSpace> {
        self.disk.as_deref()
    }

    /// Whether anything here waits for task changes (`subscriptions/listen` streams,
    /// blocked 2025-11-25 `tasks/result` calls).
    pub(super) fn has_listeners(&self) -> bool {
        self.changes.receiver_count() > 0
    }
}

/// A part of the engine: a handle on the shared [`Core`] (it reads as one through
/// `Deref`) under the name of the behaviour its file owns, reaching the other
/// parts by name.
macro_rules! part {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub(super) struct $name(pub(super) std::sync::Arc<super::core::Core>);

        impl std::ops::Deref for $name {
            type Target = super::core::Core;
            fn deref(&self) -> &super::core::Core {
                &self.0
            }
        }

        impl super::core::HoldsCore for $name {
            fn core(&self) -> &std::sync::Arc<super::core::Core> {
                &self.0
            }
        }

        impl $name {
            /// This part, over the core `p` holds.
            #[allow(dead_code)]
            pub(super) fn of(p: &impl super::core::HoldsCore) -> Self {
                Self(p.core().clone())
            }
        }
    };
}
pub(super) use part;

/// What holds the shared core: the façade and every part. A part is reached
/// from another as `Drivers::of(self)`.
pub(super) trait HoldsCore {
    /// The shared core.
    fn core(&self) -> &Arc<Core>;
}

impl HoldsCore for Arc<Core> {
    fn core(&self) -> &Arc<Core> {
        self
    }
}
