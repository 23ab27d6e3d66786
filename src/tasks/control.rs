//! A running task's mailbox: how `tasks/cancel`, `tasks/update`, the sweeper,
//! other replicas and shutdown reach the task's driver.
//!
//! One per running task for as long as it runs, so it is small: a queue behind a
//! lock and two wake-ups, about 150 bytes. (tokio's bounded channel allocates a
//! block of 32 slots up front, 1.7 KB with its shared state, for the one or two
//! messages a task ever gets.)
//!
//! - At most [`QUEUED`] answers wait; a sender waits for room beyond that, as
//!   with a bounded channel.
//! - Only the first stop counts (the driver ends on it), so a stop while another
//!   waits is dropped, and a stop never waits for room.
//! - Once the driver is gone, sends fail and what was queued is dropped (a
//!   `tasks/update` waiting for its answers to be recorded stops waiting).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::Notify;

use super::phases::StopReason;

/// Messages to a task's background driver.
#[derive(Debug)]
pub(super) enum Control {
    /// Stop the call.
    Stop(StopReason),
    /// `tasks/update`: answers to outstanding input requests, and who to tell once
    /// the record shows them (the sender is dropped then, or when they change
    /// nothing).
    Answer(Map<String, Value>, Option<tokio::sync::oneshot::Sender<()>>),
}

/// Most answers waiting for a driver.
const QUEUED: usize = 16;

struct Mailbox {
    /// Waiting messages; `None` once the driver is gone.
    queue: Mutex<Option<VecDeque<Control>>>,
    /// A message came.
    sent: Notify,
    /// A message was taken (room for a waiting sender).
    taken: Notify,
}

/// The senders' side (cloned into the table of running tasks).
#[derive(Clone)]
pub(super) struct ControlTx(Arc<Mailbox>);

/// The driver's side.
pub(super) struct ControlRx(Arc<Mailbox>);

/// A new mailbox.
pub(super) fn mailbox() -> (ControlTx, ControlRx) {
    let m = Arc::new(Mailbox {
        queue: Mutex::new(Some(VecDeque::new())),
        sent: Notify::new(),
        taken: Notify::new(),
    });
    (ControlTx(m.clone()), ControlRx(m))
}

/// Why a message was not queued.
pub(super) enum Refused {
    /// The driver is gone.
    Gone,
    /// [`QUEUED`] answers wait already (`try_send` only).
    Full,
}

impl ControlTx {
    /// Queue `c`, waiting for room if the queue is full; `Gone` once the driver is.
    pub(super) async fn send(&self, c: Control) -> Result<(), Refused> {
        let mut c = c;
        loop {
            let room = self.0.taken.notified();
            match self.try_send(c) {
                Err((Refused::Full, back)) => c = back,
                done => return done.map_err(|(why, _)| why),
            }
            room.await;
        }
    }

    /// Queue `c` if there is room, else hand it back with the reason.
    pub(super) fn try_send(&self, c: Control) -> Result<(), (Refused, Control)> {
        let mut queue = self.0.queue.lock().expect("task mailbox");
        let Some(q) = queue.as_mut() else {
            return Err((Refused::Gone, c));
        };
        let stop = matches!(c, Control::Stop(_));
        if stop && q.iter().any(|m| matches!(m, Control::Stop(_))) {
            return Ok(());
        }
        if !stop
            && q.iter()
                .filter(|m| matches!(m, Control::Answer(..)))
                .count()
                >= QUEUED
        {
            return Err((Refused::Full, c));
        }
        q.push_back(c);
        drop(queue);
        self.0.sent.notify_one();
        Ok(())
    }
}

impl ControlRx {
    /// The next message, when one comes.
    pub(super) async fn recv(&mut self) -> Control {
        loop {
            let next = self
                .0
                .queue
                .lock()
                .expect("task mailbox")
                .as_mut()
                .and_then(VecDeque::pop_front);
            if let Some(c) = next {
                self.0.taken.notify_waiters();
                return c;
            }
            // A message sent before this wait left a permit: none is missed.
            self.0.sent.notified().await;
        }
    }
}

impl Drop for ControlRx {
    fn drop(&mut self) {
        let left = self.0.queue.lock().map(|mut q| q.take()).ok().flatten();
        drop(left);
        self.0.taken.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> Control {
        Control::Answer(Map::new(), None)
    }

    #[tokio::test]
    async fn messages_arrive_in_order_and_only_the_first_stop_counts() {
        let (tx, mut rx) = mailbox();
        tx.send(answer()).await.ok().unwrap();
        tx.send(Control::Stop(StopReason::Cancelled))
            .await
            .ok()
            .unwrap();
        tx.send(Control::Stop(StopReason::Shutdown))
            .await
            .ok()
            .unwrap();
        assert!(matches!(rx.recv().await, Control::Answer(..)));
        assert!(matches!(
            rx.recv().await,
            Control::Stop(StopReason::Cancelled)
        ));
        // The second stop was dropped: nothing else waits.
        let more = tokio::time::timeout(std::time::Duration::from_millis(50), rx.recv()).await;
        assert!(more.is_err(), "{more:?}");
    }

    #[tokio::test]
    async fn a_full_mailbox_holds_answers_back_but_not_a_stop() {
        let (tx, mut rx) = mailbox();
        for _ in 0..QUEUED {
            tx.try_send(answer()).ok().unwrap();
        }
        assert!(matches!(tx.try_send(answer()), Err((Refused::Full, _))));
        tx.try_send(Control::Stop(StopReason::Expired))
            .ok()
            .unwrap();
        // A waiting sender gets in once the driver takes one.
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send(answer()).await.is_ok() })
        };
        tokio::task::yield_now().await;
        assert!(matches!(rx.recv().await, Control::Answer(..)));
        let got_in = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await;
        assert!(got_in.expect("the waiting sender got in").unwrap());
    }

    #[tokio::test]
    async fn once_the_driver_is_gone_sends_fail_and_queued_answers_are_let_go() {
        let (tx, rx) = mailbox();
        let (applied, seen) = tokio::sync::oneshot::channel();
        tx.send(Control::Answer(Map::new(), Some(applied)))
            .await
            .ok()
            .unwrap();
        drop(rx);
        assert!(seen.await.is_err(), "the waiting update is let go");
        assert!(matches!(tx.send(answer()).await, Err(Refused::Gone)));
    }
}
