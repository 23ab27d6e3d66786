//! Group commit for the embedded store: concurrent durable writes share one
//! sled flush (one fsync) instead of paying one each.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::is_full;
use crate::store::StoreError;

/// Group commit: concurrent durable writes share one flush (one fsync) instead of
/// paying one each.
///
/// One flush runs at a time, on a blocking thread. A writer that has inserted its
/// data calls [`GroupCommit::commit`], which needs a flush that *starts* after the
/// call: if none is running it starts one; if one is running (it may have begun
/// before the writer's insert) it waits for the next, which begins as soon as the
/// running one ends and covers every writer that arrived meanwhile. Flushes are
/// numbered; the watch holds the number of the last one finished and its result,
/// so a waiter never misses it.
pub(super) struct GroupCommit {
    /// Makes everything written before the call durable (`db.flush()`).
    flush: Box<dyn Fn() -> sled::Result<()> + Send + Sync>,
    state: Mutex<CommitState>,
    /// The last finished flush: its number and result.
    done: tokio::sync::watch::Sender<(u64, Result<(), FlushError>)>,
}

/// Why a flush failed, kept for every writer it covered: whether the disk or
/// quota was full (the write may succeed once space is freed), and sled's words.
#[derive(Clone, Debug)]
struct FlushError {
    full: bool,
    message: String,
}

impl From<sled::Error> for FlushError {
    fn from(e: sled::Error) -> Self {
        Self {
            full: matches!(&e, sled::Error::Io(io) if is_full(io)),
            message: e.to_string(),
        }
    }
}

impl From<FlushError> for StoreError {
    fn from(e: FlushError) -> Self {
        if e.full {
            StoreError::Full(e.message)
        } else {
            StoreError::Db(e.message)
        }
    }
}

#[derive(Default)]
struct CommitState {
    /// Flushes started so far; the running one, if any, is number `started`.
    started: u64,
    /// A flush is running (its blocking task owns the loop in [`FlushRun::run`]).
    running: bool,
    /// Some writer waits for flush `started + 1`, to begin when the running one ends.
    next_wanted: bool,
}

impl GroupCommit {
    pub(super) fn new(flush: Box<dyn Fn() -> sled::Result<()> + Send + Sync>) -> Arc<Self> {
        Arc::new(Self {
            flush,
            state: Mutex::new(CommitState::default()),
            done: tokio::sync::watch::Sender::new((0, Ok(()))),
        })
    }

    fn lock(&self) -> MutexGuard<'_, CommitState> {
        // Nothing panics while holding the lock; a poisoned state is still sound.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once a flush that started after this call has finished, with its
    /// result: everything the caller wrote before calling is then durable.
    pub(super) async fn commit(self: &Arc<Self>) -> Result<(), StoreError> {
        let mut done = self.done.subscribe();
        let (wanted, start) = {
            let mut st = self.lock();
            if st.running {
                st.next_wanted = true;
                (st.started + 1, false)
            } else {
                st.running = true;
                st.started += 1;
                (st.started, true)
            }
        };
        if start {
            let run = FlushRun {
                gc: self.clone(),
                finished: false,
            };
            // Detached: the flushes go on (and report) if this writer is dropped.
            drop(tokio::task::spawn_blocking(move || run.run()));
        }
        // A later flush than `wanted` also began after this call: its result
        // covers this writer too.
        let result = done
            .wait_for(|(n, _)| *n >= wanted)
            .await
            .map(|r| r.1.clone());
        match result {
            Ok(r) => r.map_err(StoreError::from),
            // The sender lives in `self`, which outlives this call.
            Err(_) => Err(StoreError::Db("flush abandoned".into())),
        }
    }

    #[cfg(test)]
    pub(super) fn flushes_started(&self) -> u64 {
        self.lock().started
    }
}

/// The loop running flushes while writers want them. If it ends any other way than
/// by returning from `run` (the flush panicked, or the runtime dropped the task
/// before it ran), `drop` fails the running flush and the one wanted next, so
/// their writers get an error instead of waiting forever.
struct FlushRun {
    gc: Arc<GroupCommit>,
    finished: bool,
}

impl FlushRun {
    fn run(mut self) {
        let done = self.gc.done.clone();
        let last = loop {
            let gc = &self.gc;
            let result = (gc.flush)().map_err(FlushError::from);
            let mut st = gc.lock();
            let n = st.started;
            if !st.next_wanted {
                st.running = false;
                break (n, result);
            }
            gc.done.send_modify(|last| *last = (n, result));
            // Writers arrived during that flush: the next one starts now, after
            // their inserts, and covers them all.
            st.next_wanted = false;
            st.started += 1;
        };
        // The last flush's writers are told only once this run holds the store
        // no more: a writer that then drops the store closes the database (and
        // its lock), so the same directory opens again at once. A flush started
        // meanwhile may have reported a later number first; the number only rises.
        self.finished = true;
        drop(self);
        done.send_if_modified(|seen| {
            let newer = last.0 > seen.0;
            if newer {
                *seen = last;
            }
            newer
        });
    }
}

impl Drop for FlushRun {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let gc = &self.gc;
        let mut st = gc.lock();
        st.started += u64::from(st.next_wanted);
        st.next_wanted = false;
        st.running = false;
        let failed = Err(FlushError {
            full: false,
            message: "flush task failed: it panicked or was cancelled".into(),
        });
        let n = st.started;
        gc.done.send_modify(|last| *last = (n, failed));
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    use super::*;

    /// A group commit whose flushes each wait for the test: `entered` reports the
    /// number of each flush as it begins; the value sent on the returned sender
    /// ends it (`None` makes it panic).
    fn gated() -> (
        Arc<GroupCommit>,
        tokio::sync::mpsc::UnboundedReceiver<u64>,
        std::sync::mpsc::Sender<Option<sled::Result<()>>>,
    ) {
        let (entered_tx, entered) = tokio::sync::mpsc::unbounded_channel();
        let (release, release_rx) = std::sync::mpsc::channel::<Option<sled::Result<()>>>();
        let release_rx = Mutex::new(release_rx);
        let calls = std::sync::atomic::AtomicU64::new(0);
        let gc = GroupCommit::new(Box::new(move || {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            entered_tx.send(n).unwrap();
            let end = release_rx.lock().unwrap().recv().unwrap();
            end.expect("the test makes this flush panic")
        }));
        (gc, entered, release)
    }

    /// Polls a commit once: whether it still waits. The first poll registers it
    /// (it starts a flush or asks for the next one).
    async fn waits(w: &mut Pin<Box<impl Future<Output = Result<(), StoreError>>>>) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(w.as_mut().poll(cx).is_pending())).await
    }

    fn enospc() -> sled::Error {
        sled::Error::Io(std::io::Error::from_raw_os_error(28))
    }

    /// When a durable write returns, the flush has let go of the store (the
    /// database it flushes), so a writer that drops the store is not racing the
    /// flush thread for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_returns_only_once_the_flush_has_let_go_of_the_store() {
        for _ in 0..500 {
            let gc = GroupCommit::new(Box::new(|| Ok(())));
            gc.commit().await.unwrap();
            assert_eq!(Arc::strong_count(&gc), 1, "the flush still holds the store");
        }
    }

    #[tokio::test]
    async fn a_writer_during_a_flush_waits_for_the_next_one() {
        let (gc, mut entered, release) = gated();
        let mut a = Box::pin(gc.commit());
        assert!(waits(&mut a).await);
        assert_eq!(entered.recv().await, Some(1));
        // Flush 1 runs (it may have begun before these writers' inserts).
        let mut b = Box::pin(gc.commit());
        let mut c = Box::pin(gc.commit());
        assert!(waits(&mut b).await && waits(&mut c).await);
        release.send(Some(Ok(()))).unwrap();
        a.await.unwrap();
        // Flush 1 has reported and flush 2 began, for both: they wait for it.
        assert_eq!(entered.recv().await, Some(2));
        assert!(waits(&mut b).await && waits(&mut c).await);
        let mut d = Box::pin(gc.commit());
        assert!(waits(&mut d).await);
        // Flush 2 fails: each of its writers gets the error.
        release.send(Some(Err(enospc()))).unwrap();
        for w in [b, c] {
            match w.await {
                Err(StoreError::Full(m)) => assert!(m.contains("os error 28"), "{m}"),
                other => panic!("expected the flush error, got {other:?}"),
            }
        }
        // Flush 3, for the writer that came during flush 2, succeeds.
        assert_eq!(entered.recv().await, Some(3));
        assert!(waits(&mut d).await);
        release.send(Some(Ok(()))).unwrap();
        d.await.unwrap();
        assert_eq!(gc.flushes_started(), 3);
        assert!(!gc.lock().running);
    }

    #[tokio::test]
    async fn a_panicking_flush_fails_its_writers_and_the_next() {
        let (gc, mut entered, release) = gated();
        let mut a = Box::pin(gc.commit());
        assert!(waits(&mut a).await);
        assert_eq!(entered.recv().await, Some(1));
        let mut b = Box::pin(gc.commit());
        assert!(waits(&mut b).await);
        release.send(None).unwrap();
        for w in [a, b] {
            match w.await {
                Err(StoreError::Db(m)) => assert!(m.contains("panicked"), "{m}"),
                other => panic!("expected an error, got {other:?}"),
            }
        }
        // Flush 2 never ran (it counts as failed); the next writer starts flush 3.
        assert_eq!(gc.flushes_started(), 2);
        let c = tokio::spawn({
            let gc = gc.clone();
            async move { gc.commit().await }
        });
        assert_eq!(
            entered.recv().await,
            Some(2),
            "the second call of the flush"
        );
        release.send(Some(Ok(()))).unwrap();
        c.await.unwrap().unwrap();
        assert_eq!(gc.flushes_started(), 3);
    }

    /// No writer returns before a flush that began after its write has ended.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_writer_is_covered_by_a_flush_begun_after_its_write() {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        let written = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let (w, d) = (written.clone(), durable.clone());
        let gc = GroupCommit::new(Box::new(move || {
            let covered = w.load(SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(2));
            d.fetch_max(covered, SeqCst);
            Ok(())
        }));
        let writers: Vec<_> = (0..64)
            .map(|i| {
                let (gc, written, durable) = (gc.clone(), written.clone(), durable.clone());
                tokio::spawn(async move {
                    // Spread over a few flushes, so writes land while one runs.
                    tokio::time::sleep(std::time::Duration::from_micros(300 * (i % 16))).await;
                    let mine = written.fetch_add(1, SeqCst) + 1;
                    gc.commit().await.unwrap();
                    assert!(
                        durable.load(SeqCst) >= mine,
                        "write {mine} returned undurable"
                    );
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap();
        }
        // How many flushes they shared depends on scheduling; the durability
        // check above is what this test is for.
        let flushes = gc.flushes_started();
        assert!(
            flushes > 0 && flushes <= 64,
            "{flushes} flushes for 64 writers"
        );
    }
}
